"""`trainctl render` as a user runs it, and the one-source rules behind it."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import helm_python
import pytest
import yaml

from app.errors import ConfigError
from app.k8s import values as chart_values
from app.k8s.render import load_values, render_objects
from app.k8s.train_schema import DERIVED, bound_maps, train_schema
from app.k8s.train_values import values_key
from app.settings import TrainSettings, cadence
from app.settings.env import load_settings
from tests.contract.k8s_support import CHART, EXAMPLES, HelmFailed, helm_template
from tests.hostile.support import assert_refused, trainctl

TRAINCTL = [sys.executable, "-m", "app"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TRAINCTL, *args], capture_output=True, text=True, check=False)


def test_render_writes_a_kustomization_per_pool(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ("render", "--values", str(EXAMPLES / "values-cpu.yaml"), "--out", str(out))
    # The example leaves rayAuth.existingSecret empty: the chart generates the token Secret,
    # which a folder meant for Git must not hold unless asked for.
    refused = _run(*args)
    assert refused.returncode == 2, refused.stderr
    assert "--out would write the Ray auth token (Secret trainctl-ray-auth" in refused.stderr
    assert "set rayAuth.existingSecret=trainctl-ray-auth; or pass --with-secret" in (refused.stderr)
    assert "Traceback" not in refused.stderr and not out.exists()
    proc = _run(*args, "--with-secret")
    assert proc.returncode == 0, proc.stderr
    assert (out / "pool-a" / "secret.yaml").is_file()
    # The token is its owner's alone (it was world-readable: a red-team pass).
    assert (out / "pool-a" / "secret.yaml").stat().st_mode & 0o777 == 0o600
    assert "kubectl apply -k" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["pool-a", "pool-b"]
    kustomization = yaml.safe_load((out / "pool-a" / "kustomization.yaml").read_text())
    assert "rayjob.yaml" in kustomization["resources"]
    job = yaml.safe_load((out / "pool-a" / "rayjob.yaml").read_text())
    assert job["metadata"]["namespace"] == "default"
    assert job["metadata"]["name"].startswith("trainctl-pool-a-")


def test_render_without_out_prints_one_stream_for_kubectl(tmp_path: Path) -> None:
    values = EXAMPLES / "values-cpu.yaml"
    override = tmp_path / "b.yaml"
    override.write_text("train: {epochs: 2}\n")
    proc = subprocess.run(
        [*TRAINCTL, "render", "-f", "-", "-f", str(override), "--set", "train.seed=9"],
        input=values.read_text(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    docs = [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
    assert proc.stdout.startswith("---\n# Source: trainctl/")
    kinds = [doc["kind"] for doc in docs]
    assert kinds.count("RayJob") == 2 and kinds.count("Secret") == 1  # shared objects once
    for config in (doc for doc in docs if doc["kind"] == "ConfigMap"):
        assert (config["data"]["TRAIN_EPOCHS"], config["data"]["TRAIN_SEED"]) == ("2", "9")
    # A token drawn afresh on every render, piped to `kubectl apply`, replaced the one running
    # clusters use, silently (found by a red-team pass): said on stderr, stdout left as it is.
    assert proc.stderr.count("trainctl: warning: the stream holds Secret trainctl-ray-auth") == 1
    assert "set rayAuth.existingSecret=trainctl-ray-auth" in proc.stderr
    kept = _run("render", "-f", str(values), "--set", "rayAuth.existingSecret=mine")
    assert kept.returncode == 0 and "warning" not in kept.stderr, kept.stderr


# Env values (a ConfigMap's data) meaning YAML 1.1's line breaks, U+0085 (NEL) above all:
# PyYAML writes it raw in a single-quoted scalar, where kubectl's go-yaml reads a space.
BREAKS = {"NEL": "a\x85b", "EDGE": "\x85 ", "LS": "a\u2028b", "PS": "\u2029", "CRLF": "a\r\nb"}
BREAKS["LONG"] = "x" * 120 + "\x85" + "y" * 120  # folded over lines by the dumper's width


def test_rendered_text_reads_back_as_helm_renders_it(tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    env = "".join(f"  {key}: {json.dumps(value)}\n" for key, value in BREAKS.items())
    path.write_text(
        f"nodePools:\n  cpu: {{gpusPerWorker: 0, tolerations: []}}\nenv:\n{env}"
        "rayAuth: {existingSecret: demo-ray-auth}\n"
    )
    (helm,) = [o for o in helm_template([path], namespace="ml") if o["kind"] == "ConfigMap"]
    assert BREAKS.items() <= helm["data"].items()
    args = ("render", "--release", "demo", "-n", "ml", "-f", str(path))
    result = trainctl(*args)
    assert result.code == 0, result.text
    # Read back by Go's YAML reader (Helm's, as kubectl's), one document at a time.
    docs = [helm_python.values_from_yaml(d) for d in re.split(r"(?m)^---$", result.out)]
    (printed,) = [d for d in docs if d.get("kind") == "ConfigMap"]
    assert printed["data"] == helm["data"]
    assert trainctl(*args, "--out", str(tmp_path / "o")).code == 0
    written = (tmp_path / "o" / "cpu" / "configmap.yaml").read_text(encoding="utf-8")
    assert helm_python.values_from_yaml(written)["data"] == helm["data"]


# Strings PyYAML reads as strings, so writes plain, and Go's YAML reader (kubectl, kustomize,
# Argo CD) reads as numbers or booleans: `namespace: 0800` failed to decode in kubectl, an env
# `y` became true, `1e-3` 0.001 (found by a red-team pass).
GO_AMBIGUOUS = {"ZERO": "0800", "EIGHT": "08", "Y_LOWER": "y", "N_UPPER": "N", "EXP": "1e-3",
                "BIG": "1E3", "OCT": "0o17", "UNDER": "1_0", "DOT": ".5", "PLUS": "+7"}  # fmt: skip


def test_strings_go_reads_as_numbers_or_booleans_are_quoted(tmp_path: Path) -> None:
    from app.k8s.manifests_out import go_reads_otherwise

    assert all(go_reads_otherwise(v) for v in GO_AMBIGUOUS.values())
    assert not any(go_reads_otherwise(v) for v in ("0800a", "v1", "yes-no", "1.2.3", "e3", "-"))
    path = tmp_path / "values.yaml"
    env = "".join(f"  {key}: {json.dumps(value)}\n" for key, value in GO_AMBIGUOUS.items())
    path.write_text(
        f"nodePools:\n  cpu: {{gpusPerWorker: 0, tolerations: []}}\nenv:\n{env}"
        "labels: {team: '08'}\nrayAuth: {existingSecret: demo-ray-auth}\n"
    )
    args = ("render", "--release", "demo", "-n", "0800", "-f", str(path))
    result = trainctl(*args)
    assert result.code == 0, result.text
    # Read back by Go's YAML reader (Helm's, as kubectl's), one document at a time.
    docs = [helm_python.values_from_yaml(d) for d in re.split(r"(?m)^---$", result.out)]
    docs = [d for d in docs if d]
    assert docs and all(d["metadata"]["namespace"] == "0800" for d in docs)
    assert all(d["metadata"]["labels"]["team"] == "08" for d in docs)
    (config,) = [d for d in docs if d.get("kind") == "ConfigMap"]
    assert GO_AMBIGUOUS.items() <= config["data"].items()
    assert trainctl(*args, "--out", str(tmp_path / "o")).code == 0
    written = (tmp_path / "o" / "cpu" / "configmap.yaml").read_text(encoding="utf-8")
    assert GO_AMBIGUOUS.items() <= helm_python.values_from_yaml(written)["data"].items()


def test_bad_values_exit_2_with_the_key_and_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  epochs: 0\n  lern_rate: 0.1\nnodePools:\n  a: {replicas: two}\n")
    proc = _run("render", "--values", str(bad), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "train.epochs" in proc.stderr and "lern_rate" in proc.stderr
    assert "nodePools.a.replicas" in proc.stderr
    assert "settable TRAIN_* keys" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_unreadable_or_non_mapping_values_exit_2(tmp_path: Path) -> None:
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("train: [\n")
    for path, words in ((listing, "must hold a mapping"), (broken, "not valid YAML")):
        proc = _run("render", "--values", str(path), "--out", str(tmp_path / "o"))
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr


def test_null_removes_a_default_like_helm(tmp_path: Path) -> None:
    path = tmp_path / "v.yaml"
    path.write_text("poolDefaults:\n  tolerations: null\n")
    assert "tolerations" not in load_values([path])["poolDefaults"]
    assert load_values()["poolDefaults"]["tolerations"]


def test_packaged_chart_files_equal_the_chart() -> None:
    for name in chart_values.SYNCED_FILES:
        packaged = (chart_values.PACKAGED_DIR / name).read_bytes()
        assert packaged == (CHART / name).read_bytes(), f"{name}: run `make manifests`"


def test_train_schema_is_generated_from_the_settings_model() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["definitions"]["train"] == train_schema()
    # The generator's own rules are in the committed file, and regenerating keeps every rule
    # written there by hand (it once dropped the chart's own labels' refusal).
    regenerated = bound_maps(copy.deepcopy(schema))
    assert regenerated == schema, "run `make manifests`"
    keys = set(schema["definitions"]["train"]["properties"])
    assert keys <= set(TrainSettings.model_fields)
    assert keys | set(DERIVED) == set(TrainSettings.model_fields)  # a new setting shows up here


def test_values_yaml_train_keys_are_settings() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    example = yaml.safe_load((EXAMPLES / "values-three-pools.yaml").read_text())
    for train in [
        values["train"],
        example["train"],
        *(p.get("train", {}) for p in example["nodePools"].values()),
    ]:
        assert set(train) <= set(TrainSettings.model_fields) - set(DERIVED)


# -- the `train:` values held to the settings `trainctl train` reads them with ------------------

POOLS = """\
nodePools:
  big: {gpusPerWorker: 0, replicas: 4}
  small: {gpusPerWorker: 0, replicas: 1}
