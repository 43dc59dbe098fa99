"""`trainctl train` end to end on the shared multi-node Ray cluster: real Ray, torch and files.

The session's finished digits run (tests/cluster/conftest.py) trains compiled on two DDP workers,
so the tests that read it also prove that compiled runs save plain weights and resume.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from app.data.kinds.synthetic import SYNTHETIC_CLASSES, SYNTHETIC_SHAPE
from app.data.schema import DatasetInfo, inspect_dataset
from app.training.model import build_model
from tests import parquet_support
from tests.hostile.support import trainctl
from tests.support import (
    FINISHED_EPOCHS,
    FinishedRun,
    explain,
    read_history,
    read_summary,
    run_trainctl,
    trainctl_env,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SYNTHETIC_INFO = DatasetInfo(
    channels=SYNTHETIC_SHAPE[2],
    height=SYNTHETIC_SHAPE[0],
    width=SYNTHETIC_SHAPE[1],
    num_classes=SYNTHETIC_CLASSES,
    train_rows=1,
    valid_rows=1,
    layout="raw",
    mean=(0.5,) * SYNTHETIC_SHAPE[2],
    std=(0.25,) * SYNTHETIC_SHAPE[2],
)


def _settings(tmp: Path, cluster: object, **overrides: str) -> dict[str, str]:
    values = {
        "dataset": "synthetic",
        "model": "cnn",
        "epochs": "2",
        "num_workers": "2",
        "global_batch_size": "64",
        "data_path": str(tmp / "data"),
        "storage_path": str(tmp / "runs"),
        "ray_address": cluster.address,  # type: ignore[attr-defined]
        "max_failures": "0",
    }
    values.update(overrides)
    return trainctl_env(**values)


def test_two_workers_train_and_leave_a_complete_run_folder(finished_run: FinishedRun) -> None:
    run_dir, result = finished_run.run_dir, finished_run.result
    summary = read_summary(run_dir)
    assert summary["status"] == "succeeded"
    assert summary["run_name"] == "digits-cnn"
    assert summary["epochs_completed"] == FINISHED_EPOCHS
    assert set(summary["metrics"]) == {"train_loss", "val_loss", "val_accuracy"}
    assert 1 <= summary["best"]["epoch"] <= FINISHED_EPOCHS
    assert summary["failures"] == 0 and summary["restored_from"] is None
    assert summary["settings"]["num_workers"] == "2"
    history = read_history(run_dir)
    assert [row["epoch"] for row in history] == list(range(1, FINISHED_EPOCHS + 1))
    assert all(row["images_per_s"] > 0 and row["first_batch_s"] >= 0 for row in history)
    # Compiled on both DDP workers; the first epoch's first step (the compilation) apart.
    assert all(row["compiled"] == 1.0 for row in history), history
    assert history[0]["compile_s"] > 0 and history[1]["compile_s"] == 0.0
    assert summary["settings"]["compile"] == "on" and summary["settings"]["amp"] == "off"
    assert (run_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"
    # One readable progress line per epoch, with throughput and an ETA.
    last = f"epoch {FINISHED_EPOCHS}/{FINISHED_EPOCHS}"
    lines = [line for line in result.stdout.splitlines() if last in line]
    assert lines and "ETA" in lines[0] and "val_acc" in lines[0], explain(result)
    assert " img/s " in lines[0], explain(result)
    # Its workers said their loop had ended: a Ctrl-C as such a run ends waits for no
    # just-in-time checkpoint (app/run/signals.py).
    progress = json.loads((run_dir / "progress.json").read_text())
    invocations = [json.loads(line)["invocation"] for line in (run_dir / "attempts.jsonl").open()]
    assert progress["trained_out"] == progress["invocation"] == invocations[-1], progress


def test_a_run_alone_starts_no_placement_group_cleaner(finished_run: FinishedRun) -> None:
    # Its job ends with it, and Ray removes a job's placement groups then (app/run/job_trainer.py);
    # a sweep's trials keep the cleaner (tests/cluster/test_sweep.py).
    assert finished_run.cleaners_started == 0


def test_each_worker_leaves_its_own_log_each_line_once(finished_run: FinishedRun) -> None:
    attempt = finished_run.run_dir / "logs" / "attempt-1"
    names = sorted(p.name for p in attempt.iterdir())
    assert names == ["driver.log", "worker-0.log", "worker-1.log"], names
    for rank in (0, 1):
        # Each line once (Ray's worker loggers reach both the tee and the root logger), and
        # only this rank's lines.
        lines = (attempt / f"worker-{rank}.log").read_text().splitlines()
        repeated = sorted({line for line in lines if lines.count(line) > 1})
        assert not repeated, (rank, repeated)
        assert lines[0].startswith(f"=== worker rank {rank}, attempt 1 at "), lines
        reports = [line for line in lines if line.startswith("Reporting training result ")]
        assert reports and all(line.endswith(f" from rank {rank}") for line in reports), lines
        # Ray Train says where the model goes on rank 0 only.
        assert ("Moving model to device: cpu" in lines) == (rank == 0), lines


def test_digits_two_workers_learn(finished_run: FinishedRun) -> None:
    summary = read_summary(finished_run.run_dir)
    assert summary["metrics"]["val_accuracy"] >= 0.9, summary


def test_checkpoint_loads_on_cpu_without_ray(finished_run: FinishedRun) -> None:
    summary = read_summary(finished_run.run_dir)
    weights = torch.load(Path(summary["checkpoint"]) / "model.pt", weights_only=True)
    assert all(not key.startswith("module.") for key in weights)  # unwrapped, not DDP's names
    assert all(not key.startswith("_orig_mod.") for key in weights)  # nor torch.compile's
    plain = build_model("cnn", inspect_dataset(finished_run.tmp / "data" / "digits"))
    plain.load_state_dict(weights)  # strict: exactly a plain model's names
    state = torch.load(Path(summary["checkpoint"]) / "train_state.pt", weights_only=True)
    assert state["epoch"] == FINISHED_EPOCHS and state["optimizer"]["state"]


# Rerunning a finished run (nothing to train; more epochs continue it) is tested on a copy of
# it, together with damaged checkpoints: tests/cluster/test_faults.py.


def test_bad_settings_exit_2_before_anything_is_written(tmp_path: Path) -> None:
    env = trainctl_env(epochs="0", model="gpt", storage_path=str(tmp_path / "runs"))
    result = run_trainctl("train", env=env, cwd=tmp_path)
    assert result.returncode == 2, explain(result)
    assert "TRAIN_EPOCHS='0'" in result.stderr and "TRAIN_MODEL='gpt'" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "runs").exists()


def test_failure_during_training_exits_1_with_cause_and_locations(
    ray_cluster: object, tmp_path: Path
) -> None:
    # Data that passes preflight (it decodes a sample of the first files) with a truncated
    # image in a later file: streamed (not cached by the driver first), the training workers'
    # Ray Data iterators meet it during the first epoch. (Weights that cannot load, the
    # earlier trigger here, now stop in preflight: tests/hostile/.)
    broken = parquet_support.bad_image_past_the_sample(tmp_path / "data" / "deep")
    env = _settings(
        tmp_path, ray_cluster, dataset="parquet", data_path=str(tmp_path / "data" / "deep"),
        epochs="1", global_batch_size="16", cache_dataset="off",
    )  # fmt: skip
    result = run_trainctl("train", env=env, cwd=tmp_path)
    assert result.returncode == 1, explain(result)
    assert "training failed: bad image in" in result.stderr, explain(result)
    assert f"{broken}: row 15" in result.stderr, explain(result)
    run_dir = tmp_path / "runs" / "parquet-cnn"
    assert f"driver and worker logs: {run_dir}/logs/attempt-1/" in result.stderr
    assert "Traceback" not in result.stderr
    summary = read_summary(run_dir)
    assert summary["status"] == "failed"
    assert summary["bad_data"].startswith(f"{broken}: row 15"), summary

    # A retry (KubeRay's backoffLimit) stops before Ray: the image is still bad.
    retry = run_trainctl("train", env=env, cwd=tmp_path)
    assert retry.returncode == 2, explain(retry)
    assert f"failed on its data, and it is still bad: {broken}: row 15" in retry.stderr
    assert read_summary(run_dir)["bad_data"] == summary["bad_data"]  # kept for the next retry

    # The worker's traceback, which Ray only ships to the driver, outlives the cluster in the
    # run folder. A rank that fails first makes Ray stop the other, which on a busy machine
    # may not have reached the bad image yet.
    failed = []
    for rank in (0, 1):
        shown = run_trainctl("logs", str(run_dir), "--worker", str(rank), env=env, cwd=tmp_path)
        assert shown.returncode == 0, explain(shown)
        lines = shown.stdout.splitlines()
        assert lines[0] == f"==> {run_dir}/logs/attempt-1/worker-{rank}.log <=="
        if "Traceback (most recent call last):" in lines:
            failed.append(lines)
    assert failed, "no worker log holds the traceback"
    # The image is cut 20 bytes in, inside its header: said as what it is.
    said = "a truncated or damaged PNG (it starts as one, but its header is incomplete: 20 bytes)"
    assert any(said in line for line in failed[0]), failed[0][-20:]


def test_a_parquet_file_its_reader_refuses_is_named_without_rays_tracebacks(
    ray_cluster: object, tmp_path: Path
) -> None:
    """A file damaged past preflight's sample: Ray Data's reader refuses it while the driver
    plans the read. Ray printed a notice with the tail of a traceback for each retry, and the
    run ended "training failed: OSError: Deserializing page header failed." naming no file."""
    damaged = parquet_support.damaged_page_past_the_sample(tmp_path / "data" / "damaged")
    env = _settings(
        tmp_path, ray_cluster, dataset="parquet", data_path=str(tmp_path / "data" / "damaged"),
        epochs="1", global_batch_size="16",
    )  # fmt: skip
    result = run_trainctl("train", env=env, cwd=tmp_path)
    assert result.returncode == 1, explain(result)
    named = f"training failed: unreadable data in {damaged}: not a readable Parquet file ("
    assert named in result.stderr, explain(result)
    output = result.stdout + result.stderr
    assert "Traceback" not in output and '  File "' not in output, explain(result)
    assert "retries remaining" not in output, explain(result)
    # Ray Data's sampling of the file guessed at credentials first: kept for driver.log only.
    assert "Parquet dataset sampling failed" not in output, explain(result)
    run_dir = tmp_path / "runs" / "parquet-cnn"
    kept = (run_dir / "logs" / "attempt-1" / "driver.log").read_text()
    assert "Parquet dataset sampling failed" in kept, kept[-3000:]
    assert read_summary(run_dir)["status"] == "failed"


def test_the_finished_run_reads_back_through_status_and_logs(finished_run: FinishedRun) -> None:
    """The run's last lines label each figure; `trainctl status` and `trainctl logs` of its
    folder (no Kubernetes) say the same, and its accelerator-hours are recorded."""
    run_dir, summary = finished_run.run_dir, read_summary(finished_run.run_dir)
    best, last = summary["best"], summary["metrics"]
    line = next(x for x in finished_run.result.stdout.splitlines() if " succeeded: " in x)
    assert line == (
        f"trainctl: run digits-cnn succeeded: {FINISHED_EPOCHS}/{FINISHED_EPOCHS} epochs; "
        f"last epoch val_accuracy {last['val_accuracy']:.4f}; best checkpoint (epoch "
        f"{best['epoch']}) val_accuracy {best['val_accuracy']:.4f}; 0 failure(s) recovered"
    ), explain(finished_run.result)
    hours = summary["accelerator_hours"]
    assert (hours["kind"], hours["workers"], hours["per_worker"]) == ("cpu", 2, 1.0), hours
    assert 0 < hours["hours"] < summary["duration_s"] * 2 / 3600 + 1e-9, hours
    result = trainctl("status", str(run_dir), "--json")
    assert result.code == 0, result.text
    record = json.loads(result.out)
    assert (record["status"], record["epochs_completed"]) == ("succeeded", FINISHED_EPOCHS)
    assert record["best"] == {"epoch": best["epoch"], "val_accuracy": best["val_accuracy"]}
    assert record["promotion"]["line"] == summary["promotion"]["line"]
    assert record["accelerator_hours"] == hours
    result = trainctl("logs", str(run_dir))  # the driver's, by default
    assert result.code == 0, result.text
    assert result.out.splitlines()[0] == f"==> {run_dir}/logs/attempt-1/driver.log <=="
    assert line.removeprefix("trainctl: ") in result.out
    # Its worker group's start recorded the data it trained on, which a rerun is held to.
    from app.data.schema import inspect_dataset
    from app.runfolder.folder import last_data

    trained = inspect_dataset(finished_run.tmp / "data" / "digits").trained_on()
    assert last_data(run_dir) == trained, (last_data(run_dir), trained)
