"""Rows to score, made in Ray Data's read tasks: uint8 images, their labels, where each came
from, and why one could not be used.

The images are decoded by the training pipeline's own code, so that a file scored gets the
pixels it got in training: an image folder's files through app/data/folder_images.py
(app/data/image_decode.py's preparation and limits), Parquet through app/data/images.py. A
file that cannot be used does not fail its block: its row carries the reason in `error`
(image zero), and `trainctl evaluate` and `predict` skip and count it, or stop at it with
--strict.

No torch here: Ray's short-lived read tasks import the module of the function they run.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from app.data.folder_images import load_images
from app.data.images import ImageError, ImageFormat, to_images
from app.storage.location import RunPath

ROWS_PER_BLOCK = 256  # files per read task: as training reads an image folder


def folder_rows(
    table: pa.Table, root: RunPath, size: tuple[int, int], channels: int
) -> dict[str, np.ndarray]:
    """A block of (path, label) rows as rows to score; `path` is relative to `root`, and so
    is `read`, where a block has it: the file read for a path listed as a link (its target)."""
    paths = table.column("path").to_pylist()
    read = table.column("read").to_pylist() if "read" in table.column_names else paths
    errors = [""] * len(paths)
    images = load_images(root, read, size, channels, errors)
    labels = table.column("label").to_numpy().astype(np.int64, copy=False)
    return {
        "image": images,
        "label": labels,
        "path": np.asarray(paths, dtype=object),
        "error": np.asarray(errors, dtype=object),
    }


def parquet_rows(table: pa.Table, fmt: ImageFormat) -> dict[str, np.ndarray]:
    """A block of Parquet rows (image, label, and the file as Ray Data's `path`) as rows to
    score. A block whose images do not all convert is converted row by row, so that only the
    bad rows are marked; their reason then names no row, which the driver adds (it counts
    each file's rows in order)."""
    column = table.column("image")
    rows = table.num_rows
    errors = [""] * rows
    try:
        images = to_images(column, fmt)
    except ImageError:
        images = np.zeros((rows, fmt.height, fmt.width, fmt.channels), np.uint8)
        for row in range(rows):
            try:
                images[row] = to_images(column.slice(row, 1), fmt)[0]
            except ImageError as err:
                errors[row] = str(err).removeprefix("row 0: ")  # the driver numbers the row
    return {
        "image": images,
        "label": table.column("label").to_numpy().astype(np.int64, copy=False),
        "path": np.asarray(table.column("path").to_pylist(), dtype=object),
        "error": np.asarray(errors, dtype=object),
    }
