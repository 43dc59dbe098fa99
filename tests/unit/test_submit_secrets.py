"""`trainctl submit` refuses a pool whose pods read a Secret the namespace lacks, before it
creates anything: otherwise each Ray pod waits in CreateContainerConfigError on GPUs it holds.

End to end against the fake Kubernetes API server (tests/unit/fake_kube_api.py), with the real
values, renderer and client; the pure part (app/k8s/secret_refs.py) on rendered objects too.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from app.errors import EXIT_INVALID, EXIT_OK
from app.k8s.render import load_values, render_objects
from app.k8s.secret_refs import RAY_AUTH_KEY, SecretRef, secret_problems, secret_refs
from tests.unit.fake_kube_api import FakeKubeApi
from tests.unit.kube_cli_support import VALUES, api, submit

__all__ = ["api"]  # a fixture used by name below

# Every way the chart's values make the pods read a Secret.
SECRET_VALUES = (
    VALUES
    + """\
secretEnv: [{name: HF_TOKEN, secretName: hf, key: token}]
secretEnvFrom: [wandb-env]
signing: {secretName: trainctl-signing}
rayAuth: {existingSecret: ray-token}
"""
)
SECRET_VALUE = "s3cr3t-value-never-printed"


def _secret(name: str, *keys: str) -> dict[str, object]:
    data = {key: base64.b64encode(SECRET_VALUE.encode()).decode() for key in keys}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data}


def _all_secrets(api: FakeKubeApi, *, leave_out: str = "") -> None:
    for secret in [
        _secret("hf", "token"),
        _secret("wandb-env", "WANDB_API_KEY"),
        _secret("trainctl-signing", "signing.pem", "verify.pem"),
        _secret("ray-token", RAY_AUTH_KEY),
    ]:
        if secret["metadata"]["name"] != leave_out:  # type: ignore[index]
            api.add("secrets", "ml", secret)


@pytest.fixture
def secret_values(tmp_path: Path) -> Path:
    path = tmp_path / "values.yaml"
    path.write_text(SECRET_VALUES)
    return path


def test_the_pods_secret_reads_are_found_in_the_rendered_pool(secret_values: Path) -> None:
    objects = render_objects(load_values([secret_values]), release="demo", namespace="ml")
    refs = secret_refs(objects["cpu-a"])
    assert SecretRef("hf", "token", "env HF_TOKEN") in refs
    assert SecretRef("wandb-env", None, "envFrom") in refs
    assert SecretRef("ray-token", RAY_AUTH_KEY, "Ray token authentication") in refs
    signing = {(r.name, r.key) for r in refs if r.reader.startswith("volume ")}
    assert signing == {("trainctl-signing", "signing.pem"), ("trainctl-signing", "verify.pem")}
    assert len(refs) == len(set(refs))  # head, workers and submitter read them once each here


def test_a_secret_the_pool_creates_itself_is_not_asked_for(tmp_path: Path) -> None:
    """The default rayAuth: the chart renders the token Secret, and submit creates it."""
    path = tmp_path / "values.yaml"
    path.write_text(VALUES)
    objects = render_objects(load_values([path]), release="demo", namespace="ml")["cpu-a"]
    assert any(o["kind"] == "Secret" for o in objects)
    assert secret_refs(objects) == []


def test_optional_reads_and_unreadable_secrets_are_not_judged() -> None:
    pod = {
        "containers": [
            {
                "name": "c",
                "env": [
                    {"name": "A", "valueFrom": {"secretKeyRef": {"name": "a", "key": "k"}}},
                    {
                        "name": "B",
                        "valueFrom": {"secretKeyRef": {"name": "b", "key": "k", "optional": True}},
                    },
                ],
            }
        ]
    }
    objects = [{"kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {"spec": pod}}}]
    refs = secret_refs(objects)
    assert refs == [SecretRef("a", "k", "env A")]
    assert secret_problems(refs, {}, "ml") == ([], [])  # "a" could not be read: not judged


def test_missing_secrets_exit_2_naming_each_and_nothing_is_created(
    api: FakeKubeApi, secret_values: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = submit(capsys, secret_values)
    assert code == EXIT_INVALID, out + err
    said = "Secret hf does not exist in namespace ml, and env HF_TOKEN reads it (key 'token')"
    assert said in err
    assert "kubectl -n ml create secret generic hf --from-literal=token=..." in err
    assert "Secret wandb-env does not exist in namespace ml, and envFrom reads it" in err
    assert "Secret trainctl-signing does not exist" in err and "Secret ray-token does not" in err
    assert "nothing was created" in err and "Traceback" not in out + err
    assert api.writes() == []


def test_a_missing_key_is_named_with_the_keys_the_secret_has_and_no_value(
    api: FakeKubeApi, secret_values: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _all_secrets(api, leave_out="trainctl-signing")
    api.add("secrets", "ml", _secret("trainctl-signing", "signing.pem", "public.pem"))
    code, out, err = submit(capsys, secret_values)
    assert code == EXIT_INVALID, out + err
    said = "Secret trainctl-signing in namespace ml has no key 'verify.pem' (it has: public.pem, "
    assert said + "signing.pem), which volume" in err, err
    assert "hf" not in err and "wandb-env" not in err  # the ones that are right go unsaid
    assert SECRET_VALUE not in out + err
    assert base64.b64encode(SECRET_VALUE.encode()).decode() not in out + err
    assert api.writes() == []


def test_present_secrets_let_the_run_be_created(
    api: FakeKubeApi, secret_values: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _all_secrets(api)
    code, out, err = submit(capsys, secret_values)
    assert code == EXIT_OK, out + err
    assert "rayjob/" in out and " created (namespace ml)" in out
    assert "warning" not in out + err
    assert api.writes()[-1] == ("POST", "/apis/ray.io/v1/namespaces/ml/rayjobs")


def test_secrets_this_identity_may_not_read_are_left_to_the_pods(
    api: FakeKubeApi, secret_values: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chart's scheduled submit may read no Secret but the token it creates."""
    api.forbidden.add(("GET", "secrets"))
    code, out, err = submit(capsys, secret_values)
    assert code == EXIT_OK, out + err
    assert " created (namespace ml)" in out


def test_a_missing_pull_secret_is_a_warning_and_the_run_goes_ahead(
    api: FakeKubeApi, secret_values: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _all_secrets(api)
    with secret_values.open("a") as values:
        values.write("imagePullSecrets: [regcred]\n")
    code, out, err = submit(capsys, secret_values)
    assert code == EXIT_OK, out + err
    said = "warning: imagePullSecrets names Secret regcred, which does not exist in namespace ml"
    assert said in out + err
    assert out.count("imagePullSecrets names Secret regcred") == 1  # one pull, said once
