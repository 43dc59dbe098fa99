"""Settings for when a run ends before TRAIN_EPOCHS, and what reaching a target cost.

TRAIN_STOP_AT is TRAIN_PROMOTE_IF's grammar (app/settings/gate.py) limited to what every worker
knows identically at the end of an epoch: the all-reduced validation and training figures, with
exact thresholds (no `%`, no `beats_champion`). TRAIN_PATIENCE counts epochs without improvement
of TRAIN_CHECKPOINT_METRIC. The decisions themselves are app/training/early_stop.py's.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, PlainSerializer, WithJsonSchema
from pydantic_settings import NoDecode

from app.errors import did_you_mean
from app.settings.gate import BEATS, Gate, allowed, parse_gate

# The figures every rank holds the same value of after an epoch (all-reduced in the loop).
STOPPABLE = ("val_accuracy", "val_loss", "train_loss")
MAX_PATIENCE = 10_000
ALLOWED = (
    f"conditions are METRIC OP NUMBER joined by `and`; METRIC is one of {', '.join(STOPPABLE)}; "
    "OP is one of >=, >, <=, <; e.g. val_accuracy>=0.99"
)


def parse_stop_at(text: str) -> Gate:
    """The stop condition `text` describes (empty: none); ValueError naming what is wrong."""
    if not text.strip():
        return Gate()
    if BEATS in text.split():
        raise ValueError(
            f"{BEATS} is a promotion condition; TRAIN_STOP_AT takes thresholds only, e.g. "
            "val_accuracy>=0.99"
        )
    for part in re.split(r"\s+and\s+", text.strip()):
        named = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", part)
        if named and named.group(1) not in STOPPABLE:
            close = did_you_mean(named.group(1), STOPPABLE, "").removeprefix("; ")
            raise ValueError(
                f"{part.strip()!r}: training can stop on {', '.join(STOPPABLE)} only (the "
                f"figures every worker shares after an epoch){f' ({close})' if close else ''}"
                f"; {ALLOWED}"
            )
    try:
        return parse_gate(text)
    except ValueError as err:  # the gate's own list of what is allowed is the promotion's
        raise ValueError(str(err).replace(allowed(), ALLOWED)) from None


def _stop_at_setting(value: Any) -> Gate:
    if isinstance(value, Gate):
        return value
    return parse_stop_at("" if value is None else str(value))


StopAtSetting = Annotated[
    Gate,
    NoDecode,
    BeforeValidator(_stop_at_setting),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string"}),
]


class StoppingSettings(BaseModel):
    stop_at: StopAtSetting = Field(
        "",
        description="End training at the first epoch whose figures meet this condition, e.g. "
        "`val_accuracy>=0.99` or `val_loss<=0.05 and val_accuracy>=0.98` (metrics: "
        f"{', '.join(STOPPABLE)}; >=, >, <=, <; exact numbers, no %). The run succeeds, keeps "
        "its checkpoints and is promoted as usual; a rerun does not train on. Empty: off.",
    )
    patience: int = Field(
        0,
        ge=0,
        le=MAX_PATIENCE,
        description="End training after this many epochs in a row without improvement of "
        "TRAIN_CHECKPOINT_METRIC over its best so far. 0: off.",
    )
    gpu_hour_price: float = Field(
        0.0,
        ge=0,
        le=1_000_000,
        description="Price of one accelerator-hour (GPU-hour, or CPU-hour without GPUs), in "
        "any currency: summary.json and `trainctl status` then show the run's cost and the "
        "cost to each TRAIN_STOP_AT / TRAIN_PROMOTE_IF threshold. 0: no cost shown.",
    )
