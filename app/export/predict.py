"""`trainctl predict`: top-k classes for images, from a run's export alone.

Reads nothing but the export folder and the images. app/export/card.py verifies every file the
model card lists against its sha256, from the bytes it read; the weights are then loaded from
those same bytes with torch.load(weights_only=True) into the model trainctl's own code builds
for the card's architecture, input and classes (app/training/model.py), as a checkpoint is
resumed. Nothing in an export can run code here: the torch.export program beside the weights is
for model servers and is never loaded (app/export/card.py says why).

An image is read as a regular file of at most MAX_FILE_BYTES, without following a link (a FIFO
would hang, a device never end), and prepared as training prepared an image folder's files,
with the same limits: app/data/image_decode.py, one module for both. For a 3-channel model
every mode is made RGB; a 1-channel model takes only grayscale images; each is resized to cover
the card's height x width and center-cropped, scaled to [0, 1] and normalized with the card's
mean and std, per channel.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.data.folder_listing import NOT_UTF8, is_utf8
from app.data.image_decode import MAX_FILE_BYTES, ImageError, decode_image
from app.errors import ConfigError
from app.export.card import CARD_FILE, EXPORT_DIR, WEIGHTS_FILE, Verified, verified
from app.formatting import shown
from app.storage.entries import Kind, bucket_there, kind_within
from app.storage.location import RunPath, parse_location
from app.storage.probe import DEFAULT_TIMEOUT_S
from app.storage.reading import present, read_bounded

MAX_TOP_K = 1000
# Images per forward pass: at most 64, and no more pixels than 64 of 224x224 (a few at 1024),
# so memory is bounded whatever the number of images and the card's input size.
MOST_PER_PASS = 64
PIXELS_PER_PASS = MOST_PER_PASS * 224 * 224


@dataclass(frozen=True)
class Prediction:
    image: str
    top: list[tuple[str, int, float]]  # (class name, class index, probability)

    def record(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "top": [{"class": n, "index": i, "probability": p} for n, i, p in self.top],
        }

    def line(self) -> str:
        # One line per image, whatever its name: a newline in a file name is shown escaped.
        return f"{_shown(self.image)}: " + ", ".join(f"{_shown(n)} {p:.4f}" for n, _, p in self.top)


def _shown(text: str) -> str:
    """A file or class name on one line: as is when printable, else escaped like repr."""
    return text if text.isprintable() else repr(text)


def image_key(path: str) -> str:
    """What names one image however an argument spells it (`./a.png`, `a.png`, an absolute
    path; a URI as it is): two arguments with one key are one image."""
    if "://" in path:
        return path
    return os.path.normpath(os.path.abspath(path))


def distinct(images: Sequence[str]) -> tuple[list[str], int]:
    """`images` once each, in their order, and how many repeats were dropped: one row per
    image (`predict a.png a.png` answered twice, and `inbox/ inbox/*.png` scored every file
    twice, each counted as an image: a red-team pass)."""
    seen: set[str] = set()
    kept = []
    for image in images:
        key = image_key(image)
        if key not in seen:
            seen.add(key)
            kept.append(image)
    return kept, len(images) - len(kept)


def named_twice(count: int) -> str:
    return f"{count:,} image(s) named more than once (by two arguments) were scored once"


def predict(
    target: RunPath,
    images: Sequence[str],
    top_k: int,
    endpoint: str | None = None,
    card_sha256: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> list[Prediction]:
    """`target`: a run folder or its export/ (app/settings/env.run_location); `endpoint`:
    TRAIN_STORAGE_ENDPOINT, for images in an S3-compatible store; `card_sha256`: what the
    export's card must hash to (a champion pointer's); `timeout`: TRAIN_STORAGE_TIMEOUT_S, for
    a bucket's first answer."""
    if not 1 <= top_k <= MAX_TOP_K:
        raise ConfigError(f"--top-k {top_k}: must be 1..{MAX_TOP_K}")
    # As batch prediction refuses them: a lone surrogate in --json is not JSON a strict reader
    # takes, and is not the file's name.
    if bad := [image for image in images if not is_utf8(image)]:
        raise ConfigError([f"{shown(image)}: its name is not UTF-8; {NOT_UTF8}" for image in bad])
    images, twice = distinct(images)
    if twice:
        print(f"trainctl: {named_twice(twice)}", file=sys.stderr)
    folder, root = export_folder(target, timeout)
    export = verified(folder, root, card_sha256)
    card = export.card
    # Bounded memory whatever the number of images: they are decoded and run in chunks.
    size = per_pass(card)
    chunks = [images[start : start + size] for start in range(0, len(images), size)]
    # A bad first image is named before anything loads.
    first = input_batch(chunks[0], card, endpoint, timeout)
    module = load_model(export)
    found = _classify(module, first, chunks[0], card["class_names"], top_k)
    for chunk in chunks[1:]:
        batch = input_batch(chunk, card, endpoint, timeout)
        found += _classify(module, batch, chunk, card["class_names"], top_k)
    return found