networkPolicy: {enabled: false}
rayAuth: {existingSecret: demo-ray-auth}
"""


def _pools_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "pools.yaml"
    path.write_text(POOLS + extra)
    return path


def _local_refusal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> list[str]:
    """What `trainctl train` says of the same variables, read from its own environment."""
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        load_settings()
    return refused.value.problems


def test_render_refuses_a_gate_train_refuses_with_its_message_per_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (local,) = _local_refusal(monkeypatch, tmp_path, TRAIN_PROMOTE_IF="val_acc>=0.9")
    out = tmp_path / "out"
    args = ("render", "-f", str(_pools_file(tmp_path)), "--out", str(out))
    result = trainctl(*args, "--set-json", 'train.promote_if="val_acc>=0.9"')
    assert result.code == 2, result.text
    # One line for both pools: the top-level value is what they share.
    assert f"pools big, small: train.promote_if: {local}\n" in result.err, result.err
    assert "did you mean val_accuracy?" in local
    assert not out.exists()  # nothing written
    # Helm cannot judge a gate: it renders, and the pods would stop with that message.
    helm_template([_pools_file(tmp_path)], set_json=('train.promote_if="val_acc>=0.9"',))


def test_render_refuses_a_gate_a_pools_own_settings_rule_out(tmp_path: Path) -> None:
    """peak_gpu_gib is recorded on a GPU only: on a CPU pool the gate kept the champion after
    every nightly run, with exit 0. Refused for the CPU pools, named by the keys it comes from."""
    path = tmp_path / "pools.yaml"
    path.write_text(
        POOLS.replace("nodePools:\n", "nodePools:\n  gpu: {gpusPerWorker: 1, replicas: 2}\n")
    )
    result = trainctl("render", "-f", str(path), "--set", "train.promote_if=peak_gpu_gib<=10")
    assert result.code == 2, result.text
    said = "TRAIN_PROMOTE_IF can never be met by this run: peak_gpu_gib<=10: peak_gpu_gib is "
    for pool in ("big", "small"):
        assert f"pool {pool}: {said}" in result.err, result.err
        assert f"TRAIN_USE_GPU is nodePools.{pool}.gpusPerWorker)" in result.err, result.err
    assert "pool gpu" not in result.err  # its workers have GPUs: the figure is recorded


def test_render_names_the_pool_whose_derived_settings_fail(tmp_path: Path) -> None:
    """The batch against TRAIN_NUM_WORKERS, which the chart derives per pool from replicas."""
    result = trainctl(
        "render", "-f", str(_pools_file(tmp_path)), "--set", "train.global_batch_size=2"
    )
    assert result.code == 2, result.text
    assert "pool big: TRAIN_GLOBAL_BATCH_SIZE=2 is smaller than the 4 workers" in result.err
    assert "TRAIN_GLOBAL_BATCH_SIZE is train.global_batch_size" in result.err
    assert "TRAIN_NUM_WORKERS is nodePools.big.replicas" in result.err
    assert "pool small" not in result.err  # one worker: two samples a step are enough


def test_every_derived_setting_is_traced_to_the_values_it_comes_from() -> None:
    """A setting the chart derives per pool is never reported as a `train.` key, which the
    schema does not even allow there."""
    values = load_values(set_values=("nodePools.gpu.gpusPerWorker=2",))
    in_configmap = set(DERIVED) - {"ray_address"}  # RAY_ADDRESS is KubeRay's, in the pod
    for setting in in_configmap:
        assert not values_key(setting, "gpu", values).startswith("train."), setting
    assert values_key("num_workers", "gpu", values) == "nodePools.gpu.replicas x gpusPerWorker"
    # A sweep's trials take theirs from tune.workersPerTrial, where it is set.
    sweep = load_values(
        set_values=("tune.enabled=true", "tune.workersPerTrial=1000", "tune.space.seed.grid={1,2}")
    )
    assert values_key("num_workers", "gpu", sweep) == "tune.workersPerTrial"


def test_a_pools_own_train_value_is_named_by_its_key(tmp_path: Path) -> None:
    path = _pools_file(tmp_path, "poolDefaults: {train: {promote_if: val_accuracy>=90%}}\n")
    result = trainctl("render", "-f", str(path), "--set", "nodePools.small.train.amp=fp16")
    assert result.code == 2, result.text
    assert "pool big: poolDefaults.train.promote_if: TRAIN_PROMOTE_IF=" in result.err
    # The pool's own `train` replaces poolDefaults' (as any pool key does): its gate is the
    # top-level default, and its amp needs a GPU it does not have.
    assert "pool small: poolDefaults" not in result.err
    assert "pool small: TRAIN_AMP=fp16 needs TRAIN_USE_GPU=true" in result.err
    assert "TRAIN_AMP is nodePools.small.train.amp" in result.err
    assert "TRAIN_USE_GPU is nodePools.small.gpusPerWorker" in result.err


def test_a_model_name_is_refused_by_the_schema_in_both_engines_with_a_suggestion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (local,) = _local_refusal(monkeypatch, tmp_path, TRAIN_MODEL="resnet1800")
    path = _pools_file(tmp_path)
    result = trainctl("render", "-f", str(path), "--set", "train.model=resnet1800")
    assert result.code == 2, result.text
    assert f"train.model: {local}" in result.err and "did you mean resnet18?" in local
    with pytest.raises(HelmFailed, match="train/model"):
        helm_template([path], set_values=("train.model=resnet1800",))


def test_settings_the_pods_check_refuses_by_name_are_refused_at_render(tmp_path: Path) -> None:
    """Weights of another model: render said ok, and the pods' `check` refused them once their
    GPUs were scheduled (a red-team pass). Refused by name, in the words `check` uses. A sweep
    warm-started from champion:<name>, refused there too at the time, is now what a sweep
    takes (app/sweep/warm_start.py): it renders."""
    from app.training.weights import weights_source

    path = _pools_file(tmp_path)
    for model, weights in [
        ("resnet50", "ResNet18_Weights.DEFAULT"),
        ("cnn", "ResNet18_Weights.DEFAULT"),
    ]:
        result = trainctl(
            "render", "-f", str(path), "--set", f"train.model={model},train.weights={weights}"
        )
        with pytest.raises(ConfigError) as checked:  # what `check` says on the pods
            weights_source(TrainSettings(_env_file=None, model=model, weights=weights))
        assert_refused(result, 2, f"train.weights: {checked.value.problems[0]}")
    fits = trainctl(
        "render",
        "-f",
        str(path),
        "--set",
        "train.model=resnet50,train.weights=ResNet50_Weights.IMAGENET1K_V2",
    )
    assert fits.code == 0, fits.text
    sweep = ("tune.enabled=true", "train.warm_start=champion:digits-cnn")
    result = trainctl("render", "-f", str(path), "--set", ",".join(sweep), "--set-json",
                      'tune.space={"lr": {"loguniform": [0.0001, 0.1]}}')  # fmt: skip
    assert result.code == 0, result.text
    assert "TRAIN_WARM_START: champion:digits-cnn" in result.out, result.out


@pytest.mark.parametrize(
    "key",
    [
        "trainctl.io/run",
        "trainctl.io/role",
        "app.kubernetes.io/name",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/component",
        "helm.sh/chart",
    ],
)
def test_a_label_the_chart_sets_itself_is_refused_in_both_engines(tmp_path: Path, key: str) -> None:
    """`labels: {trainctl.io/run: x}` renamed the RayJob's run label, not its pods';
    `trainctl.io/role: data` put the data nodes' role on the GPU workers too;
    `app.kubernetes.io/component` made Helm write the key twice in 9 objects while render
    kept the chart's."""
    path = _pools_file(tmp_path)
    result = trainctl("render", "-f", str(path), "--set-json", f'labels={{"{key}": "x"}}')
    assert result.code == 2, result.text
    assert f"labels: '{key}' is not allowed: a label the chart sets itself" in result.err
    with pytest.raises(HelmFailed, match="labels"):
        helm_template([path], set_json=(f'labels={{"{key}": "x"}}',))
    mine = trainctl("render", "-f", str(path), "--set", "labels.team=ml,labels.trainctl\\.io=x")
    assert mine.code == 0 and "team: ml" in mine.out, mine.text  # a key of its own stays yours


