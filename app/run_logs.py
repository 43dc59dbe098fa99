"""Driver and worker output kept in the run folder, so it outlives the Ray cluster.

Layout: <run_dir>/logs/attempt-K/driver.log and worker-N.log (N = world rank). An attempt is
one `trainctl train` driver (a RayJob retry or a rerun is the next one). Ray Train restarting
a failed worker group inside the same driver appends to the same files after a marked line.

Output is teed, not moved: Ray's own log files and `kubectl logs` still get every line. Each
file rotates at TRAIN_LOG_MAX_MB with three older files kept (logging.handlers' naming:
worker-0.log.1 is the newest older one). A worker's exception is written there with its full
traceback before it propagates, since Ray only ships it to the driver and then removes the pod.
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import logging.handlers
import os
import re
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from app import store_probe
from app.errors import ConfigError, TrainctlError
from app.objectstore import ObjectPath, locate
from app.redact import redact
from app.storage import RunPath

LOGS_DIR = "logs"
BACKUPS = 3
UPLOAD_EVERY_S = 5.0  # a log in a bucket is written locally and copied up this often
ATTEMPT_PATTERN = re.compile(r"^attempt-(\d+)$")


def attempt_dir(run_dir: RunPath, attempt: int) -> RunPath:
    return run_dir / LOGS_DIR / f"attempt-{attempt}"


def attempts(run_dir: RunPath) -> list[int]:
    folder = run_dir / LOGS_DIR
    if not folder.is_dir():
        return []
    found = (ATTEMPT_PATTERN.match(p.name) for p in folder.iterdir() if p.is_dir())
    return sorted(int(m.group(1)) for m in found if m)


def next_attempt(run_dir: RunPath) -> int:
    """The attempt number for a new driver: one past the highest on the volume."""
    return max(attempts(run_dir), default=0) + 1


def _handler(path: RunPath, max_mb: float) -> logging.Handler:
    max_bytes = max(1024, int(max_mb * 1024 * 1024))
    if isinstance(path, ObjectPath):
        handler: logging.Handler = _Uploaded(path, max_bytes)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=BACKUPS, delay=True
        )
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler


class _Uploaded(logging.handlers.RotatingFileHandler):
    """A log in a bucket: objects cannot be appended to, so the lines go to a local file (same
    rotation) that is copied up every UPLOAD_EVERY_S and when the log closes."""

    def __init__(self, target: ObjectPath, max_bytes: int) -> None:
        self.target = target
        self.local = Path(tempfile.mkdtemp(prefix="trainctl-log-")) / target.name
        # A restarted worker (maybe on another node) continues the log, as on a volume.
        for name in [target.name, *(f"{target.name}.{i}" for i in range(1, BACKUPS + 1))]:
            with contextlib.suppress(FileNotFoundError):
                (self.local.parent / name).write_bytes(target.with_name(name).read_bytes())
        super().__init__(self.local, maxBytes=max_bytes, backupCount=BACKUPS, delay=True)
        self.sent: dict[str, int] = {}
        self.done = threading.Event()
        self.uploader = threading.Thread(target=self._loop, name="log-upload", daemon=True)
        self.uploader.start()

    def _loop(self) -> None:
        while not self.done.wait(UPLOAD_EVERY_S):
            self.upload()

    def upload(self) -> None:
        with contextlib.suppress(OSError):  # a missed copy is retried on the next tick
            self.flush()
            for local in sorted(self.local.parent.glob(f"{self.local.name}*")):
                stamp = local.stat().st_mtime_ns
                if self.sent.get(local.name) != stamp:
                    self.target.with_name(local.name).write_bytes(local.read_bytes())
                    self.sent[local.name] = stamp

    def close(self) -> None:
        self.done.set()
        super().close()
        self.upload()


# Lines each thread's tees wrote since that thread's last logging record reached the root
# logger: see _LoggingRecords.
_recent = threading.local()


class _Tee(io.TextIOBase):
    """A text stream that writes through to the original and, by whole lines, to the log."""

    def __init__(self, original: TextIO, handler: logging.Handler) -> None:
        self.original = original
        self.handler = handler
        self.pending = ""
        self.lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.original.write(text)
        with self.lock:
            self.pending += text
            *lines, self.pending = self.pending.split("\n")
            for line in lines:
                self._emit(line)
        return len(text)

    def _emit(self, line: str) -> None:
        record = logging.LogRecord("trainctl", logging.INFO, "", 0, line, None, None)
        self.handler.handle(record)
        if not hasattr(_recent, "lines"):
            _recent.lines = collections.deque(maxlen=64)
        _recent.lines.append(line)

    def flush(self) -> None:
        self.original.flush()
        with self.lock:
            if self.pending:
                self._emit(self.pending)
                self.pending = ""
        self.handler.flush()

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
        if not held:
            self.open()

    def open(self) -> None:
        if self.target is None:
            self.target = _handler(self.path, self.max_mb)
            for record in self.records:
                self.target.handle(record)
            self.records.clear()

    def emit(self, record: logging.LogRecord) -> None:
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


def log_file(run_dir: RunPath, *, worker: int | None, attempt: int | None) -> RunPath:
    """The log to show: a worker's (or the driver's when worker is None), newest attempt."""
    found = attempts(run_dir)
    if not found:
        raise ConfigError(
            f"no logs in {run_dir / LOGS_DIR}: not a run folder of trainctl, or its driver "
            "never started there"
        )
    if attempt is None:
        attempt = found[-1]
    elif attempt not in found:
        raise ConfigError(
            f"--attempt {attempt}: {run_dir / LOGS_DIR} holds attempts {', '.join(map(str, found))}"
        )
    folder = attempt_dir(run_dir, attempt)
    name = "driver.log" if worker is None else f"worker-{worker}.log"
    path = folder / name
    if not path.is_file():
        there = sorted(p.name for p in folder.glob("*.log"))
        raise ConfigError(
            f"no {name} in {folder}; there: {', '.join(there) or 'nothing'}"
            + (" (worker numbers are world ranks, from 0)" if worker is not None else "")
        )
    return path


def read_lines(path: RunPath) -> Iterator[str]:
    """The log's lines oldest first: rotated files (.3, .2, .1) before the current one."""
    for index in range(BACKUPS, 0, -1):
        older = path.with_name(f"{path.name}.{index}")
        if older.is_file():
            yield from older.read_text(errors="replace").splitlines()
    yield from path.read_text(errors="replace").splitlines()


