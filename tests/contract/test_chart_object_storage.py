"""storage.type s3 and gcs: runs and data in a bucket, no shared volume, credentials by reference.

Rendered by the real Helm engine and by `trainctl render`, which must agree; every values file
of the other contract tests (tests/contract/values/object-storage-*.yaml among them) also goes
through the CRD, Kubernetes and checkov checks there. Last, `submit --wait` finds the run's
summary in the bucket (a moto S3 server) from the chart's own objects.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from app.k8s.follow import summary_line
from app.k8s.plan import pool_objects
from app.k8s.render import load_values, render_objects, render_schedule_objects
from app.k8s.submit import _run_dir as submit_run_dir
from app.runfolder.folder import read_summary
from app.settings import TrainSettings
from tests.contract.k8s_support import (
    KEPT_BY_GITOPS,
    by_key,
    containers,
    helm_render,
    normalized,
    of_kind,
    pod_templates,
    refusals,
)
from tests.s3_support import Bucket, S3Server

POOLS = {"nodePools": {"l4": {"replicas": 2}, "cpu": {"gpusPerWorker": 0}}}
S3 = {
    "storage": {
        "type": "s3",
        "bucket": "ml-runs",
        "prefix": "teams/vision",
        "endpoint": "http://minio.minio:9000",
        "region": "eu-west-1",
        "credentialsSecret": "minio-credentials",
    },
    **POOLS,
}
GCS = {"storage": {"type": "gcs", "bucket": "ml_runs", "credentialsSecret": "gcs-key"}, **POOLS}
KEY_DIR = "/var/run/secrets/trainctl/gcs"

# The Ray pods' account stays through `helm uninstall` while a run still going needs it.
KEPT_ON_UNINSTALL = {"helm.sh/resource-policy": "keep"}


def _ray_pods(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (where, template)
        for job in of_kind(objects, "RayJob")
        for where, template in pod_templates(job)
        if "submitter" not in where
    ]


def _configmaps(objects: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [o["data"] for o in of_kind(objects, "ConfigMap")]


def _both(values: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    """Helm's objects, after checking `trainctl render` gives the same ones."""
    helm = by_key(helm_render(values, release="train", namespace="ml"))
    path = tmp_path / "values.yaml"
    path.write_text(json.dumps(values))  # JSON: the dict's exact meaning in any YAML reader
    python: dict = {}
    values_read = load_values([path])
    for objects in render_objects(values_read, release="train", namespace="ml").values():
        python.update(by_key(objects))
    python.update(by_key(render_schedule_objects(values_read, release="train", namespace="ml")))
    assert sorted(helm) == sorted(python)
    for key, obj in helm.items():
        assert normalized(obj) == normalized(python[key]), key
    return list(helm.values())


def test_s3_renders_no_claim_and_no_shared_volume(tmp_path: Path) -> None:
    objects = _both(S3, tmp_path)
    assert not of_kind(objects, "PersistentVolumeClaim")
    pods = _ray_pods(objects)
    assert len(pods) == 4  # head and workers of two pools
    for where, template in pods:
        assert "shared" not in {v["name"] for v in template["spec"]["volumes"]}, where
        assert {v["name"] for v in template["spec"]["volumes"]} == {"dshm"}, where
        for container in containers(template):
            assert [m["name"] for m in container["volumeMounts"]] == ["dshm"], where


def test_s3_configmap_holds_the_bucket_uris_endpoint_and_region(tmp_path: Path) -> None:
    for data in _configmaps(_both(S3, tmp_path)):
        assert data["TRAIN_STORAGE_PATH"] == "s3://ml-runs/teams/vision/runs"
        assert data["TRAIN_DATA_PATH"] == "s3://ml-runs/teams/vision/data"
        assert data["TRAIN_STORAGE_ENDPOINT"] == "http://minio.minio:9000"
        assert data["AWS_REGION"] == "eu-west-1"
        assert "GOOGLE_APPLICATION_CREDENTIALS" not in data


