"""An exclusive lock beside a file, held while one writer reads, decides and writes it.

On a volume a flock on a hidden file beside it (`.<name>.lock`), opened below `root` without
following a link: drivers in other pods of a shared volume are serialised by it (flock works on
local file systems and NFSv4 alike). A bucket has no locks: there a writer either sends a
compare-and-swap (app/storage/conditional.py) or is last-writer-wins, and `exclusive` says it
holds nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from app.storage import safe_fs
from app.storage.location import RunPath

POLL_S = 0.1


class LockUnavailable(OSError):
    """The lock could not be opened (its name taken by a link or a folder), or another holder
    kept it past the wait."""


@contextlib.contextmanager
def exclusive(path: RunPath, root: RunPath | None, wait_s: float) -> Iterator[bool]:
    """Inside: `path`'s writers kept out (True), or nothing held where the store has no locks
    (False: a bucket). LinkRefused where a folder on the way is a link; LockUnavailable where
    the lock cannot be opened, or is still held by another after `wait_s` seconds."""
    if not isinstance(path, Path):
        yield False
        return
    lock = path.parent / f".{path.name.removesuffix('.json')}.lock"
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        with safe_fs.folder_fd(path.parent, safe_fs.below(path, root), create=True) as folder:
            fd = os.open(lock.name, flags, 0o666, dir_fd=folder)
    except OSError as err:  # the lock's name taken by a link (ELOOP) or a folder
        raise LockUnavailable(f"{lock}: cannot be opened as a lock ({err.strerror})") from None
    try:
        _lock(fd, lock, wait_s)
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def _lock(fd: int, lock: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise LockUnavailable(
                    f"{lock}: still locked by another run after {wait_s:.0f} s"
                ) from None
            time.sleep(POLL_S)
