"""The files a run's logs are written to: a rotating file on a volume, opened without
following links, or a local file copied up to a bucket (app/runfolder/log_capture.py tees
output here).

Each rotates at TRAIN_LOG_MAX_MB with BACKUPS older files kept (logging.handlers' naming:
worker-0.log.1 is the newest older one).
"""

from __future__ import annotations

import contextlib
import io
import logging
import logging.handlers
import tempfile
import threading
from pathlib import Path

from app.runfolder.log_reader import BACKUPS
from app.storage import safe_fs
from app.storage.buckets import ObjectPath
from app.storage.location import RunPath, local_path

UPLOAD_EVERY_S = 5.0  # a log in a bucket is written locally and copied up this often


def open_handler(path: RunPath, max_mb: float, root: Path | None) -> logging.Handler:
    """A handler writing `path`, rotated at max_mb with BACKUPS older files kept."""
    max_bytes = max(1024, int(max_mb * 1024 * 1024))
    local = local_path(path)
    if local is None:
        handler: logging.Handler = _Uploaded(path, max_bytes)  # a bucket
    else:
        handler = _NoFollow(local, max_bytes, root or local.parent)
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler


class _NoFollow(logging.handlers.RotatingFileHandler):
    """A rotating log whose every open starts at the run folder and follows no link (rotation
    renames names inside the attempt folder, which moves a link rather than following it)."""

    def __init__(self, path: Path, max_bytes: int, root: Path) -> None:
        self.root = root
        safe_fs.makedirs(path.parent, self.root)  # a linked `logs` is refused here, at once
        # Opened now, not at the first line: a link at the log's name is refused here too.
        super().__init__(path, maxBytes=max_bytes, backupCount=BACKUPS)

    def _open(self) -> io.TextIOWrapper:
        binary = safe_fs.open_append(Path(self.baseFilename), self.root)
        return io.TextIOWrapper(binary, encoding=self.encoding or "utf-8", errors=self.errors)


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
