"""The run folder <storage_path>/<run_name>: its layout, and every read and write of its records.

- `summary.json`: what a person or a CI script reads after a run; written atomically by the driver.
- `metrics.jsonl`: one line per finished epoch (what curves.png plots and the epoch lines print).
- `attempts.jsonl`: one line per worker-group start: from which checkpoint, at which epoch.
- `checkpoint_epoch_NNNN/`: the checkpoints (app/runfolder/checkpoints.py), `logs/`
  (app/runfolder/log_capture.py).

Only rank 0 writes the two JSON-lines files, after its checkpoint has been handed to Ray, so a
line never describes an epoch whose checkpoint was lost. No torch here: `submit --wait`, the
progress follower and the tests read the folder without paying for it.

On a volume nothing here follows a link (app/storage/safe_fs.py): the driver refuses a run folder
whose own names are links before Ray starts (`refuse_links`, exit 2); a reader that meets one later
ignores that file with a warning, as it does a damaged one, and a writer refuses it.
Records are bounded in size and nesting before they are parsed (app/storage/bounded_json.py).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from app.errors import ConfigError, RunFailed
from app.formatting import whole
from app.runfolder.epoch_record import REQUIRED
from app.storage import bounded_json, safe_fs
from app.storage.entries import entries, links, not_a_link
from app.storage.location import RunPath, append_line, strict_json, write_atomic, write_json
from app.storage.probe import StoreUnavailable
from app.storage.reading import present_within, read_bounded

SUMMARY_FILE = "summary.json"
# summary.json: the last start refused before it began, beside an earlier run's record
# (record_invalid); {"error", "time"}.
REFUSED_KEY = "refused_start"
# summary.json of a run that failed on its data: where the bad image or unreadable file is, as
# the driver located it; the next start of the run looks again before it trains.
BAD_DATA_KEY = "bad_data"
METRICS_FILE = "metrics.jsonl"
ATTEMPTS_FILE = "attempts.jsonl"
CURVES_FILE = "curves.png"
# Rank 0's last known step (every few seconds) and its last just-in-time checkpoint: what the
# next worker-group start needs to count the steps an interruption lost
# (app/runfolder/interruptions).
PROGRESS_FILE = "progress.json"
MAX_PROGRESS_BYTES = 64 << 10
# Ray Train's record of the checkpoints it registered. Resume is decided from verified files
# instead; a stale snapshot may name checkpoints since set aside, which stops Ray from starting.
RAY_SNAPSHOT = "checkpoint_manager_snapshot.json"
RAY_STORAGE_MARKER = ".validate_storage_marker"  # Ray Train writes it to test the storage
# Bounds on what is read back: years of epochs fit many times over; a file past them is damaged.
MAX_RECORDS_BYTES = 64 << 20
MAX_LINE_CHARS = 1 << 20
MAX_SUMMARY_BYTES = 16 << 20
# The names trainctl reads or writes in a run folder (checkpoint folders by their prefixes):
# none of them may be a link (`refuse_links`).
# classes.json: app/runfolder/class_names.py (which imports this module, hence the literal).
LOGS_DIR = "logs"  # the run's logs, logs/attempt-K/ (app/runfolder/log_capture.py writes them)
# What makes a folder a run's: any of these records (a run's first start writes some of them).
RUN_RECORDS = (SUMMARY_FILE, METRICS_FILE, ATTEMPTS_FILE, PROGRESS_FILE, LOGS_DIR)
EXPORT_DIR = "export"  # the run's export (app/export/card.py): its files are checked too
EVAL_DIR = "eval"  # `trainctl evaluate`'s reports, eval/<name>/ (app/evaluation/report.py)
# A sweep's folder (app/runfolder/sweep_records.py) holds this where a run's holds
# summary.json: told apart here, so that commands given a sweep instead of a run can say so.
SWEEP_FILE = "sweep.json"
TRIALS_DIR = "trials"
MAX_SWEEP_BYTES = 16 * 1024 * 1024
OWN_NAMES = (
    SUMMARY_FILE,
    METRICS_FILE,
    ATTEMPTS_FILE,
    CURVES_FILE,
    RAY_SNAPSHOT,
    PROGRESS_FILE,
    "logs",
    "classes.json",
    EXPORT_DIR,
    EVAL_DIR,
)
OWN_PREFIXES = ("checkpoint_epoch_", "corrupt_", "tensorboard")


def run_names(run_dir: RunPath) -> set[str]:
    """The names a run folder's export and promotion go by: its own, and for a sweep's trial
    (<sweep>/trials/<trial>) the sweep's, under which the sweep exports and promotes it."""
    names = {run_dir.name}
    if run_dir.parent.name == TRIALS_DIR:
        names.add(run_dir.parent.parent.name)
    return names


