"""The image-folder layout for bench/ingest.py: CIFAR-shaped JPEG files in class folders.

The same synthetic images as the Parquet layouts, written once per size as JPEG (Pillow,
quality 90) into train/<class>/ and valid/<class>/, and cached. bench/ingest.py reads them with
`trainctl train`'s calls (TRAIN_DATASET=folder, TRAIN_IMAGE_SIZE=32, so no resize: only the
decode is measured) and reports their rows/s against the Parquet layouts as ratios.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from bench.common import cached_dataset, cifar_arrays

MAX_FOLDER_ROWS = 20_000  # a file per row: beyond this, writing them outlasts the benchmark


def folder_rows(rows: int) -> int:
    return min(rows, MAX_FOLDER_ROWS)


def jpeg_folder(rows: int, valid_rows: int) -> Path:
    """train/ and valid/ of JPEG files, one folder per class, generated once and cached."""

    def build(staging: Path) -> None:
        images, labels = cifar_arrays(rows + valid_rows)
        for index, (image, label) in enumerate(zip(images, labels, strict=True)):
            split = "train" if index < rows else "valid"
            folder = staging / split / f"class{int(label):02d}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image).save(folder / f"{index:07d}.jpg", quality=90)

    return cached_dataset(f"cifar-jpeg-{rows}", build)
