"""Observability on the real local multi-node cluster, with a real MLflow server.

The shared interrupted run (tests/cluster/interrupted_run.py) serves these assertions: it
trains 3 epochs with MLflow and TensorBoard on; its driver is stopped by SIGTERM inside epoch 2,
its rerun is killed outright, and a third driver finishes it while the test scrapes every Ray
node's metrics port. Then: the same MLflow run holds the params, one point per epoch and the
best checkpoint; TensorBoard's own reader finds every epoch; the app's gauges were in Ray's
Prometheus output; every attempt left its logs in the run folder. (A failed worker's traceback
read back through `trainctl logs` is checked on test_train.py's failing run, and two workers'
logs on the shared finished run.)
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.cluster.interrupted_run import EPOCHS, EXPERIMENT, RUN, InterruptedRun
from tests.hostile.support import trainctl
from tests.support import explain, read_summary, run_trainctl

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

ATTEMPTS = 3


def test_the_reruns_continue_one_tracked_run_to_the_end(interrupted_run: InterruptedRun) -> None:
    final = interrupted_run.final
    assert final is not None and final.returncode == 0, explain(final)
    summary = interrupted_run.summary
    assert summary["status"] == "succeeded" and summary["epochs_completed"] == EPOCHS
    first = interrupted_run.first_tracking
    assert summary["tracking"]["mlflow"]["run_id"] == first["mlflow"]["run_id"]


def test_mlflow_holds_one_run_with_params_epochs_and_best_checkpoint(
    interrupted_run: InterruptedRun,
) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=interrupted_run.mlflow_uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, [r.info.run_id for r in runs]  # the reruns continued, not a second
    run = runs[0]
    assert run.info.run_id == interrupted_run.first_tracking["mlflow"]["run_id"]
    assert run.info.status == "FINISHED" and run.info.run_name == RUN
    assert run.data.params["model"] == "cnn" and run.data.params["epochs"] == str(EPOCHS)
    assert run.data.params["storage_path"] == str(interrupted_run.run_dir.parent)
    for name in ("train_loss", "val_loss", "val_accuracy", "images_per_s"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, name)]
        assert sorted(steps) == list(range(1, EPOCHS + 1)), (name, steps)
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "best_checkpoint")]
    assert artifacts, "no best checkpoint artifact"
    best = read_summary(interrupted_run.run_dir)["best"]["checkpoint"]
    assert sorted(Path(p).name for p in artifacts) == sorted(p.name for p in Path(best).iterdir())


def test_tensorboard_reads_every_epoch(interrupted_run: InterruptedRun) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = interrupted_run.run_dir / "tensorboard"
    assert len(list(folder.glob("events.out.tfevents.*"))) == ATTEMPTS  # one per driver
    events = EventAccumulator(str(folder))
    events.Reload()
    steps = sorted(e.step for e in events.Scalars("val_accuracy"))
    assert steps == list(range(1, EPOCHS + 1))
    last = max(events.Scalars("val_accuracy"), key=lambda e: e.step)
    assert last.value == pytest.approx(interrupted_run.summary["metrics"]["val_accuracy"])


def test_ray_metrics_endpoint_exports_the_apps_figures(interrupted_run: InterruptedRun) -> None:
    lines = interrupted_run.metric_lines
    for name in ("epoch", "train_loss", "val_accuracy", "images_per_second", "eta_seconds"):
        found = [line for line in lines if line.startswith(f"ray_trainctl_{name}{{")]
        assert found, (name, sorted(lines)[:20])
        assert any(f'run="{RUN}"' in line for line in found)


def test_every_attempt_left_driver_and_worker_logs(interrupted_run: InterruptedRun) -> None:
    logs = interrupted_run.run_dir / "logs"
    names = [f"attempt-{n}" for n in range(1, ATTEMPTS + 1)]
    assert sorted(p.name for p in logs.iterdir()) == names
    for attempt in names:
        files = sorted(p.name for p in (logs / attempt).iterdir())
        assert files == ["driver.log", "worker-0.log"], (attempt, files)
    # Each line once (Ray's worker loggers reach both the tee and the root logger), and the
    # lines the worker printed are there. (Two workers' logs: tests/cluster/test_train.py.)
    lines = (logs / names[-1] / "worker-0.log").read_text().splitlines()
    repeated = sorted({line for line in lines if lines.count(line) > 1})
    assert not repeated, repeated
    assert lines[0].startswith(f"=== worker rank 0, attempt {ATTEMPTS} at "), lines
    reports = [line for line in lines if line.startswith("Reporting training result ")]
    assert reports and all(line.endswith(" from rank 0") for line in reports), lines
    assert "Moving model to device: cpu" in lines, lines  # Ray Train says it on rank 0 only
    driver = (logs / names[-1] / "driver.log").read_text()
    # Killed after a step checkpoint of epoch 2: the last rerun resumes inside epoch 2, or in
    # epoch 3 when Ray committed more before the killed driver's workers were ended.
    assert re.search(rf"resuming run {RUN} at epoch [23](, step \d+)? from ", driver), driver
    assert f"run {RUN} succeeded: {EPOCHS}/{EPOCHS} epochs" in driver


def test_a_rerun_after_the_last_checkpoint_closes_the_open_tracker_run(
    interrupted_run: InterruptedRun, tmp_path: Path
) -> None:
    """A driver killed after its last checkpoint leaves status running in summary.json and the
    MLflow run open; the rerun has nothing to train, and closes that same run. Killed before
    the last epoch's metrics line too, the rerun writes that line from the checkpoint. On a
    copy of the shared run folder (the other tests read the original)."""
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "runs" / RUN
    shutil.copytree(interrupted_run.run_dir, run_dir)
    summary = read_summary(run_dir)
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    *kept, last = (run_dir / "metrics.jsonl").read_text().splitlines()
    (run_dir / "metrics.jsonl").write_text("".join(f"{line}\n" for line in kept))
    client = MlflowClient(tracking_uri=interrupted_run.mlflow_uri)
    run_id = summary["tracking"]["mlflow"]["run_id"]
    client.update_run(run_id, status="RUNNING")
    env = {**interrupted_run.env, "TRAIN_STORAGE_PATH": str(run_dir.parent)}
    result = run_trainctl("train", env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, explain(result)
    assert "nothing to train" in result.stdout
    final = json.loads(last)
    restored = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(restored) == len(kept) + 1 and restored[-1]["epoch"] == final["epoch"], restored
    assert restored[-1]["val_accuracy"] == final["val_accuracy"], (restored[-1], final)
    assert f"epoch {final['epoch']} had no line in metrics.jsonl" in result.stdout, explain(result)
    assert client.get_run(run_id).info.status == "FINISHED"
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert len(client.search_runs([experiment.experiment_id])) == 1
    assert read_summary(run_dir)["tracking"]["mlflow"]["run_id"] == run_id


def test_status_of_the_run_folder_says_its_interruptions_and_hours(
    interrupted_run: InterruptedRun,
) -> None:
    """`trainctl status RUN_DIR --json` (no Kubernetes) on the run stopped, killed, finished."""
    summary = interrupted_run.summary
    result = trainctl("status", str(interrupted_run.run_dir), "--json")
    assert result.code == 0, result.text
    record = json.loads(result.out)
    assert record["status"] == "succeeded" and record["epochs_completed"] == EPOCHS
    counts = record["interruptions"]
    assert counts["count"] == len(summary["interruptions"]) >= 2, counts
    assert counts["stopped"] >= 1 and counts["failures"] >= 1, counts  # SIGTERM, then SIGKILL
    assert record["best"]["epoch"] == summary["best"]["epoch"]
    # The stopped driver's worker group and the finishing one's (the killed one wrote nothing).
    hours = record["accelerator_hours"]
    assert hours == summary["accelerator_hours"] and hours["kind"] == "cpu", hours
    assert hours["workers"] == 1 and 0 < hours["hours"] < 1, hours
