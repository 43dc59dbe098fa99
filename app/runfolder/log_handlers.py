"""The files a run's logs are written to: a rotating file on a volume, opened without
following links, or a local file copied up to a bucket (app/runfolder/log_capture.py tees
output here).

Each rotates at TRAIN_LOG_MAX_MB with BACKUPS older files kept (logging.handlers' naming:
worker-0.log.1 is the newest older one).
"""

from __future__ import annotations

import io
import logging
import logging.handlers
from pathlib import Path

from app.runfolder.log_reader import BACKUPS
from app.storage import safe_fs
from app.storage.location import LocalFolder, RunPath

UPLOAD_EVERY_S = 5.0  # a log in a bucket is written locally and copied up this often


def open_handler(path: RunPath, max_mb: float, root: RunPath | None) -> logging.Handler:
    """A handler writing `path`, rotated at max_mb with BACKUPS older files kept."""
    max_bytes = max(1024, int(max_mb * 1024 * 1024))
    handler = _RunLog(path, max_bytes, root)
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler


class _RunLog(logging.handlers.RotatingFileHandler):
    """A rotating log in the run folder. logging's handler needs a local file: on a volume
    the log itself, every open starting at the run folder and following no link (rotation
    renames names inside the attempt folder, which moves a link rather than following it);
    in a bucket, whose objects cannot be appended to, a local file (same rotation) copied up
    every UPLOAD_EVERY_S and when the log closes (app/storage/location.py LocalFolder)."""

    def __init__(self, path: RunPath, max_bytes: int, root: RunPath | None) -> None:
        # A restarted worker (maybe on another node) continues the log, its older files too.
        self.local = LocalFolder(
            path.parent, root=root, pattern=f"{path.name}*", prefix="trainctl-log-"
        )
        safe_fs.makedirs(self.local.path, self.local.root)  # a linked `logs` is refused here
        # Opened now, not at the first line: a link at the log's name is refused here too.
        super().__init__(self.local.path / path.name, maxBytes=max_bytes, backupCount=BACKUPS)
        self.local.sync_every(UPLOAD_EVERY_S)

    def _open(self) -> io.TextIOWrapper:
        binary = safe_fs.open_append(Path(self.baseFilename), self.local.root)
        return io.TextIOWrapper(binary, encoding=self.encoding or "utf-8", errors=self.errors)

    def close(self) -> None:
        super().close()
        self.local.stop()
