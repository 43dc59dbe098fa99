"""State dicts as trainctl reads them: plain module names, real data, and whether they fit.

Used by checkpoints (resume), warm starts, pretrained weights and `trainctl predict` alike, so
that a file that cannot load into the model is refused in preflight, naming the keys, before
any worker starts. A file is read with torch.load(weights_only=True), which builds tensors and
plain containers only: nothing in it can run code. Such a file can still hold tensors that
have a shape and no data (saved from the meta device), sparse or quantized tensors a model's
dense parameters cannot take, or NaN and infinity: shapes alone pass those, and training (or
serving) would fail, or learn nothing, later. `tensor_problem` names the first such key.
"""

from __future__ import annotations

import pickle
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

MODEL_FILE = "model.pt"  # a checkpoint folder's weights (app/runfolder/checkpoints.py)
MAX_WEIGHTS_BYTES = 4 << 30  # ViT-H/14, torchvision's largest classifier, is 2.5 GB
FINITE_CHUNK = 1 << 24  # elements checked at a time: bounded memory for the largest tensor


def fit_problem(model_state: Any, expected: dict[str, torch.Size]) -> str | None:
    """How a state dict differs from the model's {name: shape}; None when it loads as is."""
    if not isinstance(model_state, dict):
        return f"{MODEL_FILE} holds a {type(model_state).__name__}, not a state dict"
    return shapes_problem(shapes_of(model_state), expected)


def shapes_of(model_state: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """{name: shape} of a state dict's tensors: all a fit check needs of it."""
    return {k: tuple(v.shape) for k, v in model_state.items() if hasattr(v, "shape")}


def shapes_problem(
    shapes: dict[str, tuple[int, ...]], expected: dict[str, torch.Size]
) -> str | None:
    """How weights of these {name: shape} differ from the model's; None when they load as is."""
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


def tensor_problem(state: dict[str, Any]) -> str | None:
    """Why the tensors of a loaded state dict cannot be trained or served, naming the first
    key: no data (the meta device), not a dense tensor, more values than its storage holds, or
    NaN/infinite values; None if none."""
    import torch  # here: the limits and the fit check above are read without torch (predict)

    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            continue  # not a weight: the fit check names it if the model expects a tensor there
        shape = tuple(value.shape)
        if value.is_meta:
            return (
                f"{key} has shape {shape} but no data (saved from the meta device); save the "
                "state dict of a model whose weights are real"
            )
        if value.layout is not torch.strided or value.is_quantized:
            kind = "quantized" if value.is_quantized else str(value.layout).removeprefix("torch.")
            return f"{key} is a {kind} tensor; a model's weights are dense tensors"
        # A saved view may declare more values than its storage holds (zero or overlapping
        # strides over one stored number): a 400 KB file can declare 10**12 values, and the
        # scan below would walk them for days. Real weights each own their values.
        held = value.untyped_storage().nbytes() // max(value.element_size(), 1)
        if value.numel() > held:
            return (
                f"{key} declares {value.numel():,} values {shape} over a storage of "
                f"{held:,}: a view repeating stored values, not a model's weights"
            )
        if value.is_floating_point() or value.is_complex():
            flat = value.detach().reshape(-1)
            for start in range(0, flat.numel(), FINITE_CHUNK):
                if not bool(torch.isfinite(flat[start : start + FINITE_CHUNK]).all()):
                    return f"{key} holds NaN or infinite values"
    return None


def load_tensors(data: bytes) -> Any:
    """torch.load(weights_only=True) of these bytes, onto the CPU. torch's warning about a
    pickle protocol it does not expect (a file pickle.dumps wrote, not torch.save) is kept
    off the user's terminal: it asks to file an issue with torch, and the refusal that
    follows says what is wrong with the file."""
    import io
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def load_problem(err: BaseException) -> str:
    """Why torch.load(weights_only=True) refused a file, in words that never advise loading
    it another way: torch's own text suggests weights_only=False, which runs the code a
    planted file carries."""
    if isinstance(err, pickle.UnpicklingError):
        found = re.search(
            r"(unsupported GLOBAL [^\n]*?|Unsupported global: [^\n]*?)\.?\n", str(err)
        )
        if found:  # a function or class to call: what a planted file carries
            return (
                f"UnpicklingError: it holds more than tensors ({found.group(1)}), which would "
                "run code if loaded: it is not loaded"
            )
        # Random bytes, a damaged file, a pickle of plain Python data: nothing to call.
        return (
            "UnpicklingError: not a file of tensors torch.save wrote (damaged, or another kind "
            "of file): it is not loaded"
        )
    return f"{type(err).__name__}: {err}"
