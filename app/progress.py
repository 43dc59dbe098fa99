"""One readable line per epoch, printed by the driver while Ray trains.

Workers append each finished epoch to metrics.jsonl on shared storage; the driver follows that
file. Worker output stays in Ray's log folder and <run_dir>/logs/, so the console shows progress,
not noise; the same records feed the experiment trackers (app/tracking.py).
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app import history


def progress_line(metrics: dict[str, Any], total_epochs: int, eta_s: float) -> str:
    # images_per_s is absent from runs recorded before it was added.
    rate = metrics.get("images_per_s")
    return (
        f"epoch {metrics['epoch']:>{len(str(total_epochs))}}/{total_epochs}"
        f"  train_loss {metrics['train_loss']:.4f}"
        f"  val_loss {metrics['val_loss']:.4f}"
        f"  val_acc {metrics['val_accuracy']:.2%}"
        f"  {metrics['epoch_time_s']:.1f}s/epoch"
        + (f"  {rate:,.0f} img/s" if rate is not None else "")
        + f"  ETA {_duration(eta_s)}"
    )


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class EpochFollower:
    """Prints each epoch that appears in the run's history after `since` (a unix time)."""

    def __init__(
        self,
        run_dir: Path,
        total_epochs: int,
        since: float,
        emit: Callable[[str], None],
        on_epoch: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._run_dir, self._total, self._since, self._emit = run_dir, total_epochs, since, emit
        self._on_epoch = on_epoch  # the experiment trackers: each epoch once, in order
        self._printed: set[int] = set()
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
        fresh = [
            row
            for row in history.epochs(self._run_dir)
            if row.get("time", 0) >= self._since and int(row["epoch"]) not in self._printed
        ]
        for row in fresh:
            self._printed.add(int(row["epoch"]))
            durations = [
                r["epoch_time_s"]
                for r in history.epochs(self._run_dir)
                if r.get("time", 0) >= self._since
            ]
            eta = (self._total - int(row["epoch"])) * statistics.median(durations)
            self._emit(progress_line(row, self._total, eta))
            if self._on_epoch is not None:
                self._on_epoch(row)
