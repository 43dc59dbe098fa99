"""The export folder's layout and its model card: written by app/export/build.py, verified by
app/export/predict.py before anything in the folder is loaded.

Why checksums: `torch.export.load` reads the weights with torch.load(weights_only=True) but, if
that fails, falls back to weights_only=False (torch/_export/serde/serialize.py,
deserialize_torch_artifact), which unpickles and so can run code; a TorchScript file runs its
own code by design. An export in a bucket that many hands write must therefore match the
sha256 the card records for it, checked first; a mismatch is refused (exit 2) and nothing is
loaded. The card itself is the trust root: whoever may rewrite the card may rewrite the model
too, and the champion pointer records the card's own sha256 to compare against.

No torch import here: `trainctl predict` checks before it loads.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from app.errors import ConfigError
from app.storage import bounded_json
from app.storage.reading import sha256_of

EXPORT_DIR = "export"
EXPORTED_PROGRAM = "model.pt2"  # torch.export.save
TORCHSCRIPT = "model.ts"  # torch.jit.save, where torch.export cannot trace the model
CARD_FILE = "model_card.json"
# The model's plain state dict, for warm starts (app/training/warm_start.py); never what
# `file` names: predict and model servers load the program, a warm start only the weights.
WEIGHTS_FILE = "weights.pt"
MODEL_FILES = (EXPORTED_PROGRAM, TORCHSCRIPT)
FORMATS = {EXPORTED_PROGRAM: "torch.export", TORCHSCRIPT: "torchscript"}
MAX_CARD_BYTES = 8 << 20  # class names and the data's file list make up most of it
MAX_CHANNELS, MAX_SIDE, MAX_CLASSES = 4, 8192, 100_000


def card_json(card: dict[str, Any]) -> bytes:
    return (json.dumps(card, indent=2) + "\n").encode()


def read_card(folder: Path, card_sha256: str | None = None) -> dict[str, Any]:
    """The card in export folder `folder`, shape-checked; ConfigError naming what is wrong.
    `card_sha256`: what the card's bytes must hash to (a champion pointer's), checked on the
    bytes that are then parsed."""
    path = folder / CARD_FILE
    try:
        if path.stat().st_size > MAX_CARD_BYTES:
            raise ConfigError(f"{path}: over {MAX_CARD_BYTES:,} bytes; not a model card")
        data = path.read_bytes()
        found = hashlib.sha256(data).hexdigest()
        if card_sha256 is not None and found != card_sha256:
            raise ConfigError(
                f"{path}: sha256 {found} is not the {card_sha256} the champion pointer "
                "records; altered since it was promoted, and not loaded"
            )
        card = bounded_json.loads(data.decode("utf-8"), MAX_CARD_BYTES)
    except FileNotFoundError:
        raise ConfigError(
            f"{folder}: no {CARD_FILE}; give a run folder (with {EXPORT_DIR}/) or its "
            f"{EXPORT_DIR} folder, written by a successful `trainctl train`"
        ) from None
    except (OSError, ValueError) as err:  # UnicodeDecodeError is a ValueError
        raise ConfigError(f"{path}: unreadable model card ({err})") from None
    problem = card_problem(card)
    if problem:
        raise ConfigError(f"{path}: {problem}")
    return card


def card_problem(card: Any) -> str | None:
    """What makes `card` unusable for prediction, or None."""
    if not isinstance(card, dict):
        return "not a JSON object"
    files = card.get("files")
    if not isinstance(files, dict) or not files:
        return "`files` must map the export's file names to their sha256"
    if not set(files) <= {*MODEL_FILES, WEIGHTS_FILE} or card.get("file") not in files:
        return (
            f"`files` may name only {', '.join(MODEL_FILES)} (and {WEIGHTS_FILE}), and must "
            "hold `file`"
        )
    if card.get("file") not in MODEL_FILES:
        return f"`file` must be one of {', '.join(MODEL_FILES)}"
    input_ = card.get("input")
    if not isinstance(input_, dict):
        return "`input` is missing"
    channels, height, width = (input_.get(k) for k in ("channels", "height", "width"))
    for name, value, top in (("channels", channels, MAX_CHANNELS), ("height", height, MAX_SIDE),
                             ("width", width, MAX_SIDE)):  # fmt: skip
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top:
            return f"input.{name} must be a whole number 1..{top}"
    for name in ("mean", "std"):
        values = input_.get(name)
        if (
            not isinstance(values, list)
            or len(values) != channels
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        ):
            return f"input.{name} must hold {channels} numbers, one per channel"
    if any(v == 0 for v in input_["std"]):
        return "input.std must not be 0"
    names = card.get("class_names")
    if (
        not isinstance(names, list)
        or not 1 <= len(names) <= MAX_CLASSES
        or not all(isinstance(n, str) for n in names)
    ):
        return f"class_names must be a list of 1..{MAX_CLASSES} strings"
    return None


def verified(folder: Path, card_sha256: str | None = None) -> tuple[dict[str, Any], Path]:
    """(card, model file) once every file the card lists matches its sha256 (and the card
    `card_sha256`, where given); ConfigError naming the file and both checksums otherwise.
    Nothing is loaded before this passes."""
    card = read_card(folder, card_sha256)
    for name, expected in card["files"].items():
        path = folder / name
        try:
            found = sha256_of(path, folder)  # a link in the folder is refused, not followed
        except FileNotFoundError:
            raise ConfigError(f"{path}: missing; the model card lists it") from None
        except OSError as err:
            raise ConfigError(f"{path}: cannot be read ({err.strerror or err})") from None
        if found != expected:
            raise ConfigError(
                f"{path}: sha256 {found} does not match the model card's {expected}; "
                "the export was altered or damaged and is not loaded (loading it could run code)"
            )
    return card, folder / card["file"]
