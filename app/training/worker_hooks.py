"""What a training worker adds around the train loop: its log file and, on rank 0, the epoch
gauges. Kept apart from app/training/loop.py so the loop itself stays about training."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from app.runfolder import log_capture as run_logs
from app.settings import TrainSettings
from app.training.plan import WorkerPlan

EpochHook = Callable[[dict[str, Any]], None]


@contextlib.contextmanager
def worker_hooks(plan: WorkerPlan, rank: int) -> Iterator[EpochHook]:
    """Tee this worker's output to <run_dir>/logs/attempt-K/worker-<rank>.log; yield the
    per-epoch hook (Ray metrics on rank 0, nothing elsewhere)."""
    settings, attempt = plan.settings, plan.log_attempt
    path = run_logs.attempt_dir(settings.run_dir, attempt) / f"worker-{rank}.log"
    with run_logs.capture(path, settings.log_max_mb, f"worker rank {rank}, attempt {attempt}"):
        yield _epoch_hook(settings) if rank == 0 else (lambda metrics: None)


def _epoch_hook(settings: TrainSettings) -> EpochHook:
    try:
        from app.training.ray_gauges import EpochGauges

        gauges = EpochGauges(settings.run_name, settings.epochs)
    except Exception as err:
        logging.getLogger(__name__).warning("Ray metrics are off: %s", err)
        return lambda metrics: None

    def record(metrics: dict[str, Any]) -> None:
        try:
            gauges.record(metrics)
        except Exception as err:
            logging.getLogger(__name__).warning("could not set Ray metrics: %s", err)

    return record
