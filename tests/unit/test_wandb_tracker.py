"""The W&B tracker with the real wandb package, offline (WANDB_MODE=offline: what an air-gapped
cluster runs, `wandb sync` uploading later), its files read back (tests/wandb_support.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.settings import TrainSettings
from app.tracking.trackers import Trackers
from tests.wandb_support import offline_runs


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """W&B offline, its settings, cache and artifact staging in this test's folder, not ~."""
    for key in ("MLFLOW_TRACKING_URI", "WANDB_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "vision")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for key in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(key, str(tmp_path / "wandb-home" / key.lower()))
    yield tmp_path
    import wandb

    wandb.teardown()  # its service process, which would outlive the test


def _record(epoch: int) -> dict[str, Any]:
    return {"epoch": epoch, "time": time.time(), "train_loss": 1.0 / epoch,
            "val_loss": 2.0 / epoch, "val_accuracy": 0.25 * epoch}  # fmt: skip


def test_epochs_settings_and_the_best_checkpoint_reach_an_offline_run(offline: Path) -> None:
    settings = TrainSettings(storage_path=offline / "runs", run_name="shapes", lr=0.003,
                             tensorboard=False)  # fmt: skip
    settings.run_dir.mkdir(parents=True)
    trackers = Trackers.start(settings, None)
    for epoch in (1, 2):
        trackers.log_epoch(_record(epoch))
    best = settings.run_dir / "checkpoint_epoch_0002"
    best.mkdir()
    (best / "model.pt").write_bytes(b"weights")
    trackers.finish("succeeded", best)
    assert trackers.delivery()["wandb"]["delivered_epochs"] == [1, 2]

    [run] = offline_runs(settings.run_dir / "wandb")  # W&B's files beside the run's own
    assert (run.run_id, run.project, run.name) == (trackers.ids["wandb"]["run_id"], "vision",
                                                   "shapes")  # fmt: skip
    assert run.config["lr"] == 0.003 and run.config["run_name"] == "shapes"
    assert [(h["epoch"], h["val_accuracy"], h["val_loss"]) for h in run.history] == [
        (1, 0.25, 2.0), (2, 0.5, 1.0)]  # fmt: skip
    assert run.artifacts == {"shapes-best": ["model.pt"]}
    assert run.exit_code == 0


def test_a_failed_run_ends_its_tracker_run_failed_and_a_rerun_continues_it(
    offline: Path,
) -> None:
    settings = TrainSettings(storage_path=offline / "runs", run_name="flaky", tensorboard=False)
    settings.run_dir.mkdir(parents=True)
    first = Trackers.start(settings, None)
    first.log_epoch(_record(1))
    first.finish("failed", None)
    again = Trackers.start(settings, first.ids)  # the ids the summary keeps
    again.catch_up([_record(1)])  # the recorded epochs, as a rerun's driver hands them on
    again.log_epoch(_record(2))
    again.finish("succeeded", None)
    assert again.ids["wandb"]["run_id"] == first.ids["wandb"]["run_id"]

    runs = offline_runs(settings.run_dir / "wandb")
    assert [run.run_id for run in runs] == [first.ids["wandb"]["run_id"]] * 2  # one W&B run
    assert [run.exit_code for run in runs] == [1, 0]
    # Offline, W&B cannot say which epochs the first driver logged: the rerun logs them again
    # (online, the run's summary, which W&B restores on resume, says so and nothing repeats).
    assert [[h["epoch"] for h in run.history] for run in runs] == [[1], [1, 2]]