def holds_run_records(folder: RunPath) -> bool:
    """Whether `folder` holds any record of a run besides an export: a summary, metrics, an
    attempt, a checkpoint, logs. An export/ folder kept on its own has none."""
    try:
        listed = entries(folder)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return any(
        (e.name in OWN_NAMES and e.name != EXPORT_DIR) or e.name.startswith(OWN_PREFIXES)
        for e in listed
    )


def read_jsonl(path: RunPath, required: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The file's records; lines that are not JSON objects with `required` fields are skipped.

    A process killed mid-write leaves half a line, and hands or tools may leave worse; a bad
    line must neither crash the run nor, through the summary, every later rerun. The first
    time a file has bad lines it is said once, with their line numbers.
    """
    try:
        raw = read_record_file(path, MAX_RECORDS_BYTES)
    except FileNotFoundError:
        return []
    except (OSError, ValueError, safe_fs.LinkRefused) as err:
        _warn_once(path, f"cannot read {path} ({_why(err)}); its records are ignored")
        return []
    records, bad = parse_jsonl(raw, required)
    say_skipped(path, bad)
    return records


def say_skipped(path: RunPath, bad: list[int]) -> None:
    """The damaged lines of a records file, said once with their line numbers."""
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
        _warn_once(path, f"skipped {len(bad)} unreadable line(s) in {path} (line {shown})")


def parse_jsonl(
    raw: bytes, required: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]], list[int]]:
    """(the JSON-object lines with `required` fields, the numbers of the lines that are not)."""
    records, bad = [], []
    for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = bounded_json.loads(line, MAX_LINE_CHARS)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not _fits(record, required or {}):
            bad.append(number)
            continue
        records.append(record)
    return records, bad


def read_record_file(path: RunPath, limit: int) -> bytes:
    """A record file's bytes, at most `limit` (ValueError past it); on a volume without
    following a link (LinkRefused)."""
    return read_bounded(path, None, limit)


# A record the storage would not hand over is not damaged: another writer did nothing to it,
# and no run rewrites it. (An access error in a bucket read as "damaged": a red-team pass.)
NOT_READ = "check the storage's credentials and network (TRAIN_STORAGE_PATH)"


def refused_read(err: BaseException) -> bool:
    """The storage refused or did not answer the read (access denied, network), as opposed to
    what was read, or found there, being wrong (a folder, a link, bad text)."""
    return isinstance(err, OSError) and not isinstance(
        err, (IsADirectoryError, NotADirectoryError, safe_fs.LinkRefused)
    )


def _why(err: BaseException) -> str:
    if isinstance(err, safe_fs.LinkRefused):
        return "a symbolic link, not followed"
    if isinstance(err, OSError):
        return err.strerror or (str(err).splitlines() or [type(err).__name__])[0]
    return str(err)


def _fits(record: dict[str, Any], required: dict[str, Callable[[object], bool]]) -> bool:
    return all(holds(record.get(key)) for key, holds in required.items())


_WARNED: set[tuple[str, str]] = set()


def _warn_once(path: RunPath, message: str) -> None:
    if (str(path), message) not in _WARNED:
        _WARNED.add((str(path), message))
        print(f"trainctl: warning: {message}", file=sys.stderr)


def _append(path: RunPath, record: dict[str, Any]) -> None:
    append_line(path, strict_json(record))


def _rewrite(path: RunPath, records: list[dict[str, Any]]) -> None:
    write_atomic(path, "".join(strict_json(r) + "\n" for r in records).encode())


def start_attempt(
    run_dir: RunPath,
    *,
    invocation: str,
    start_epoch: int,
    world_size: int,
    restored_from: str | None,
    resumed_step: int | None = None,
    interruption: dict[str, Any] | None = None,
    resume_note: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Record a worker-group start and forget history past the epoch it resumes from. `data`:
    what the group trains on (classes, input shape, rows), which a rerun's data is held to."""
    metrics_path = run_dir / METRICS_FILE
    kept = [r for r in read_jsonl(metrics_path, REQUIRED) if r["epoch"] < start_epoch]
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
            "resumed_step": resumed_step,
            "interruption": interruption,
            "resume_note": resume_note,
            "data": data,
        },
    )


