"""One readable line per epoch, printed by the driver while Ray trains.

Rank 0 records each finished epoch in the run folder on shared storage (app/runfolder/folder.py);
the driver follows that record. Worker output stays in Ray's log folder and <run_dir>/logs/, so
the console shows progress, not noise; the same records feed the experiment trackers
(app/tracking/trackers.py).
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.formatting import finite
from app.runfolder import folder as run_folder
from app.runfolder.epoch_record import epoch_line, eta_s, pace
from app.runfolder.interruptions import in_words


class EpochFollower:
    """Prints each epoch that appears in the run's history after `since` (a unix time)."""

    def __init__(
        self,
        run_dir: Path,
        total_epochs: int,
        since: float,
        emit: Callable[[str], None],
        on_epoch: Callable[[dict[str, Any]], None] | None = None,
        on_checkpoint: Callable[[], None] | None = None,
    ) -> None:
        self._run_dir, self._total, self._since, self._emit = run_dir, total_epochs, since, emit
        self._on_epoch = on_epoch  # the experiment trackers: each epoch once, in order
        # Mid-epoch checkpoints (TRAIN_CHECKPOINT_EVERY): called once per new one that rank 0
        # records in progress.json, so that superseded ones are pruned within the epoch.
        self._on_checkpoint = on_checkpoint
        self._checkpoint_step: Any = None
        self._printed: set[int] = set()
        self._said = 0  # attempts already looked at for an interruption to announce
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="epoch-follower", daemon=True)

    def __enter__(self) -> EpochFollower:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.poll()  # the last epoch may land between the final poll and the stop

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.poll()

    def poll(self) -> None:
        self._say_interruptions()
        if self._on_checkpoint is not None:
            saved = run_folder.read_progress(self._run_dir).get("checkpoint_step")
            if saved is not None and saved != self._checkpoint_step:
                self._checkpoint_step = saved
                self._on_checkpoint()
        # This driver's epochs; their records lie in the run folder, where a line of another
        # hand's (a `time` that is text, no epoch time) is passed over, not a crash.
        mine = [row for row in run_folder.epochs(self._run_dir) if self._since_start(row)]
        durations = [p for row in mine if (p := pace(row)) is not None]
        for row in [row for row in mine if row["epoch"] not in self._printed]:
            self._printed.add(row["epoch"])
            eta = (
                eta_s(row["epoch"], self._total, statistics.median(durations))
                if durations
                else None
            )
            self._emit(epoch_line(row, self._total, eta))
            if self._on_epoch is not None:
                self._on_epoch(row)

    def _since_start(self, record: dict[str, Any]) -> bool:
        return (finite(record.get("time")) or 0) >= self._since

    def _say_interruptions(self) -> None:
        """`preempted at step 412 (epoch 3), checkpoint in 1.8 s, resumed, 0 steps lost`: one
        line per worker-group start of this driver that took over from an interrupted one."""
        path = self._run_dir / run_folder.ATTEMPTS_FILE
        starts = [a for a in run_folder.read_jsonl(path) if self._since_start(a)]
        for start in starts[self._said :]:
            if isinstance(start.get("interruption"), dict):
                self._emit(in_words(start["interruption"]))
            if start.get("resume_note"):
                self._emit(str(start["resume_note"]))
        self._said = max(self._said, len(starts))
