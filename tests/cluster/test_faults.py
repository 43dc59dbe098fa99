"""Fault injection on the real local multi-node cluster: the run survives and resumes.

Every injection waits until Ray's controller has *committed* a checkpoint (it is in Ray's
checkpoint snapshot), so no test races the commit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.runfolder import checkpoints
from tests.support import (
    FINISHED_EPOCHS,
    FinishedRun,
    explain,
    read_history,
    read_summary,
    run_trainctl,
)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]

# Where each fault is tested on the real cluster:
# - a killed training worker (one process), on a run folder in an S3 bucket:
#   tests/cluster/test_object_storage.py;
# - a lost node (no notice) and a drained one (preemption notice), on one run:
#   tests/cluster/test_preemption.py;
# - a driver stopped by SIGTERM (an eviction) and then killed by SIGKILL, on one run:
#   tests/cluster/test_preemption.py;
# - damaged checkpoints, below.


def test_corrupt_and_partial_newest_checkpoints_fall_back_to_the_last_good_one(
    finished_run: FinishedRun, tmp_path: Path
) -> None:
    """A finished run's rerun trains nothing. Then the two newest checkpoints are damaged in
    the two ways storage damages them: a rerun with more epochs sets both aside, each with its
    reason, resumes after the last good one, and continues the run to its new target.

    One rerun checks both kinds: a `trainctl train` is about half a minute of this machine.
    """
    # A finished run (every checkpoint kept), copied: the same start as training one here.
    env, run_dir = finished_run.copy_to(tmp_path)
    name, last, more = run_dir.name, FINISHED_EPOCHS, FINISHED_EPOCHS + 1
    trained = read_summary(run_dir)
    # Rerun with other settings, none of which trains it on: its record stays the one it was
    # trained with (a red-team pass found lr, GPUs and fewer epochs rewritten, untrained).
    other = {"TRAIN_LR": "0.5", "TRAIN_USE_GPU": "true", "TRAIN_EPOCHS": str(last - 1)}
    again = run_trainctl("train", env={**env, **other}, cwd=tmp_path)
    assert again.returncode == 0, explain(again)
    assert f"already finished {FINISHED_EPOCHS} epochs" in again.stdout
    summary = read_summary(run_dir)
    assert summary["epochs_completed"] == FINISHED_EPOCHS
    assert summary["settings"] == trained["settings"], explain(again)
    assert summary["epochs_target"] == trained["epochs_target"] == FINISHED_EPOCHS
    assert summary["accelerator_hours"]["kind"] == trained["accelerator_hours"]["kind"] == "cpu"

    partial, good = last - 1, last - 2
    env = {**env, "TRAIN_EPOCHS": str(more), "TRAIN_CHECKPOINTS_TO_KEEP": "10"}  # keep them all

    # Truncated weights in the newest checkpoint.
    model = run_dir / f"checkpoint_epoch_{last:04d}" / "model.pt"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    # A partial one before it: the upload never finished, so meta.json never arrived.
    (run_dir / f"checkpoint_epoch_{partial:04d}" / "meta.json").unlink()

    # A writer of the storage links Ray's storage marker to a file the user can write: Ray
    # Train opens it for writing as it starts, and truncated the file (a red-team pass).
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's own file\n")
    (run_dir / ".validate_storage_marker").unlink(missing_ok=True)
    (run_dir / ".validate_storage_marker").symlink_to(precious)

    rerun = run_trainctl("train", env=env, cwd=tmp_path, timeout=900)
    assert rerun.returncode == 0, explain(rerun)
    assert precious.read_text() == "the user's own file\n"
    assert not (run_dir / ".validate_storage_marker").is_symlink()
    assert f"checkpoint checkpoint_epoch_{last:04d} is unusable" in rerun.stdout, explain(rerun)
    assert f"checkpoint_epoch_{partial:04d} is unusable: meta.json is missing" in rerun.stdout
    assert f"resuming run {name} at epoch {good + 1}" in rerun.stdout, explain(rerun)
    assert (run_dir / f"corrupt_checkpoint_epoch_{last:04d}").is_dir()
    assert (run_dir / f"corrupt_checkpoint_epoch_{partial:04d}").is_dir()
    # The epochs after the good one were trained again: their new checkpoints are whole.
    assert {ref.epoch for ref in checkpoints.scan(run_dir).good} >= {good, partial, last, more}
    summary = read_summary(run_dir)
    assert summary["epochs_completed"] == more and summary["status"] == "succeeded", summary
    assert summary["restored_from"].endswith(f"checkpoint_epoch_{good:04d}"), summary
    assert Path(summary["restored_from"]).parent == run_dir, "resumed from the copy"
    history = read_history(run_dir)
    assert [row["epoch"] for row in history] == list(range(1, more + 1))
    resumed = history[good]  # epoch good + 1, the first the rerun trained: compiled again
    assert resumed["compiled"] == 1.0 and resumed["compile_s"] > 0, resumed
