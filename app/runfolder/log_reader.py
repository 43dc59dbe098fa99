"""Reading a run's log back for `trainctl logs --worker/--driver`: streamed, tailed, followed.

A log and its three rotated files may reach 4 x TRAIN_LOG_MAX_MB, so nothing here holds a file
in memory: lines are read in chunks (a bucket through pyarrow's input stream), `--tail N`
finds the start of the last N lines by reading back from the end a chunk at a time, and a line
longer than MAX_LINE is cut into pieces of that size. On a volume every file is opened below
the run folder without following a link (app/storage/safe_fs.py), so a planted `worker-0.log ->
/etc/passwd` is refused, not printed.

`follow_log` keeps printing what is appended, polling every FOLLOW_POLL_S, until the caller is
interrupted (Ctrl-C, or SIGTERM, which the CLI turns into an exception). On a volume a
rotation (the file renamed to .1 and a new one started) is noticed by its inode: the old file
is read to its end first. In a bucket the object is polled by size; a smaller object is a
rotated log and is read from its start.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator

from app.errors import ConfigError
from app.storage.location import RunPath
from app.storage.reading import MissingFile, ReadableFile, present, sequential_chunks

# logging.handlers' naming: name.1 is the newest older file (app/runfolder/log_capture.py)
BACKUPS = 3
CHUNK = 1 << 16
MAX_LINE = 1 << 16  # bytes; a longer line is printed in pieces
FOLLOW_POLL_S = 0.5


class _Lines:
    """Bytes in, whole lines out; what is held back is at most one unfinished line (MAX_LINE)."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, data: bytes) -> list[str]:
        *lines, self.pending = (self.pending + data).split(b"\n")
        while len(self.pending) > MAX_LINE:
            lines.append(self.pending[:MAX_LINE])
            self.pending = self.pending[MAX_LINE:]
        out: list[str] = []
        for line in lines:
            out += [_text(line[i : i + MAX_LINE]) for i in range(0, max(len(line), 1), MAX_LINE)]
        return out

    def flush(self) -> list[str]:
        rest, self.pending = self.pending, b""
        return [_text(rest)] if rest else []


def _text(line: bytes) -> str:
    return line.removesuffix(b"\r").decode("utf-8", errors="replace")


def _files(path: RunPath) -> list[RunPath]:
    """The log's files, oldest first: rotated ones (.3, .2, .1) before the current one."""
    older = [path.with_name(f"{path.name}.{i}") for i in range(BACKUPS, 0, -1)]
    return [p for p in older if present(p)] + [path]


def _stream(
    path: RunPath, root: RunPath | None, start: int = 0, stop: int | None = None
) -> Iterator[str]:
    """The lines of one file from byte `start` (to `stop`, or its end), a chunk at a time."""
    lines = _Lines()
    whole = sequential_chunks(path, CHUNK) if start == 0 and stop is None else None
    if whole is not None:
        for chunk in whole:
            yield from lines.feed(chunk)
    else:
        file = ReadableFile(path, root)
        try:
            offset = start
            while (want := _want(offset, stop)) and (chunk := file.read_at(offset, want)):
                offset += len(chunk)
                yield from lines.feed(chunk)
        finally:
            file.close()
    yield from lines.flush()


def _want(offset: int, stop: int | None) -> int:
    return CHUNK if stop is None else max(0, min(CHUNK, stop - offset))


def read_lines(path: RunPath, root: RunPath | None = None, end: int | None = None) -> Iterator[str]:
    """Every line of the log, oldest first, across its rotated files (the current one up to
    byte `end` when given)."""
    files = _files(path)
    for file in files[:-1]:
        yield from _stream(file, root)
    yield from _stream(files[-1], root, 0, end)


