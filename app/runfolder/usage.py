"""Accelerator-hours: what a run held, workers x GPUs (CPUs where it trained without GPUs) x
wall time, as summary.json's `accelerator_hours` records it and `trainctl status` shows it;
and the run's wall time (`duration_s`), summed the same way over its drivers.

A worker group holds its workers from its start (one attempts.jsonl line, rank 0's clock) to
the next start (a restart after a failure or a preemption, possibly at another world size) or
the driver's end; each driver adds its own worker groups to what the run's earlier drivers
recorded (the running summary carries their total). A driver killed without a word (SIGKILL,
a lost node) writes no summary, so its share is known only from the training clock its
checkpoints carry (app/training/run_clock.py): a run's figures are never below that clock's
at its last epoch. Pure functions, free of torch and Ray: the driver and `trainctl status`
both import them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from app.formatting import finite, is_finite, whole

Kind = Literal["gpu", "cpu"]
MAX_HOURS = 1e9  # past any real run: a bigger figure in a run folder is damage, not shown
MAX_WORKERS = 1_000_000


def accelerator_hours(
    previous: Any,
    starts: Sequence[Any],
    *,
    end: float,
    use_gpu: bool,
    cpus_per_worker: float,
) -> dict[str, Any]:
    """The run's record after this driver: `{kind, hours, workers, per_worker}`.

    `starts`: this driver's worker-group starts (attempts.jsonl lines: `time`, `world_size`);
    `end`: when it ended (unix time); `previous`: the record the run's earlier drivers left
    (ignored when unreadable or of the other kind: GPU- and CPU-hours do not add up)."""
    kind, per_worker = _unit(use_gpu, cpus_per_worker)
    seconds, workers = held(starts, end, per_worker)
    before = checked(previous)
    carried = before["hours"] if before and before["kind"] == kind else 0.0
    if workers is None and before and before["kind"] == kind:
        workers = before["workers"]
    return {
        "kind": kind,
        "hours": round(carried + seconds / 3600, 6),
        "workers": workers,
        "per_worker": per_worker,
    }


def from_training_clock(
    records: Sequence[Mapping[str, Any]], *, use_gpu: bool, cpus_per_worker: float
) -> dict[str, Any] | None:
    """A run whose driver never concluded (a sweep's trial the scheduler stopped): its
    accelerator-hours from the training clock of its last epoch (`worker_time_s`, worker
    seconds over all its worker groups), which leaves out each group's start; None where no
    epoch recorded one."""
    kind, per_worker = _unit(use_gpu, cpus_per_worker)
    clocks = [finite(r.get("worker_time_s")) for r in records]
    seconds = next((c for c in reversed(clocks) if c is not None and c >= 0), None)
    if seconds is None or seconds / 3600 > MAX_HOURS:
        return None
    hours = round(seconds * per_worker / 3600, 6)
    return {"kind": kind, "hours": hours, "workers": None, "per_worker": per_worker}


def clock_seconds(records: Sequence[Mapping[str, Any]]) -> float:
    """The training clock at the run's last epoch that recorded one (`run_time_s`), 0 where
    none did: how long the run trained at least, whichever of its drivers ended unsaid."""
    for record in reversed(records):
        seconds = finite(record.get("run_time_s"))
        if seconds is not None and 0 <= seconds <= MAX_HOURS * 3600:
            return seconds
    return 0.0


def at_least(record: dict[str, Any], clock: dict[str, Any] | None) -> dict[str, Any]:
    """`record` (this driver's on top of the earlier drivers'), or the training clock's hours
    where those are more: an earlier driver killed without a word added nothing."""
    if clock is None or clock["kind"] != record["kind"] or clock["hours"] <= record["hours"]:
        return record
    return {**record, "hours": clock["hours"]}


def _unit(use_gpu: bool, cpus_per_worker: float) -> tuple[Kind, float]:
    """What a worker holds and is counted in: one GPU, or its CPUs without GPUs."""
    return ("gpu", 1.0) if use_gpu else ("cpu", float(cpus_per_worker))


def run_seconds(previous: Any, this_driver_s: float) -> float:
    """The run's wall time so far (summary.json's `duration_s`): this driver's on top of what
    the run's earlier drivers recorded (ignored when it is not a figure a driver writes)."""
    carried = float(previous) if is_finite(previous) and 0 <= previous <= MAX_HOURS * 3600 else 0.0
    return carried + max(0.0, this_driver_s)


def held(starts: Sequence[Any], end: float, per_worker: float) -> tuple[float, int | None]:
    """(worker-seconds x per_worker held by these worker groups, the last group's size)."""
    groups = sorted(
        (float(s["time"]), int(s["world_size"]))
        for s in starts
        if isinstance(s, Mapping) and _time(s.get("time"), end) and _count(s.get("world_size"))
    )
    total = 0.0
    for index, (began, size) in enumerate(groups):
        until = groups[index + 1][0] if index + 1 < len(groups) else end
        total += size * per_worker * max(0.0, until - began)
    return total, (groups[-1][1] if groups else None)


def checked(record: Any) -> dict[str, Any] | None:
    """A record read from a run folder, or None where any field is not what a driver writes."""
    if not isinstance(record, Mapping) or record.get("kind") not in ("gpu", "cpu"):
        return None
    hours, per_worker, workers = (
        record.get("hours"),
        record.get("per_worker"),
        record.get("workers"),
    )
    if not is_finite(hours) or not 0 <= hours <= MAX_HOURS:
        return None
    if not is_finite(per_worker) or not 0 < per_worker <= 1024:
        return None
    if workers is not None and not _count(workers):
        return None
    out = {"kind": record["kind"], "hours": float(hours), "workers": workers,
           "per_worker": float(per_worker)}  # fmt: skip
    price, cost = record.get("price_per_hour"), record.get("cost")
    if is_finite(price) and is_finite(cost) and price > 0 and 0 <= cost <= MAX_HOURS * price:
        out.update(price_per_hour=float(price), cost=float(cost))  # TRAIN_GPU_HOUR_PRICE's
    return out


def in_words(record: Mapping[str, Any]) -> str:
    """e.g. `0.0213 CPU-hours (2 workers x 1 CPU)`, `12.5 GPU-hours (8 workers x 1 GPU)`."""
    unit = record["kind"].upper()
    shown = hours_text(record["hours"])
    per = f"{record['per_worker']:g} {unit}"
    workers = record.get("workers")
    who = f" ({workers} worker{'' if workers == 1 else 's'} x {per})" if workers else ""
    cost = f", cost {money(record['cost'])}" if record.get("cost") is not None else ""
    return f"{shown} {unit}-hours{who}{cost}"


def money(amount: float) -> str:
    """A cost in the price's own (unnamed) currency: 12.34, or 0.0012 below a hundredth."""
    return f"{amount:,.2f}" if amount >= 0.01 or amount == 0 else f"{amount:.4f}"


def hours_text(hours: float) -> str:
    """12.50, 0.02, 0.0003: two decimals, or four below a hundredth of an hour."""
    return f"{hours:,.2f}" if hours >= 0.01 or hours == 0 else f"{hours:.4f}"


def _count(value: Any) -> bool:
    return whole(value, 1, MAX_WORKERS) is not None


def _time(value: Any, end: float) -> bool:
    return is_finite(value) and 0 < value <= end
