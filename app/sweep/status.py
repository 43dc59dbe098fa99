"""`trainctl status <sweep folder>`: the trials' table, from sweep.json."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from app.errors import ConfigError
from app.formatting import format_duration, shown
from app.redact import redact
from app.run.status import STALE_S, is_run_folder, read_run
from app.runfolder.folder import sweep_record
from app.runfolder.summary import STATUS_WORDS
from app.runfolder.sweep_records import DONE, SWEEP_FILE, record_metric, table
from app.settings.tune_plan import TRIAL_NAME, TRIALS_DIR
from app.storage.location import RunPath
from app.storage.reading import present_within

ENDED = (*DONE, "failed")  # a trial row written once the trial had ended
# A trial read from its folder is said in the sweep's words (summary.json's): an interrupted
# trial showed as `stopped`, the word of a trial the scheduler stopped and will not resume.
RECORDED = {word: status for status, word in STATUS_WORDS.items()}


def show_sweep(
    target: str | None, storage: str | None, echo: Callable[[str], None], *, as_json: bool
) -> bool:
    """Show the sweep `target` names (a folder, or a name under --storage) and return True;
    False when it is not a sweep's folder (`status` then reads it as run folders)."""
    from app.settings.env import settings_environ, storage_access, storage_location

    if target is None or target in ("", ".", ".."):
        return False
    endpoint, timeout = storage_access(settings_environ())
    if storage is not None and "/" not in target and "://" not in target:
        path = storage_location(storage, f"--storage {redact(storage)}", endpoint) / target
    else:
        path = storage_location(target, f"RUN_DIR {redact(target)!r}", endpoint)
    try:
        # Within the deadline: a silent store was asked for a minute of the client's retries
        # here, then refused by the run folder's reading as silent "within 10 s".
        if not present_within(path / SWEEP_FILE, "RUN_DIR", timeout):
            return False
    except (OSError, ValueError):
        return False
    trials = path / TRIALS_DIR
    record, problem, _ = sweep_record(path)
    if problem is not None:
        # As a run folder's damaged summary.json: exit 2, on stderr, nothing on stdout.
        raise ConfigError(
            f"{problem}; each trial's own folder: trainctl status {shown(str(trials))}"
        )
    if record is None:
        return True  # a sweep's folder all the same: its run folders are the trials'
    record, silent, damaged = _live(record, path)
    echo(json.dumps(record, indent=2) if as_json else table(record))
    if silent and not as_json:
        echo(
            f"({', '.join(silent)}: no progress for over {format_duration(STALE_S)}; a sweep "
            "whose driver was killed is left like this: rerun `trainctl tune` to continue it)"
        )
    if damaged:
        said = f"{shown(str(path))}: sweep.json lists trials whose folders do not hold them"
        raise ConfigError([said, *dict.fromkeys(damaged)])  # a trial listed twice, said once
    return True


def _live(
    record: dict[str, Any], sweep_dir: RunPath
) -> tuple[dict[str, Any], list[str], list[str]]:
    """sweep.json with each trial it has not seen end read from the trial's own folder; the
    trials silent for long; and the ended trials whose folders are gone or damaged.

    The sweep rewrites sweep.json only when a trial ends, so a trial in training showed
    `pending 0` for as long as it trained, and one whose driver was killed stayed so for good;
    its folder says what `trainctl status` says of any run. An ended trial's folder is read
    too: sweep.json alone showed a healthy table over a best trial whose folder was deleted."""
    rows = record.get("trials")
    if not isinstance(rows, list):
        return record, [], []
    metric = record_metric(record)
    live: list[Any] = []
    silent: list[str] = []
    damaged: list[str] = []
    for row in rows:
        name = row.get("trial") if isinstance(row, dict) else None
        if not isinstance(name, str) or not TRIAL_NAME.fullmatch(name):
            live.append(row)
            continue
        if row.get("status") in ENDED:
            live.append(row)
            if row.get("status") in DONE:  # a failed trial may have failed before its folder
                damaged.extend(_ended_trial_problems(sweep_dir / TRIALS_DIR / name, name))
            continue
        run = read_run(sweep_dir / TRIALS_DIR / name)
        if run.status == "unknown" and run.epochs_completed is None:  # not started yet
            live.append(row)
            continue
        live.append(
            {**row, "status": RECORDED.get(run.status, run.status),
             "epochs": run.epochs_completed or 0,
             "final": (run.last_epoch or {}).get(metric), "best": (run.best or {}).get(metric)}
        )  # fmt: skip
        if run.silent_s is not None and run.silent_s >= STALE_S:
            silent.append(f"{name} silent {format_duration(run.silent_s)}")
    return {**record, "trials": live}, silent, damaged


def _ended_trial_problems(trial_dir: RunPath, name: str) -> list[str]:
    """What is wrong with an ended trial's folder: gone, without its summary, or damaged."""
    if not is_run_folder(trial_dir):
        return [f"{name}: its folder {shown(str(trial_dir))} is missing or holds no run records"]
    run = read_run(trial_dir)
    if run.problems:
        return [f"{name}: {problem}" for problem in run.problems]
    if run.status == "unknown":
        return [f"{name}: {shown(str(trial_dir))} has no readable summary.json"]
    return []
