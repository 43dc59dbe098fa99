"""Driver and worker output kept in the run folder, so it outlives the Ray cluster.

Layout: <run_dir>/logs/attempt-K/driver.log and worker-N.log (N = world rank). An attempt is
one `trainctl train` driver (a RayJob retry or a rerun is the next one). Ray Train restarting
a failed worker group inside the same driver appends to the same files after a marked line.

Output is teed, not moved: Ray's own log files and `kubectl logs` still get every line. Each
file rotates at TRAIN_LOG_MAX_MB with three older files kept (logging.handlers' naming:
worker-0.log.1 is the newest older one). A worker's exception is written there with its full
traceback before it propagates, since Ray only ships it to the driver and then removes the pod.

On a volume the files are opened below the run folder without following a link
(app/storage/safe_fs.py): a driver meeting a linked `logs`, attempt folder or log stops with
exit 2 naming it; a worker says so on its stderr and keeps its output there only. Reading
back is app/runfolder/log_reader.py.
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import logging.handlers
import re
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import TextIO

from app.errors import TrainctlError
from app.runfolder import log_handlers
from app.runfolder.folder import LOGS_DIR
from app.storage import safe_fs
from app.storage.entries import Kind, entries, refuse_link
from app.storage.location import RunPath

ATTEMPT_PATTERN = re.compile(r"^attempt-(\d+)$")


def attempt_dir(run_dir: RunPath, attempt: int) -> RunPath:
    return run_dir / LOGS_DIR / f"attempt-{attempt}"


def attempts(run_dir: RunPath) -> list[int]:
    """The attempt numbers in the run folder; on a volume a linked `logs` or attempt folder
    is refused (LinkRefused), never listed through."""
    folder = run_dir / LOGS_DIR
    if refuse_link(folder, run_dir) is not Kind.DIR:
        return []
    names = []
    for entry in entries(folder, run_dir):
        if entry.kind is Kind.LINK and ATTEMPT_PATTERN.match(entry.name):
            raise entry.refused()
        if entry.kind is Kind.DIR:
            names.append(entry.name)
    found = (ATTEMPT_PATTERN.match(name) for name in names)
    return sorted(int(m.group(1)) for m in found if m)


WORKER_LOG = re.compile(r"^worker-(\d+)\.log$")


def worker_ranks(run_dir: RunPath, attempt: int) -> list[int]:
    """The ranks that wrote a log in this attempt (none where the run failed before its
    workers trained: a bad setting on a worker, data Ray could not read)."""
    folder = attempt_dir(run_dir, attempt)
    if refuse_link(folder, run_dir) is not Kind.DIR:
        return []
    found = (WORKER_LOG.match(e.name) for e in entries(folder, run_dir) if e.kind is Kind.FILE)
    return sorted(int(m.group(1)) for m in found if m)


def log_root(path: RunPath) -> RunPath:
    """The run folder a log path lies in (<run>/logs/attempt-K/name), else the log's folder:
    where a log's opens start on a volume (app/storage/safe_fs.py)."""
    if path.parent.parent.name == LOGS_DIR:
        return path.parent.parent.parent
    return path.parent


def next_attempt(run_dir: RunPath) -> int:
    """The attempt number for a new driver: one past the highest on the volume."""
    return max(attempts(run_dir), default=0) + 1


# Lines each thread's tees wrote since that thread's last logging record reached the root
# logger: see _LoggingRecords.
_recent = threading.local()


# Ray Data's progress bars in a process that is not the Ray job's driver (a sweep's trial
# runs in a Tune actor) are printed as JSON lines with this mark, for the driver to draw as
# bars: in a log file they were most of its lines.
RAY_PROGRESS_BAR = "__ray_tqdm_magic_token__"


