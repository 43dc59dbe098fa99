"""TRAIN_PROMOTE_IF's decision: a parsed gate (app/settings/gate.py) against the exported
checkpoint's metrics and the champion's, as pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.settings.gate import Gate


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

    def record(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "gate": self.gate,
            "metric": self.metric,
            "value": self.value,
            "champion_value": self.champion_value,
            "thresholds": self.thresholds,
        }


def decide(
    gate: Gate,
    metrics: Mapping[str, float],
    champion_metrics: Mapping[str, float] | None,
    metric: str,
    higher_is_better: bool,
) -> Decision:
    """Whether the exported checkpoint (`metrics`) passes `gate` against the champion's.

    `metric` is TRAIN_CHECKPOINT_METRIC, what `beats_champion` compares."""
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
            failed.append(f"{threshold.metric} {shown} is not {threshold.op} {threshold.value:g}")
    if gate.beats_champion and champion is not None:
        better = value is not None and (value > champion if higher_is_better else value < champion)
        if not better:
            shown = "missing" if value is None else f"{value:.4g}"
            word = ">" if higher_is_better else "<"
            failed.append(f"{metric} {shown} is not {word} the champion's {champion:.4g}")
    if failed:
        reason = "; ".join(failed)
    elif gate.beats_champion and champion is not None:
        word = ">" if higher_is_better else "<"
        reason = f"{metric} {_show(value)} {word} {_show(champion)}"
    elif gate.beats_champion:
        reason = "no champion yet" + (f"; {_passed(checks)}" if checks else "")
    else:
        reason = _passed(checks) or "no conditions"
    return Decision(not failed, reason, metric, value, champion, str(gate), checks)


def _passed(checks: list[dict[str, Any]]) -> str:
    return ", ".join(
        f"{c['metric']} {_show(c['value'])} {c['op']} {c['threshold']:g}" for c in checks
    )


def _show(value: float | None) -> str:
    return "missing" if value is None else f"{value:.4g}"


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