def resolve_run_dir(run: str, storage: str | None) -> RunPath:
    """RUN as a run folder path or URI, or a run name under --storage (default
    TRAIN_STORAGE_PATH; TRAIN_STORAGE_ENDPOINT reaches an S3-compatible store)."""
    from app.settings import storage_access

    endpoint, timeout = storage_access(os.environ)
    try:
        as_path = locate(run, endpoint)
    except ValueError as err:
        raise ConfigError(f"run {redact(run)!r}: {err}") from None
    if _is_dir(as_path / LOGS_DIR, "RUN", timeout):
        return as_path
    if storage is None:
        from app.settings import TrainSettings

        storage = os.environ.get("TRAIN_STORAGE_PATH") or str(
            TrainSettings.model_fields["storage_path"].default
        )
    try:
        candidate = locate(storage, endpoint) / run
    except ValueError as err:
        raise ConfigError(f"--storage {redact(storage)}: {err}") from None
    if _is_dir(candidate, "--storage", timeout):
        return candidate
    raise ConfigError(
        f"run {redact(run)!r}: neither {as_path} nor {candidate} is a run folder with logs; "
        "give the run folder's path, or --storage where the volume is mounted"
    )


def _is_dir(path: RunPath, what: str, timeout: float) -> bool:
    if isinstance(path, ObjectPath):  # within TRAIN_STORAGE_TIMEOUT_S, or say which store, why
        return store_probe.is_dir(path, what, timeout)
    return path.is_dir()
