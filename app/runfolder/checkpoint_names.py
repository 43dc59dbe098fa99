"""Checkpoint folder names: one per end of epoch, one per mid-epoch (step) checkpoint.

`checkpoint_epoch_0003` is written after epoch 3 was trained and validated.
`checkpoint_epoch_0003_step_00000412` is written inside epoch 4, at global step 412: its epoch
number is the count of epochs completed, as in its meta.json, so names sort in training order
(epoch 3's end, then epoch 4's step checkpoints, then epoch 4's end).
"""

from __future__ import annotations

import re

PREFIX = "checkpoint_epoch_"
_NAME = re.compile(r"\Acheckpoint_epoch_([0-9]{4,9})(?:_step_([0-9]{8,12}))?\Z")


def dir_name(epoch: int, step: int | None = None) -> str:
    """The folder name for epochs completed `epoch`; with `step`, a mid-epoch checkpoint."""
    if step is None:
        return f"{PREFIX}{epoch:04d}"
    return f"{PREFIX}{epoch:04d}_step_{step:08d}"


def parse_name(name: str) -> tuple[int, int | None] | None:
    """(epoch, step or None) from a checkpoint folder name; None for any other name."""
    match = _NAME.match(name)
    if match is None:
        return None
    step = match.group(2)
    return int(match.group(1)), int(step) if step is not None else None
