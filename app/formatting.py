"""How durations and epochs read, the same on `trainctl train`'s console and in `submit --wait`.

Torch-free and Kubernetes-free, so that both the training driver and the cluster commands can
import it cheaply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def format_duration(seconds: float) -> str:
    """45s, 2m05s, 3h07m, 4d: short, and precise where it matters."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d"


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def epoch_line(record: Mapping[str, Any], total: int, eta_s: float | None = None) -> str:
    """One epoch record of the run folder as one line.

    Fields a record lacks (runs recorded before a field existed, a line edited by hand) are left
    out rather than failing. The ETA is `eta_s` where the caller has a better estimate (the
    driver's median epoch), else the remaining epochs at this epoch's pace.
    """
    epoch = int(record["epoch"])
    parts = [f"epoch {epoch:>{len(str(total))}}/{total}"]
    for name in ("train_loss", "val_loss"):
        if _number(record.get(name)):
            parts.append(f"{name} {record[name]:.4f}")
    if _number(record.get("val_accuracy")):
        parts.append(f"val_acc {record['val_accuracy']:.2%}")
    pace = record.get("epoch_time_s")
    if _number(pace):
        parts.append(f"{pace:.1f}s/epoch")
    if _number(record.get("images_per_s")):
        parts.append(f"{record['images_per_s']:,.0f} img/s")
    if eta_s is None and _number(pace):
        eta_s = max(0, total - epoch) * pace
    if eta_s is not None:
        parts.append(f"ETA {format_duration(eta_s)}")
    return "  ".join(parts)