SET_BY_THE_PODS = "the image, Kubernetes, KubeRay or Ray set this variable for the pods to work"
ENV_NAME_RULES = {
    "TRAIN_PROMOTE_IF": "TRAIN_* settings go in train:, where both engines check them",
    "train_num_workers": "TRAIN_* settings go in train:, where both engines check them",
    "AWS_SECRET_ACCESS_KEY": "a credential-like name (a token, password, secret or key) goes in "
    "secretEnv:",
    "RAY_AUTH_TOKEN": "Ray's token and auth mode are the chart's (rayAuth:)",
    "LD_LIBRARY_PATH": SET_BY_THE_PODS,
    "NVIDIA_VISIBLE_DEVICES": SET_BY_THE_PODS,
}


SECRET_ENV_NAME_RULES = {
    key: rule for key, rule in ENV_NAME_RULES.items() if key != "AWS_SECRET_ACCESS_KEY"
} | {
    "MY_POD_IP": SET_BY_THE_PODS,
    "PATH": SET_BY_THE_PODS,
}


@pytest.mark.parametrize("key", list(SECRET_ENV_NAME_RULES))
def test_secret_env_names_follow_envs_rules_but_credentials_in_both_engines(
    tmp_path: Path, key: str
) -> None:
    """secretEnv's names were held only to not being TRAIN_*: MY_POD_IP (which KubeRay sets and
    the spot pools' drain hook finds its Ray node by), PATH, LD_PRELOAD, RAY_AUTH_TOKEN all
    rendered, in both engines (a red-team pass). Credential-like names are what it is for."""
    path = _pools_file(tmp_path)
    value = f'secretEnv=[{{"name": "{key}", "secretName": "s", "key": "k"}}]'
    result = trainctl("render", "-f", str(path), "--set-json", value)
    assert result.code == 2, result.text
    assert f"secretEnv.0.name: '{key}' is not allowed: {SECRET_ENV_NAME_RULES[key]}" in result.err
    with pytest.raises(HelmFailed, match="secretEnv"):
        helm_template([path], set_json=(value,))
    fine = 'secretEnv=[{"name": "AWS_SECRET_ACCESS_KEY", "secretName": "s", "key": "k"}]'
    assert trainctl("render", "-f", str(path), "--set-json", fine).code == 0
    helm_template([path], set_json=(fine,))


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            '[{"name": "A", "secretName": "s", "key": "k"}, '
            '{"name": "A", "secretName": "s2", "key": "k"}]',
            'secretEnv names "A" twice: a container holds each variable once',
        ),
        (
            '[{"name": "NOTE", "secretName": "s", "key": "k"}]',
            '"NOTE" is in both env and secretEnv',
        ),
    ],
    ids=["twice", "also-in-env"],
)
def test_a_secret_env_name_given_twice_is_refused_by_both_engines(
    tmp_path: Path, extra: str, said: str
) -> None:
    """Both rendered, with two `- name: A` entries in each container (a red-team pass): the API
    server refuses such pods, and a name in env too had its ConfigMap value silently replaced."""
    path = _pools_file(tmp_path, "env:\n  NOTE: plain\n")
    result = trainctl("render", "-f", str(path), "--set-json", f"secretEnv={extra}")
    assert_refused(result, 2, said)
    with pytest.raises(HelmFailed, match=re.escape(said)):
        helm_template([path], set_json=(f"secretEnv={extra}",))