def last_data(run_dir: RunPath) -> dict[str, Any] | None:
    """The data the run's last worker group trained on, as its start recorded it, or None
    where the last start recorded none that reads as one (an older version's, a damaged one):
    never an earlier start's, which may be of data since replaced. Whole numbers only, an
    input of three: the file is the storage's."""
    records = read_jsonl(run_dir / ATTEMPTS_FILE)
    data = records[-1].get("data") if records else None
    if not isinstance(data, dict):
        return None
    shape = data.get("input")
    counts = [data.get(k) for k in ("classes", "train_rows", "valid_rows")]
    sized = isinstance(shape, list) and len(shape) == 3
    if (
        sized
        and all(whole(v, 1) is not None for v in shape)
        and all(whole(v, 0) is not None for v in counts)
    ):
        return data
    return None


def write_progress(run_dir: RunPath, invocation: str, **fields: Any) -> None:
    """Merge `fields` into progress.json (rank 0 only; atomic, so a reader sees all or none)."""
    record = {**read_progress(run_dir), **fields, "invocation": invocation, "time": time.time()}
    write_json(run_dir / PROGRESS_FILE, record)


def read_progress(run_dir: RunPath) -> dict[str, Any]:
    try:
        text = read_record_file(run_dir / PROGRESS_FILE, MAX_PROGRESS_BYTES).decode("utf-8")
        record = bounded_json.loads(text)
    except (OSError, ValueError, safe_fs.LinkRefused):  # absent or damaged: nothing known
        return {}
    return record if isinstance(record, dict) else {}


def record_epoch(run_dir: RunPath, metrics: dict[str, Any]) -> None:
    _append(run_dir / METRICS_FILE, {**metrics, "time": time.time()})


def epochs(run_dir: RunPath) -> list[dict[str, Any]]:
    """Per-epoch metrics, one record per epoch (the newest wins if an epoch repeats)."""
    by_epoch = {r["epoch"]: r for r in read_jsonl(run_dir / METRICS_FILE, REQUIRED)}
    return [by_epoch[e] for e in sorted(by_epoch)]


def attempts(run_dir: RunPath, invocation: str) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(run_dir / ATTEMPTS_FILE) if r.get("invocation") == invocation]


def failed_on_data(run_dir: RunPath) -> str | None:
    """Where the run's last attempt found its data bad (BAD_DATA_KEY), while its record says it
    failed so; None otherwise (a damaged or foreign value included)."""
    summary = read_summary(run_dir) or {}
    where = summary.get(BAD_DATA_KEY)
    return where if summary.get("status") == "failed" and isinstance(where, str) else None


def read_summary(run_dir: RunPath) -> dict[str, Any] | None:
    """The summary as last written, or None while there is none (or it is unreadable)."""
    path = run_dir / SUMMARY_FILE
    try:
        text = read_record_file(path, MAX_SUMMARY_BYTES).decode("utf-8")
        summary = bounded_json.loads(text)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, safe_fs.LinkRefused) as err:  # UnicodeDecodeError included
        if refused_read(err):
            _warn_once(path, f"{path} cannot be read ({_why(err)}); {NOT_READ}")
        else:
            _warn_once(path, f"{path} is damaged ({_why(err)}); ignored (a run rewrites it)")
        return None
    if not isinstance(summary, dict):
        _warn_once(path, f"{path} is damaged (not a JSON object); ignored (a run rewrites it)")
        return None
    return summary