def test_the_configmap_is_what_the_app_reads_as_a_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    (data, *_) = _configmaps(helm_render(S3))
    for name in [k for k in os.environ if k.startswith("TRAIN_")]:
        monkeypatch.delenv(name)
    for name, value in data.items():
        if name.startswith("TRAIN_"):
            monkeypatch.setenv(name, value)
    settings = TrainSettings()
    assert str(settings.run_dir) == f"s3://ml-runs/teams/vision/runs/{data['TRAIN_RUN_NAME']}"
    assert settings.run_dir.endpoint == "http://minio.minio:9000"


def test_s3_credentials_are_only_a_secret_reference(tmp_path: Path) -> None:
    objects = _both(S3, tmp_path)
    assert ("Secret", "minio-credentials") not in by_key(objects)  # never created or inlined
    for where, template in _ray_pods(objects):
        for container in containers(template):
            refs = [e["secretRef"]["name"] for e in container["envFrom"] if "secretRef" in e]
            assert refs == ["minio-credentials"], where
    for job in of_kind(objects, "RayJob"):  # the submitter only runs `ray job submit`
        (submitter,) = job["spec"]["submitterPodTemplate"]["spec"]["containers"]
        assert "envFrom" not in submitter
    # The name appears in envFrom entries only: no key names or values anywhere else.
    text = json.dumps(objects)
    envfrom_refs = sum(len(_ray_pods([job])) for job in of_kind(objects, "RayJob"))
    assert text.count('"minio-credentials"') == envfrom_refs
    assert "AWS_SECRET_ACCESS_KEY" not in text and "AWS_ACCESS_KEY_ID" not in text


def test_gcs_mounts_the_key_file_read_only(tmp_path: Path) -> None:
    objects = _both(GCS, tmp_path)
    assert not of_kind(objects, "PersistentVolumeClaim")
    for where, template in _ray_pods(objects):
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert set(volumes) == {"gcs-credentials", "dshm"}, where
        secret = volumes["gcs-credentials"]["secret"]
        assert secret == {"secretName": "gcs-key", "defaultMode": 0o440}, where
        for container in containers(template):
            (mount,) = [m for m in container["volumeMounts"] if m["name"] == "gcs-credentials"]
            assert mount == {"name": "gcs-credentials", "mountPath": KEY_DIR, "readOnly": True}
            assert not [e for e in container["envFrom"] if "secretRef" in e], where
    for data in _configmaps(objects):
        assert data["GOOGLE_APPLICATION_CREDENTIALS"] == f"{KEY_DIR}/key.json"
        assert data["TRAIN_STORAGE_PATH"] == "gs://ml_runs/trainctl/runs"
        assert not {"TRAIN_STORAGE_ENDPOINT", "AWS_REGION"} & set(data)


