"""Which checkpoint may resume this run: proven before Ray starts (TRAIN_WARM_START's weights:
app/run/warm_start.py).

Checksums prove a checkpoint intact, not that it belongs to this run: a checkpoint of another
model (or of the same model on another class count) passes them and then fails inside every
worker on every retry. Such checkpoints are set aside like corrupt ones, with the reason.

This is the driver's first look into the run folder, before Ray starts: a symbolic link among
its own names (planted on a shared volume) stops the run here with exit 2, naming it, before
anything is read or written through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.data.schema import DatasetInfo
from app.export.witness import witnessed
from app.runfolder import checkpoints
from app.runfolder import folder as run_folder
from app.runfolder.epoch_record import CORE_METRICS
from app.settings import TrainSettings
from app.storage.location import RunPath


def usable_checkpoint(
    settings: TrainSettings, info: DatasetInfo, say: Callable[[str], None]
) -> checkpoints.CheckpointRef | None:
    """The newest checkpoint that can resume this run; unusable ones are set aside, with why.
    A link in the run folder is refused first (LinkRefused, exit 2)."""
    run_folder.refuse_links(settings.run_dir)
    scan = checkpoints.scan(settings.run_dir)
    for folder, why in scan.bad:
        checkpoints.set_aside(folder, why, say)
    for ref in witnessed(scan.good, settings.signing_key, say):
        problem = checkpoints.resume_problem(ref, model_shapes(settings, info))
        if problem is None:
            return ref
        checkpoints.set_aside(ref.path, problem, say)
    return None


def restore_epoch_line(
    run_dir: RunPath, latest: checkpoints.CheckpointRef | None, say: Callable[[str], None]
) -> None:
    """metrics.jsonl's line for the newest checkpoint's epoch, where it lacks it.

    Rank 0 writes an epoch's line once the epoch's checkpoint is reported. The run's last
    checkpoint is committed inside that report (its copy is synchronous), so a driver or worker
    killed between the two (Ctrl-C on a sweep, a node lost) left a committed final epoch without
    its line, and the rerun, which finds the run finished, never wrote it: a metric lost
    silently. The checkpoint recorded the epoch's figures in its meta.json; the line is written
    again from them, saying so (`restored_from`)."""
    if latest is None or latest.kind != "epoch" or latest.epoch < 1:
        return
    if any(record["epoch"] == latest.epoch for record in run_folder.epochs(run_dir)):
        return
    line = {name: None for name in CORE_METRICS} | latest.metrics
    run_folder.record_epoch(
        run_dir, {**line, "epoch": latest.epoch, "restored_from": latest.path.name}
    )
    say(
        f"epoch {latest.epoch} had no line in {run_folder.METRICS_FILE} (stopped between its "
        f"checkpoint and its line): restored from checkpoint {latest.path.name}"
    )


def model_shapes(settings: TrainSettings, info: DatasetInfo) -> dict[str, Any]:
    from app.training.weights import shapes_and_head

    return shapes_and_head(settings, info)[0]
