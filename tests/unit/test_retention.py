"""Retention: which checkpoints stay is decided once (app/runfolder/retention.py), and the same rule
prunes after each epoch while Ray trains and at the end of the run."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from torch import nn

from app.runfolder import checkpoint_names, checkpoints, retention
from app.runfolder.checkpoints import CheckpointRef
from app.runfolder.folder import RAY_SNAPSHOT
from app.settings import TrainSettings
from tests.support import write_ray_snapshot


def _ref(name: str, epoch: int, accuracy: float) -> CheckpointRef:
    metrics = {"val_accuracy": accuracy, "val_loss": 1 - accuracy}
    return CheckpointRef(Path("/runs/r") / name, epoch, metrics)


def _epoch(epoch: int, accuracy: float) -> CheckpointRef:
    return _ref(checkpoint_names.dir_name(epoch), epoch, accuracy)


def _write(run_dir: Path, epoch: int, accuracy: float) -> Path:
    folder = run_dir / checkpoint_names.dir_name(epoch)
    checkpoints.write_checkpoint(
        folder,
        model_state=nn.Linear(2, 2).state_dict(),
        train_state={"epoch": epoch, "step": epoch},
        epoch=epoch,
        metrics={"val_accuracy": accuracy, "val_loss": 1 - accuracy},
    )
    return folder


@pytest.mark.parametrize(
    ("name", "ranked"),
    [
        ("checkpoint_epoch_0003", True),
        ("checkpoint_epoch_12345", True),
        ("checkpoint_epoch-0003_step-000412", False),  # mid-epoch: never ranked
        ("checkpoint_epoch_0003_step_000412", False),
        ("corrupt_checkpoint_epoch_0003", False),
        ("checkpoint_epoch_", False),
    ],
)
def test_only_end_of_epoch_checkpoint_names_are_ranked(name: str, ranked: bool) -> None:
    assert retention.is_ranked(name) is ranked


def test_keeps_the_best_by_the_metric_and_the_newest() -> None:
    good = [_epoch(1, 0.9), _epoch(2, 0.5), _epoch(3, 0.7), _epoch(4, 0.6)]
    gone = retention.to_remove(good, keep=2, metric="val_accuracy")
    assert [ref.epoch for ref in gone] == [2]
    # val_loss: lower is better, so the same checkpoints rank the other way round.
    gone = retention.to_remove(good, keep=1, metric="val_loss")
    assert sorted(ref.epoch for ref in gone) == [2, 3]


def test_names_that_are_not_ranked_are_never_removed_nor_counted() -> None:
    mid = _ref("checkpoint_epoch-0005_step-000412", 5, 0.0)
    good = [_epoch(1, 0.9), _epoch(2, 0.5), mid]
    gone = retention.to_remove(good, keep=1, metric="val_accuracy")
    # Epoch 1 is the best, epoch 2 the newest ranked one; the mid-epoch folder is left alone
    # and does not count as "the newest" either.
    assert gone == []
    assert retention.to_remove([*good, _epoch(3, 0.1)], keep=1, metric="val_accuracy") == [
        _epoch(2, 0.5)
    ]


def test_pruning_after_every_epoch_leaves_what_one_final_prune_leaves() -> None:
    """In-run pruning may not change the outcome: the same rule, applied as checkpoints arrive,
    keeps exactly the set that pruning once at the end keeps."""
    rng = random.Random(24)
    for keep, metric in itertools.product((1, 2, 3), ("val_accuracy", "val_loss")):
        for _ in range(30):
            refs = [_epoch(epoch, rng.choice([0.1, 0.5, 0.7, 0.9])) for epoch in range(1, 9)]
            kept: list[CheckpointRef] = []
            for ref in refs:
                kept.append(ref)
                gone = retention.to_remove(kept, keep=keep, metric=metric)
                kept = [k for k in kept if k not in gone]
            once = [r for r in refs if r not in retention.to_remove(refs, keep=keep, metric=metric)]
            assert kept == once, (keep, metric, refs)


def test_the_in_run_pruner_keeps_storage_bounded_and_hashes_each_checkpoint_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = TrainSettings(storage_path=tmp_path, run_name="r", checkpoints_to_keep=1)
    run_dir = settings.run_dir
    pruner = checkpoints.in_run_pruner(
        run_dir, keep=settings.checkpoints_to_keep, metric=settings.checkpoint_metric, warn=print
    )
    verified: list[str] = []
    real_verify = checkpoints.verify

    def counting_verify(folder: Path) -> CheckpointRef:
        verified.append(folder.name)
        return real_verify(folder)

    monkeypatch.setattr(checkpoints, "verify", counting_verify)
    for epoch, accuracy in [(1, 0.5), (2, 0.9), (3, 0.6), (4, 0.7)]:
        _write(run_dir, epoch, accuracy)
        write_ray_snapshot(run_dir, *(checkpoint_names.dir_name(e) for e in range(1, epoch + 1)))
        pruner.after_checkpoint()
    # A checkpoint still being copied (no meta.json yet) is neither kept track of nor removed.
    partial = _write(run_dir, 5, 0.1)
    (partial / checkpoints.META_FILE).unlink()
    pruner.after_checkpoint()
    left = sorted(p.name for p in run_dir.iterdir() if p.name != RAY_SNAPSHOT)
    assert left == ["checkpoint_epoch_0002", "checkpoint_epoch_0004", "checkpoint_epoch_0005"]
    # Each complete checkpoint hashed once; the partial one is tried again on each pass.
    complete = [name for name in verified if name != "checkpoint_epoch_0005"]
    assert sorted(complete) == [checkpoint_names.dir_name(epoch) for epoch in (1, 2, 3, 4)]


def test_the_in_run_pruner_never_removes_what_ray_would_restart_from(tmp_path: Path) -> None:
    settings = TrainSettings(storage_path=tmp_path, run_name="r", checkpoints_to_keep=1)
    run_dir = settings.run_dir
    _write(run_dir, 1, 0.9)
    older, newer = (checkpoint_names.dir_name(1, step) for step in (150, 170))
    for name, step in ((older, 150), (newer, 170)):
        checkpoints.write_checkpoint(
            run_dir / name, model_state=nn.Linear(2, 2).state_dict(),
            train_state={"epoch": 1, "step": step}, epoch=1, metrics={}, step=step,
        )  # fmt: skip
    # The newer step checkpoint is complete on storage, but Ray has not committed it yet: a
    # worker failure now restarts from the older one, which must stay.
    write_ray_snapshot(run_dir, checkpoint_names.dir_name(1), older)
    pruner = checkpoints.in_run_pruner(
        run_dir, keep=settings.checkpoints_to_keep, metric=settings.checkpoint_metric, warn=print
    )
    pruner.after_checkpoint()
    assert (run_dir / older).is_dir() and (run_dir / newer).is_dir()
    # Once Ray commits the newer one, the older is superseded.
    write_ray_snapshot(run_dir, checkpoint_names.dir_name(1), older, newer)
    pruner.after_checkpoint()
    assert not (run_dir / older).exists() and (run_dir / newer).is_dir()
    assert (run_dir / checkpoint_names.dir_name(1)).is_dir()  # the best end-of-epoch one


def test_a_failed_pass_is_told_and_does_not_stop_training(tmp_path: Path) -> None:
    told: list[str] = []

    def failing_prune(good: list[CheckpointRef]) -> list[Path]:
        raise PermissionError(13, "Permission denied", str(tmp_path))

    pruner = retention.InRunPruner(lambda known: [], failing_prune, told.append)
    pruner.after_checkpoint()
    assert told == [f"checkpoints not pruned yet (PermissionError: [Errno 13] Permission denied: "
                    f"'{tmp_path}')"]  # fmt: skip


def _step(epochs_done: int, step: int) -> CheckpointRef:
    name = checkpoint_names.dir_name(epochs_done, step)
    return CheckpointRef(Path("/runs/r") / name, epochs_done, {"step": float(step)}, step)


def test_mid_epoch_checkpoints_live_only_while_newest_and_are_never_ranked() -> None:
    epoch_1, epoch_2 = _epoch(1, 0.9), _epoch(2, 0.5)
    early, late = _step(2, 150), _step(2, 180)
    good = [epoch_1, epoch_2, early, late]
    # The newest (a step checkpoint) stays for the rerun to resume from; the older step
    # checkpoint is superseded; the epoch checkpoints are ranked by the metric alone.
    gone = retention.to_remove(good, keep=1, metric="val_accuracy")
    assert [ref.path.name for ref in gone] == [early.path.name, epoch_2.path.name]
    assert [ref.epoch for ref in retention.ranked(good, "val_accuracy")] == [1, 2]
    # The next epoch's end supersedes every step checkpoint before it.
    gone = retention.to_remove([*good, _epoch(3, 0.95)], keep=2, metric="val_accuracy")
    assert {ref.path.name for ref in gone} == {early.path.name, late.path.name, epoch_2.path.name}
