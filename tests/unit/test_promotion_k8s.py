"""`submit --wait` and `trainctl status` show the promotion outcome that the run folder's
summary.json keeps (the driver's last line), through a scripted Kubernetes API and real files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.errors import EXIT_OK
from app.k8s.outcome import promotion_line
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

LINE = "promoted v7 (val_accuracy 0.962 > the champion's 0.955)"


@dataclass(frozen=True)
class FinishedRun:
    """A RayJob whose run folder on the mounted volume holds a promoted run's summary."""

    api: FakeKubeApi
    values_file: Path
    name: str
    mount: str  # --storage-mount: TRAIN_STORAGE_PATH is <mountPath>/runs


@pytest.fixture
def finished(api: FakeKubeApi, values_file: Path, rayjob_name: str, tmp_path: Path) -> FinishedRun:
    mount = tmp_path / "volume"
    run_dir = mount / "runs" / rayjob_name
    run_dir.mkdir(parents=True)
    summary = {"run_name": rayjob_name, "status": "succeeded", "epochs_completed": 2,
               "epochs_target": 2, "promoted": True, "promotion": {"line": LINE}}  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return FinishedRun(api, values_file, rayjob_name, str(mount))


def test_submit_wait_ends_with_the_promotion_line(
    finished: FinishedRun, capsys: pytest.CaptureFixture[str]
) -> None:
    finished.api.rayjob_statuses = [RUNNING, SUCCEEDED]
    code, out, _ = submit(capsys, finished.values_file, "--wait", "--storage-mount", finished.mount)
    assert code == EXIT_OK
    assert out.strip().splitlines()[-1] == LINE


def test_status_shows_each_finished_runs_outcome(
    finished: FinishedRun, capsys: pytest.CaptureFixture[str]
) -> None:
    finished.api.rayjob_statuses = [SUCCEEDED]
    submit(capsys, finished.values_file)
    code, out, _ = trainctl(capsys, "status", "--storage-mount", finished.mount)
    assert code == EXIT_OK and out.startswith("NAME")
    assert f"\n{finished.name}: {LINE}" in out
    code, out, _ = trainctl(capsys, "status")  # no mount: the table alone, no guess
    assert code == EXIT_OK and LINE not in out


def test_a_sweeps_job_ends_with_the_sweeps_line_and_promotion(
    finished: FinishedRun, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep's folder holds sweep.json, not summary.json: `submit --wait` said "no summary
    yet" and no promotion line, the last line the nightly sweep's CronJob shows (a red-team
    pass); `status` showed no outcome either."""
    run_dir = Path(finished.mount) / "runs" / finished.name
    (run_dir / "summary.json").unlink()
    record = {
        "sweep": finished.name, "status": "succeeded", "metric": "val_accuracy",
        "trials": [{"trial": "trial-0001", "status": "succeeded"},
                   {"trial": "trial-0002", "status": "stopped"}],
        "best": {"trial": "trial-0001", "best": 0.95}, "promoted": True,
        "promotion": {"line": LINE},
    }  # fmt: skip
    (run_dir / "sweep.json").write_text(json.dumps(record))
    finished.api.rayjob_statuses = [RUNNING, SUCCEEDED]
    code, out, _ = submit(capsys, finished.values_file, "--wait", "--storage-mount", finished.mount)
    assert code == EXIT_OK
    lines = out.strip().splitlines()
    assert lines[-1] == LINE, out
    said = (
        f"sweep {finished.name} succeeded: 2 trials (1 stopped, 1 succeeded), best trial-0001 "
        f"(0.9500); record {run_dir / 'sweep.json'}"
    )
    assert said in lines, out
    assert "no summary yet" not in out
    code, out, _ = trainctl(capsys, "status", "--storage-mount", finished.mount)
    assert code == EXIT_OK and f"\n{finished.name}: {LINE}" in out


def test_the_line_is_redacted_and_absent_before_a_promotion() -> None:
    assert promotion_line(None) is None and promotion_line({"status": "running"}) is None
    secret = {"promotion": {"line": "kept v1: not promoted (s3://user:pw@h/b unreadable)"}}
    assert "pw" not in (promotion_line(secret) or "")
