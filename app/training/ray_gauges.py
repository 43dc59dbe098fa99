"""The app's per-epoch figures as Ray metrics, exported by Ray's metrics agent on each node.

Prometheus scrapes them from the same port as Ray's own ray_* and ray_train_* metrics (8080 on
KubeRay pods; the chart's `metrics.enabled` opens it to the named scraper). Ray prefixes
application metrics with `ray_`, so they appear as ray_trainctl_<name>{run="<run name>"}.
Only rank 0 sets them: every rank holds the same all-reduced figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# metric name -> (description, how to compute it from the epoch's record and the run target)
GAUGES = {
    "trainctl_epoch": "Last completed epoch.",
    "trainctl_train_loss": "Mean training loss of the last epoch.",
    "trainctl_val_loss": "Validation loss after the last epoch.",
    "trainctl_val_accuracy": "Validation accuracy after the last epoch (0-1).",
    "trainctl_images_per_second": "Training throughput of the last epoch, all workers.",
    "trainctl_eta_seconds": "Estimated seconds to the last epoch at the last epoch's pace.",
}


def figures(metrics: Mapping[str, Any], target_epochs: int) -> dict[str, float]:
    """The gauge values for one epoch's record (pure: what is exported is tested on its own)."""
    epoch = int(metrics["epoch"])
    values = {
        "trainctl_epoch": float(epoch),
        "trainctl_train_loss": metrics.get("train_loss"),
        "trainctl_val_loss": metrics.get("val_loss"),
        "trainctl_val_accuracy": metrics.get("val_accuracy"),
        "trainctl_images_per_second": metrics.get("images_per_s"),
        "trainctl_eta_seconds": max(0, target_epochs - epoch) * float(metrics["epoch_time_s"])
        if isinstance(metrics.get("epoch_time_s"), int | float)
        else None,
    }
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float)}


class EpochGauges:
    def __init__(self, run_name: str, target_epochs: int) -> None:
        from ray.util.metrics import Gauge

        self.tags = {"run": run_name}
        self.target = target_epochs
        self.gauges = {
            name: Gauge(name, description=text, tag_keys=("run",)) for name, text in GAUGES.items()
        }

    def record(self, metrics: Mapping[str, Any]) -> None:
        for name, value in figures(metrics, self.target).items():
            self.gauges[name].set(value, tags=self.tags)
