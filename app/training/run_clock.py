"""The run's training clock, carried in every checkpoint: the wall time to each epoch.

`run_time_s` counts seconds from the run's first worker-group start, summed over worker groups
along the path of checkpoints that led to the epoch: each group from its start to the
checkpoint the next group resumed from. Work lost to an interruption (after the last
checkpoint) and the time no group ran (between drivers, while Ray restarted) are not counted;
the run's accelerator-hours in summary.json count all of it (app/runfolder/usage.py).
`worker_time_s` is the same sum with each second weighted by the group's worker count.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.formatting import finite


@dataclass(frozen=True)
class RunClock:
    before_s: float  # run_time_s at the checkpoint this group resumed from (0: a fresh run)
    before_worker_s: float
    world: int
    since: float  # this group's start, time.monotonic()

    @classmethod
    def resumed(cls, saved: Any, world: int, since: float | None = None) -> RunClock:
        saved = saved if isinstance(saved, Mapping) else {}
        return cls(
            _seconds(saved.get("run_time_s")),
            _seconds(saved.get("worker_time_s")),
            world,
            time.monotonic() if since is None else since,
        )

    def reading(self, now: float | None = None) -> dict[str, float]:
        """{run_time_s, worker_time_s} now: the epoch record's and the checkpoint's."""
        held = max(0.0, (time.monotonic() if now is None else now) - self.since)
        return {
            "run_time_s": round(self.before_s + held, 3),
            "worker_time_s": round(self.before_worker_s + held * self.world, 3),
        }


def _seconds(value: Any) -> float:
    seconds = finite(value)
    return seconds if seconds is not None and seconds >= 0 else 0.0
