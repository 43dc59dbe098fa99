"""Reading from storage, on a volume or in a bucket alike: a file a chunk at a time (and its
sha256), a bounded record, a listing, and the questions (is it there, is it a folder) with a
deadline.

On a volume the file is opened below its run folder without following a link
(app/storage/safe_fs.py) and is appended to and rotated by rename; in a bucket it is a pyarrow
random-access file, and each upload replaces the object whole. Callers (app/runfolder/log_reader.py)
ask these questions instead of asking which kind of storage they have.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.storage import safe_fs
from app.storage.buckets import ObjectPath
from app.storage.location import RunPath
from app.storage.probe import DEFAULT_TIMEOUT_S
from app.storage.probe import exists as bucket_exists
from app.storage.probe import is_dir as bucket_is_dir

HASH_CHUNK = 1 << 20  # bounded memory whatever the file's size


class ReadableFile:
    """One file opened for reading: a local fd below `root`, or an object."""

    def __init__(self, path: RunPath, root: RunPath | None) -> None:
        self.path, self.root = path, root
        # An object is replaced whole by each upload: polled by size, never renamed away.
        self.replaced_whole = isinstance(path, ObjectPath)
        if isinstance(path, ObjectPath):
            self.handle: Any = path.fs.open_input_file(path.key)
        else:
            self.handle = safe_fs.open_read(path, safe_fs.below(path, root))

    def size(self) -> int:
        if self.replaced_whole:
            return int(self.handle.size())
        return os.fstat(self.handle.fileno()).st_size

    def read_at(self, offset: int, size: int) -> bytes:
        if self.replaced_whole:
            if offset >= self.size():
                return b""
            return bytes(self.handle.read_at(size, offset))
        return os.pread(self.handle.fileno(), size, offset)

    def current_size(self) -> int | None:
        """An object's size now (a new upload), None where it is gone; a volume's file: its
        open descriptor's size."""
        if not self.replaced_whole:
            return self.size()
        path: ObjectPath = self.path  # type: ignore[assignment]
        return path.size() if path.is_file() else None

    def renamed_away(self) -> bool:
        """Whether the path now names another file than the one open (or one appeared): a
        rotation on a volume. An object never is."""
        if self.replaced_whole:
            return False
        path: Path = self.path  # type: ignore[assignment]
        status = safe_fs.refuse_link(path, safe_fs.below(path, self.root))
        return status is not None and status.st_ino != os.fstat(self.handle.fileno()).st_ino

    def close(self) -> None:
        self.handle.close()


class MissingFile(ReadableFile):
    """A volume's log between a rotation's rename and its next line: nothing to read yet."""

    def __init__(self, path: RunPath, root: RunPath | None) -> None:
        self.path, self.root, self.handle, self.replaced_whole = path, root, None, False

    def size(self) -> int:
        return 0

    def read_at(self, offset: int, size: int) -> bytes:
        return b""

    def renamed_away(self) -> bool:
        path: Path = self.path  # type: ignore[assignment]
        return safe_fs.refuse_link(path, safe_fs.below(path, self.root)) is not None

    def close(self) -> None:
        pass


def present(path: RunPath) -> bool:
    """Whether the file is there; on a volume a link counts (it is opened, and refused)."""
    if isinstance(path, ObjectPath):
        return path.is_file()
    return path.exists() or path.is_symlink()


def file_size(path: RunPath) -> int:
    """A file's size in bytes, on a volume or in a bucket."""
    if isinstance(path, ObjectPath):
        return int(path.size())
    return path.stat().st_size


def file_stamp(path: RunPath) -> tuple[int, int]:
    """A file's (size in bytes, modification time in ns), on a volume or in a bucket: what
    changes when the file is written again, even to the same size."""
    if isinstance(path, ObjectPath):
        return path.stamp()
    status = path.stat()
    return status.st_size, status.st_mtime_ns


