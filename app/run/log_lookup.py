"""Finding a run's log for `trainctl logs`: the run folder from RUN or --storage, then the
worker's or driver's log of an attempt. Reading it is app/runfolder/log_reader.py; writing it,
app/runfolder/log_capture.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from app.errors import ConfigError
from app.formatting import one_path
from app.redact import redact
from app.runfolder import log_reader
from app.runfolder.folder import SWEEP_FILE
from app.runfolder.log_capture import LOGS_DIR, attempt_dir, attempts, log_root
from app.settings.tune_plan import TRIALS_DIR
from app.storage.entries import Kind, entries, not_a_link
from app.storage.location import RunPath
from app.storage.reading import is_dir_within, present_within


def log_file(run_dir: RunPath, *, worker: int | None, attempt: int | None) -> RunPath:
    """The log to show: a worker's (or the driver's when worker is None), newest attempt."""
    found = attempts(run_dir)
    if not found:
        raise ConfigError(
            f"no logs in {run_dir / LOGS_DIR}: not a run folder of trainctl, or its driver "
            "never started there"
        )
    newest = attempt is None
    if attempt is None:
        attempt = found[-1]
    elif attempt not in found:
        raise ConfigError(
            f"--attempt {attempt}: {run_dir / LOGS_DIR} holds attempts {', '.join(map(str, found))}"
        )
    folder = attempt_dir(run_dir, attempt)
    name = "driver.log" if worker is None else f"worker-{worker}.log"
    path = folder / name
    if not _is_log(path, run_dir):
        there = sorted(p.name for p in folder.glob("*.log"))
        # A rerun's folder appears before its driver writes: the attempt before still has logs.
        before = found[-2] if newest and len(found) > 1 else None
        earlier = f"; --attempt {before} shows the one before" if before else ""
        raise ConfigError(
            f"no {name} in {folder}; there: {', '.join(there) or 'nothing'}"
            + (" (worker numbers are world ranks, from 0)" if worker is not None else "")
            + (f" (attempt {attempt} is starting, or wrote nothing){earlier}" if not there else "")
        )
    return path


def _is_log(path: RunPath, run_dir: RunPath) -> bool:
    """Whether the log is there. `trainctl logs` on a link (the log or a rotated one): exit 2,
    naming it; on something that is there but is no file (a FIFO would block a reader
    forever), exit 2 saying what. One listing of the attempt folder, below the run folder."""
    found = {entry.name: entry for entry in entries(path.parent, run_dir)}
    rotated = [f"{path.name}.{index}" for index in range(1, log_reader.BACKUPS + 1)]
    for name in [*rotated, path.name]:
        entry = found.get(name)
        if entry is not None and entry.kind is Kind.LINK:
            raise entry.refused()
        _regular_or_absent(path.with_name(name), entry.kind if entry else None)
    return path.name in found


def _regular_or_absent(path: RunPath, kind: Kind | None) -> bool:
    """True for a regular file, False where nothing is; ConfigError for anything else."""
    if kind is None:
        return False
    if kind is Kind.FILE:
        return True
    raise ConfigError(
        f"{path}: is {kind.value}, not a log file; trainctl reads only regular files in a run "
        "folder: remove it"
    )


def read_lines(path: RunPath) -> Iterator[str]:
    """The log's lines oldest first: rotated files (.3, .2, .1) before the current one,
    streamed (app/runfolder/log_reader.py)."""
    return log_reader.read_lines(path, log_root(path))


def resolve_run_dir(run: str, storage: str | None) -> RunPath:
    """RUN as a run folder path or URI, or a run name under --storage (default
    TRAIN_STORAGE_PATH; TRAIN_STORAGE_ENDPOINT reaches an S3-compatible store), each parsed
    as `train` parses TRAIN_STORAGE_PATH (app/settings/env.py)."""
    from app.settings.env import (
        settings_environ,
        storage_access,
        storage_location,
        storage_path_setting,
    )

    env = settings_environ()
    endpoint, timeout = storage_access(env)
    as_path = storage_location(run, f"run {redact(run)!r}", endpoint)
    if _asked(is_dir_within, as_path / LOGS_DIR, "RUN", timeout):
        return not_a_link(as_path)
    if "/" in run:  # a path or URI: never looked up again as a name under the storage
        if not _asked(is_dir_within, as_path, "RUN", timeout):
            raise ConfigError(
                f"run {redact(run)!r}: no such folder: {as_path}; give a run folder's path "
                "(`trainctl status --storage DIR` lists the runs there), or a run's name "
                "with --storage"
            )
        _refuse_a_sweep(as_path, run, timeout)
        raise ConfigError(
            f"run {redact(run)!r}: {as_path} is no run folder with logs (it has no "
            f"{LOGS_DIR}/ folder); give a run folder's path, or a run's name with --storage"
        )
    if storage is None:
        storage = storage_path_setting(env)
    candidate = storage_location(storage, f"--storage {redact(storage)}", endpoint) / run
    for folder in (as_path, candidate):
        _refuse_a_sweep(folder, run, timeout)
    if _asked(is_dir_within, candidate, "--storage", timeout):
        return not_a_link(candidate)
    raise ConfigError(
        f"run {redact(run)!r}: neither {as_path} nor {candidate} is a run folder with logs; "
        "give the run folder's path, or --storage where the volume is mounted"
    )


def _refuse_a_sweep(folder: RunPath, run: str, timeout: float) -> None:
    """A sweep's folder without logs of its own (refused before its first trial, or kept by an
    older trainctl): ConfigError naming where its trials' are."""
    if _asked(present_within, folder / SWEEP_FILE, "RUN", timeout):  # its trials have logs
        raise ConfigError(
            f"run {redact(run)!r}: {folder} is a sweep's folder; each trial is a run with "
            f"its own logs: trainctl logs {folder / TRIALS_DIR}/<trial> (`trainctl status "
            f"{folder}` lists them)"
        )


def _asked(
    check: Callable[[RunPath, str, float], bool], path: RunPath, variable: str, timeout: float
) -> bool:
    """`check` (is_dir_within, present_within) of `path`, with a name the system refuses (too
    long, a NUL) said as bad input."""
    try:
        return check(path, variable, timeout)
    except (OSError, ValueError) as err:
        why = getattr(err, "strerror", None) or err
        raise ConfigError(f"{variable}: {one_path(path)}: {why}") from None


def _not_a_link(run_dir: RunPath) -> RunPath:
    """A run folder that is itself a link (planted as runs/<name> -> anywhere) is refused."""
    return not_a_link(run_dir)
