"""Experiment tracking, opt in: MLflow, TensorBoard and Weights & Biases, from the driver.

Which trackers run is decided by each library's own switch: MLFLOW_TRACKING_URI (plus the
usual MLFLOW_EXPERIMENT_NAME, MLFLOW_TRACKING_TOKEN...), TRAIN_TENSORBOARD=true, and
WANDB_API_KEY or WANDB_MODE (plus WANDB_PROJECT...). The driver logs for rank 0: the figures
are the all-reduced ones rank 0 records in the run folder, which the driver follows anyway, so
the train loop carries no tracker code and a tracker never slows a training step.

A configured tracker that cannot work stops the run before Ray starts (app/tracking/check.py,
run by app/preflight.py), unless TRAIN_TRACKING_REQUIRED=false: then it costs one warning and
is switched off. Mid-run, no epoch is lost silently: a failed call keeps its epoch (and every
later one) in a buffer, retried with backoff on the next epoch (a tracker that stays down is
not asked again on every epoch) and at the end; the summary says per tracker which epochs were
delivered and which were not, and a warning names the undelivered ones.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import click

from app.errors import connection_cause
from app.redact import redact_text
from app.settings import TrainSettings
from app.storage.location import RunPath
from app.tracking.check import check_trackers, configured
from app.tracking.clients import CLIENTS, epoch_metrics, flat_params

__all__ = ["Trackers", "epoch_metrics", "flat_params"]


class _Delivery:
    """One tracker's client (None until it starts) and the epochs it has not got yet."""

    def __init__(self, name: str, start: Callable[[], Any]) -> None:
        self.name, self.start = name, start
        self.client: Any = None
        self.pending: dict[int, dict[str, Any]] = {}  # epoch -> record, sent in epoch order
        self.unsure: dict[int, dict[str, Any]] = {}  # may be there already: asked first
        self.delivered: set[int] = set()
        self.errors = 0
        self.failing_since: int = 0  # failed calls in a row
        self.retry_at = 0.0  # time.monotonic() before which it is not asked again
        self.last_error = ""
        self.finished = False

    def send(self) -> None:
        """Start the client if needed and deliver every kept epoch; raises on any failure."""
        if self.client is None:
            self.client = self.start()
        if self.unsure:
            have = self.client.logged_epochs()
            for epoch, record in sorted(self.unsure.items()):
                if epoch in have:
                    self.delivered.add(epoch)
                else:
                    self.pending.setdefault(epoch, record)
            self.unsure.clear()
        for epoch in sorted(self.pending):
            self.client.log_epoch(self.pending[epoch])
            del self.pending[epoch]
            self.delivered.add(epoch)

    def undelivered(self) -> list[int]:
        return sorted(set(self.pending) | set(self.unsure))