class _Tee(io.TextIOBase):
    """A text stream that writes through to the original and, by whole lines, to the log."""

    def __init__(self, original: TextIO, handler: logging.Handler) -> None:
        self.original = original
        self.handler = handler
        self.pending = ""
        self.lock = threading.Lock()
        self.inside = threading.local()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.original.write(text)
        self._log(text, whole=False)
        return len(text)

    def flush(self) -> None:
        self.original.flush()
        self._log("", whole=True)
        self.handler.flush()

    def _log(self, text: str, *, whole: bool) -> None:
        """Hand the finished lines (with whole=True, the unfinished one too) to the log.

        A handler that fails reports it on stderr, which is this stream: that report goes to
        the original only, since taking the lock again here would deadlock."""
        if getattr(self.inside, "emitting", False):
            return
        with self.lock:
            self.inside.emitting = True
            try:
                *lines, self.pending = (self.pending + text).split("\n")
                if whole and self.pending:
                    lines.append(self.pending)
                    self.pending = ""
                if not hasattr(_recent, "lines"):
                    _recent.lines = collections.deque(maxlen=64)
                for line in lines:
                    if RAY_PROGRESS_BAR in line:  # a bar's state for a Ray driver to draw
                        continue
                    record = logging.LogRecord("trainctl", logging.INFO, "", 0, line, None, None)
                    self.handler.handle(record)
                    _recent.lines.append(line)
            finally:
                self.inside.emitting = False

    def isatty(self) -> bool:
        return self.original.isatty()

    def fileno(self) -> int:
        return self.original.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.original, "encoding", "utf-8")

    def __getattr__(self, name: str) -> object:
        # Anything else (buffer, errors, reconfigure...) is the original stream's.
        return getattr(self.original, name)


class _Held(logging.Handler):
    """Holds records until `open()` hands them to the file: a driver refused for bad input
    must leave no file behind, yet its first lines belong in the log once it does start."""

    def __init__(self, path: RunPath, max_mb: float, held: bool) -> None:
        super().__init__()
        self.path, self.max_mb = path, max_mb
        self.records: list[logging.LogRecord] = []
        self.target: logging.Handler | None = None
        self.refused = False
        if not held:
            try:
                self.open()
            except safe_fs.LinkRefused as err:
                # A worker cannot stop the run with exit 2: its output stays on its stderr
                # (Ray's log), and nothing is written through the link.
                self.refused = True
                for problem in err.problems:
                    print(
                        f"trainctl: warning: log not kept in the run folder: {problem}",
                        file=sys.stderr,
                    )

    def open(self) -> None:
        if self.target is None:
            self.target = log_handlers.open_handler(self.path, self.max_mb, log_root(self.path))
            for record in self.records:
                self.target.handle(record)
            self.records.clear()

    def emit(self, record: logging.LogRecord) -> None:
        if self.refused:
            return
        if self.target is None:
            self.records.append(record)
        else:
            self.target.handle(record)

    def flush(self) -> None:
        if self.target is not None:
            self.target.flush()

    def close(self) -> None:
        if self.target is not None:
            self.target.close()
        super().close()


class _LoggingRecords(logging.Handler):
    """Python logging's records for the log, on the root logger, for loggers whose handlers
    write to streams opened before the tee (or to none).

    A record that a handler on its way up already printed to sys.stdout/stderr reached the log
    through the tee: Ray's worker loggers do that, and each of their lines was written twice.
    Handlers run from the record's logger up to the root, where this one comes last, all on
    the thread that logged: so such a record's text is among the lines this thread teed since
    its previous record.
    """

    def __init__(self, target: logging.Handler) -> None:
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        teed, _recent.lines = getattr(_recent, "lines", ()), collections.deque(maxlen=64)
        try:
            first = record.getMessage().split("\n", 1)[0]
        except Exception:  # a bad format string: let the target report it as logging does
            first = None
        if first and any(first in line for line in teed):
            return
        self.target.handle(record)


@contextlib.contextmanager
def capture(path: RunPath, max_mb: float, banner: str, held: bool = False) -> Iterator[_Held]:
    """Tee this process's stdout/stderr (and Python logging) into `path` while inside.

    With held=True nothing is written until the yielded handler's open() is called. An
    exception leaving the block is written there with its traceback, then re-raised.
    """
    handler = _Held(path, max_mb, held)
    handler.handle(
        logging.LogRecord(
            "trainctl", logging.INFO, "", 0, f"=== {banner} at {time.ctime()} ===", None, None
        )
    )
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Tee(saved[0], handler), _Tee(saved[1], handler)  # type: ignore[assignment]
    root = logging.getLogger()
    from_logging = _LoggingRecords(handler)
    root.addHandler(from_logging)
    try:
        yield handler
    except BaseException as err:
        _flush()  # what was printed before the error comes first
        if isinstance(err, TrainctlError):  # expected: its message, as the CLI prints it
            text = "\n".join(f"trainctl: {line}" for line in err.problems)
        elif not isinstance(err, SystemExit | GeneratorExit):
            text = "".join(traceback.format_exception(err)).rstrip("\n")
        else:
            text = ""
        if text:
            for line in text.split("\n"):
                handler.handle(logging.LogRecord("trainctl", 40, "", 0, line, None, None))
        raise
    finally:
        _flush()
        sys.stdout, sys.stderr = saved
        root.removeHandler(from_logging)
        handler.close()


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
