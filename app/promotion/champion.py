"""The champion pointer: `<storage_path>/champions/<TRAIN_MODEL_NAME>.json`.

A small JSON object naming the run whose export is the current champion, its version (1, 2,
... : one more each time the pointer moves), the metric it won with, and the sha256 of its
model card (app/export/card.py), so a consumer can check the card it loads is the one that was
promoted.

Replaced whole, never edited: a reader sees the old pointer or the new one, never a torn file.
- On a volume, an atomic rename (app/storage/location.py write_atomic), and the read-decide-write
  runs under an exclusive flock on `champions/.<name>.lock`, so two runs finishing at once are
  serialized: the second decides against the first's pointer.
- In a bucket, one PUT of the whole object. pyarrow's S3 and GCS clients (the only store client
  trainctl has) offer no conditional write (S3 If-Match / If-None-Match), so two runs
  finishing in the same instant are last-writer-wins of a whole, consistent object; the
  pointer is read back after the write and a lost race is reported (`superseded`), never hidden.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.storage import bounded_json, safe_fs
from app.storage.location import RunPath, local_path, write_json
from app.storage.reading import read_bounded

CHAMPIONS_DIR = "champions"
MAX_POINTER_BYTES = 1 << 20
LOCK_WAIT_S = 60.0  # another driver holds the lock for one read and one small write


class PointerDamaged(ValueError):
    """The pointer exists but is not a pointer: nothing may be compared against it."""


@dataclass(frozen=True)
class Replaced:
    before: dict[str, Any] | None  # the pointer the decision was made against
    written: dict[str, Any] | None  # what this call wrote, None when it kept `before`
    after: dict[str, Any] | None  # read back after the write (bucket) or `written`/`before`

    @property
    def superseded(self) -> bool:
        return self.written is not None and self.after != self.written


def pointer_path(storage: RunPath, name: str) -> RunPath:
    return storage / CHAMPIONS_DIR / f"{name}.json"


def _root(local: Path) -> Path:
    """Where the pointer's opens start: the storage folder, so that neither `champions/` nor
    the pointer is read or written through a link planted there (app/storage/safe_fs.py)."""
    return local.parent.parent


def read_pointer(path: RunPath) -> dict[str, Any] | None:
    """The pointer, None when there is none; PointerDamaged when it is unreadable."""
    local = local_path(path)
    try:
        data = read_bounded(path, _root(local) if local else None, MAX_POINTER_BYTES)
        pointer = bounded_json.loads(data.decode("utf-8"), MAX_POINTER_BYTES)
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as err:  # oversized, not UTF-8, not JSON, a folder
        raise PointerDamaged(f"{path}: unreadable champion pointer ({err})") from None
    except safe_fs.LinkRefused:  # a ConfigError: it would stop the step instead of keeping
        raise PointerDamaged(
            f"{path}: unreadable champion pointer (a symbolic link, not followed)"
        ) from None
    version = pointer.get("version") if isinstance(pointer, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise PointerDamaged(f"{path}: not a champion pointer (no whole-number `version`)")
    # The gate compares with `metrics` (beats_champion): anything but an object there would
    # stop the gate midway instead of keeping the champion with a reason.
    if not isinstance(pointer.get("metrics", {}), dict):
        raise PointerDamaged(f"{path}: not a champion pointer (`metrics` is not an object)")
    return pointer


def replace(
    path: RunPath, decide: Callable[[dict[str, Any] | None], dict[str, Any] | None]
) -> Replaced:
    """Read the pointer, let `decide` return the new one (or None to keep it), write it whole.

    `decide` may raise: nothing is written then."""
    with _exclusive(path):
        before = read_pointer(path)
        new = decide(before)
        if new is None:
            return Replaced(before, None, before)
        local = local_path(path)
        write_json(path, new, _root(local) if local else None)
        after = new if local is not None else read_pointer(path)
    return Replaced(before, new, after)


@contextlib.contextmanager
def _exclusive(path: RunPath) -> Iterator[None]:
    """On a volume: an exclusive flock held while deciding and writing; a bucket has none."""
    local = local_path(path)
    if local is None:
        yield
        return
    lock = local.parent / f".{local.name.removesuffix('.json')}.lock"
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        with safe_fs.folder_fd(local.parent, _root(local), create=True) as folder:
            fd = os.open(lock.name, flags, 0o666, dir_fd=folder)
    except safe_fs.LinkRefused as err:  # `champions/` itself: kept, with the reason
        raise PointerDamaged("; ".join(err.problems)) from None
    except OSError as err:  # the lock's name taken by a link (ELOOP) or a folder
        raise PointerDamaged(f"{lock}: cannot be opened as a lock ({err.strerror})") from None
    try:
        _lock(fd, lock)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _lock(fd: int, lock: os.PathLike[str]) -> None:
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise PointerDamaged(
                    f"{lock}: still locked by another run after {LOCK_WAIT_S:.0f} s"
                ) from None
            time.sleep(0.1)