@pytest.mark.parametrize("key", list(ENV_NAME_RULES))
def test_runtime_env_vars_follow_envs_rules_in_both_engines(tmp_path: Path, key: str) -> None:
    """The job's runtime_env env_vars reach its entrypoint: a TRAIN_* there overrode the
    settings both engines had checked (a gate that always passes, workers the pods cannot
    hold), and a credential sat in the RayJob's text. Refused as in env:, saying by which rule
    (one line, the first rule's, for a name two rules refuse); other variables and runtime_env
    fields pass through."""
    path = _pools_file(tmp_path)
    value = f'rayJob.runtimeEnv={{"env_vars": {{"{key}": "x"}}}}'
    result = trainctl("render", "-f", str(path), "--set-json", value)
    assert result.code == 2, result.text
    (problem,) = result.err.splitlines()[1:]
    assert problem.startswith(
        f"  - rayJob.runtimeEnv.env_vars: '{key}' is not allowed: {ENV_NAME_RULES[key]}"
    ), result.err
    with pytest.raises(HelmFailed, match=f"invalid propertyName .{key}."):
        helm_template([path], set_json=(value,))
    plain = 'rayJob.runtimeEnv={"env_vars": {"OMP_NUM_THREADS": "2"}, "pip": ["rich"]}'
    mine = trainctl("render", "-f", str(path), "--set-json", plain)
    assert mine.code == 0 and '"env_vars":{"OMP_NUM_THREADS":"2"}' in mine.out, mine.text


