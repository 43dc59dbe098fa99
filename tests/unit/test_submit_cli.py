"""`trainctl submit`, `status` and `logs` end to end against a fake Kubernetes API server.

Everything real except the API server: the values file, the renderer, the official kubernetes
client, kubeconfig loading, the CLI and its exit codes. The fake plays the operator's part by
answering each RayJob read with the next scripted status.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.errors import EXIT_CLUSTER, EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_WAIT_TIMEOUT
from app.runfolder import folder as run_folder
from tests.unit.fake_kube_api import FakeKubeApi
from tests.unit.kube_cli_support import (
    RUNNING,
    SUCCEEDED,
    api,
    rayjob_name,
    submit,
    trainctl,
    values_file,
)

__all__ = ["api", "rayjob_name", "values_file"]  # fixtures used by name below


def test_submit_wait_creates_everything_and_exits_0_on_success(
    api: FakeKubeApi, values_file: Path, rayjob_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    api.rayjob_statuses = [{}, {"jobDeploymentStatus": "Initializing"}, RUNNING, SUCCEEDED]
    code, out, err = submit(capsys, values_file, "--wait")
    assert code == EXIT_OK, err
    assert f"rayjob/{rayjob_name} created (namespace ml)" in out
    assert "secret/demo-ray-auth created" in out
    assert f"configmap/{rayjob_name} applied" in out
    assert "Initializing / job -" in out and "Running / job RUNNING: training" in out
    assert f"RayJob {rayjob_name} succeeded" in out
    assert "warning: RayJob" not in out  # the pool's only run
    writes = api.writes()
    assert writes[-1] == ("POST", "/apis/ray.io/v1/namespaces/ml/rayjobs")
    applies = [q for m, _, q, ct in api.requests if m == "PATCH"]
    assert applies and all(q == {"fieldManager": ["trainctl"], "force": ["true"]} for q in applies)
    stored = api.objects[("rayjobs", "ml", rayjob_name)]
    assert stored["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 2


def test_submitting_again_attaches_and_writes_nothing(
    api: FakeKubeApi, values_file: Path, rayjob_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    api.rayjob_statuses = [SUCCEEDED]
    assert submit(capsys, values_file)[0] == EXIT_OK
    before = len(api.writes())
    code, out, _ = submit(capsys, values_file, "--wait")
    assert code == EXIT_OK
    assert f"rayjob/{rayjob_name} exists: attaching to it" in out
    assert len(api.writes()) == before


def test_a_run_tag_makes_a_new_run_beside_the_old_one(
    api: FakeKubeApi, values_file: Path, rayjob_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert submit(capsys, values_file)[0] == EXIT_OK
    code, out, _ = submit(capsys, values_file, "--run-tag", "20300101")
    assert code == EXIT_OK
    names = {name for plural, _, name in api.objects if plural == "rayjobs"}
    assert len(names) == 2 and rayjob_name in names
    # The first is still going (no status yet): said, as it is for values that differ from
    # the release's (a --set left out named another RayJob, found by a red-team pass).
    assert f"warning: RayJob {rayjob_name} of this release's pool cpu-a is still going" in out
    assert "give submit the same values" in out
    # The Secret made by the first submit is kept, never overwritten with a new token.
    assert "secret/demo-ray-auth exists, kept as is" in out


def test_a_retried_scheduled_pod_attaches_to_the_run_of_its_job(
    api: FakeKubeApi, values_file: Path, rayjob_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chart's CronJob passes its Job's name as the tag: a retried pod of the same Job
    renders the same RayJob and attaches; the next scheduled Job starts a new run."""
    api.rayjob_statuses = [RUNNING]
    job = "--run-tag=train-cpu-a-retrain-29000000"
    code, first, _ = submit(capsys, values_file, job)
    assert code == EXIT_OK
    (created,) = [line.split()[0] for line in first.splitlines() if line.startswith("rayjob/")]
    writes = len(api.writes())
    code, retry, _ = submit(capsys, values_file, job)
    assert code == EXIT_OK
    assert f"{created} exists: attaching to it" in retry and len(api.writes()) == writes
    assert submit(capsys, values_file, "--run-tag=train-cpu-a-retrain-29010080")[0] == EXIT_OK
    names = {name for plural, _, name in api.objects if plural == "rayjobs"}
    assert len(names) == 2 and rayjob_name not in names  # never the untagged (Helm's) run