def sequential_chunks(path: RunPath, chunk: int) -> Iterator[bytes] | None:
    """A bucket object's bytes through pyarrow's input stream (cheaper than random access for
    a whole read); None on a volume, where the random-access file is as good."""
    if not isinstance(path, ObjectPath):
        return None

    def chunks() -> Iterator[bytes]:
        with path.fs.open_input_stream(path.key) as stream:
            while data := stream.read(chunk):
                yield data

    return chunks()


def read_bounded(path: RunPath, root: RunPath | None, limit: int) -> bytes:
    """A record file's bytes, at most `limit` (ValueError past it, nothing read beyond it);
    on a volume opened below `root` (default: its folder) without following a link
    (LinkRefused); FileNotFoundError where it is not there."""
    if isinstance(path, ObjectPath):
        size = path.size()  # FileNotFoundError where no object is there; one request
        if size > limit:
            raise ValueError(f"{size:,} bytes, over the {limit:,} allowed")
        return path.read_bytes()
    return safe_fs.read_bytes(path, safe_fs.below(path, root), limit)


def open_below(path: RunPath, root: RunPath | None = None, limit: int | None = None) -> Any:
    """`path` opened for reading; on a volume below `root` (default: its folder), following
    no link, and only a regular file (NotRegularFile: a FIFO would block the reader); with
    `limit`, ValueError when the file opened is larger."""
    if isinstance(path, ObjectPath):
        if limit is not None and (size := path.size()) > limit:
            raise ValueError(f"{path} is {size:,} bytes, over the {limit:,} allowed")
        return path.open("rb")
    return safe_fs.open_read(path, safe_fs.below(path, root), limit)


def sha256_of(path: RunPath, root: RunPath | None = None, limit: int | None = None) -> str:
    """The file's SHA-256 (hex), read a chunk at a time through open_below: on a volume below
    `root` (default: its folder) without following a link, in a bucket as a stream; ValueError
    when it is larger than `limit`."""
    digest, read = hashlib.sha256(), 0
    with open_below(path, root, limit) as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
            read += len(chunk)
            if limit is not None and read > limit:  # it grew while being read
                raise ValueError(f"{path} is over the {limit:,} bytes allowed")
    return digest.hexdigest()


def random_access(path: RunPath) -> Any:
    """What pyarrow's readers open for `path`: a local path as it is, a bucket object as a
    random-access file (read in ranges, not downloaded whole)."""
    return path.fs.open_input_file(path.key) if isinstance(path, ObjectPath) else path


def reader_source(root: RunPath) -> tuple[str, dict[str, Any]]:
    """What pyarrow-based readers (Ray Data) take for `root`: the path inside its filesystem,
    and the filesystem argument for a bucket (trainctl's own client: its endpoint, retries)."""
    if isinstance(root, ObjectPath):
        return root.key, {"filesystem": root.fs}
    return str(root), {}


def walk_files(folder: RunPath) -> list[RunPath]:
    """Every file below `folder`, at any depth, on a volume or in a bucket."""
    if isinstance(folder, ObjectPath):
        return folder.walk_files()
    return [path for path in folder.rglob("*") if path.is_file()]


def is_dir_within(path: RunPath, variable: str, seconds: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether `path` is a folder; a bucket answers within `seconds` or the refusal names the
    store and `variable` (app/storage/probe.py)."""
    if isinstance(path, ObjectPath):
        return bucket_is_dir(path, variable, seconds)
    return path.is_dir()


def exists_within(path: RunPath, variable: str, seconds: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether `path` exists; a bucket answers within `seconds` or the refusal names it."""
    if isinstance(path, ObjectPath):
        return bucket_exists(path, variable, seconds)
    return path.exists()


def present_within(path: RunPath, variable: str, seconds: float = DEFAULT_TIMEOUT_S) -> bool:
    """`present` (on a volume a link counts: it is opened, and refused); a bucket answers
    within `seconds` or the refusal names the store and `variable`."""
    if isinstance(path, ObjectPath):
        return bucket_exists(path, variable, seconds)
    return present(path)
