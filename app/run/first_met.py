"""Time and accelerator-hours to accuracy: when each threshold was first met, for summary.json's
`time_to_threshold` and `trainctl status`.

Every threshold term of TRAIN_STOP_AT and TRAIN_PROMOTE_IF (`val_accuracy>=0.95`) gets one
entry: the first epoch whose record meets it, the run's training clock at that epoch's end
(`run_time_s`: seconds from the first worker-group start, summed over worker groups, without
lost work or the time between drivers: app/training/run_clock.py) and the accelerator-hours the
workers held until then (`worker_time_s` x GPUs or CPUs per worker), with its cost where
TRAIN_GPU_HOUR_PRICE is set. Never met: `epoch` null. An earlier driver's record of a term
stands (a resumed run keeps its first-met epoch). Pure functions over the records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.formatting import format_duration, is_finite, whole
from app.settings.gate import Gate, Threshold

SOURCES = ("TRAIN_STOP_AT", "TRAIN_PROMOTE_IF")
MAX_ENTRIES = 64  # what a summary.json may list and `status` shows


def terms(stop_at: Gate, promote_if: Gate) -> list[tuple[Threshold, list[str]]]:
    """Each threshold once, with the settings that name it."""
    found: dict[str, tuple[Threshold, list[str]]] = {}
    for source, gate in zip(SOURCES, (stop_at, promote_if), strict=True):
        for threshold in gate.thresholds:
            found.setdefault(str(threshold), (threshold, []))[1].append(source)
    return list(found.values())


def first_met(
    epochs: Sequence[Mapping[str, Any]],
    wanted: Sequence[tuple[Threshold, list[str]]],
    *,
    per_worker: float,
    price: float = 0.0,
) -> list[dict[str, Any]]:
    """One entry per threshold, from the epoch records in epoch order."""
    out = []
    for threshold, sources in wanted:
        hit = next((r for r in epochs if threshold.met_by(r.get(threshold.metric))), None)
        entry: dict[str, Any] = {"threshold": str(threshold), "settings": list(sources)}
        entry.update(_when(hit, per_worker, price))
        out.append(entry)
    return out


def _when(record: Mapping[str, Any] | None, per_worker: float, price: float) -> dict[str, Any]:
    if record is None:
        return {"epoch": None, "run_time_s": None, "accelerator_hours": None}
    run_s, worker_s = record.get("run_time_s"), record.get("worker_time_s")
    hours = round(worker_s * per_worker / 3600, 6) if is_finite(worker_s) else None
    when: dict[str, Any] = {
        "epoch": record["epoch"],
        "run_time_s": round(run_s, 3) if is_finite(run_s) else None,  # None: an older run's epoch
        "accelerator_hours": hours,
    }
    if price > 0 and hours is not None:
        when["cost"] = round(hours * price, 6)
    return when


def keep_first(previous: Any, computed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`computed`, where an earlier driver's record of the same threshold (read from the
    previous summary, checked) says it was met no later."""
    earlier = {e["threshold"]: e for e in checked(previous) if e["epoch"] is not None}
    out = []
    for entry in computed:
        before = earlier.get(entry["threshold"])
        if before and (entry["epoch"] is None or before["epoch"] <= entry["epoch"]):
            entry = {**before, "settings": entry["settings"]}
        out.append(entry)
    return out


def checked(entries: Any) -> list[dict[str, Any]]:
    """A summary's `time_to_threshold`, keeping only entries shaped as a driver writes them."""
    if not isinstance(entries, list):
        return []
    return [dict(e) for e in entries[:MAX_ENTRIES] if _entry_ok(e)]


def _entry_ok(entry: Any) -> bool:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("threshold"), str):
        return False
    epoch = entry.get("epoch")
    if epoch is not None and whole(epoch) is None:
        return False
    figures = [entry.get(k) for k in ("run_time_s", "accelerator_hours", "cost")]
    return all(v is None or (is_finite(v) and v >= 0) for v in figures)


def in_words(entry: Mapping[str, Any], kind: str = "") -> str:
    """`val_accuracy>=0.95: epoch 3, 41s of training, 0.0342 CPU-hours, cost 0.12`, or
    `...: not met` (an entry `checked` kept)."""
    if entry.get("epoch") is None:
        return f"{entry['threshold']}: not met"
    parts = [f"epoch {entry['epoch']}"]
    if entry.get("run_time_s") is not None:
        parts.append(f"{format_duration(entry['run_time_s'])} of training")
    if entry.get("accelerator_hours") is not None:
        unit = f" {kind.upper()}-hours" if kind else " accelerator-hours"
        parts.append(f"{_hours(entry['accelerator_hours'])}{unit}")
    if entry.get("cost") is not None:
        parts.append(f"cost {_hours(entry['cost'])}")
    return f"{entry['threshold']}: {', '.join(parts)}"


def short(entries: Sequence[Mapping[str, Any]]) -> str:
    """The listing's cell: the first threshold's epoch and training time, `+N` for the rest."""
    if not entries:
        return "-"
    first = entries[0]
    text = "not met" if first.get("epoch") is None else f"@{first['epoch']}"
    if first.get("epoch") is not None and first.get("run_time_s") is not None:
        text += f" {format_duration(first['run_time_s'])}"
    return text + (f" +{len(entries) - 1}" if len(entries) > 1 else "")


def _hours(value: float) -> str:
    return f"{value:,.2f}" if value >= 0.01 or value == 0 else f"{value:.4f}"


def cost(hours: float, price: float) -> float | None:
    """The cost of `hours` at `price` per accelerator-hour; None without a price."""
    return round(hours * price, 6) if price > 0 else None
