"""The run folder <storage_path>/<run_name>: its layout, and every read and write of its records.

- `summary.json`: what a person or a CI script reads after a run; written atomically by the driver.
- `metrics.jsonl`: one line per finished epoch (what curves.png plots and the epoch lines print).
- `attempts.jsonl`: one line per worker-group start: from which checkpoint, at which epoch.
- `checkpoint_epoch_NNNN/`: the checkpoints (app/checkpoints.py), `logs/` (app/run_logs.py).

Only rank 0 writes the two JSON-lines files, after its checkpoint has been handed to Ray, so a
line never describes an epoch whose checkpoint was lost. No torch here: `submit --wait`, the
progress follower and the tests read the folder without paying for it.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from app.storage import RunPath, append_line, write_atomic, write_json

SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"
ATTEMPTS_FILE = "attempts.jsonl"
CURVES_FILE = "curves.png"
# Ray Train's record of the checkpoints it registered. Resume is decided from verified files
# instead; a stale snapshot may name checkpoints since set aside, which stops Ray from starting.
RAY_SNAPSHOT = "checkpoint_manager_snapshot.json"
# A metrics line needs a whole epoch number; the metrics it has must be numbers (None: absent
# is fine). Anything else is a damaged line.
EPOCH_FIELDS: dict[str, Any] = {
    "epoch": int,
    "train_loss": (int, float, type(None)),
    "val_loss": (int, float, type(None)),
    "val_accuracy": (int, float, type(None)),
}


def read_jsonl(path: RunPath, required: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The file's records; lines that are not JSON objects with `required` fields are skipped.

    A process killed mid-write leaves half a line, and hands or tools may leave worse; a bad
    line must neither crash the run nor, through the summary, every later rerun. The first
    time a file has bad lines it is said once, with their line numbers.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as err:
        why = err.strerror or str(err).splitlines()[0]
        _warn_once(path, f"cannot read {path} ({why}); its records are ignored")
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


def _warn_once(path: RunPath, message: str) -> None:
    if (str(path), message) not in _WARNED:
        _WARNED.add((str(path), message))
        print(f"trainctl: warning: {message}", file=sys.stderr)


def _append(path: RunPath, record: dict[str, Any]) -> None:
    append_line(path, json.dumps(record))


def _rewrite(path: RunPath, records: list[dict[str, Any]]) -> None:
    write_atomic(path, "".join(json.dumps(r) + "\n" for r in records).encode())


def start_attempt(
    run_dir: RunPath,
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


def record_epoch(run_dir: RunPath, metrics: dict[str, Any]) -> None:
    _append(run_dir / METRICS_FILE, {**metrics, "time": time.time()})


def epochs(run_dir: RunPath) -> list[dict[str, Any]]:
    """Per-epoch metrics, one record per epoch (the newest wins if an epoch repeats)."""
    by_epoch = {r["epoch"]: r for r in read_jsonl(run_dir / METRICS_FILE, EPOCH_FIELDS)}
    return [by_epoch[e] for e in sorted(by_epoch)]


def attempts(run_dir: RunPath, invocation: str) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(run_dir / ATTEMPTS_FILE) if r.get("invocation") == invocation]


def read_summary(run_dir: RunPath) -> dict[str, Any] | None:
    """The summary as last written, or None while there is none (or it is unreadable)."""
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def write_summary(run_dir: RunPath, summary: dict[str, Any]) -> RunPath:
    """Write atomically: readers (and `trainctl submit --wait`) never see half a file."""
    path = run_dir / SUMMARY_FILE
    write_json(path, summary)
    return path


def forget_ray_snapshot(run_dir: RunPath) -> None:
    (run_dir / RAY_SNAPSHOT).unlink(missing_ok=True)
