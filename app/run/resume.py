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
from app.errors import ConfigError
from app.export.witness import witnessed
from app.formatting import one_line
from app.runfolder import checkpoints
from app.runfolder import folder as run_folder
from app.runfolder.epoch_record import CORE_METRICS
from app.settings import TrainSettings
from app.settings.tune_space import VARIABLE
from app.storage.location import RunPath

# Settings that make another model: a run's checkpoints are not resumed under other values,
# even where their shapes happen to fit. The data's own identity is its class names, which
# preflight holds to the run's (another dataset kind of the same images is the same run).
MODEL_SHAPE = ("model", "image_size", "vit_patch")
# What a resumed run's training follows: said when a rerun changes it.
TRAINING = (*VARIABLE, "epochs", "dataset", "image_size")


def usable_checkpoint(
    settings: TrainSettings, info: DatasetInfo, say: Callable[[str], None]
) -> checkpoints.CheckpointRef | None:
    """The newest checkpoint that can resume this run; unusable ones are set aside, with why.
    A link in the run folder is refused first (LinkRefused, exit 2)."""
    run_folder.refuse_links(settings.run_dir)
    if problem := other_task(settings, info):  # before anything is set aside
        raise ConfigError(problem)
    scan = checkpoints.scan(settings.run_dir)
    if scan.good and (then := run_folder.last_data(settings.run_dir)):
        _say_other_rows(info, then, say)
    for folder, why in scan.bad:
        checkpoints.set_aside(folder, why, say)
    for ref in witnessed(scan.good, settings.signing_key, say):
        problem = checkpoints.resume_problem(ref, model_shapes(settings, info))
        if problem is None:
            return ref
        if isinstance(problem, checkpoints.Misfit) and _trained_here(settings):
            raise ConfigError(_other_data(settings, info, ref, problem))
        checkpoints.set_aside(ref.path, problem, say)  # damaged, or planted: not its model
    return None


def other_task(settings: TrainSettings, info: DatasetInfo) -> str | None:
    """Why this rerun is another task than the one the run's checkpoints hold, or None: read
    only, so `check` says it too (it said ok, and `train` then refused: a red-team pass).

    - Another model (TRAIN_MODEL, TRAIN_IMAGE_SIZE, TRAIN_VIT_PATCH): its checkpoints were
      set aside as corrupt and the new model's epochs replaced the run's history, exit 0.
    - Other classes or another input shape than the run's last worker group trained on
      (attempts.jsonl): a Parquet set rewritten at 48 px resumed a 32 px run, its history half
      one and half the other.
    Both red-team passes. A run without checkpoint folders has nothing to lose."""
    if not checkpoints.has_checkpoints(settings.run_dir):
        return None
    if shaped := changed_since(settings, MODEL_SHAPE):
        return (
            f"run {settings.run_name} was trained with {', '.join(shaped)}: its checkpoints are "
            "of that model, not this one, and starting over would replace its history; give "
            f"the new model a run of its own (TRAIN_RUN_NAME), or move {settings.run_dir} away "
            "to start over"
        )
    then, now = run_folder.last_data(settings.run_dir), info.trained_on()
    if then and (then["classes"], then["input"]) != (now["classes"], now["input"]):
        shown = "{classes} classes at input {input[0]}x{input[1]}x{input[2]}"
        return (
            f"run {settings.run_name} trained on {shown.format(**then)} (its last start), and "
            f"this rerun would train on {shown.format(**now)}: the data's classes changed, or "
            "the input size (the data's own, or the one TRAIN_IMAGE_SIZE, TRAIN_WEIGHTS or the "
            f"model sets). Its checkpoints are of that task, and {_ways_on(settings)}"
        )
    return None


def _say_other_rows(info: DatasetInfo, then: dict[str, Any], say: Callable[[str], None]) -> None:
    """Other row counts than the run's last start: said, since a resume's exact replay
    assumes the same rows."""
    now = info.trained_on()
    rows = [
        f"{split} {then[f'{split}_rows']:,} rows then, {now[f'{split}_rows']:,} now"
        for split in ("train", "valid")
        if then[f"{split}_rows"] != now[f"{split}_rows"]
    ]
    if rows:
        say(
            f"the data changed since the run's last start ({'; '.join(rows)}): the epochs "
            "trained so far saw the old rows, and a resume inside an epoch skips the first "
            "batches of the new order, which are other rows now"
        )


def _trained_here(settings: TrainSettings) -> bool:
    """Whether a driver of this run recorded its settings (summary.json): its checkpoints are
    then the run's own, and one that no longer fits says the data changed, not that it was
    planted."""
    summary = run_folder.read_summary(settings.run_dir) or {}
    return isinstance(summary.get("settings"), dict)


def _other_data(
    settings: TrainSettings, info: DatasetInfo, ref: checkpoints.CheckpointRef, problem: str
) -> str:
    """A run's own checkpoint that the model this data makes does not fit: label ids without
    names gained a class, or Parquet images of another size. Set aside as corrupt, the run
    started over and replaced its history with exit 0 (a red-team pass)."""
    return (
        f"run {settings.run_name}, checkpoint {ref.path.name}: {problem}: the data's classes "
        f"or the input size changed since it trained (now {info.num_classes} classes at input "
        f"{info.channels}x{info.height}x{info.width}), and {_ways_on(settings)}"
    )


def _ways_on(settings: TrainSettings) -> str:
    """What a refused rerun of another task can do instead, said by both refusals above."""
    return (
        "starting over would replace the run's history; restore what changed, give this a run "
        f"of its own (TRAIN_RUN_NAME), or move {settings.run_dir} away to start over"
    )


def changed_since(settings: TrainSettings, names: tuple[str, ...] = TRAINING) -> list[str]:
    """`names` whose value the run's last driver recorded (summary.json's settings) and this one
    changes, each as `TRAIN_LR=0.001 (now 0.05)`; empty without a readable record."""
    summary = run_folder.read_summary(settings.run_dir) or {}
    recorded = summary.get("settings")
    if not isinstance(recorded, dict):
        return []
    now = settings.redacted()
    return [
        f"TRAIN_{name.upper()}={one_line(str(recorded[name]), 60)} (now "
        f"{one_line(str(now.get(name)), 60)})"
        for name in dict.fromkeys(names)
        if name in recorded and recorded[name] != now.get(name)
    ]


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
