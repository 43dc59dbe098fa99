"""Image-folder datasets written the way users have them: PNG and JPEG files from Pillow in
train/<class>/ and valid/<class>/ folders, color and grayscale, of assorted sizes."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = ("cat", "dog", "Zebra")  # code-point order: Zebra, cat, dog


VALID_SEEDS = 3000  # a multiple of 3: every 3rd image stays grayscale (image_bytes)


def image_bytes(seed: int, label: int, fmt: str, size: tuple[int, int] = (24, 20)) -> bytes:
    """A learnable image: a class's base brightness under noise; every 3rd one grayscale."""
    rng = np.random.default_rng(seed)
    pixels = (rng.integers(0, 60, (size[1], size[0], 3)) + label * 90).astype(np.uint8)
    image = Image.fromarray(pixels)
    if seed % 3 == 0:
        image = image.convert("L")
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


def image_folder(
    root: Path, per_class: tuple[int, int] = (12, 4), classes: tuple[str, ...] = CLASSES
) -> dict[str, bytes]:
    """train/ and valid/ with per_class images of each class, PNG and JPEG alternating; valid/'s
    drawn from other seeds than train/'s (a copy of a train/ image is refused there).
    Returns every file's bytes by its path relative to root (what a bucket upload needs)."""
    files = {}
    for split, count in zip(("train", "valid"), per_class, strict=True):
        apart = VALID_SEEDS if split == "valid" else 0
        for label, name in enumerate(classes):
            for index in range(count):
                fmt = "PNG" if index % 2 else "JPEG"
                relative = f"{split}/{name}/{index:03d}.{'png' if fmt == 'PNG' else 'jpg'}"
                files[relative] = image_bytes(apart + index * 7 + label, label % 3, fmt)
    for relative, data in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    return files


def truncated_jpeg() -> bytes:
    whole = image_bytes(1, 1, "JPEG", (64, 64))
    return whole[: len(whole) // 2]


def png_claiming(width: int, height: int) -> bytes:
    """A tiny PNG whose header declares width x height pixels (a decompression bomb's shape)."""
    data = bytearray(image_bytes(2, 0, "PNG", (8, 8)))
    ihdr = 8 + 8  # signature, then the chunk's length and type
    data[ihdr : ihdr + 8] = struct.pack(">II", width, height)
    body = bytes(data[ihdr - 4 : ihdr + 13])  # type + the 13 IHDR bytes
    data[ihdr + 13 : ihdr + 17] = struct.pack(">I", zlib.crc32(body))
    return bytes(data)