class Trackers:
    """The trackers of one driver. No call raises: failures are counted, warned and retried."""

    def __init__(
        self,
        warn: Callable[[str], None] | None = None,
        *,
        retry_s: float = 1.0,
        retry_max_s: float = 30.0,
        final_tries: int = 3,
    ) -> None:
        self.deliveries: list[_Delivery] = []
        self.ids: dict[str, dict[str, Any]] = {}
        self.switched_off: dict[str, str] = {}  # tracker -> why (TRAIN_TRACKING_REQUIRED=false)
        self.seen: set[int] = set()
        self._warn = warn or (lambda text: click.echo(f"trainctl: warning: {text}", err=True))
        self._retry_s, self._retry_max_s, self._final_tries = retry_s, retry_max_s, final_tries
        # The epoch follower's thread logs while the main thread may catch up or finish (its
        # last poll runs beside a follower still waiting on a slow server): one call at a time.
        self._lock = threading.RLock()

    @classmethod
    def start(
        cls, settings: TrainSettings, previous: Mapping[str, Any] | None, **options: Any
    ) -> Trackers:
        """Each configured tracker, probed again (the server may have gone since the preflight).
        Optional ones that cannot work are switched off; required ones are kept and retried."""
        trackers = cls(**options)
        # The tracker runs an earlier driver recorded in summary.json, which many hands can
        # write: what is not a record of run ids is no run to continue.
        previous = previous if isinstance(previous, Mapping) else {}
        problems = {v.name: v.problem for v in check_trackers(settings) if v.problem}
        for name in configured(os.environ, settings):
            if name in problems and not settings.tracking_required:
                trackers.switched_off[name] = problems[name] or ""
                trackers._warn(
                    f"{name} tracking is off (TRAIN_TRACKING_REQUIRED=false), training goes on "
                    f"without it: {problems[name]}"
                )
                continue
            kind, before = CLIENTS[name], previous.get(name)
            before = before if isinstance(before, Mapping) else {}
            delivery = _Delivery(name, lambda kind=kind, before=before: kind(settings, before))
            trackers.deliveries.append(delivery)
            trackers._try(delivery, force=True)
            if note := getattr(delivery.client, "note", None):  # a new run where one was kept
                trackers._warn(note)
        return trackers

    @property
    def active(self) -> list[Any]:
        return [d.client for d in self.deliveries if d.client is not None]

    def _try(self, delivery: _Delivery, *, force: bool = False) -> bool:
        """One attempt to deliver what `delivery` keeps; False (and warned) when it failed."""
        if not force and time.monotonic() < delivery.retry_at:
            return False  # still backing off: the epoch waits in the buffer
        kept = delivery.undelivered()
        try:
            delivery.send()
        except Exception as err:
            delivery.errors += 1
            delivery.failing_since += 1
            wait = min(self._retry_s * 2 ** (delivery.failing_since - 1), self._retry_max_s)
            delivery.retry_at = time.monotonic() + wait
            delivery.last_error = _one_line(err)
            if delivery.failing_since == 1:  # once per outage, not once per epoch
                what = "could not start" if delivery.client is None else "failed"
                kept = delivery.undelivered()
                epochs = f"epochs {_epochs(kept)} are" if kept else "its epochs will be"
                self._warn(
                    f"{delivery.name} tracking {what} ({delivery.last_error}); training goes "
                    f"on, {epochs} kept and retried"
                )
            return False
        if delivery.name not in self.ids:
            self.ids[delivery.name] = delivery.client.ids
        if delivery.failing_since:
            delivery.failing_since = 0
            self._warn(f"{delivery.name} tracking is back: epochs {_epochs(kept)} delivered")
        return True

    def log_epoch(self, record: Mapping[str, Any]) -> None:
        with self._lock:
            self._log_epoch(record)

    def _log_epoch(self, record: Mapping[str, Any]) -> None:
        epoch = int(record["epoch"])
        self.seen.add(epoch)
        for delivery in self.deliveries:
            if epoch not in delivery.delivered:
                delivery.pending[epoch] = dict(record)
            self._try(delivery)

    def catch_up(self, records: list[dict[str, Any]]) -> None:
        """Log the recorded epochs a tracker does not have: a driver killed between an epoch
        and its next look at the epoch records never sent that epoch."""
        with self._lock:
            self._catch_up(records)

    def _catch_up(self, records: list[dict[str, Any]]) -> None:
        self.seen.update(int(r["epoch"]) for r in records)
        for delivery in self.deliveries:
            for record in records:
                epoch = int(record["epoch"])
                if epoch not in delivery.delivered and epoch not in delivery.pending:
                    delivery.unsure[epoch] = record
            self._try(delivery, force=True)

    def finish(self, status: str, best: RunPath | None) -> None:
        """Deliver what is kept (a few tries, with backoff), close each tracker's run, and
        name every epoch that never got there."""
        with self._lock:
            for delivery in self.deliveries:
                self._finish(delivery, status, best)

    def _finish(self, delivery: _Delivery, status: str, best: RunPath | None) -> None:
        for attempt in range(self._final_tries):
            if self._try(delivery, force=True) and self._close(delivery, status, best):
                break
            if attempt + 1 < self._final_tries:
                time.sleep(min(self._retry_s * 2**attempt, self._retry_max_s))
        lost = delivery.undelivered()
        missing = [f"epochs {_epochs(lost)} not delivered"] if lost else []
        if not delivery.finished:
            missing.append("its run not closed")
        if missing:
            self._warn(
                f"{delivery.name} tracking: {' and '.join(missing)} ({delivery.last_error}); "
                "every epoch's figures are in the run folder's metrics.jsonl"
            )

    def _close(self, delivery: _Delivery, status: str, best: RunPath | None) -> bool:
        try:
            delivery.client.finish(status, best)
        except Exception as err:
            delivery.errors += 1
            delivery.last_error = _one_line(err)
            return False
        delivery.finished = True
        return True

    def delivery(self) -> dict[str, dict[str, Any]]:
        """Per tracker: which epochs it got, which it did not, and how many calls failed."""
        record: dict[str, dict[str, Any]] = {}
        for d in self.deliveries:
            record[d.name] = {
                "delivered_epochs": sorted(d.delivered),
                "undelivered_epochs": d.undelivered(),
                "closed": d.finished,
                "errors": d.errors,
                **({"last_error": d.last_error} if d.errors else {}),
            }
        for name, why in self.switched_off.items():
            record[name] = {
                "delivered_epochs": [],
                "undelivered_epochs": sorted(self.seen),
                "errors": 0,
                "switched_off": why,
            }
        return record


def _one_line(err: BaseException) -> str:
    """The error's message on one line, credentials hidden, whole (the fix comes last). A
    connection failure is said by the request and its reason: MLflow's message carries
    urllib3's whole retry story, 400 characters in every warning (a red-team pass)."""
    text = " ".join(str(err).split())
    if (reason := _connection_reason(err)) is not None:
        asked, wrapped, _ = text.partition(" failed with exception ")
        text = f"{asked} failed: {reason}" if wrapped else reason
    return redact_text(f"{type(err).__name__}: {text}" if text else type(err).__name__)


def _connection_reason(err: BaseException) -> str | None:
    """urllib3's reason under `err` (its cause or context, or an exception it wraps), if any."""
    found: BaseException | None = err
    for _ in range(8):  # a chain many hands built is followed a few links, no further
        if found is None:
            return None
        for candidate in (found, *(a for a in found.args if isinstance(a, BaseException))):
            if isinstance(getattr(candidate, "reason", None), BaseException):
                return connection_cause(candidate)
        found = found.__cause__ or found.__context__
    return None


def _epochs(epochs: list[int]) -> str:
    return ", ".join(map(str, epochs)) if epochs else "none"
