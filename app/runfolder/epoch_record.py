"""The epoch record: one line of <run_dir>/metrics.jsonl, written by rank 0 after each epoch.

Its fields are listed once, here. The writer (app/training/loop.py), the metrics file's reader
(app/runfolder/folder.py), the summary (app/runfolder/summary.py), the trackers
(app/tracking/clients.py), the Ray gauges (app/training/ray_gauges.py), the gate grammar
(app/settings/gate.py) and the epoch line (`epoch_line`, below) all take their field lists
from `FIELDS`. Free of storage, torch and Ray, so any of them imports it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from app.formatting import finite, format_duration, shown_figure, whole


@dataclass(frozen=True)
class Field:
    name: str
    # A figure every reader relies on: a metrics line whose value is not a number (or null) is
    # damaged and skipped; the summary and its `best` carry it.
    core: bool = False
    tracked: bool = False  # logged to MLflow / TensorBoard / W&B at step=epoch
    gauge: tuple[str, str] | None = None  # Ray gauge: (metric name, description)
    line: str | None = None  # its part of the epoch line, formatted with `value`
    # What a core figure can be (a loss never below 0, an accuracy a fraction): a metrics line
    # outside it is damaged, never shown (a hand-written accuracy of 1e308 was, by status).
    least: float | None = None
    most: float | None = None


FIELDS: tuple[Field, ...] = (
    Field("epoch", gauge=("trainctl_epoch", "Last completed epoch.")),
    Field(
        "train_loss", core=True, tracked=True, least=0.0, line="train_loss {value:.4f}",
        gauge=("trainctl_train_loss", "Mean training loss of the last epoch."),
    ),
    Field(
        "val_loss", core=True, tracked=True, least=0.0, line="val_loss {value:.4f}",
        gauge=("trainctl_val_loss", "Validation loss after the last epoch."),
    ),
    Field(
        "val_accuracy", core=True, tracked=True, least=0.0, most=1.0, line="val_acc {value:.2%}",
        gauge=("trainctl_val_accuracy", "Validation accuracy after the last epoch (0-1)."),
    ),
    Field("lr", tracked=True),
    Field("epoch_time_s", tracked=True, line="{value:.1f}s/epoch"),
    Field(
        "images_per_s", tracked=True, line="{value:,.0f} img/s",
        gauge=("trainctl_images_per_second", "Training throughput of the last epoch, all workers."),
    ),
    Field("first_batch_s", tracked=True),
    Field("first_step_s"),
    Field("compile_s"),
    Field("compiled"),  # 1.0 when the epoch ran compiled, 0.0 after a fallback to eager
    Field("peak_gpu_gib"),  # on a GPU only
    # The run's training clock at the epoch's end (app/training/run_clock.py): wall seconds
    # summed over worker groups, and the same weighted by each group's worker count.
    Field("run_time_s"),
    Field("worker_time_s"),
)  # fmt: skip
NAMES = tuple(f.name for f in FIELDS)
CORE_METRICS = tuple(f.name for f in FIELDS if f.core)
TRACKED_METRICS = tuple(f.name for f in FIELDS if f.tracked)
# TRAIN_EPOCHS is at most this (app/settings/model.py), and so is an epoch record's epoch.
MAX_EPOCHS = 100_000


def _an_epoch(value: object) -> bool:
    return whole(value, 1, MAX_EPOCHS) is not None


def _a_figure(field: Field) -> Callable[[object], bool]:
    def fits(value: object) -> bool:
        if value is None:
            return True
        figure = shown_figure(value)
        if figure is None:
            return False
        # NaN is a diverged run's figure (the epoch line says so), not a damaged line.
        return math.isnan(figure) or (
            (field.least is None or figure >= field.least)
            and (field.most is None or figure <= field.most)
        )

    return fits


# What a metrics line must hold to be read: an epoch number TRAIN_EPOCHS allows, and numbers (or
# null) for the core figures, each a number a float holds within the figure's range. Anything
# else is a damaged line.
REQUIRED: dict[str, Callable[[object], bool]] = {
    "epoch": _an_epoch,
    **{f.name: _a_figure(f) for f in FIELDS if f.core},
}
ETA_GAUGE = (
    "trainctl_eta_seconds",
    "Estimated seconds to the last epoch at the last epoch's pace.",
)


def new_record(**values: float) -> dict[str, float]:
    """An epoch record from the writer's values, refusing a name not listed in FIELDS (a
    renamed figure would otherwise vanish from every reader without a word)."""
    unknown = sorted(set(values) - set(NAMES))
    if unknown:
        raise ValueError(f"not fields of the epoch record: {', '.join(unknown)}")
    return dict(values)


def eta_s(epoch: int, target_epochs: int, pace_s: float) -> float:
    """Seconds to the target epoch at `pace_s` seconds an epoch: the one ETA."""
    return max(0, target_epochs - epoch) * pace_s


_eta_s = eta_s  # for epoch_line, whose argument of that name the callers pass by keyword


def is_number(value: object) -> bool:
    return shown_figure(value) is not None


def pace(record: Mapping[str, Any]) -> float | None:
    """The record's own epoch time, where it has one."""
    return finite(record.get("epoch_time_s"))


def epoch_line(record: Mapping[str, Any], total: int, eta_s: float | None = None) -> str:
    """One epoch record of the run folder as one line.

    Fields a record lacks (runs recorded before a field existed, a line edited by hand) are left
    out rather than failing. The ETA is `eta_s` where the caller has a better estimate (the
    driver's median epoch), else the remaining epochs at this epoch's pace.
    """
    epoch = int(record["epoch"])
    parts = [f"epoch {epoch:>{len(str(total))}}/{total}"]
    for field in FIELDS:
        if not field.line:
            continue
        if is_number(record.get(field.name)):
            parts.append(field.line.format(value=record[field.name]))
        elif field.core and field.name in record and record[field.name] is None:
            # JSON has no NaN: a diverged epoch's loss is written as null, and was left out
            # of the line without a word (a red-team pass).
            parts.append(f"{field.name} not finite")
    own_pace = pace(record)
    if eta_s is None and own_pace is not None:
        eta_s = _eta_s(epoch, total, own_pace)
    if eta_s is not None:
        parts.append(f"ETA {format_duration(eta_s)}")
    return "  ".join(parts)
