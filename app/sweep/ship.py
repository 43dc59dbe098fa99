"""A sweep's end for its trials: a stopped trial's summary, and the best trial shipped.

The best trial's best checkpoint is exported and judged by TRAIN_PROMOTE_IF by the same
function that judges a single run (app/promotion/step.promote_run), once per sweep, against
the champion under the sweep's TRAIN_STORAGE_PATH: the trial's settings, with the trial's run
folder as the run folder, the sweep's name as the run's name and the sweep's champion name
(a sweep over TRAIN_MODEL still has one champion).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import click
from pydantic import PrivateAttr

from app.data.schema import DatasetInfo
from app.export.witness import witnessed
from app.formatting import finite
from app.promotion.step import promote_run
from app.run.resume import restore_epoch_line
from app.runfolder import checkpoints
from app.runfolder import folder as run_folder
from app.runfolder.folder import (
    SummaryNotWritten,
    read_summary,
    recorded_tracking,
    write_final_summary,
)
from app.runfolder.summary import build_summary, plot_curves
from app.runfolder.sweep_records import stopped_by
from app.runfolder.usage import from_training_clock
from app.settings import TrainSettings
from app.storage.location import RunPath


class TrialOfSweep(TrainSettings):
    """A trial's settings where the run folder is the trial's, the rest the sweep's."""

    _trial_dir: Any = PrivateAttr(None)

    @property
    def run_dir(self) -> RunPath:  # type: ignore[override]
        return self._trial_dir


def promotion_settings(sweep: TrainSettings, trial: TrainSettings) -> TrialOfSweep:
    values = {
        **trial.model_dump(mode="json"),
        "storage_path": str(sweep.storage_path),
        "run_name": sweep.run_name,
        "model_name": sweep.champion_name,
    }
    settings = TrialOfSweep.from_values(values)
    settings._trial_dir = trial.run_dir
    return settings


def promote_best(sweep: TrainSettings, trial: TrainSettings, info: DatasetInfo) -> dict[str, Any]:
    """The one promotion of the sweep (NotPromoted / RunFailed as for a run)."""
    from app.training.accel import resolve
    from app.training.weights import pretrained_info

    resolved, _ = resolve(trial, info)  # what the trial trained with, as its driver saw it
    info = pretrained_info(resolved, info)
    settings = promotion_settings(sweep, resolved)
    summary = read_summary(trial.run_dir) or {}
    # Exported, evaluated on valid/ (and test/), gated as a run is.
    return promote_run(settings, info, summary, summary.get("promotion"), evaluate=True)


def mark_stopped(trial: TrainSettings, stop: dict[str, Any], info: DatasetInfo) -> None:
    """The trial's summary says `stopped` (by the scheduler, after which epoch), not failed,
    with the settings it trained with (`auto` resolved, as the other trials' drivers record
    them: compare showed `amp auto` beside `off` as a difference that was none)."""
    from app.training.accel import resolve

    run_dir = trial.run_dir
    say = partial(_say_of, run_dir.name)
    good = None  # the verified checkpoints: every file hashed once, and only where needed
    if trial.signing_key is not None:
        # Tune ends a stopped trial's driver, and Ray Train's controller with it, maybe before
        # the controller witnessed the checkpoint of an epoch the workers trained after the
        # scheduler's verdict: set aside now, with the reason, not left for the next reader.
        good = witnessed(checkpoints.scan(run_dir).good, trial.signing_key, say)
    trial, _ = resolve(trial, info)
    before = read_summary(run_dir) or {}
    if before.get("status") == "stopped":
        return
    good = checkpoints.scan(run_dir).good if good is None else good
    # Tune's stop can end the workers between an epoch's checkpoint and its metrics line, as a
    # killed driver does: the line is written from the checkpoint, or the trial's records
    # disagreed (two epochs in metrics.jsonl, three in its summary and checkpoints).
    ended = [ref for ref in good if ref.kind == "epoch"]
    restore_epoch_line(run_dir, max(ended, key=lambda ref: ref.epoch, default=None), say)
    trained = run_folder.epochs(run_dir)
    summary = build_summary(
        run_dir,
        status="stopped",
        run_name=trial.run_name,
        target_epochs=trial.epochs,
        settings={**trial.redacted(), "fused_adamw": trial.use_gpu},
        duration_s=max(0.0, finite(stop.get("time_s")) or 0.0),
        failures=0,
        restored_from=None,
        metric=trial.checkpoint_metric,
        good=good,
        epochs=trained,
    )
    last = max((row["epoch"] for row in trained if isinstance(row.get("epoch"), int)), default=0)
    summary["stopped_by"] = stopped_by(trial.tune_scheduler, stop.get("epoch"), last)
    held = from_training_clock(
        trained, use_gpu=trial.use_gpu, cpus_per_worker=trial.cpus_per_worker
    )
    if held is not None:  # compare derived it from wall time x workers: several times over
        summary["accelerator_hours"] = held
    if tracking := recorded_tracking(before):
        summary["tracking"] = tracking
    try:
        plot_curves(run_dir)
        write_final_summary(run_dir, summary)
    except (SummaryNotWritten, OSError) as err:
        click.echo(f"trainctl: warning: {run_dir}: stopped, not recorded ({err})", err=True)


def _say_of(trial_id: str, line: str) -> None:
    click.echo(f"trainctl: {trial_id}: {line}")
