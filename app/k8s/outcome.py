"""The promotion outcome of a finished RayJob's run, for `submit --wait` and `trainctl status`.

The driver's last line (app/promotion/step.py) is what a CronJob's job log ends with; the same
line is kept in the run folder's summary.json (`promotion.line`), which these commands read: in
the bucket when the chart keeps runs in object storage, else through a local mount of the
shared volume (--storage-mount).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.errors import TrainctlError
from app.k8s.plan import bucket_run_dir, local_run_dir
from app.redact import redact_text


def promotion_line(summary: Mapping[str, Any] | None) -> str | None:
    """summary.json's promotion line (`promoted v7 (...)` / `kept v6: ...`), None before one."""
    promotion = (summary or {}).get("promotion")
    line = promotion.get("line") if isinstance(promotion, Mapping) else None
    return redact_text(line) if isinstance(line, str) else None


def run_outcome(
    rayjob: Mapping[str, Any], configmaps: list[dict[str, Any]], storage_mount: Path | None
) -> str | None:
    """The promotion line of `rayjob`'s run, where its run folder can be read from here."""
    from app.run.folder import read_summary

    objects = [
        {**dict(rayjob), "kind": "RayJob"},
        *({**c, "kind": "ConfigMap"} for c in configmaps),
    ]
    try:
        run_dir = bucket_run_dir(objects)
        if run_dir is None and storage_mount is not None:
            run_dir = local_run_dir(objects, storage_mount)
        if run_dir is None:
            return None
        return promotion_line(read_summary(run_dir))
    except (TrainctlError, OSError, ValueError, KeyError) as err:
        return f"run folder not readable from here ({redact_text(str(err))[:200]})"
