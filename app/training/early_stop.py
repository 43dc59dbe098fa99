"""Early stopping (TRAIN_STOP_AT, TRAIN_PATIENCE): whether training ends after an epoch.

Ray Train needs the same number of reports from every rank, so every rank must reach the same
decision. It is taken from the epoch's all-reduced figures (the same numbers on every rank) and
from a small `Progress` carried in every checkpoint (the same bytes on every rank after a
resume). Pure functions, free of torch and Ray: the loop, the driver and the tests call them.

A stop is recorded in the last checkpoint's meta.json (`stopped`: reason, epoch and the rule as
written); a rerun whose rule is the same does not train on (`still_holds`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from app.formatting import finite, whole
from app.runfolder.retention import higher_is_better
from app.settings import TrainSettings
from app.settings.gate import Gate

Reason = Literal["stop_at", "patience"]


@dataclass(frozen=True)
class StopRule:
    stop_at: Gate  # thresholds only; none: off
    patience: int  # 0: off
    metric: str  # TRAIN_CHECKPOINT_METRIC: what patience watches
    higher_is_better: bool

    @property
    def active(self) -> bool:
        return bool(self.stop_at.thresholds) or self.patience > 0

    def text(self, reason: Reason) -> str:
        """The rule behind `reason`, as recorded with a stop and compared on a rerun."""
        if reason == "stop_at":
            return f"TRAIN_STOP_AT={self.stop_at}"
        return f"TRAIN_PATIENCE={self.patience} on {self.metric}"


def rule_of(settings: TrainSettings) -> StopRule:
    metric = settings.checkpoint_metric
    return StopRule(settings.stop_at, settings.patience, metric, higher_is_better(metric))


def described(rule: StopRule, epochs: int) -> str:
    """The rule as it will be judged, for `trainctl check`."""
    parts = []
    if rule.stop_at.thresholds:
        parts.append(f"stop at the first epoch with {rule.stop_at}")
    if rule.patience:
        parts.append(f"after {rule.patience} epoch(s) without a better {rule.metric}")
    return f"{' or '.join(parts) or 'off'} (else at TRAIN_EPOCHS={epochs})"


def advice(rule: StopRule, epochs: int) -> str | None:
    """Settings that can never stop a run early, said before it trains."""
    if rule.patience and rule.patience >= epochs - 1:
        fix = f"use at most {epochs - 2}, or 0 for off" if epochs > 2 else "use 0 for off"
        return (
            f"TRAIN_PATIENCE={rule.patience} cannot end a run of TRAIN_EPOCHS={epochs} early "
            f"(the first epoch sets the best); {fix}"
        )
    return None


@dataclass(frozen=True)
class Progress:
    """The checkpoint metric's best so far and the epochs since it improved."""

    best: float | None = None
    best_epoch: int = 0
    stale: int = 0

    def record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, saved: Any) -> Progress:
        """From a checkpoint's training state; a fresh start for one written without it."""
        if not isinstance(saved, Mapping):
            return cls()
        best = saved.get("best")
        return cls(
            best=finite(best),
            best_epoch=int(saved.get("best_epoch") or 0),
            stale=int(saved.get("stale") or 0),
        )


@dataclass(frozen=True)
class Stop:
    reason: Reason
    epoch: int
    rule: str

    def record(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        if self.reason == "stop_at":
            return f"stopped early at epoch {self.epoch}: {self.rule} met"
        return f"stopped early at epoch {self.epoch}: no improvement for {self.rule}"


def improved(rule: StopRule, progress: Progress, value: float) -> bool:
    if not math.isfinite(value):
        return False
    if progress.best is None:
        return True
    return value > progress.best if rule.higher_is_better else value < progress.best


def after_epoch(
    rule: StopRule, progress: Progress, epoch: int, target: int, metrics: Mapping[str, float]
) -> tuple[Progress, Stop | None]:
    """The progress after `epoch` and the stop it calls for, if any. The target epoch itself
    is never an early stop: training ends there anyway."""
    value = float(metrics.get(rule.metric, math.nan))
    if improved(rule, progress, value):
        progress = Progress(best=value, best_epoch=epoch, stale=0)
    else:
        progress = Progress(progress.best, progress.best_epoch, progress.stale + 1)
    if epoch >= target:
        return progress, None
    if rule.stop_at.thresholds and met(rule.stop_at, metrics):
        return progress, Stop("stop_at", epoch, rule.text("stop_at"))
    if rule.patience and progress.stale >= rule.patience:
        return progress, Stop("patience", epoch, rule.text("patience"))
    return progress, None


def met(gate: Gate, metrics: Mapping[str, Any]) -> bool:
    """Whether every threshold of `gate` holds for `metrics` (a missing figure does not)."""
    return all(t.met_by(metrics.get(t.metric)) for t in gate.thresholds)


def recorded_stop(meta: Any) -> Stop | None:
    """A checkpoint's recorded stop, or None where it has none or it is not one a run writes."""
    if not isinstance(meta, Mapping):
        return None
    reason, epoch, rule = meta.get("reason"), meta.get("epoch"), meta.get("rule")
    if reason not in ("stop_at", "patience") or not isinstance(rule, str):
        return None
    if (epoch := whole(epoch, least=1)) is None:
        return None
    return Stop(reason, epoch, rule)


def still_holds(stop: Stop | None, rule: StopRule) -> bool:
    """Whether a recorded stop ends a rerun too: its rule is still the one in force."""
    return stop is not None and stop.rule == rule.text(stop.reason)
