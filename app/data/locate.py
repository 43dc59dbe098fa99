"""Finding the Parquet file and row (or the image file) behind an image error in a Ray worker.

A read task only sees a block of rows, so its ImageError says "row 5" of a block, and Ray wraps
it as RayTaskError(UserCodeException). Naming the file costs nothing while all is well: only
after a run fails this way does the driver re-read the files itself, in file order, to find the
first row that does not convert, within a time limit.
"""

from __future__ import annotations

import time
from pathlib import Path

from app.data.images import ImageError, to_images
from app.data.schema import DatasetInfo, open_parquet, parquet_files
from app.storage.buckets import locate

SEARCH_LIMIT_S = 60.0
ROWS_PER_STEP = 1024


def locate_bad_image(
    info: DatasetInfo, limit_s: float = SEARCH_LIMIT_S, endpoint: str | None = None
) -> str | None:
    """'<file>: row <n> (of the file): <cause>' for the first bad image, or None; for an image
    folder '<file>: <cause>'."""
    deadline = time.monotonic() + limit_s
    root = locate(info.path, endpoint)
    if info.layout == "folder":
        from app.data.folder import first_bad_file

        return first_bad_file(root, info.height, deadline)
    for split in ("train", "valid"):
        for path in parquet_files(root / split):
            offset = 0
            for batch in open_parquet(path).iter_batches(ROWS_PER_STEP, columns=["image"]):
                if time.monotonic() > deadline:
                    return None
                try:
                    to_images(batch.column(0), info.image_format)
                except ImageError:
                    return _first_bad_row(path, batch.column(0), offset, info)
                offset += batch.num_rows
    return None


def _first_bad_row(path: Path, column: object, offset: int, info: DatasetInfo) -> str:
    for row in range(len(column)):  # type: ignore[arg-type]
        try:
            to_images(column.slice(row, 1), info.image_format)  # type: ignore[attr-defined]
        except ImageError as err:
            cause = str(err).removeprefix("row 0 ").removeprefix("row 0: ")
            return f"{path}: row {offset + row}: {cause}"
    return f"{path}: rows {offset}..{offset + len(column) - 1}"  # type: ignore[arg-type]