# -- checkpoint_every: a step count as a number, and every refusal naming the accepted forms -----


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        ({"set_values": ("train.checkpoint_every=500",)}, "500"),
        ({"set_json": ("train.checkpoint_every=500",)}, "500"),
        ({"set_string": ("train.checkpoint_every=500",)}, "500"),
        ({"set_values": ("train.checkpoint_every=90s",)}, "90s"),
        ({"set_values": ("train.checkpoint_every=epoch",)}, "epoch"),
    ],
)
def test_checkpoint_every_takes_a_step_count_as_a_number_in_both_engines(
    tmp_path: Path, sets: dict, expected: str
) -> None:
    path = _pools_file(tmp_path)
    values = load_values([path], **sets)
    (config,) = [o for o in render_objects(values, release="t", namespace="ml")["big"]
                 if o["kind"] == "ConfigMap"]  # fmt: skip
    assert config["data"]["TRAIN_CHECKPOINT_EVERY"] == expected
    helm = [o for o in helm_template([path], release="t", **sets) if o["kind"] == "ConfigMap"]
    assert {o["data"]["TRAIN_CHECKPOINT_EVERY"] for o in helm} == {expected}


@pytest.mark.parametrize(
    ("flag", "expression"),
    [
        ("--set", "train.checkpoint_every=0"),
        ("--set", "train.checkpoint_every=100000000"),
        ("--set", "train.checkpoint_every=true"),
        ("--set", "train.checkpoint_every=5s"),
        ("--set", "train.checkpoint_every=every-epoch"),
        ("--set-json", "train.checkpoint_every=1.5"),
        ("--set-json", "train.checkpoint_every=[500]"),
    ],
)
def test_a_refused_checkpoint_every_names_the_accepted_forms(
    tmp_path: Path, flag: str, expression: str
) -> None:
    path = _pools_file(tmp_path)
    result = trainctl("render", "-f", str(path), flag, expression)
    assert result.code == 2, result.text
    assert "train.checkpoint_every" in result.err and cadence.ALLOWED in result.err, result.err
    option = {"--set": "set_values", "--set-json": "set_json"}[flag]
    with pytest.raises(HelmFailed, match="checkpoint_every"):
        helm_template([path], **{option: (expression,)})