def per_pass(card: dict[str, Any]) -> int:
    """How many images go through the model at once at the (verified) card's input size."""
    pixels = int(card["input"]["height"]) * int(card["input"]["width"])
    return max(1, min(MOST_PER_PASS, PIXELS_PER_PASS // pixels))


def export_folder(where: RunPath, timeout: float = DEFAULT_TIMEOUT_S) -> tuple[RunPath, RunPath]:
    """The export folder `where` names (an export folder, or a run folder holding export/),
    local or in a bucket, and the folder below which its files are opened: `where` itself, so
    that neither export/ nor a file in it is read through a link."""
    try:
        # A bucket's first request answers within its deadline, or the refusal names the store
        # and what to fix: a store down was an internal error, a silent one a two-minute wait.
        found = kind_within(where, "RUN_OR_EXPORT", timeout)
    except NotADirectoryError:  # a file on the way: named as the card not found below
        found = None
    if found is Kind.FILE:  # it read <file>/export/model_card.json
        raise ConfigError(
            f"{shown(where)}: is a file; give the run folder or its {EXPORT_DIR}/ folder, whose "
            f"{CARD_FILE} says which files to load"
        )
    if found is None:  # it said "<where>/export: no model_card.json"
        bucket_there(where, "RUN_OR_EXPORT", timeout)
        raise ConfigError(
            f"{shown(where)}: no such run or export folder; give a run folder, its "
            f"{EXPORT_DIR}/ folder, or champion:<name>"
        )
    folder = where if present(where / CARD_FILE) else where / EXPORT_DIR
    return folder, where


def input_batch(
    images: Sequence[str],
    card: dict[str, Any],
    endpoint: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> Any:
    """The image files (paths, or objects' URIs in a store at `endpoint`, each answering within
    `timeout`) as the card's model takes them: float32 NCHW at its size, normalized with its
    mean and std; ConfigError naming the first file that is not a readable image."""
    import numpy as np
    import torch

    spec = card["input"]
    arrays = [_pixels(_image_file(image, endpoint, timeout), spec) for image in images]
    x = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255.0
    mean = torch.tensor(spec["mean"], dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(spec["std"], dtype=torch.float32).view(1, -1, 1, 1)
    return ((x - mean) / std).contiguous()


def _image_file(image: str, endpoint: str | None, timeout: float) -> RunPath:
    """Where `image` is read: a local path as given; an object named by its URI, which the
    store says is there within `timeout` (or the refusal names the store)."""
    try:  # what only looks like a URI (s3:/b/x.png) is refused as TRAIN_STORAGE_PATH's is
        where = parse_location(image, endpoint)
    except ValueError as err:
        raise ConfigError(f"{shown(image)}: {err}") from None
    if "://" not in image:
        return Path(image)  # named as given in every message
    found = kind_within(where, "the image", timeout)
    if found is Kind.DIR:
        raise ConfigError(f"{shown(image)}: a prefix; end it with / to score every image below it")
    if found is None:
        bucket_there(where, "the image", timeout)
        raise ConfigError(f"{shown(image)}: no such object")
    return where


def _pixels(path: RunPath, spec: dict[str, Any]) -> Any:
    """One image as uint8 HxWxC at the card's size; ConfigError naming the file otherwise."""
    name = shown(path)  # a newline in a file name never starts a line of its own
    try:
        data = read_bounded(path, None, MAX_FILE_BYTES)  # a link is refused (LinkRefused)
    except IsADirectoryError:
        raise ConfigError(f"{name}: a folder; give image files (e.g. {name}/*.jpg)") from None
    except FileNotFoundError:
        raise ConfigError(f"{name}: no such file") from None
    except (OSError, ValueError) as err:  # a FIFO or device; over MAX_FILE_BYTES
        why = (err.strerror if isinstance(err, OSError) else None) or str(err)
        raise ConfigError(f"{name}: cannot be read ({why}); not an image to classify") from None
    try:
        return decode_image(data, (spec["height"], spec["width"]), path, spec["channels"])
    except ImageError as err:
        raise ConfigError(str(err)) from None


def card_info(card: dict[str, Any]) -> Any:
    """The DatasetInfo the card's model was built for (input geometry, mean and std, classes):
    what app/training/model.py builds from, and app/data/pipeline.py's Normalizer scales by."""
    from app.data.schema import DatasetInfo

    spec, names = card["input"], tuple(card["class_names"])
    return DatasetInfo(
        channels=spec["channels"], height=spec["height"], width=spec["width"],
        num_classes=len(names), train_rows=0, valid_rows=0, layout="export",
        mean=tuple(spec["mean"]), std=tuple(spec["std"]), class_names=names,
    )  # fmt: skip


def check_loads(export: Verified) -> None:
    """ConfigError unless the export's weights load into its card's model here: run before Ray
    starts, so that weights that pass their checksums but not the load (written with the card:
    another architecture, NaN, a pickle) are refused with exit 2, not by every actor of a pool
    as an internal error. Each actor then loads the same verified bytes."""
    load_model(export)


def load_model(export: Verified) -> Any:
    """The card's model with weights.pt's verified bytes loaded into it, in eval mode."""
    from app.runfolder.state_dicts import (
        fit_problem,
        load_problem,
        load_tensors,
        plain_keys,
        tensor_problem,
    )
    from app.training.model import build_model, model_problem

    card = export.card
    weights, where = export.folder / WEIGHTS_FILE, export.folder / CARD_FILE
    info = card_info(card)
    problem = model_problem(card["architecture"], info, card.get("vit_patch", 0))
    if problem:
        raise ConfigError(f"{where}: the card's model cannot be built ({problem})")
    model = build_model(card["architecture"], info, card.get("vit_patch", 0))
    try:
        state = load_tensors(export.weights)
    except Exception as err:  # not a torch file, or one holding more than tensors
        raise ConfigError(
            f"{weights}: cannot be loaded as a state dict ({load_problem(err)}); its sha256 is "
            "the card's, so whoever wrote it wrote the card too: trainctl never exports such a "
            "file, so treat the folder as tampered with, and re-export the run"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise ConfigError(f"{weights}: holds a {type(state).__name__}, not a state dict")
    state = plain_keys(state)
    expected = {key: value.shape for key, value in model.state_dict().items()}
    problem = tensor_problem(state) or fit_problem(state, expected)
    if problem:
        raise ConfigError(f"{weights}: does not fit the card's {card['architecture']}: {problem}")
    model.load_state_dict(state)
    return model.eval()


def _classify(
    module: Any, batch: Any, images: Sequence[str], names: list[str], top_k: int
) -> list[Prediction]:
    import torch

    with torch.no_grad():
        probabilities = torch.softmax(module(batch).float(), dim=1)
    if probabilities.shape[1] != len(names):
        raise ConfigError(
            f"the model gives {probabilities.shape[1]} classes but the card names {len(names)}"
        )
    values, indices = probabilities.topk(min(top_k, len(names)), dim=1)
    return [
        Prediction(
            image,
            [(names[i], int(i), float(p)) for p, i in zip(v.tolist(), ix.tolist(), strict=True)],
        )
        for image, v, ix in zip(images, values, indices, strict=True)
    ]
