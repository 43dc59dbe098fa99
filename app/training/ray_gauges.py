"""The app's per-epoch figures as Ray metrics, exported by Ray's metrics agent on each node.

Prometheus scrapes them from the same port as Ray's own ray_* and ray_train_* metrics (8080 on
KubeRay pods; the chart's `metrics.enabled` opens it to the named scraper). Ray prefixes
application metrics with `ray_`, so they appear as ray_trainctl_<name>{run="<run name>"}.
Only rank 0 sets them: every rank holds the same all-reduced figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.runfolder import epoch_record
from app.runfolder.epoch_record import ETA_GAUGE, FIELDS, eta_s

# metric name -> description: the epoch record's gauges (app/runfolder/epoch_record.py), and the
# ETA.
GAUGES = dict([*(f.gauge for f in FIELDS if f.gauge), ETA_GAUGE])


def figures(metrics: Mapping[str, Any], target_epochs: int) -> dict[str, float]:
    """The gauge values for one epoch's record (pure: what is exported is tested on its own)."""
    values = {f.gauge[0]: metrics.get(f.name) for f in FIELDS if f.gauge}
    values["trainctl_epoch"] = int(metrics["epoch"])
    pace = epoch_record.pace(metrics)
    if pace is not None:
        values[ETA_GAUGE[0]] = eta_s(int(metrics["epoch"]), target_epochs, pace)
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
