"""`trainctl predict`: top-k classes for images, from a run's export alone.

Loads nothing but the export folder (app/export/card.py checks every file's sha256 first) and
imports nothing from the training code (app.training, app.run): what runs here is what a model
server would run. Preprocessing follows the card, and is what training did to an image folder
(app/data/folder_images.decode_image), so that a file predicted here gets the numbers it got
in validation: Pillow decodes the image; for a 3-channel model every mode (grayscale, RGBA,
CMYK, 16-bit) is made RGB, as the folder reader does; it is resized so that it covers the
card's height x width and center-cropped (bilinear; a plain resize would squash an image of
another aspect ratio), scaled to [0, 1] and normalized with the card's mean and std, per
channel. A 1-channel model takes only 1-channel images: which grey a colour photo should
become is not the model's to guess.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.errors import ConfigError
from app.export.card import CARD_FILE, EXPORT_DIR, EXPORTED_PROGRAM, verified

MAX_IMAGE_BYTES = 64 << 20
MAX_IMAGE_PIXELS = 50_000_000  # Pillow's decompression-bomb guard, made an error
MAX_TOP_K = 1000
CHUNK = 64  # images per forward pass
CHANNEL_MODES = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


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


def predict(
    target: str, images: Sequence[str], top_k: int, card_sha256: str | None = None
) -> list[Prediction]:
    """`card_sha256`: what the export's card must hash to (a champion pointer's)."""
    if not 1 <= top_k <= MAX_TOP_K:
        raise ConfigError(f"--top-k {top_k}: must be 1..{MAX_TOP_K}")
    # Bounded memory whatever the number of images: they are decoded and run in chunks.
    chunks = [images[start : start + CHUNK] for start in range(0, len(images), CHUNK)]
    with export_folder(target) as folder:
        card, model_file = verified(folder, card_sha256)
        first = _batch(chunks[0], card)  # a bad first image is named before anything loads
        module = _load(model_file, card["format"])
        found = _classify(module, first, chunks[0], card["class_names"], top_k)
        for chunk in chunks[1:]:
            found += _classify(module, _batch(chunk, card), chunk, card["class_names"], top_k)
        return found


@contextlib.contextmanager
def export_folder(target: str) -> Iterator[Path]:
    """The export folder `target` names (an export folder, or a run folder holding export/),
    local or in a bucket (copied to a private temporary folder first)."""
    from app.storage.location import local_copy, parse_location

    try:
        where = parse_location(target)
    except ValueError as err:
        raise ConfigError(f"{target}: {err}") from None
    with local_copy(where if (where / CARD_FILE).is_file() else where / EXPORT_DIR) as folder:
        yield folder


def _batch(images: Sequence[str], card: dict[str, Any]) -> Any:
    import numpy as np
    import torch

    spec = card["input"]
    arrays = [_pixels(Path(image), spec) for image in images]
    x = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255.0
    mean = torch.tensor(spec["mean"], dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(spec["std"], dtype=torch.float32).view(1, -1, 1, 1)
    return ((x - mean) / std).contiguous()


def _pixels(path: Path, spec: dict[str, Any]) -> Any:
    """One image as uint8 HxWxC at the card's size; ConfigError naming the file otherwise."""
    import numpy as np
    from PIL import Image, ImageOps

    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    size = (spec["width"], spec["height"])
    try:
        if path.is_dir():
            raise ConfigError(f"{path}: a folder; give image files (e.g. {path}/*.jpg)")
        if path.stat().st_size > MAX_IMAGE_BYTES:
            raise ConfigError(f"{path}: over {MAX_IMAGE_BYTES >> 20} MiB; not an image to classify")
        with warnings.catch_warnings():
            # Pillow only warns between MAX_IMAGE_PIXELS and twice that: refuse it all.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as opened:
                if spec["channels"] == 3:  # as the folder reader: every mode made RGB
                    opened.draft("RGB", size)
                    image = opened.convert("RGB")
                else:  # a palette image is its colours; other modes are taken as decoded
                    image = opened.convert("RGB") if opened.mode == "P" else opened.copy()
    except ConfigError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ConfigError(
            f"{path}: over the {MAX_IMAGE_PIXELS:,} pixels allowed for one image (a "
            "decompression bomb, or a photograph to downscale first)"
        ) from None
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, ValueError, SyntaxError) as err:
        raise ConfigError(f"{path}: not a readable image ({err})") from None
    channels = CHANNEL_MODES.get(image.mode)
    if channels is None:
        raise ConfigError(
            f"{path}: Pillow mode {image.mode} is not supported; use 8-bit grayscale (L), RGB "
            "or RGBA images"
        )
    if channels != spec["channels"]:
        raise ConfigError(
            f"{path}: {channels} channel(s) ({image.mode}), but the model takes "
            f"{spec['channels']} ({_modes(spec['channels'])})"
        )
    if image.size != size:
        image = ImageOps.fit(image, size, Image.Resampling.BILINEAR)
    pixels = np.asarray(image, dtype=np.uint8)
    return pixels.reshape(spec["height"], spec["width"], channels)


def _modes(channels: int) -> str:
    return next(mode for mode, count in CHANNEL_MODES.items() if count == channels)


def _load(model_file: Path, fmt: str) -> Any:
    import torch

    if model_file.name == EXPORTED_PROGRAM and fmt == "torch.export":
        return torch.export.load(str(model_file)).module()
    return torch.jit.load(str(model_file), map_location="cpu").eval()


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