def test_a_number_or_boolean_where_text_is_wanted_points_to_set_string(tmp_path: Path) -> None:
    path = _pools_file(tmp_path)
    for expression, text in (("labels.team=true", "true"), ("train.model_name=2024", "2024")):
        result = trainctl("render", "-f", str(path), "--set", expression)
        assert result.code == 2, result.text
        assert f"--set-string {expression.split('=')[0]}={text}" in result.err, result.err
        with pytest.raises(HelmFailed):
            helm_template([path], set_values=(expression,))
        assert trainctl("render", "-f", str(path), "--set-string", expression).code == 0


def test_no_pool_enabled_renders_nothing_and_says_its_values_wait_for_one() -> None:
    """As Helm renders no object: no pod would read the values, so nothing is refused yet,
    and the line says so (exit 0 is not a verdict on them)."""
    result = trainctl("render", "--set-json", 'train.promote_if="val_acc>=0.9"')
    assert result.code == 0, result.text
    assert result.out == ""
    assert "no node pool is enabled: nothing to render" in result.err
    assert "enable one to check them" in result.err


def test_rerender_replaces_its_own_files_and_refuses_to_delete_anyone_elses(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    args = ("render", "-f", str(_pools_file(tmp_path)), "--out", str(out))
    assert trainctl(*args).code == 0
    assert trainctl(*args).code == 0  # its own files, listed by its kustomization.yaml
    patch = out / "big" / "custom.yaml"  # a kustomize patch placed in the pool's folder
    patch.write_text("mine\n")
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    result = trainctl(*args, "--set", "train.epochs=3")
    assert result.code == 2, result.text
    assert f"--out: {patch} was not written by `trainctl render`" in result.err, result.err
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before


def test_a_pool_folder_left_from_an_earlier_render_is_named_and_kept(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ("render", "-f", str(_pools_file(tmp_path)), "--out", str(out))
    assert trainctl(*args).code == 0
    (out / "notes").mkdir()  # the user's own folder beside the pools: not a pool's
    (out / "notes" / "kustomization.yaml").write_text("resources: []\n")
    kept = {path: path.read_bytes() for path in (out / "small").iterdir()}
    result = trainctl(*args, "--set", "nodePools.small.enabled=false")
    assert result.code == 0, result.text
    assert f"trainctl: {out / 'small'}: a pool folder of an earlier render" in result.err
    assert f"rm -r {out / 'small'}" in result.err
    assert "notes" not in result.err and "big" not in result.err, result.err
    assert {path: path.read_bytes() for path in (out / "small").iterdir()} == kept
    again = trainctl(*args)  # the pool enabled again: its folder is rendered, nothing named
    assert again.code == 0 and "earlier render" not in again.err, again.text


def test_a_train_value_holding_a_nul_is_refused_before_a_pod_that_cannot_start(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    args = ("render", "-f", str(_pools_file(tmp_path)), "--out", str(out))
    result = trainctl(*args, "--set-json", 'train.torch_home="/a\\u0000b"')
    assert result.code == 2, result.text
    assert "TRAIN_TORCH_HOME holds a NUL character" in result.err, result.err
    assert not out.exists()


def test_plain_variables_may_be_lowercase_or_merely_contain_token(tmp_path: Path) -> None:
    """curl reads only the lowercase proxy variables, Ray's own flags are RAY_<lowercase>,
    and TOKENIZERS_PARALLELISM (Hugging Face) is no credential: all three were refused, the
    first two with a bare regular expression (a red-team pass)."""
    path = _pools_file(tmp_path)
    plain = {
        "http_proxy": "http://proxy:3128",
        "RAY_memory_monitor_refresh_ms": "0",
        "TOKENIZERS_PARALLELISM": "false",
    }
    result = trainctl("render", "-f", str(path), "--set-json", f"env={json.dumps(plain)}")
    assert result.code == 0, result.text
    helm = helm_template([path], set_json=(f"env={json.dumps(plain)}",))
    for objects in ([o for o in yaml.safe_load_all(result.out) if o], helm):
        configs = [o for o in objects if o["kind"] == "ConfigMap" and "http_proxy" in o["data"]]
        assert configs and all(plain.items() <= c["data"].items() for c in configs)


def test_a_decimal_tag_is_told_to_be_quoted_as_meant_not_as_yaml_read_it(tmp_path: Path) -> None:
    """`tag: 2.10` reached the schema as 2.1, and the refusal said to quote "2.1" (another
    image) and that --set reads it as a number, which Helm's --set does not (a red-team
    pass): both engines keep `--set image.tag=2.10` as the text 2.10."""
    path = _pools_file(tmp_path)
    values = tmp_path / "tag.yaml"
    values.write_text("image: {repository: ghcr.io/acme/trainctl, tag: 2.10}\n")
    result = trainctl("render", "-f", str(path), "-f", str(values))
    assert result.code == 2, result.text
    assert (
        "image.tag: 2.1 is a number, and text is wanted: quote it in the values file as you mean "
        'it (unquoted, YAML reads 2.10 as the number 2.1 too: "2.10" keeps it); --set and '
        "--set-string keep a value with a decimal point as text"
    ) in result.err
    kept = trainctl("render", "-f", str(path), "--set", "image.tag=2.10")
    assert kept.code == 0 and "trainctl:2.10\n" in kept.out, kept.text
    helm = helm_template([path], set_values=("image.tag=2.10",))
    assert any("trainctl:2.10" in json.dumps(o) for o in helm if o["kind"] == "RayJob")


WORDED = {
    "bool-for-a-count": (
        ("--set", "nodePools.big.gpusPerWorker=true"),
        "nodePools.big.gpusPerWorker: true is a boolean, and a number is wanted",
    ),
    "empty-pool": (("--set", "nodePools.big="), '"" (empty text) is not a mapping'),
    "account-name": (
        ("--set", "serviceAccount.name=My_SA"),
        "'My_SA' is not allowed: a ServiceAccount name: lowercase letters",
    ),
    "digest": (
        ("--set", "image.digest=sha256:abc"),
        "an image digest: sha256: and 64 lowercase hex digits",
    ),
    "digest-in-the-tag": (
        ("--set", f"image.tag=0.1.0@sha256:{'a' * 64}"),
        "a digest (@sha256:...) goes in image.digest",
    ),
    "mapping-for-a-secret-name": (
        ("--set-json", 'secretEnvFrom=[{"secretName": "extra"}]'),
        "secretEnvFrom.0: a mapping is given, and text is wanted: a Kubernetes object name",
    ),
}


@pytest.mark.parametrize(("flags", "said"), WORDED.values(), ids=WORDED.keys())
def test_refusals_say_what_is_wanted_in_the_values_words(
    tmp_path: Path, flags: tuple[str, str], said: str
) -> None:
    """Raw regexes (`'My_SA' does not match '^([a-z0-9]...'`), Python's words (`True is not of
    type 'integer'`) and an empty value shown as nothing (a red-team pass)."""
    result = trainctl("render", "-f", str(_pools_file(tmp_path)), *flags)
    assert_refused(result, 2, said)
    assert "does not match '" not in result.err and "is not of type" not in result.err


def test_a_fraction_in_a_file_and_a_huge_value_are_said_briefly(tmp_path: Path) -> None:
    """`gpusPerWorker: 1.5` in a file was `1.5 is not of type 'integer'`; a 2 MB runTag was
    quoted back whole on stderr (2,000,331 bytes)."""
    fraction = _pools_file(tmp_path, "poolDefaults: {gpusPerWorker: 1.5}\n")
    result = trainctl("render", "-f", str(fraction))
    assert_refused(result, 2, "1.5 is not a whole number, and one is wanted")
    huge = tmp_path / "tag.yaml"
    huge.write_text(f"runTag: {'a' * 200_000}\n")
    result = trainctl("render", "-f", str(_pools_file(tmp_path)), "-f", str(huge))
    assert_refused(result, 2, "runTag: 'aaaa", "... (200,000 characters) is not allowed")
    assert len(result.err) < 2000, len(result.err)


def test_with_secret_without_out_is_refused_not_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--with-secret acts on --out's folder only: on stdout it did nothing, with exit 0 and no
    word (a red-team pass), while submit refuses its own flags of that kind."""
    monkeypatch.chdir(tmp_path)
    result = trainctl("render", "-f", str(EXAMPLES / "values-three-pools.yaml"), "--with-secret")
    assert_refused(result, 2, "--with-secret only applies together with --out")
    assert result.out == ""


def test_with_secret_where_the_values_generate_none_is_said(tmp_path: Path) -> None:
    """With rayAuth.existingSecret set, --with-secret wrote nothing more and said nothing (a
    red-team pass): the user believed the token was in the folder."""
    values = str(tmp_path / "values.yaml")
    (tmp_path / "values.yaml").write_text("nodePools:\n  cpu: {gpusPerWorker: 0}\n")
    result = trainctl("render", "-f", values, "--out", str(tmp_path / "a"), "--with-secret")
    assert result.code == 0 and "wrote no Secret" not in result.err, result.text
    assert list((tmp_path / "a").glob("*/secret*.yaml")), result.text
    result = trainctl(
        "render", "-f", values, "--set", "rayAuth.existingSecret=team-token",
        "--out", str(tmp_path / "b"), "--with-secret",
    )  # fmt: skip
    assert result.code == 0, result.text
    assert "--with-secret wrote no Secret: these values generate none" in result.err
    assert not list((tmp_path / "b").glob("*/secret*.yaml"))
