"""TRAIN_PROMOTE_IF: its grammar and its parse, with the settings (no run code, no torch).

Grammar (whitespace-separated, case-sensitive):

    gate      := condition ("and" condition)*
    condition := "beats_champion" | METRIC OP NUMBER
    OP        := ">=" | ">" | "<=" | "<"

METRIC is a field of the epoch record (app/runfolder/epoch_record.py), read from the exported
checkpoint's metrics. `beats_champion` compares TRAIN_CHECKPOINT_METRIC (the metric that ranks
checkpoints, in its own direction) with the champion's value of it: strictly better, so a tie
keeps the champion (with no champion yet, it compares with chance: app/promotion/gate.py).
Only `and` exists: a gate is a list of requirements, all of which must hold; `or` would make
"why was it kept" ambiguous.
The decision (the gate against the metrics) is app/promotion/gate.py's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema
from pydantic_settings import NoDecode

from app.errors import did_you_mean

BEATS = "beats_champion"
OPS = (">=", "<=", ">", "<")  # two-character operators first: ">=" is not ">" then "="
MAX_GATE_CHARS = 500
FRACTIONS = ("val_accuracy",)  # metrics recorded as 0..1
_CONDITION = re.compile(
    r"\A([a-z_][a-z0-9_]*)\s*(>=|<=|>|<)\s*([-+]?[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\Z"
)


@dataclass(frozen=True)
class Threshold:
    metric: str
    op: str
    value: float

    def holds(self, found: float) -> bool:
        return {
            ">=": found >= self.value,
            ">": found > self.value,
            "<=": found <= self.value,
            "<": found < self.value,
        }[self.op]

    def met_by(self, figure: Any) -> bool:
        """Whether a figure read from a record meets this threshold; a missing, non-numeric or
        non-finite figure does not."""
        if not isinstance(figure, int | float) or isinstance(figure, bool):
            return False
        return math.isfinite(figure) and self.holds(float(figure))

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{exact(self.value)}"


def exact(value: float) -> str:
    """A threshold as written back (the recorded gate, the verdict): the shortest text that
    reads back as the same float (`0.9999999`, not `:g`'s `1`), without a needless `.0`."""
    value = float(value)
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


@dataclass(frozen=True)
class Gate:
    beats_champion: bool = False
    thresholds: tuple[Threshold, ...] = ()

    def __str__(self) -> str:
        parts = ([BEATS] if self.beats_champion else []) + [str(t) for t in self.thresholds]
        return " and ".join(parts)


def metrics() -> tuple[str, ...]:
    """The epoch record's fields. Imported when a gate is parsed, not with this module: the
    settings (and so `trainctl predict`'s CLI) import the gate's type without the run code."""
    from app.runfolder.epoch_record import FIELDS

    return tuple(f.name for f in FIELDS)


def allowed() -> str:
    return f"conditions are {BEATS} or METRIC OP NUMBER joined by `and`; METRIC is one of " + (
        ", ".join(metrics()) + f"; OP is one of {', '.join(OPS)}"
    )


def parse_gate(text: str) -> Gate:
    """The gate `text` describes; ValueError naming the part that is wrong and what is allowed."""
    if len(text) > MAX_GATE_CHARS:
        raise ValueError(f"longer than {MAX_GATE_CHARS} characters")
    parts = re.split(r"\s+and\s+", text.strip())
    if not text.strip():
        raise ValueError(f"is empty; {allowed()}")
    beats, thresholds = False, []
    for part in parts:
        part = part.strip()
        if part == BEATS:
            beats = True
            continue
        percent = part.endswith("%")
        match = _CONDITION.match(part.removesuffix("%"))
        if not match:
            raise ValueError(f"cannot read {part!r}; {allowed()}")
        metric, op, number = match.groups()
        if metric not in metrics():
            close = did_you_mean(metric, metrics(), "").removeprefix("; ")
            hint = f" ({close})" if close else ""
            raise ValueError(f"unknown metric {metric!r}{hint}; {allowed()}")
        value = float(number)
        if not math.isfinite(value):
            raise ValueError(f"{part!r}: the number must be finite")
        if metric in FRACTIONS and (percent or not 0 <= value <= 1):
            # The epoch line shows it as a percentage; a gate of 90 would never pass, silently.
            # `95%` is refused too, not read as 0.95: the recorded gate is what was written.
            fraction = exact(value / 100)
            raise ValueError(
                f"{part!r}: {metric} is a fraction from 0 to 1 (the epoch line's 95.28% is "
                f"0.9528): write {fraction}; did you mean {metric}{op}{fraction}?"
            )
        if percent:  # a loss has no percentage: `val_loss<5%` must not become `val_loss<5`
            raise ValueError(
                f"{part!r}: {metric} is a plain number, not a percentage; write it without `%`"
            )
        thresholds.append(Threshold(metric, op, value))
    return Gate(beats, tuple(thresholds))


def _gate_setting(value: Any) -> Gate:
    return value if isinstance(value, Gate) else parse_gate(str(value))


# The settings field's type: text in (env, .env, chart), the parsed Gate inside, its canonical
# text out (summary.json, `trainctl env`). NoDecode: pydantic-settings would otherwise read a
# dataclass field's text as JSON.
GateSetting = Annotated[
    Gate,
    NoDecode,
    BeforeValidator(_gate_setting),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string"}),
]
