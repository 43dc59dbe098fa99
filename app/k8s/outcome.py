"""What a RayJob's run folder says, for `submit --wait` and `trainctl status`: the promotion
outcome of a finished run, and the interruptions (preemptions, failures, stops) of any run.

The driver's last line (app/promotion/step.py) is what a CronJob's job log ends with; the same
line is kept in the run folder's summary.json (`promotion.line`), which these commands read: in
the bucket when the chart keeps runs in object storage, else through a local mount of the
shared volume (--storage-mount). Interruptions come from summary.json once the run finished,
from attempts.jsonl while it runs (app/runfolder/interruptions.py).

A run folder is written by many hands: every string read from it is redacted, shown escaped
when it holds control characters, and cut to a length a terminal line can hold; lists are cut
to their last few entries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from app.errors import TrainctlError
from app.formatting import one_line
from app.k8s.plan import bucket_run_dir, local_run_dir
from app.runfolder.interruptions import lines_of

FINISHED = ("Complete", "Failed")  # jobDeploymentStatus of a run whose summary is final
MAX_LINE_CHARS = 300  # a line read from the run folder, as shown


def promotion_line(summary: Mapping[str, Any] | None) -> str | None:
    """summary.json's promotion line (`promoted v7 (...)` / `kept v6: ...`), None before one."""
    promotion = (summary or {}).get("promotion")
    line = promotion.get("line") if isinstance(promotion, Mapping) else None
    return one_line(line, MAX_LINE_CHARS) if isinstance(line, str) else None


def finished(rayjob: Mapping[str, Any]) -> bool:
    status = rayjob.get("status")
    return isinstance(status, Mapping) and status.get("jobDeploymentStatus") in FINISHED


def interruption_lines(
    rayjob: Mapping[str, Any], summary: Mapping[str, Any] | None, attempts: Sequence[Any]
) -> list[str]:
    """The run's interruptions in words (app/runfolder/interruptions.py): a finished RayJob's from
    summary.json, a running one's from attempts.jsonl."""
    return lines_of(summary, attempts, finished=finished(rayjob))


def run_lines(
    rayjob: Mapping[str, Any], configmaps: list[dict[str, Any]], storage_mount: Path | None
) -> list[str]:
    """What `rayjob`'s run folder says, where it can be read from here: its interruptions,
    then a finished run's promotion line; nothing where the folder cannot be located."""
    from app.runfolder.folder import ATTEMPTS_FILE, read_jsonl, read_summary, read_sweep

    sweep = None
    try:
        run_dir = _run_dir(rayjob, configmaps, storage_mount)
        if run_dir is None:
            return []
        summary = read_summary(run_dir) if finished(rayjob) else None
        if summary is None and finished(rayjob):  # a sweep's folder: its promotion line
            sweep = read_sweep(run_dir)
        final = isinstance((summary or {}).get("interruptions"), list)
        attempts = [] if final else read_jsonl(run_dir / ATTEMPTS_FILE)
    except (TrainctlError, OSError, ValueError, KeyError) as err:
        return [f"run folder not readable from here ({one_line(str(err), 200)})"]
    lines = interruption_lines(rayjob, summary, attempts)
    outcome = promotion_line(summary or sweep)
    return lines + ([outcome] if outcome else [])


def _run_dir(
    rayjob: Mapping[str, Any], configmaps: list[dict[str, Any]], storage_mount: Path | None
) -> Any | None:
    objects = [
        {**dict(rayjob), "kind": "RayJob"},
        *({**c, "kind": "ConfigMap"} for c in configmaps),
    ]
    run_dir = bucket_run_dir(objects)
    if run_dir is None and storage_mount is not None:
        run_dir = local_run_dir(objects, storage_mount)
    return run_dir