def _retrain_container(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scheduled CronJob's pod spec and its one container (`submit --wait`)."""
    (cron, *_) = of_kind(objects, "CronJob")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def test_the_scheduled_wait_reads_the_bucket_with_the_ray_pods_credentials(
    tmp_path: Path,
) -> None:
    """`submit --wait` in the CronJob reads the run's records from the bucket itself: without
    the bucket's credentials it said summary.json was damaged and never printed the promotion
    (found by a red-team pass)."""
    schedule = {"schedule": {"enabled": True}, "rayAuth": {"existingSecret": "ray-auth"}}
    pod, container = _retrain_container(_both({**S3, **schedule}, tmp_path))
    assert container["envFrom"] == [{"secretRef": {"name": "minio-credentials"}}]
    assert {"name": "AWS_REGION", "value": "eu-west-1"} in container["env"]
    assert [v["name"] for v in pod["volumes"]] == ["scratch", "values"]

    pod, container = _retrain_container(_both({**GCS, **schedule}, tmp_path))
    assert "envFrom" not in container
    key = {"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": f"{KEY_DIR}/key.json"}
    assert key in container["env"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "gcs-credentials"]
    assert mount == {"name": "gcs-credentials", "mountPath": KEY_DIR, "readOnly": True}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["gcs-credentials"]["secret"] == {"secretName": "gcs-key", "defaultMode": 0o440}

    pod, container = _retrain_container(_both({**POOLS, **schedule}, tmp_path))  # a volume
    assert "envFrom" not in container
    assert [e["name"] for e in container["env"]] == ["HOME", "RUN_TAG"]
    assert [v["name"] for v in pod["volumes"]] == ["scratch", "values", "shared"]


def test_workload_identity_needs_no_secret_and_an_empty_prefix_no_double_slash(
    tmp_path: Path,
) -> None:
    annotations = {"iam.gke.io/gcp-service-account": "t@p.iam.gserviceaccount.com", "x/y": "true"}
    values = {
        "storage": {"type": "gcs", "bucket": "ml-runs", "prefix": ""},
        "serviceAccount": {"annotations": annotations},
        **POOLS,
    }
    objects = _both(values, tmp_path)
    for where, template in _ray_pods(objects):
        assert [v["name"] for v in template["spec"]["volumes"]] == ["dshm"], where
    for data in _configmaps(objects):
        assert data["TRAIN_STORAGE_PATH"] == "gs://ml-runs/runs"
        assert data["TRAIN_DATA_PATH"] == "gs://ml-runs/data"
        assert "GOOGLE_APPLICATION_CREDENTIALS" not in data
    (account,) = of_kind(objects, "ServiceAccount")
    # "true" stays a string; beside the user's, what keeps GitOps from pruning the account
    # one retired pool folder shares with the others (tests/contract/test_render_parity.py).
    assert account["metadata"]["annotations"] == {
        **KEPT_ON_UNINSTALL,
        **KEPT_BY_GITOPS,
        **annotations,
    }
    assert account["automountServiceAccountToken"] is False


def test_irsa_annotation_on_the_created_account(tmp_path: Path) -> None:
    role = "arn:aws:iam::123456789012:role/trainctl"
    values = {
        "storage": {"type": "s3", "bucket": "ml-runs"},
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": role}},
        **POOLS,
    }
    objects = _both(values, tmp_path)
    (account,) = of_kind(objects, "ServiceAccount")
    assert account["metadata"]["annotations"] == {
        **KEPT_ON_UNINSTALL,
        **KEPT_BY_GITOPS,
        "eks.amazonaws.com/role-arn": role,
    }
    for data in _configmaps(objects):
        assert data["TRAIN_STORAGE_PATH"] == "s3://ml-runs/trainctl/runs"
        assert not {"TRAIN_STORAGE_ENDPOINT", "AWS_REGION"} & set(data)
    for _, template in _ray_pods(objects):
        for container in containers(template):
            assert not [e for e in container["envFrom"] if "secretRef" in e]


def test_the_volume_mode_ignores_the_bucket_keys(tmp_path: Path) -> None:
    values = {"storage": {**S3["storage"], "type": "pvc"}, **POOLS}
    plain = by_key(helm_render(POOLS, release="train", namespace="ml"))
    objects = by_key(_both(values, tmp_path))
    assert sorted(objects) == sorted(plain)
    for key, obj in objects.items():
        if key[0] != "Secret":  # the auth token is random per render
            assert obj == plain[key], key


@pytest.mark.parametrize(
    ("storage", "where"),
    [
        ({"type": "s3"}, "storage.bucket"),
        ({"type": "gcs", "bucket": ""}, "storage.bucket"),
        ({"type": "s3", "bucket": "Bad_Bucket"}, "storage.bucket"),
        ({"type": "s3", "bucket": "ab"}, "storage.bucket"),
        ({"type": "s3", "bucket": "b" * 64}, "storage.bucket"),
        ({"type": "minio", "bucket": "ml-runs"}, "storage.type"),
        ({"type": "s3", "bucket": "ml-runs", "prefix": "a/../b"}, "storage.prefix"),
        ({"type": "s3", "bucket": "ml-runs", "prefix": ".."}, "storage.prefix"),
        ({"type": "s3", "bucket": "ml-runs", "prefix": "/lead"}, "storage.prefix"),
        ({"type": "s3", "bucket": "ml-runs", "prefix": "trail/"}, "storage.prefix"),
        ({"type": "s3", "bucket": "ml-runs", "prefix": "a b"}, "storage.prefix"),
        ({"type": "s3", "bucket": "ml-runs", "endpoint": "http://k:s@minio:9000"}, "endpoint"),
        ({"type": "s3", "bucket": "ml-runs", "endpoint": "http://minio:9000/path"}, "endpoint"),
        ({"type": "s3", "bucket": "ml-runs", "endpoint": "minio:9000"}, "storage.endpoint"),
        ({"type": "s3", "bucket": "ml-runs", "endpoint": "ftp://minio"}, "storage.endpoint"),
        ({"type": "gcs", "bucket": "ml-runs", "endpoint": "http://minio:9000"}, "endpoint"),
        ({"type": "gcs", "bucket": "ml-runs", "region": "us-east-1"}, "storage.region"),
        ({"type": "s3", "bucket": "ml-runs", "region": "US East"}, "storage.region"),
        ({"type": "s3", "bucket": "ml-runs", "credentialsSecret": "Keys!"}, "credentialsSecret"),
        ({"type": "s3", "bucket": "ml-runs", "runsSubPath": "a/./b"}, "storage.runsSubPath"),
    ],
    ids=lambda item: json.dumps(item) if isinstance(item, dict) else item,
)
def test_bad_storage_values_are_refused_by_both_engines(
    storage: dict[str, Any], where: str, tmp_path: Path
) -> None:
    _refused_by_both({"storage": storage, **POOLS}, where, tmp_path)


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"serviceAccount": {"annotations": {"bad key!": "x"}}}, "serviceAccount.annotations"),
        ({"serviceAccount": {"annotations": {"a": 1}}}, "serviceAccount.annotations.a"),
        (  # the chart sets AWS_REGION from storage.region: not twice
            {"storage": {**S3["storage"]}, "env": {"AWS_REGION": "us-east-1"}},
            "env",
        ),
    ],
    ids=["annotation-key", "annotation-value", "region-twice"],
)
def test_bad_account_and_env_values_are_refused_by_both_engines(
    values: dict[str, Any], where: str, tmp_path: Path
) -> None:
    _refused_by_both({**values, **POOLS}, where, tmp_path)


