"""Reading a run-folder file a chunk at a time, on a volume or in a bucket alike.

On a volume the file is opened below its run folder without following a link
(app/storage/safe_fs.py) and is appended to and rotated by rename; in a bucket it is a pyarrow
random-access file, and each upload replaces the object whole. Callers (app/run/log_reader.py)
ask these questions instead of asking which kind of storage they have.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.storage import safe_fs
from app.storage.buckets import ObjectPath
from app.storage.location import RunPath


class ReadableFile:
    """One file opened for reading: a local fd below `root`, or an object."""

    def __init__(self, path: RunPath, root: Path | None) -> None:
        self.path, self.root = path, root
        # An object is replaced whole by each upload: polled by size, never renamed away.
        self.replaced_whole = isinstance(path, ObjectPath)
        if isinstance(path, ObjectPath):
            self.handle: Any = path.fs.open_input_file(path.key)
        else:
            self.handle = safe_fs.open_read(path, root or path.parent)

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
        status = safe_fs.refuse_link(path, self.root or path.parent)
        return status is not None and status.st_ino != os.fstat(self.handle.fileno()).st_ino

    def close(self) -> None:
        self.handle.close()


class MissingFile(ReadableFile):
    """A volume's log between a rotation's rename and its next line: nothing to read yet."""

    def __init__(self, path: RunPath, root: Path | None) -> None:
        self.path, self.root, self.handle, self.replaced_whole = path, root, None, False

    def size(self) -> int:
        return 0

    def read_at(self, offset: int, size: int) -> bytes:
        return b""

    def renamed_away(self) -> bool:
        path: Path = self.path  # type: ignore[assignment]
        return safe_fs.refuse_link(path, self.root or path.parent) is not None

    def close(self) -> None:
        pass


def present(path: RunPath) -> bool:
    """Whether the file is there; on a volume a link counts (it is opened, and refused)."""
    if isinstance(path, ObjectPath):
        return path.is_file()
    return path.exists() or path.is_symlink()


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
