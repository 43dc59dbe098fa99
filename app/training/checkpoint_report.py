"""One checkpoint, end of epoch or mid-epoch, reported to Ray Train by every rank.

Every rank reports (Ray requires it) and gives its RNG states (gathered into rank 0's files);
only rank 0 writes and attaches the checkpoint, since all ranks hold the same weights.
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import ray.train
import torch
from torch import nn

from app.runfolder import checkpoint_names, checkpoints
from app.runfolder.checkpoints import WITNESSED_METRIC
from app.training.checkpoint_watch import gathered_rng


class Reported(NamedTuple):
    """What a report took, and the checkpoint folder it named (app/runfolder/checkpoint_names)."""

    seconds: float
    folder: str


def report_checkpoint(
    *,
    rank: int,
    world: int,
    metrics: dict[str, float],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    epochs_done: int,
    step: int,
    epoch_step: int = 0,
    reason: str = "epoch",
    unranked: dict[str, float] | None = None,
    epoch_sums: list[float] | None = None,
    class_names: tuple[str, ...] = (),
    carried: dict[str, Any] | None = None,
    stopped: dict[str, Any] | None = None,
    final: bool = False,
) -> Reported:
    """Report; returns the seconds it took and the checkpoint folder's name (Reported).
    `reason` is `epoch` for an end-of-epoch checkpoint (metrics are the epoch's validated
    record), else `interval`, `preemption` or `stopped` for a mid-epoch one at global `step`,
    `epoch_step` steps into epoch `epochs_done + 1`, with this rank's `epoch_sums` ([loss sum,
    rows] of the epoch so far: the resumed epoch's record then covers all of it). `carried`:
    what the next start continues from besides the weights and optimizer (the run clock, early
    stopping's progress), the same on every rank; `stopped`: the early stop that ends training
    here, recorded in meta.json; `final`: the run's last report."""
    started = time.monotonic()
    extra = {"epoch_sums": epoch_sums} if epoch_sums is not None else None
    rng = gathered_rng(world, extra)  # a collective: before the rank-0-only part
    mid_epoch = reason != "epoch"
    folder_name = checkpoint_names.dir_name(epochs_done, step if mid_epoch else None)
    if mid_epoch:
        # Ray's CheckpointConfig ranks by TRAIN_CHECKPOINT_METRIC: a mid-epoch checkpoint has no
        # validation, so it gets the worst score and Ray keeps it only while it is the newest.
        metrics = {"epoch": float(epochs_done + 1), "step": float(step), **(unranked or {})}
    if rank != 0:
        ray.train.report(metrics)
        return Reported(time.monotonic() - started, folder_name)
    train_state = {
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
        "epoch": epochs_done,
        "step": step,
        "epoch_step": epoch_step,
        "world_size": world,
        "reason": reason,
        "rng": rng,
        **(carried or {}),
    }
    folder = Path(tempfile.mkdtemp(prefix="trainctl-ckpt-"))
    digest = checkpoints.write_checkpoint(
        folder,
        model_state=(model.module if hasattr(model, "module") else model).state_dict(),
        train_state=train_state,
        epoch=epochs_done,
        metrics={k: float(v) for k, v in metrics.items() if math.isfinite(float(v))},
        step=step if mid_epoch else None,
        class_names=class_names,
        stopped=stopped,
    )
    # The digest travels to the controller through Ray, not the storage: a driver that signs
    # its exports witnesses the checkpoints its workers wrote (app/export/witness.py).
    ray.train.report(
        {**metrics, WITNESSED_METRIC: digest},
        checkpoint=ray.train.Checkpoint.from_directory(str(folder)),
        checkpoint_dir_name=folder_name,
        checkpoint_upload_mode=_upload_mode(reason, final),
        delete_local_checkpoint_after_upload=True,
    )
    return Reported(time.monotonic() - started, folder_name)


def _upload_mode(reason: str, final: bool) -> ray.train.CheckpointUploadMode:
    """How Ray copies the checkpoint's folder to shared storage.

    The files are complete when reported, so the copy can run in the background (ASYNC) while
    training goes on: nothing writes to the folder again, Ray deletes it once copied, commits
    the checkpoint only after the copy, keeps reports in order, and waits for the last copy
    before the run ends. A copy cut short by a crash lacks files or fails its checksums, and the
    next run sets it aside (app/runfolder/checkpoints.py). BENCHMARKS.md has the time this
    saves. A just-in-time checkpoint (preemption, SIGTERM) is copied before report returns
    instead (SYNC): the time it reports is then the time to a committed checkpoint. So is the
    run's last: Ray would wait for its copy only after the training function returned, when
    this worker's log in the run folder is closed, and the lines Ray logs as each report is
    committed (in order: the earlier copies' too) would miss the log."""
    mode = ray.train.CheckpointUploadMode
    return mode.SYNC if reason in ("preemption", "stopped") or final else mode.ASYNC