def _refused_by_both(values: dict[str, Any], where: str, tmp_path: Path) -> None:
    _, ours = refusals(values, tmp_path)
    assert any(where in problem for problem in ours), ours


# --- submit --wait ------------------------------------------------------------------------
@pytest.fixture
def bucket(s3_server: S3Server) -> Bucket:
    return s3_server.bucket("contract-submit-wait")


def test_submit_wait_reads_the_summary_from_the_bucket(bucket: Bucket, tmp_path: Path) -> None:
    """The chart's own objects (storage.type s3) lead submit to the run's summary.json."""
    values_file = tmp_path / "values.yaml"
    storage = {"type": "s3", "bucket": bucket.name, "prefix": "team", "endpoint": bucket.endpoint}
    values_file.write_text(json.dumps({"storage": storage, "nodePools": {"cpu": {}}}))
    objects = pool_objects(
        render_objects(load_values([values_file]), release="demo", namespace="ml"), "cpu"
    )
    run_dir = submit_run_dir(objects, None)
    name = next(o["metadata"]["name"] for o in objects if o["kind"] == "RayJob")
    assert str(run_dir) == f"s3://{bucket.name}/team/runs/{name}"
    assert read_summary(run_dir) is None  # nothing written yet: not an error
    summary = {"run_name": name, "status": "finished", "epochs_completed": 2, "epochs_target": 2}
    bucket.write(f"team/runs/{name}/summary.json", json.dumps(summary).encode())
    assert read_summary(run_dir) == summary
    line = summary_line(read_summary(run_dir), run_dir)
    assert line.startswith(f"run {name} finished: 2/2 epochs")
    assert f"summary s3://{bucket.name}/team/runs/{name}/summary.json" in line