def _start_of_last(file: ReadableFile, end: int, count: int) -> tuple[int, int]:
    """(offset where the last `count` lines before `end` begin, how many lines there are)."""
    found, position = 0, end
    if end and file.read_at(end - 1, 1) == b"\n":
        position = end - 1  # the file's final newline ends its last line, it starts none
    while position > 0:
        size = min(CHUNK, position)
        block = file.read_at(position - size, size)
        index = len(block)
        while (index := block.rfind(b"\n", 0, index)) >= 0:
            found += 1
            if found == count:
                return position - size + index + 1, found
        position -= size
    return 0, found + (1 if end else 0)


def tail_lines(
    path: RunPath, count: int, root: RunPath | None = None, end: int | None = None
) -> Iterator[str]:
    """The last `count` lines of the log (rotated files reached only as far as needed; the
    current one up to byte `end` when given)."""
    if count <= 0:
        return
    starts: list[tuple[RunPath, int, int | None]] = []
    remaining = count
    for older in reversed(_files(path)):
        stop = end if older == path else None
        file = ReadableFile(older, root)
        try:
            offset, found = _start_of_last(file, file.size() if stop is None else stop, remaining)
        finally:
            file.close()
        starts.insert(0, (older, offset, stop))
        remaining -= found
        if remaining <= 0:
            break
    last: collections.deque[str] = collections.deque(maxlen=count)
    for older, offset, stop in starts:
        last.extend(_stream(older, root, offset, stop))
    yield from last


def show(
    path: RunPath,
    emit: Callable[[str], None],
    *,
    tail: int | None,
    follow: bool,
    root: RunPath | None,
) -> None:
    """What `trainctl logs --worker/--driver` prints: a header naming the file, then the log,
    its last `tail` lines, or (follow) those and then every new line until interrupted."""
    emit(f"==> {path} <==")
    try:
        if follow:
            follow_log(path, emit, tail=tail, root=root)
            return
        lines = tail_lines(path, tail, root) if tail is not None else read_lines(path, root)
        for line in lines:
            emit(line)
    except BrokenPipeError:
        raise  # the reader of our output left (`| head`): click ends quietly, nothing to blame
    except OSError as err:  # unreadable, or gone with the store: named, not a traceback
        named = str(err.filename or "")  # the rotated file it was, where the error says
        where = named if named.startswith(("/", f"{path}")) else path
        raise ConfigError(f"{where}: cannot be read ({err.strerror or err})") from None


def follow_log(
    path: RunPath,
    emit: Callable[[str], None],
    *,
    tail: int | None = None,
    root: RunPath | None = None,
    poll_s: float = FOLLOW_POLL_S,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Print the log (or its last `tail` lines), then what is appended, until interrupted."""
    file = ReadableFile(path, root)
    try:
        end = file.size()  # what is there now is printed once; what comes after, as it comes
        if tail is not None:
            lines = tail_lines(path, tail, root, end)
        else:
            lines = read_lines(path, root, end)
        for line in lines:
            emit(line)
        splitter, offset = _Lines(), end
        while True:
            sleep(poll_s)
            file, offset = _read_new(file, path, root, offset, splitter, emit)
    finally:
        file.close()


def _read_new(
    file: ReadableFile,
    path: RunPath,
    root: RunPath | None,
    offset: int,
    splitter: _Lines,
    emit: Callable[[str], None],
) -> tuple[ReadableFile, int]:
    """Emit the lines appended since `offset`; reopen the log when it was rotated."""
    if file.replaced_whole:
        # Each upload replaces the object whole: a bigger one is read from `offset` in a
        # fresh handle, a smaller one is the log begun again after a rotation.
        size = file.current_size()
        size = offset if size is None else size
        if size == offset:
            return file, offset
        if size < offset:
            for line in splitter.flush():
                emit(line)
            offset = 0
        file.close()
        file = ReadableFile(path, root)
    while chunk := file.read_at(offset, CHUNK):
        offset += len(chunk)
        for line in splitter.feed(chunk):
            emit(line)
    if file.renamed_away():
        for line in splitter.flush():
            emit(line)
        file.close()
        try:
            return ReadableFile(path, root), 0
        except FileNotFoundError:  # between the rename and the new file's first line
            return MissingFile(path, root), 0
    return file, offset
