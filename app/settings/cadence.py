"""TRAIN_CHECKPOINT_EVERY: when a checkpoint is written inside an epoch, parsed once.

`epoch` (the default) writes one checkpoint per epoch, after validation. A step count (`500`)
also writes one every that many optimizer steps, and a duration (`90s`, `10m`, `1h`) one every
that much wall time. The setting is parsed here into a `CheckpointEvery` by the settings model,
so the training loop asks the object (`due`) and never reads the text again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema
from pydantic_settings import NoDecode

# One grammar, twice: the chart's schema (JSON_PATTERN, checked by Helm) must accept exactly
# what this parser does, or a values file would render with Helm and be refused by trainctl.
# ASCII digits only (`\d` takes other scripts' digits too), no sign, no fraction, no leading 0:
# steps 1 to 99,999,999; seconds 10 to 999,999; minutes and hours 1 to 999,999.
_GRAMMAR = r"(epoch|[1-9][0-9]{0,7}|[1-9][0-9]{1,5}s|[1-9][0-9]{0,5}[mh])"
_SPACE = r"[\t\n\f\r ]*"  # what Go's (Helm's) \s means; Python's \s also takes Unicode spaces
_PATTERN = re.compile(rf"\A{_SPACE}{_GRAMMAR}{_SPACE}\Z")
JSON_PATTERN = rf"^{_SPACE}{_GRAMMAR}{_SPACE}$"
_UNIT_S = {"s": 1, "m": 60, "h": 3600}
MAX_STEPS = 99_999_999  # the grammar's eight digits
ALLOWED = (
    "`epoch`, a step count (1 to 99999999, e.g. 500) or a duration of at least 10s "
    "(e.g. 90s, 10m, 1h)"
)


@dataclass(frozen=True)
class CheckpointEvery:
    doc_label: ClassVar[str] = "epoch / steps / duration"  # its type, as docs/settings.md says
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
    text = match.group(1)
    if text == "epoch":
        return CheckpointEvery("epoch")
    if text[-1] in _UNIT_S:
        return CheckpointEvery("seconds", int(text[:-1]) * _UNIT_S[text[-1]])
    return CheckpointEvery("steps", int(text))


# The settings field's type: text in (env, .env, chart), the typed object inside, text out.
# NoDecode: pydantic-settings would otherwise read a dataclass field's text as JSON, so that
# `500` passed and `epoch` or `10m` failed before this parser ever saw them.
CheckpointEverySetting = Annotated[
    CheckpointEvery,
    NoDecode,
    BeforeValidator(parse),
    PlainSerializer(str, return_type=str),
    # The chart takes a step count as a number too (`--set train.checkpoint_every=500`): the
    # schema's pattern holds strings, its bounds numbers.
    WithJsonSchema(
        {"type": ["integer", "string"], "pattern": JSON_PATTERN, "minimum": 1, "maximum": MAX_STEPS}
    ),
]
