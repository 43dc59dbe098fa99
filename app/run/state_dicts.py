"""State dicts as trainctl reads them: plain module names, and whether they fit a model.

Used by checkpoints (resume), warm starts and pretrained weights alike, so that a file that
cannot load into the model is refused in preflight, naming the keys, before any worker starts.
"""

from __future__ import annotations

from typing import Any

import torch

MODEL_FILE = "model.pt"  # a checkpoint folder's weights (app/run/checkpoints.py)


def fit_problem(model_state: Any, expected: dict[str, torch.Size]) -> str | None:
    """How a state dict differs from the model's {name: shape}; None when it loads as is."""
    if not isinstance(model_state, dict):
        return f"{MODEL_FILE} holds a {type(model_state).__name__}, not a state dict"
    shapes = {k: tuple(v.shape) for k, v in model_state.items() if hasattr(v, "shape")}
    want = {k: tuple(v) for k, v in expected.items()}
    if shapes == want:
        return None
    missing = sorted(set(want) - set(shapes))
    extra = sorted(set(shapes) - set(want))
    differ = [k for k in sorted(set(want) & set(shapes)) if want[k] != shapes[k]]
    parts = [f"missing {_some(missing)}" if missing else "",
             f"unexpected {_some(extra)}" if extra else ""]  # fmt: skip
    parts += [f"{k} is {shapes[k]} not {want[k]}" for k in differ[:3]]
    if len(differ) > 3:
        parts.append(f"{len(differ) - 3} more of another shape")
    return "; ".join(part for part in parts if part)


def _some(keys: list[str]) -> str:
    """The first three keys, and how many more: three of 150 must not read as all of them."""
    return f"{keys[:3]}" + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


def plain_keys(state: dict[str, Any]) -> dict[str, Any]:
    """A state dict with the names of a plain module: weights saved from a compiled
    (`_orig_mod.`) or DDP (`module.`) wrapper elsewhere load into a plain model too."""
    for prefix in ("_orig_mod.", "module."):
        if state and all(key.startswith(prefix) for key in state):
            state = {key.removeprefix(prefix): value for key, value in state.items()}
    return state