def recorded_tracking(summary: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The tracker runs a summary records: tracker name -> that run's ids. summary.json has many
    writers, so what is not such a record (a list, a name mapped to text) is left out; an empty
    result means there is no tracker run to continue or close."""
    tracking = summary.get("tracking") if isinstance(summary, Mapping) else None
    if not isinstance(tracking, Mapping):
        return {}
    return {str(name): dict(ids) for name, ids in tracking.items() if isinstance(ids, Mapping)}


def mlflow_run_id(tracking: Mapping[str, Any]) -> str | None:
    """The MLflow run a tracking record (`recorded_tracking`) names, None where it names none."""
    run_id = (tracking.get("mlflow") or {}).get("run_id")
    return run_id if isinstance(run_id, str) and run_id else None


def read_sweep(
    sweep_dir: RunPath, damaged: str | None = "rebuilt from the trials' folders"
) -> dict[str, Any] | None:
    """sweep.json as last written; None when there is none. A damaged one is not fatal: every
    trial's own folder says what it did, and the sweep is rebuilt from them (`damaged`: what
    the caller does instead, said after the problem; None: nothing said)."""
    record, problem, refused = sweep_record(sweep_dir)
    if problem is not None and damaged is not None:
        print(f"trainctl: {problem}; {NOT_READ if refused else damaged}")
    return record


def sweep_record(sweep_dir: RunPath) -> tuple[dict[str, Any] | None, str | None, bool]:
    """(sweep.json, what is wrong with it, whether the store refused the read): (None, None,
    False) where there is none."""
    path = sweep_dir / SWEEP_FILE
    try:
        record = bounded_json.loads(read_record_file(path, MAX_SWEEP_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return None, None, False
    except (OSError, ValueError) as err:
        if refused_read(err):
            return None, f"{path} cannot be read ({_why(err)})", True
        return None, f"{path} is damaged ({type(err).__name__})", False
    if not isinstance(record, dict):
        return None, f"{path} is damaged (not a JSON object)", False
    return record, None, False


def write_summary(run_dir: RunPath, summary: dict[str, Any]) -> RunPath:
    """Write atomically: readers (and `trainctl submit --wait`) never see half a file."""
    path = run_dir / SUMMARY_FILE
    write_json(path, summary)
    return path


# Kept in a summary that cannot be written whole: what a rerun, `status` and `submit --wait`
# need, and the champion verdict already acted on (the pointer may have moved).
KEPT_WHEN_SHORT = ("run_name", "run_dir", "target_epochs", "epochs_completed", "tracking",
                   "promoted", "champion_version")  # fmt: skip


class SummaryNotWritten(RunFailed):
    """The store refused summary.json (a full disk, a quota): exit 1, naming the cause."""


def write_final_summary(run_dir: RunPath, summary: dict[str, Any]) -> RunPath:
    """Write the summary of a run's end, or fail clearly (SummaryNotWritten) without leaving
    a summary that says `running` or a half-written one.

    A write that fails leaves no partial file (write_atomic). Then a short summary (status
    `failed`, the cause, what a rerun needs) is tried beside the old one, and then in its
    place: removing the old summary frees at least the room the short one takes, so on a full
    disk it is what remains; only a store that takes no write at all is left without one."""
    path = run_dir / SUMMARY_FILE
    try:
        write_json(path, summary)
        return path
    except OSError as err:
        cause = f"{path} could not be written ({_why(err)})"
    status = summary.get("status")
    short = {key: summary[key] for key in KEPT_WHEN_SHORT if key in summary}
    promotion = summary.get("promotion")
    if isinstance(promotion, dict):  # its line is what `submit --wait` and `status` show
        short["promotion"] = {k: promotion[k] for k in ("line", "version") if k in promotion}
    earlier = f"{summary['error']}; " if summary.get("error") else ""
    short.update(status="failed" if status in (None, "running", "succeeded") else status,
                 error=f"{earlier}{cause}", summary_incomplete=True)  # fmt: skip
    data = json.dumps(short, separators=(",", ":")).encode()
    for remove_first in (False, True):
        try:
            if remove_first:
                path.unlink(missing_ok=True)  # unlink removes a link, not its target
            write_atomic(path, data)
            break
        except OSError:
            continue
    raise SummaryNotWritten(
        [cause, f"summary.json holds a short record of the run, or none: free space on {run_dir} "
         "and rerun the same run (its checkpoints are intact)"]
    )  # fmt: skip


def ray_committed(run_dir: RunPath) -> set[str]:
    """The checkpoint folders Ray has committed in this run (its snapshot's
    `checkpoint_results[].checkpoint_dir_name`); empty when it has none or it is unreadable.

    A checkpoint trainctl sees complete on storage may not be committed yet (uploads are
    ASYNC); after a worker failure Ray restarts from its newest *committed* one, so in-run
    pruning must treat that one as the newest and leave everything after it alone."""
    try:
        text = read_record_file(run_dir / RAY_SNAPSHOT, MAX_RECORDS_BYTES).decode("utf-8")
        snapshot = bounded_json.loads(text)
    except (OSError, ValueError, safe_fs.LinkRefused):
        return set()
    results = snapshot.get("checkpoint_results") if isinstance(snapshot, dict) else None
    if not isinstance(results, list):
        return set()
    names = (r.get("checkpoint_dir_name") for r in results if isinstance(r, dict))
    return {name for name in names if isinstance(name, str)}


def forget_ray_files(run_dir: RunPath) -> None:
    """Ray Train's own files in the run folder removed before it starts: its stale snapshot,
    and its storage check's marker, which Ray opens for writing through any link a writer of
    the storage planted there (a red-team pass: a file the user can write, truncated). Unlink
    removes a link, not its target."""
    for name in (RAY_SNAPSHOT, RAY_STORAGE_MARKER):
        (run_dir / name).unlink(missing_ok=True)


def refuse_the_other_kind(run_dir: RunPath, *, sweep: bool, timeout_s: float) -> None:
    """A run's folder is not a sweep's, nor the other way round (`sweep`: a sweep is to use
    `run_dir`). A sweep run into a run's folder hid the run from `status` and judged its trials
    against it; a run trained into a sweep's folder mixed into its records. ConfigError (exit
    2) before anything is written. A bucket answers within `timeout_s` (TRAIN_STORAGE_TIMEOUT_S)
    or is refused as silent (StoreUnavailable, naming it)."""

    def there(name: str) -> bool:
        return present_within(run_dir / name, "TRAIN_STORAGE_PATH", timeout_s)

    try:
        run = there(ATTEMPTS_FILE) or there(METRICS_FILE)
        sweep_there = there(SWEEP_FILE)
    except (OSError, ValueError):  # a store refused or misconfigured: the preflight names it
        return
    if sweep and run:
        raise ConfigError(
            f"{run_dir}: a training run's folder (it holds {ATTEMPTS_FILE}), not a sweep's: "
            "give the sweep another TRAIN_RUN_NAME"
        )
    if not sweep and sweep_there:
        raise ConfigError(
            f"{run_dir}: a sweep's folder (it holds {SWEEP_FILE}), not a run's: give the run "
            "another TRAIN_RUN_NAME, or continue the sweep with `trainctl tune`"
        )


def refuse_links(run_dir: RunPath) -> None:
    """Raise LinkRefused (exit 2) naming every link among the run folder itself, its own
    names, its logs' attempt folders and their files, and its export's files. The driver calls
    it in preflight, before Ray starts and before it reads or writes anything there (a link
    found after training would cost the run its export or summary); a bucket has no links."""
    not_a_link(run_dir)  # runs/<name> planted by whoever can write
    found = [entry for entry in links(run_dir, run_dir) if _own(entry.name)]
    named = {entry.name for entry in found}
    if "logs" not in named:  # its attempt folders, and the logs in them
        found += links(run_dir / "logs", run_dir, depth=2)
    if EXPORT_DIR not in named:
        found += links(run_dir / EXPORT_DIR, run_dir)
    if found:
        raise safe_fs.LinkRefused([(entry.path, entry.link or "?") for entry in found])


def _own(name: str) -> bool:
    return name in OWN_NAMES or name.startswith(OWN_PREFIXES) or name.startswith(".summary")


def record_invalid(run_dir: RunPath, err: ConfigError, *, own_folder: bool = False) -> None:
    """Where the run folder already exists, leave the reason there; never create it for this,
    unless the caller owns the folder (`own_folder`: a sweep's trial, whose folder is the
    sweep's, and where the sweep reads each trial's status).

    A folder without a run's record (or with an invalid start's) is marked invalid. A run that
    already has a record keeps it, status and error included: a rerun refused before it started
    changed nothing, and a succeeded run marked invalid would lose its standing with everything
    that reads it (`status`, `evaluate`, a sweep's results). The refusal is noted beside it
    (REFUSED_KEY), for `status` to show, until a start gets through."""
    if isinstance(err, StoreUnavailable) and err.variable == "TRAIN_STORAGE_PATH":
        return  # the run folder's store did not answer its probe: do not wait on it again
    if isinstance(err, safe_fs.LinkRefused):
        return  # planted links: leave the folder as found, for a person to look at

    try:
        if own_folder:
            run_dir.mkdir(parents=True, exist_ok=True)  # a bucket's prefix: its first object
        elif not run_dir.is_dir():
            return
    except OSError:  # an unreachable store is itself the error being reported
        return
    summary = read_summary(run_dir) or {"run_name": run_dir.name}
    error = "; ".join(err.problems)
    if summary.get("status") in (None, "invalid"):
        summary.update(status="invalid", error=error)
    else:
        summary[REFUSED_KEY] = {"error": error, "time": time.time()}
    # An unwritable run folder is itself the error being reported.
    with contextlib.suppress(OSError):
        write_summary(run_dir, summary)
