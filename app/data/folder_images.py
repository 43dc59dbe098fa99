"""Image files of a folder dataset decoded to fixed-size uint8 RGB arrays, in Ray Data's read
tasks or in-process.

Every image becomes RGB, grayscale ones included (their one channel repeated): the channel
count then never depends on which files a folder happens to hold, and torchvision's models and
pretrained weights expect three. The preparation and its limits (size, pixels) are
app/data/image_decode.py's, which `trainctl predict` uses too. Each file is read below the data
folder without following a link, and only a regular file, at most MAX_FILE_BYTES. Like
app/data/images.py this module needs no torch, so Ray's short-lived read tasks do not import it.
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from app.data.image_decode import MAX_FILE_BYTES, ImageError, decode_image
from app.formatting import shown
from app.storage import safe_fs
from app.storage.location import RunPath
from app.storage.reading import read_bounded

READ_THREADS = 8  # files fetched at once: a bucket's latency is hidden behind the others'


def decode_slots() -> int:
    """How many files one call decodes at once. Decoding releases the GIL, so each file being
    decoded holds a CPU: in a Ray task or actor, as many as Ray gave it (a read task: 1) and
    never the CPUs Ray counts as another's (training's, on a training node); elsewhere, the
    CPUs this process may use."""
    ray = sys.modules.get("ray")  # a Ray worker has it; in-process callers may not
    if ray is not None and ray.is_initialized():
        try:
            cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0)
            return max(1, int(cpus))
        except AssertionError:  # a driver: it has no assigned resources
            pass
    from app.cpus import usable_cpus

    return usable_cpus().usable


def read_file(root: RunPath, relative: str) -> bytes:
    """One file's bytes; on a volume opened below `root` without following a link."""
    path = root / relative
    try:
        return read_bounded(path, root, MAX_FILE_BYTES)
    except safe_fs.LinkRefused:  # replaced by a link after the listing
        raise ImageError(f"{shown(path)}: cannot be read (a symbolic link, not followed)") from None
    except (OSError, ValueError, pa.ArrowException) as err:
        raise ImageError(f"{shown(path)}: cannot be read ({err})") from None


def load_images(
    root: RunPath,
    paths: list[str],
    size: int | tuple[int, int],
    channels: int = 3,
    errors: list[str] | None = None,
) -> np.ndarray:
    """The files at `paths` (relative to root), decoded, as one (N, height, width, channels)
    array; `size` is a square's side or (height, width). The first file that cannot be used
    raises its ImageError; with `errors` (a list of len(paths)) none does: a bad file's row is
    left zero and its message put at its index (`trainctl evaluate` skips and counts them)."""
    height, width = (size, size) if isinstance(size, int) else size
    out = np.zeros((len(paths), height, width, channels), np.uint8)
    decoding = threading.BoundedSemaphore(decode_slots())

    def one(index: int) -> None:
        relative = paths[index]
        try:
            data = read_file(root, relative)
            with decoding:
                out[index] = decode_image(data, (height, width), root / relative, channels)
        except ImageError as err:
            if errors is None:
                raise
            errors[index] = str(err)

    with ThreadPoolExecutor(min(READ_THREADS, max(1, len(paths)))) as pool:
        list(pool.map(one, range(len(paths))))  # list(): the first error is raised here
    return out


def to_folder_rows(table: pa.Table, root: RunPath, size: int) -> dict[str, np.ndarray]:
    """One block of (path, label) rows as the rows Ray Data hands to training."""
    paths = table.column("path").to_pylist()
    labels = table.column("label").to_numpy().astype(np.int64, copy=False)
    return {"image": load_images(root, paths, size), "label": labels}