@pytest.mark.parametrize("tag", ["", "  "])
def test_an_empty_run_tag_exits_2_and_creates_nothing(
    api: FakeKubeApi, values_file: Path, capsys: pytest.CaptureFixture[str], tag: str
) -> None:
    code, out, err = submit(capsys, values_file, f"--run-tag={tag}", "--wait")
    assert code == EXIT_INVALID
    assert "--run-tag is empty" in err and "batch.kubernetes.io/job-name" in err
    assert "Traceback" not in err + out
    assert api.writes() == []


def test_a_run_tag_no_label_can_hold_is_refused_in_words(
    api: FakeKubeApi, values_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal quoted the schema's regex, under a values key the command line never named."""
    code, out, err = submit(capsys, values_file, "--run-tag=bad tag!", "--wait")
    assert code == EXIT_INVALID and "Traceback" not in out + err
    assert "runTag: 'bad tag!' is not allowed: " in err and "`trainctl submit --run-tag`" in err
    assert "Up to 63 letters, digits" in err and "[A-Za-z0-9]" not in err
    assert api.writes() == []


# The chart's schema refuses the model too (an enum); the message is the settings' own. Only the
# settings judge the gate and the batch against the pool's workers, on its ConfigMap as rendered.
REFUSED_TRAIN_VALUES = [
    ("--set", "train.model=resnet1800", ("train.model: TRAIN_MODEL=", "did you mean resnet18")),
    ("--set-json", 'train.promote_if="val_acc>=0.9"',
     ("pool cpu-a: train.promote_if: ", "did you mean val_accuracy")),
    ("--set", "train.global_batch_size=1",
     ("pool cpu-a: TRAIN_GLOBAL_BATCH_SIZE=1", "TRAIN_NUM_WORKERS is nodePools.cpu-a.replicas")),
]  # fmt: skip


@pytest.mark.parametrize(("option", "expression", "words"), REFUSED_TRAIN_VALUES)
def test_train_values_the_pods_would_refuse_exit_2_before_the_api_is_reached(
    api: FakeKubeApi,
    values_file: Path,
    capsys: pytest.CaptureFixture[str],
    option: str,
    expression: str,
    words: tuple[str, ...],
) -> None:
    code, out, err = submit(capsys, values_file, option, expression, "--wait")
    assert code == EXIT_INVALID, err
    assert all(word in err for word in words), err
    assert "Traceback" not in err + out
    assert api.requests == []  # not even a read: the values were refused before connecting


def test_a_failed_rayjob_exits_1_with_reason_and_message(
    api: FakeKubeApi, values_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.rayjob_statuses = [
        RUNNING,
        {**RUNNING, "jobDeploymentStatus": "Failed", "reason": "AppFailed", "message": "OOM"},
    ]
    code, out, err = submit(capsys, values_file, "--wait")
    assert code == EXIT_FAILED
    assert "reason=AppFailed" in err and "message: OOM" in err
    assert "Traceback" not in err + out


def test_validation_failed_exits_2(
    api: FakeKubeApi, values_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.rayjob_statuses = [
        {"jobDeploymentStatus": "ValidationFailed", "reason": "ValidationFailed"}
    ]
    code, _, err = submit(capsys, values_file, "--wait")
    assert code == EXIT_INVALID and "invalid input" in err


def test_the_wait_timeout_exits_3_and_leaves_the_job_running(
    api: FakeKubeApi, values_file: Path, rayjob_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    api.rayjob_statuses = [RUNNING]
    code, _, err = submit(capsys, values_file, "--wait", "--timeout", "0.2")
    assert code == EXIT_WAIT_TIMEOUT
    assert f"RayJob {rayjob_name} is still running" in err


@pytest.mark.parametrize(
    "extra", [("--timeout", "nan"), ("--timeout", "inf"), ("--poll-interval", "nan")]
)
def test_the_waits_take_finite_seconds_only(
    api: FakeKubeApi, values_file: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, str]
) -> None:
    """nan passed click's range, every comparison with it being false: a wait that never
    times out, or a sleep that fails mid-wait."""
    code, _, err = submit(capsys, values_file, "--wait", *extra)
    assert code == EXIT_INVALID
    assert f"Invalid value for '{extra[0]}': '{extra[1]}' is not a finite number" in err
    assert api.writes() == [], "refused before anything reaches the API"


def test_epoch_lines_and_summary_from_a_local_mount(
    api: FakeKubeApi,
    values_file: Path,
    rayjob_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    mount = tmp_path / "volume"
    run_dir = mount / "runs" / rayjob_name  # TRAIN_STORAGE_PATH is <mountPath>/runs
    for epoch in (1, 2):
        run_folder.record_epoch(run_dir, {"epoch": epoch, "train_loss": 0.5, "val_accuracy": 0.9})
    summary = {"run_name": rayjob_name, "status": "succeeded", "epochs_completed": 2}
    (run_dir / "summary.json").write_text(json.dumps({**summary, "epochs_target": 2}))
    api.rayjob_statuses = [RUNNING, SUCCEEDED]
    code, out, _ = submit(capsys, values_file, "--wait", "--storage-mount", str(mount))
    assert code == EXIT_OK
    assert "epoch 1/2  train_loss 0.5000  val_acc 90.00%" in out
    assert f"run {rayjob_name} succeeded: 2/2 epochs" in out


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ({"crd_installed": False}, "RayJob custom resource (ray.io/v1) is not installed"),
        ({"forbidden": {("POST", "rayjobs")}}, "forbidden by RBAC: cannot create rayjob/demo-"),
        ({"namespaces": set()}, "namespace ml does not exist"),
    ],
)
def test_cluster_problems_exit_4_with_one_clear_line(
    api: FakeKubeApi,
    values_file: Path,
    capsys: pytest.CaptureFixture[str],
    setup: dict[str, Any],
    expected: str,
) -> None:
    for attr, value in setup.items():
        setattr(api, attr, value)
    code, out, err = submit(capsys, values_file)
    assert code == EXIT_CLUSTER
    assert expected in err and "Traceback" not in err + out


def test_no_kubeconfig_exits_4(
    tmp_path: Path, values_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, _, err = submit(capsys, values_file)
    assert code == EXIT_CLUSTER and "no usable Kubernetes configuration" in err


def test_bad_input_exits_2_before_touching_the_cluster(
    tmp_path: Path, values_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    code, _, err = submit(capsys, values_file, "--timeout", "5")
    assert code == EXIT_INVALID and "only apply together with --wait" in err


def test_an_unknown_pool_exits_2_naming_the_pools(
    api: FakeKubeApi, values_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("submit", "--values", str(values_file), "--pool", "t4")
    code, _, err = trainctl(capsys, *args)
    assert code == EXIT_INVALID and "'t4' is not an enabled pool" in err and "cpu-a" in err
    assert api.writes() == []


def test_status_lists_this_apps_rayjobs(
    api: FakeKubeApi, values_file: Path, rayjob_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    api.rayjob_statuses = [SUCCEEDED]
    submit(capsys, values_file)
    api.add("rayjobs", "ml", {"metadata": {"name": "someone-else", "labels": {}}})
    code, out, _ = trainctl(capsys, "status")
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["NAME", "POOL", "RESULT"]
    assert [line.split()[:3] for line in lines[1:]] == [[rayjob_name, "cpu-a", "succeeded"]]


def test_logs_prints_the_newest_submitter_pod(
    api: FakeKubeApi, values_file: Path, rayjob_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    submit(capsys, values_file)
    for name, created in (("sub-old", "2030-01-01T00:00:00Z"), ("sub-new", "2030-01-01T00:09:00Z")):
        pod = {"metadata": {"name": name, "creationTimestamp": created}}
        pod["metadata"]["labels"] = {"job-name": rayjob_name}
        api.add("pods", "ml", pod)
    api.pod_logs = {"sub-old": "old attempt\n", "sub-new": "epoch 1/2\nepoch 2/2\n"}
    code, out, _ = trainctl(capsys, "logs", rayjob_name)
    assert code == EXIT_OK
    assert out.splitlines() == [
        f"==> submitter of RayJob {rayjob_name}: pod sub-new <==",
        "epoch 1/2",
        "epoch 2/2",
    ]
    code, _, err = trainctl(capsys, "logs", "nope")
    assert code == EXIT_FAILED and "RayJob nope not found in namespace ml" in err
