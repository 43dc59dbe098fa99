"""The run folder's running record: one line per epoch and one per worker-group start.

Both files are JSON lines in <run_dir>: `metrics.jsonl` (epoch metrics, what curves.png plots)
and `attempts.jsonl` (each time a worker group starts: from which checkpoint, at which epoch).
Only rank 0 writes them, after its checkpoint has been handed to Ray, so a line never describes
an epoch whose checkpoint was lost.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
ATTEMPTS_FILE = "attempts.jsonl"
# A metrics line needs a whole epoch number; the metrics it has must be numbers (None: absent
# is fine). Anything else is a damaged line.
EPOCH_FIELDS: dict[str, Any] = {
    "epoch": int,
    "train_loss": (int, float, type(None)),
    "val_loss": (int, float, type(None)),
    "val_accuracy": (int, float, type(None)),
}


def read_jsonl(path: Path, required: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The file's records; lines that are not JSON objects with `required` fields are skipped.

    A process killed mid-write leaves half a line, and hands or tools may leave worse; a bad
    line must neither crash the run nor, through summary.json, every later rerun. The first
    time a file has bad lines it is said once, with their line numbers.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as err:
        _warn_once(path, f"cannot read {path} ({err.strerror}); its records are ignored")
        return []
    records, bad = [], []
    for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not _fits(record, required or {}):
            bad.append(number)
            continue
        records.append(record)
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
        _warn_once(path, f"skipped {len(bad)} unreadable line(s) in {path} (line {shown})")
    return records


def _fits(record: dict[str, Any], required: dict[str, Any]) -> bool:
    for key, kind in required.items():
        value = record.get(key)
        if isinstance(value, bool) or not isinstance(value, kind):
            return False
    return True


_WARNED: set[tuple[str, str]] = set()


def _warn_once(path: Path, message: str) -> None:
    if (str(path), message) not in _WARNED:
        _WARNED.add((str(path), message))
        print(f"trainctl: warning: {message}", file=sys.stderr)


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
    kept = [r for r in read_jsonl(metrics_path, EPOCH_FIELDS) if r["epoch"] < start_epoch]
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
    by_epoch = {r["epoch"]: r for r in read_jsonl(run_dir / METRICS_FILE, EPOCH_FIELDS)}
    return [by_epoch[e] for e in sorted(by_epoch)]


def attempts(run_dir: Path, invocation: str) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(run_dir / ATTEMPTS_FILE) if r.get("invocation") == invocation]
