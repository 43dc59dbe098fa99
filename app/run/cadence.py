"""TRAIN_CHECKPOINT_EVERY: when a checkpoint is written inside an epoch, parsed once.

`epoch` (the default) writes one checkpoint per epoch, after validation. A step count (`500`)
also writes one every that many optimizer steps, and a duration (`90s`, `10m`, `1h`) one every
that much wall time. The setting is parsed here into a `CheckpointEvery` by the settings model,
so the training loop asks the object (`due`) and never reads the text again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema
from pydantic_settings import NoDecode

# ASCII digits only (`\d` takes other scripts' digits too), no sign, no fraction.
_PATTERN = re.compile(r"\A\s*(?:(epoch)|([0-9]{1,9})\s*(s|m|h)?)\s*\Z")
_UNIT_S = {"s": 1, "m": 60, "h": 3600}
MAX_STEPS = 100_000_000
MIN_SECONDS, MAX_SECONDS = 10, 7 * 24 * 3600
ALLOWED = "`epoch`, a step count (e.g. 500) or a duration of 10s to 168h (e.g. 90s, 10m, 1h)"
JSON_PATTERN = r"^\s*(epoch|[0-9]{1,9}\s*[smh]?)\s*$"


@dataclass(frozen=True)
class CheckpointEvery:
    kind: Literal["epoch", "steps", "seconds"]
    value: int = 0  # steps or seconds; 0 for epoch

    def __str__(self) -> str:
        if self.kind == "epoch":
            return "epoch"
        return f"{self.value}s" if self.kind == "seconds" else str(self.value)

    @property
    def mid_epoch(self) -> bool:
        return self.kind != "epoch"

    def due(self, steps_since: int, seconds_since: float) -> bool:
        """Whether a mid-epoch checkpoint is due, given what passed since the last one."""
        if self.kind == "steps":
            return steps_since >= self.value
        if self.kind == "seconds":
            return seconds_since >= self.value
        return False


def parse(value: Any) -> CheckpointEvery:
    if isinstance(value, CheckpointEvery):
        return value
    match = _PATTERN.match(str(value)) if isinstance(value, str | int) else None
    if match is None:
        raise ValueError(f"must be {ALLOWED}")
    if match.group(1):
        return CheckpointEvery("epoch")
    number, unit = int(match.group(2)), match.group(3)
    if unit is None:
        if not 1 <= number <= MAX_STEPS:
            raise ValueError(f"a step count must be 1 to {MAX_STEPS:,}; allowed: {ALLOWED}")
        return CheckpointEvery("steps", number)
    seconds = number * _UNIT_S[unit]
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise ValueError(f"a duration must be 10s to 168h; allowed: {ALLOWED}")
    return CheckpointEvery("seconds", seconds)


# The settings field's type: text in (env, .env, chart), the typed object inside, text out.
# NoDecode: pydantic-settings would otherwise read a dataclass field's text as JSON, so that
# `500` passed and `epoch` or `10m` failed before this parser ever saw them.
CheckpointEverySetting = Annotated[
    CheckpointEvery,
    NoDecode,
    BeforeValidator(parse),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "pattern": JSON_PATTERN}),
]
