"""Finding the Parquet file and row behind an image error in a Ray worker, or the file behind a
read that Ray Data's reader refused.

A read task only sees a block of rows, so its ImageError says "row 5" of a block, and Ray wraps
it as RayTaskError(UserCodeException). Naming the file costs nothing while all is well: only
after a run fails this way does the driver re-read the files itself, in file order, to find the
first row that does not convert, within a time limit (an image folder's kind names the file:
app/data/kinds/image_folder.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa

from app.data.images import ImageError, to_images
from app.data.schema import DatasetInfo, open_parquet, parquet_files

ROWS_PER_STEP = 1024


def first_bad_row(info: DatasetInfo, deadline: float) -> str | None:
    """'<file>: row <n> (of the file): <cause>' for the first bad image of the Parquet data
    `info` describes, train then valid, or None when none is found before `deadline`
    (time.monotonic())."""
    root = info.path
    if root is None:
        return None
    for split in ("train", "valid"):
        for path in parquet_files(root / split):
            offset = 0
            try:
                for batch in open_parquet(path).iter_batches(ROWS_PER_STEP):
                    if time.monotonic() > deadline:
                        return None
                    try:
                        to_images(batch.column("image"), info.image_format)
                    except ImageError:
                        return _first_bad_row(path, batch.column("image"), offset, info)
                    offset += batch.num_rows
            except (OSError, pa.ArrowException, KeyError) as err:
                # A file its reader refuses (a damaged page, a file replaced since preflight):
                # Ray Data's error names neither the file nor the row.
                reason = " ".join(str(err).split()) or type(err).__name__
                return f"{path}: not a readable Parquet file ({reason})"
    return None


def _first_bad_row(path: Path, column: object, offset: int, info: DatasetInfo) -> str:
    for row in range(len(column)):  # type: ignore[arg-type]
        try:
            to_images(column.slice(row, 1), info.image_format)  # type: ignore[attr-defined]
        except ImageError as err:
            cause = str(err).removeprefix("row 0: ")
            return f"{path}: row {offset + row}: {cause}"
    return f"{path}: rows {offset}..{offset + len(column) - 1}"  # type: ignore[arg-type]
