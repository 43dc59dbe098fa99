"""TRAIN_PROMOTE_IF's decision: a parsed gate (app/settings/gate.py) against the exported
checkpoint's metrics and the champion's, as pure functions.

With no champion yet, `beats_champion` compares with chance instead: the checkpoint's
val_accuracy must beat the majority-class rate of the validation data (what a model that always
answers the most common class scores) by a margin (`Chance`). A model that learned nothing is
otherwise promoted by the first run of a new TRAIN_MODEL_NAME.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.settings.gate import Gate, exact

# What the first champion is compared with chance on, whatever TRAIN_CHECKPOINT_METRIC is: the
# one figure of every epoch record that a majority-class rate is comparable with.
CHANCE_METRIC = "val_accuracy"
CHANCE_MARGIN = 0.05  # the least a first champion must beat the majority-class rate by


@dataclass(frozen=True)
class Chance:
    """The majority-class rate of the validation data and the margin to beat it by.

    The margin is the larger of CHANCE_MARGIN and two standard errors of a rate measured on
    `rows` images (sqrt(rate * (1 - rate) / rows)): on 30 validation images a model no better
    than the majority class still scores up to ~0.17 above it by luck about one time in 40,
    while on 10,000 the noise is a fraction of a point and 0.05 asks for a visible gain. It is
    capped at half the majority-class error (1 - rate) / 2, so that on data where one class is
    97% the bar (0.985) can still be reached."""

    rate: float
    margin: float
    rows: int

    @property
    def bar(self) -> float:
        return self.rate + self.margin

    def record(self) -> dict[str, Any]:
        return {"metric": CHANCE_METRIC, "majority_rate": self.rate, "margin": self.margin,
                "valid_rows": self.rows}  # fmt: skip


def chance_of(valid_class_counts: Sequence[int]) -> Chance | None:
    """The Chance of validation data with these per-class counts; None when not counted."""
    rows = sum(valid_class_counts)
    if rows <= 0:
        return None
    rate = max(valid_class_counts) / rows
    noise = 2 * math.sqrt(rate * (1 - rate) / rows)
    return Chance(rate, min(max(CHANCE_MARGIN, noise), (1 - rate) / 2), rows)


@dataclass(frozen=True)
class Decision:
    """The gate's verdict, with the numbers it was made from (summary.json's `promotion`)."""

    promoted: bool
    reason: str
    metric: str
    value: float | None
    champion_value: float | None
    gate: str
    thresholds: list[dict[str, Any]] = field(default_factory=list)
    chance: dict[str, Any] | None = None  # the first champion's comparison with chance

    def record(self) -> dict[str, Any]:
        found = {
            "reason": self.reason,
            "gate": self.gate,
            "metric": self.metric,
            "value": self.value,
            "champion_value": self.champion_value,
            "thresholds": self.thresholds,
        }
        if self.chance is not None:
            found["chance"] = self.chance
        return found


def decide(
    gate: Gate,
    metrics: Mapping[str, float],
    champion_metrics: Mapping[str, float] | None,
    metric: str,
    higher_is_better: bool,
    chance: Chance | None = None,
) -> Decision:
    """Whether the exported checkpoint (`metrics`) passes `gate` against the champion's.

    `metric` is TRAIN_CHECKPOINT_METRIC, what `beats_champion` compares; `chance`, what it
    compares with when there is no champion (None: the validation data was not counted)."""
    value = number(metrics.get(metric))
    champion = number((champion_metrics or {}).get(metric))
    failed: list[str] = []
    checks = []
    for threshold in gate.thresholds:
        found = number(metrics.get(threshold.metric))
        ok = found is not None and threshold.holds(found)
        checks.append({"metric": threshold.metric, "op": threshold.op, "threshold": threshold.value,
                       "value": found, "passed": ok})  # fmt: skip
        if not ok:
            shown = "missing" if found is None else f"{found:.4g}"
            failed.append(
                f"{threshold.metric} {shown} is not {threshold.op} {exact(threshold.value)}"
            )
    if gate.beats_champion and champion is not None:
        better = value is not None and (value > champion if higher_is_better else value < champion)
        if not better:
            shown = "missing" if value is None else f"{value:.4g}"
            word = ">" if higher_is_better else "<"
            failed.append(f"{metric} {shown} is not {word} the champion's {champion:.4g}")
    against_chance = None
    if gate.beats_champion and champion is None and chance is not None:
        found = number(metrics.get(CHANCE_METRIC))
        ok = found is not None and found > chance.bar
        against_chance = {**chance.record(), "value": found, "passed": ok}
        if not ok:
            failed.append(
                f"{CHANCE_METRIC} {_show(found, 4)} does not beat the majority-class rate "
                f"{chance.rate:.4f} + {chance.margin:.4g} (no champion yet)"
            )
    if failed:
        reason = "; ".join(failed)
    elif gate.beats_champion and champion is not None:
        word = ">" if higher_is_better else "<"
        reason = f"{metric} {_show(value)} {word} {_show(champion)}"
    elif gate.beats_champion:
        reason = "no champion yet" + (f"; {_passed(checks)}" if checks else "")
    else:
        reason = _passed(checks) or "no conditions"
    return Decision(not failed, reason, metric, value, champion, str(gate), checks, against_chance)


def _passed(checks: list[dict[str, Any]]) -> str:
    return ", ".join(
        f"{c['metric']} {_show(c['value'])} {c['op']} {exact(c['threshold'])}" for c in checks
    )


def _show(value: float | None, places: int | None = None) -> str:
    if value is None:
        return "missing"
    return f"{value:.4g}" if places is None else f"{value:.{places}f}"


def number(value: Any) -> float | None:
    """A metric as the gate compares it: a finite number, or None (missing, text, an integer
    too large for a float: what a damaged pointer may hold)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value) if math.isfinite(value) else None
    except OverflowError:
        return None


def outcome_line(decision: Decision, version: int | None, champion_version: int | None) -> str:
    """The run's last line: what a GitOps pipeline or a person reading the job log sees."""
    if decision.promoted:
        return f"promoted v{version} ({decision.reason})"
    kept = f"kept v{champion_version}" if champion_version else "kept no champion"
    return f"{kept}: not promoted ({decision.reason})"
