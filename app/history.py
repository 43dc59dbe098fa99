"""The run folder's running record: one line per epoch and one per worker-group start.

Both files are JSON lines in <run_dir>: `metrics.jsonl` (epoch metrics, what curves.png plots)
and `attempts.jsonl` (each time a worker group starts: from which checkpoint, at which epoch).
Only rank 0 writes them, after its checkpoint has been handed to Ray, so a line never describes
an epoch whose checkpoint was lost.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
ATTEMPTS_FILE = "attempts.jsonl"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a killed process: ignore it rather than fail
    return records


def _append(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _rewrite(path: Path, records: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    os.replace(tmp, path)


def start_attempt(
    run_dir: Path,
    *,
    invocation: str,
    start_epoch: int,
    world_size: int,
    restored_from: str | None,
) -> None:
    """Record a worker-group start and forget history past the epoch it resumes from."""
    metrics_path = run_dir / METRICS_FILE
    kept = [r for r in read_jsonl(metrics_path) if int(r.get("epoch", 0)) < start_epoch]
    if metrics_path.exists():
        _rewrite(metrics_path, kept)
    _append(
        run_dir / ATTEMPTS_FILE,
        {
            "invocation": invocation,
            "time": time.time(),
            "start_epoch": start_epoch,
            "world_size": world_size,
            "restored_from": restored_from,
        },
    )


def record_epoch(run_dir: Path, metrics: dict[str, Any]) -> None:
    _append(run_dir / METRICS_FILE, {**metrics, "time": time.time()})


def epochs(run_dir: Path) -> list[dict[str, Any]]:
    """Per-epoch metrics, one record per epoch (the newest wins if an epoch repeats)."""
    by_epoch = {int(r["epoch"]): r for r in read_jsonl(run_dir / METRICS_FILE) if "epoch" in r}
    return [by_epoch[e] for e in sorted(by_epoch)]


def attempts(run_dir: Path, invocation: str) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(run_dir / ATTEMPTS_FILE) if r.get("invocation") == invocation]
