"""`trainctl status RUN_DIR` and `trainctl status --storage DIR`: what run folders say, on a
volume or in a bucket, without Kubernetes.

Per run: its status (running, succeeded, failed, stopped, invalid; `running` with how long it
has been silent when nothing moved for STALE_S, which is what a killed driver leaves), epochs
done of those asked, the last epoch's figure and the best checkpoint's (each named), the
promotion verdict, the interruptions, and the accelerator-hours (app/runfolder/usage.py). Final runs
are read from summary.json; a running one's summary is still an earlier driver's, so its
epochs come from metrics.jsonl, its interruptions from attempts.jsonl and its signs of life
from progress.json.

Run folders are written by many hands. Every file is read as app/runfolder/folder.py reads it:
below the run folder without following a link, regular files only (a FIFO is refused, never
waited on), bounded in size and nesting; every string shown is redacted, escaped and cut
(app/formatting.py `one_line`). A file that cannot be read is named, and the command ends
with exit 2 after showing what could be read. A listing reads at most `limit` runs, newest
first where the store says which, and stops at LIST_DEADLINE_S whatever the store does.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from app.errors import ConfigError
from app.export.card import CARD_FILE
from app.formatting import format_duration, is_finite, one_line, one_path, whole
from app.redact import redact
from app.run import first_met
from app.runfolder import folder as run_folder
from app.runfolder import interruptions, sweep_records, usage
from app.runfolder.epoch_record import CORE_METRICS, REQUIRED
from app.runfolder.summary import STATUS_WORDS, best_epoch
from app.settings.run import RESERVED_RUN_NAMES
from app.settings.tracking import MODEL_NAME_PATTERN
from app.storage import bounded_json, safe_fs
from app.storage.deadline import DeadlineExceeded, call_with_deadline
from app.storage.entries import Kind, entries, followed, kind_within, not_a_link
from app.storage.location import RunPath, ensure_reachable, within

STALE_S = 15 * 60  # progress.json is written every few seconds while rank 0 trains
LIST_DEADLINE_S = 30.0  # a whole listing, however many runs and however slow the store
MAX_ENTRIES = 1_000_000  # names looked at in a storage folder
NOT_RUNS = RESERVED_RUN_NAMES  # the champion pointers live beside the run folders
FINAL = ("succeeded", "failed", "interrupted", "invalid", "stopped")
MAX_NAME = 120  # characters of a run name, as shown
MAX_CHAMPIONS = 100  # pointers listed under a storage folder
PATH_CHARS = 300


class RunFolderUnreadable(ConfigError):
    label = "some run-folder files could not be read (the rest is shown above)"


@dataclass
class RunStatus:
    """What one run folder says, every field checked; None where it does not say."""

    run_dir: str
    name: str
    status: str  # a STATUS_WORDS value, or `unknown` (no readable summary.json)
    silent_s: float | None = None  # a running run's time since its last sign of life
    epochs_completed: int | None = None
    epochs_target: int | None = None
    metric: str = "val_accuracy"  # TRAIN_CHECKPOINT_METRIC: what `best` is ranked by
    last_epoch: dict[str, Any] | None = None  # {epoch, <metric>, val_accuracy}
    best: dict[str, Any] | None = None  # {epoch, <metric>, val_accuracy}
    promotion: dict[str, Any] | None = None  # {promoted, version, line, model}
    champion_now: str | None = None  # where this run's promotion was since replaced: by what
    # The version of a champion pointer (of the storage listed) that names this run: a rerun
    # that was not promoted still has its earlier export serving as the champion.
    champion_of: int | None = None
    interruptions: dict[str, Any] = field(default_factory=dict)
    accelerator_hours: dict[str, Any] | None = None
    stopped_early: dict[str, Any] | None = None  # {reason, epoch, rule}
    diverged_since: int | None = None  # the epoch from which train_loss was not finite
    time_to_threshold: list[dict[str, Any]] = field(default_factory=list)  # app/run/first_met
    error: str | None = None  # a failed or invalid run's reason
    refused: str | None = None  # why the last start was refused, beside an earlier run's record
    problems: list[str] = field(default_factory=list)  # files that could not be read

    def record(self) -> dict[str, Any]:
        return asdict(self)

    def status_text(self) -> str:
        if self.silent_s is not None and self.silent_s >= STALE_S:
            return f"{self.status} (silent {format_duration(self.silent_s)})"
        return self.status

    def lines(self) -> list[str]:
        """The run in a few labelled lines."""
        out = [f"run {self.name}  ({self.run_dir})", f"  status:          {self.status_text()}"]
        if self.silent_s is not None and self.silent_s >= STALE_S:
            out.append(
                f"                   no progress for {format_duration(self.silent_s)}: a driver "
                "that was killed leaves its run like this; rerun it to resume"
            )
        if self.error:
            out.append(f"  error:           {self.error}")
        if self.refused:
            out.append(f"  last start:      refused, the run's record unchanged: {self.refused}")
        out.append(f"  epochs:          {_epochs_text(self)}")
        if self.last_epoch:
            out.append(f"  last epoch:      {_figures(self.last_epoch, self.metric)}")
        if self.best:
            ranked = "" if self.metric == "val_accuracy" else f", ranked by {self.metric}"
            out.append(f"  best checkpoint: {_figures(self.best, self.metric)}{ranked}")
        if self.stopped_early:
            out.append(f"  stopped early:   {_stop_text(self.stopped_early)}")
        if self.diverged_since is not None:
            out.append(
                f"  diverged:        train_loss not a finite number from epoch "
                f"{self.diverged_since} on (a lower TRAIN_LR usually keeps it finite)"
            )
        kind = self.accelerator_hours["kind"] if self.accelerator_hours else ""
        for index, entry in enumerate(self.time_to_threshold):
            label = "  to threshold:    " if index == 0 else " " * 19
            out.append(label + first_met.in_words(entry, kind))
        if self.promotion:
            out.append(f"  promotion:       {self.promotion['line'] or _promotion_word(self)}")
        elif self.champion_of is not None:  # a later attempt, stopped or running, not judged
            out.append(f"  promotion:       {_promotion_word(self)}, from an earlier attempt")
        if self.champion_now:
            out.append(f"  champion now:    {self.champion_now}")
        counts = self.interruptions
        out.append(f"  interruptions:   {_interruptions_text(counts, self.status)}")
        out += [f"                   {line}" for line in counts.get("lines", [])]
        if self.accelerator_hours:
            out.append(f"  usage:           {usage.in_words(self.accelerator_hours)}")
        return out

    def row(self) -> tuple[str, ...]:
        best = _figures(self.best, self.metric, short=True) if self.best else "-"
        last = _figures(self.last_epoch, self.metric, short=True) if self.last_epoch else "-"
        hours = self.accelerator_hours
        return (
            self.name,
            self._status_cell(),
            _epochs_text(self),
            best,
            last,
            _promotion_word(self),
            _interruptions_short(self.interruptions),
            f"{usage.hours_text(hours['hours'])} {hours['kind']}" if hours else "-",
            first_met.short(self.time_to_threshold),
        )

    def _status_cell(self) -> str:
        stop = self.stopped_early
        return self.status_text() + (f" (early @{stop['epoch']})" if stop else "")


HEADER = (
    "RUN", "STATUS", "EPOCHS", "BEST", "LAST", "PROMOTION", "INTERRUPTIONS", "ACCEL-H",
    "FIRST-MET",
)  # fmt: skip


# --- reading one run folder -----------------------------------------------------------------
def is_run_folder(path: RunPath) -> bool:
    """Whether `path` holds any of a run's records (a link counts: it is then refused)."""
    return _folder_kind(path) == "run"


def _folder_kind(path: RunPath) -> str | None:
    """ "sweep" where `path` holds a sweep's record, "run" where it holds any of a run's
    records (a link counts: it is then refused), else None: from one listing request."""
    try:
        names = {entry.name for entry in entries(path)}  # one listing request in a bucket
    except NotADirectoryError:
        return None
    except PermissionError:
        return "run"  # there, but not readable: the read names why
    # Before the run records: a sweep's folder holds logs/ too (its own driver's).
    if run_folder.SWEEP_FILE in names:
        return "sweep"
    return "run" if names & set(run_folder.RUN_RECORDS) else None


def read_run(run_dir: RunPath, now: float | None = None) -> RunStatus:
    """The run folder's status; its unreadable files are listed in `problems`."""
    now = time.time() if now is None else now
    problems: list[str] = []
    summary = _json_file(run_dir / run_folder.SUMMARY_FILE, run_folder.MAX_SUMMARY_BYTES, problems)
    raw = summary.get("status") if summary else None
    said = raw if isinstance(raw, str) else None  # a list or an object is damage too
    final = said in FINAL
    if summary is not None and said not in STATUS_WORDS:
        problems.append(
            f"{_path(run_dir / run_folder.SUMMARY_FILE)}: damaged (status "
            f"{_shown(repr(raw), 40)} is none of {', '.join(STATUS_WORDS)})"
        )
    result = RunStatus(
        run_dir=_path(run_dir),
        name=_shown(run_dir.name, MAX_NAME),  # the run's name: its folder's
        status=STATUS_WORDS.get(said, "unknown"),
        problems=problems,
    )
    summary = summary or {}
    result.metric = _metric(summary)
    result.epochs_target = _count(summary.get("epochs_target"))
    result.epochs_completed = _count(summary.get("epochs_completed"), zero=True)
    if final and isinstance(summary.get("error"), str) and said != "succeeded":
        result.error = _shown(summary["error"], 300)
    refused = summary.get(run_folder.REFUSED_KEY)
    if isinstance(refused, dict) and isinstance(refused.get("error"), str):
        result.refused = _shown(refused["error"], 300)
    epochs: list[dict[str, Any]] = []
    attempts: list[Any] = []
    progress: dict[str, Any] = {}
    if not final:  # summary.json is an earlier driver's (or none): the live records say more
        epochs = _epochs(run_dir, problems)
        attempts = _jsonl(run_dir / run_folder.ATTEMPTS_FILE, problems)
        progress = (
            _json_file(run_dir / run_folder.PROGRESS_FILE, run_folder.MAX_PROGRESS_BYTES, problems)
            or {}
        )
    result.last_epoch, result.best = _last_and_best(summary, epochs, final, result.metric)
    if epochs and result.last_epoch:
        done = result.last_epoch["epoch"]
        result.epochs_completed = max(result.epochs_completed or 0, done)
    if not final and result.status == "running":
        result.silent_s = _silent_s(progress, epochs, attempts, now)
    result.promotion = _promotion(summary) if final else None
    if final:
        result.stopped_early = _stopped(summary.get("stopped_early"))
        result.diverged_since = _count(summary.get("diverged_since_epoch"))
        result.time_to_threshold = [
            {**entry, "threshold": _shown(entry["threshold"], 120)}
            for entry in first_met.checked(summary.get("time_to_threshold"))
        ]
    result.interruptions = _interruptions(summary, attempts, final)
    # Counted on up to now only while a driver runs: a damaged summary's status (unknown) is
    # no reason to think one does, and its figure grew with the clock (a red-team pass).
    live = result.status == "running"
    result.accelerator_hours = _hours(summary, attempts, progress, final or not live, now)
    return result


def _json_file(path: RunPath, limit: int, problems: list[str]) -> dict[str, Any] | None:
    try:
        raw = run_folder.read_record_file(path, limit)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, safe_fs.LinkRefused) as err:
        problems.append(_unreadable(path, err))
        return None
    try:
        value = bounded_json.loads(raw.decode("utf-8"))
    except ValueError as err:  # not UTF-8, not JSON, nested too deep
        problems.append(f"{_path(path)}: damaged ({_shown(str(err), 120)})")
        return None
    if not isinstance(value, dict):
        problems.append(f"{_path(path)}: damaged (not a JSON object)")
        return None
    return value


def _jsonl(path: RunPath, problems: list[str], required: dict[str, Any] | None = None) -> list[Any]:
    """The file's records; damaged lines are skipped and said (a killed writer leaves half a
    line; hands may leave figures no run has), but not the line a live writer is appending."""
    try:
        raw = run_folder.read_record_file(path, run_folder.MAX_RECORDS_BYTES)
    except FileNotFoundError:
        return []
    except (OSError, ValueError, safe_fs.LinkRefused) as err:
        problems.append(_unreadable(path, err))
        return []
    records, bad = run_folder.parse_jsonl(raw, required)
    being_written = not raw.endswith(b"\n") and bad and bad[-1] == len(raw.splitlines())
    run_folder.say_skipped(path, bad[:-1] if being_written else bad)
    return records


def _epochs(run_dir: RunPath, problems: list[str]) -> list[dict[str, Any]]:
    records = _jsonl(run_dir / run_folder.METRICS_FILE, problems, REQUIRED)
    by_epoch = {r["epoch"]: r for r in records if _count(r["epoch"])}
    return [by_epoch[e] for e in sorted(by_epoch)]


def _unreadable(path: RunPath, err: BaseException) -> str:
    if isinstance(err, safe_fs.LinkRefused):
        why = "a symbolic link, not followed"
    elif isinstance(err, OSError):
        why = err.strerror or type(err).__name__
    else:
        why = str(err)
    return f"{_path(path)}: cannot be read ({_shown(why, 160)})"


def _metric(summary: Mapping[str, Any]) -> str:
    best = summary.get("best")
    named = best.get("metric") if isinstance(best, Mapping) else None
    if named not in CORE_METRICS:
        settings = summary.get("settings")
        named = settings.get("checkpoint_metric") if isinstance(settings, Mapping) else None
    return named if named in CORE_METRICS else "val_accuracy"


def _figures_of(record: Mapping[str, Any], metric: str) -> dict[str, Any] | None:
    epoch = _count(record.get("epoch"), zero=True)
    found = {
        name: float(record[name])
        for name in dict.fromkeys((metric, "val_accuracy"))
        if is_finite(record.get(name))
    }
    return {"epoch": epoch, **found} if found else None


def _last_and_best(
    summary: Mapping[str, Any], epochs: list[dict[str, Any]], final: bool, metric: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    if epochs:
        last = _figures_of(epochs[-1], metric)
        best_record = best_epoch(epochs, metric)
        return last, (_figures_of(best_record, metric) if best_record else None)
    metrics = summary.get("metrics")
    last = None
    if isinstance(metrics, Mapping):
        last = _figures_of({**metrics, "epoch": summary.get("epochs_completed")}, metric)
    best = summary.get("best")
    return last, (_figures_of(best, metric) if isinstance(best, Mapping) else None)


def _silent_s(
    progress: Mapping[str, Any], epochs: list[dict[str, Any]], attempts: list[Any], now: float
) -> float | None:
    """Seconds since the newest sign of life (progress, an epoch, a worker-group start)."""
    times = [progress.get("time")] + [r.get("time") for r in epochs[-1:]]
    times += [a.get("time") for a in attempts[-1:] if isinstance(a, Mapping)]
    known = [float(t) for t in times if is_finite(t) and 0 < t <= now + 3600]
    return round(max(0.0, now - max(known)), 1) if known else None


def _promotion(summary: Mapping[str, Any]) -> dict[str, Any] | None:
    promotion = summary.get("promotion")
    if not isinstance(promotion, Mapping):
        return None
    line = promotion.get("line")
    promoted = summary.get("promoted")
    pointer = promotion.get("pointer")
    # The model's name, from the pointer file's name; only a name TRAIN_MODEL_NAME allows.
    model = pointer.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".json") if isinstance(
        pointer, str) else None  # fmt: skip
    return {
        "promoted": promoted if isinstance(promoted, bool) else None,
        "version": _count(summary.get("champion_version")),
        "line": _shown(line, 300) if isinstance(line, str) else None,
        "model": model if model and MODEL_NAME_PATTERN.match(model) else None,
    }


def _champion_now(run: RunStatus, run_dir: RunPath) -> str | None:
    """Where the run's promotion has since been replaced, the champion its storage's pointer
    names now (`v2 (run perm)`): its own line still says `promoted v1`, and nothing beside it
    said v1 was no longer what a server following the pointer loads (a red-team pass). Read
    from the run's own storage (its parent folder; a sweep trial's is the sweep's), never from
    a path its summary names."""
    from app.promotion.champion import NoChampion, PointerDamaged, champion_export

    promotion = run.promotion or {}
    if not (promotion.get("promoted") and promotion.get("version") and promotion.get("model")):
        return None
    storage = _storage_of(run_dir)
    try:
        _, pointer = champion_export(storage, promotion["model"], None)  # agrees with its card
    except NoChampion:
        return f"no champion {promotion['model']} under {_path(storage)}"
    except (PointerDamaged, OSError, ValueError, ConfigError) as err:
        return f"unknown: {_shown(str(err), 200)}"
    version, by = _count(pointer.get("version")), _shown(str(pointer.get("run_name")), MAX_NAME)
    if version == promotion["version"] and by in {
        _shown(name, MAX_NAME) for name in run_folder.run_names(run_dir)
    }:
        return None
    return f"{promotion['model']} v{version} (run {by}): v{promotion['version']} was replaced"


def _storage_of(run_dir: RunPath) -> RunPath:
    """Where the run's champion pointers are: its parent folder; a sweep trial's, the sweep's
    (a sweep promotes its best trial in its own storage)."""
    storage = run_dir.parent
    if storage.name == run_folder.TRIALS_DIR:
        storage = storage.parent.parent
    return storage


def _stopped(record: Any) -> dict[str, Any] | None:
    """summary.json's `stopped_early`, where it is shaped as a driver writes it."""
    if not isinstance(record, Mapping) or record.get("reason") not in ("stop_at", "patience"):
        return None
    epoch, rule = _count(record.get("epoch")), record.get("rule")
    if epoch is None or not isinstance(rule, str):
        return None
    return {"reason": record["reason"], "epoch": epoch, "rule": _shown(rule, 200)}


def _stop_text(stop: Mapping[str, Any]) -> str:
    if stop["reason"] == "stop_at":
        return f"at epoch {stop['epoch']}: {stop['rule']} met"
    return f"at epoch {stop['epoch']}: no improvement for {stop['rule']}"


def _interruptions(summary: Mapping[str, Any], attempts: list[Any], final: bool) -> dict[str, Any]:
    records, unreadable = interruptions.recorded(summary, attempts, finished=final)
    causes = [r.get("cause") for r in records]
    lost = [r.get("steps_lost") for r in records]
    return {
        "count": len(records),
        "preemptions": causes.count("preemption"),
        "failures": causes.count("failure"),
        "stopped": causes.count("stopped"),
        "steps_lost": sum(n for n in lost if _count(n, zero=True) is not None),
        "unreadable": unreadable,
        "lines": interruptions.lines_of(summary, attempts, finished=final),
    }


def _hours(
    summary: Mapping[str, Any],
    attempts: list[Any],
    progress: Mapping[str, Any],
    final: bool,
    now: float,
) -> dict[str, Any] | None:
    """A finished run's record; a running one's, with its current driver's worker groups up
    to now (the running summary carries the earlier drivers')."""
    recorded = usage.checked(summary.get("accelerator_hours"))
    if final:
        return recorded
    settings = summary.get("settings")
    invocation = progress.get("invocation")
    if not isinstance(settings, Mapping) or not isinstance(invocation, str):
        return recorded
    use_gpu, cpus = settings.get("use_gpu"), settings.get("cpus_per_worker")
    if not isinstance(use_gpu, bool) or not is_finite(cpus) or not 0 < cpus <= 1024:
        return recorded
    mine = [a for a in attempts if isinstance(a, Mapping) and a.get("invocation") == invocation]
    return usage.accelerator_hours(
        recorded, mine, end=now, use_gpu=use_gpu, cpus_per_worker=float(cpus)
    )


# --- a folder of run folders ------------------------------------------------------------------
@dataclass
class Listing:
    root: str
    runs: list[RunStatus]
    folders: int  # candidate folders found
    not_runs: int  # of those read, how many held no run records (sweeps apart)
    not_read: int  # folders left unread: past `limit`, or past the deadline
    timed_out: bool
    problems: list[str]
    deadline_s: float = LIST_DEADLINE_S
    sweeps: list[dict[str, Any]] = field(default_factory=list)  # sweep_records.brief each
    champions: list[dict[str, Any]] = field(default_factory=list)  # _champions

    def record(self) -> dict[str, Any]:
        return {
            "storage": self.root,
            "runs": [run.record() for run in self.runs],
            "champions": self.champions,
            "folders": self.folders,
            "not_run_folders": self.not_runs,
            "sweeps": [sweep["name"] for sweep in self.sweeps],
            "sweep_states": self.sweeps,
            "not_read": self.not_read,
            "timed_out": self.timed_out,
            "problems": self.problems,
        }


def list_runs(
    root: RunPath,
    *,
    limit: int,
    deadline_s: float = LIST_DEADLINE_S,
    now: float | None = None,
) -> Listing:
    """The run folders directly under `root`, newest first (by name in a bucket), at most
    `limit` of them read, all within `deadline_s`."""
    end = time.monotonic() + deadline_s
    problems: list[str] = []
    root = within(root, deadline_s)  # every request ends within the listing's time
    try:
        names = call_with_deadline(lambda: _candidates(root, problems), deadline_s, str(root))
    except DeadlineExceeded:
        problems.append(f"{_path(root)}: listing took over {deadline_s:g} s")
        return Listing(_path(root), [], 0, 0, 0, True, problems, deadline_s)
    runs: list[RunStatus] = []
    sweeps: list[dict[str, Any]] = []
    read = not_runs = 0
    timed_out = False
    for name in names:
        if len(runs) >= limit:
            break
        left = end - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        run_dir = root / name
        try:
            found = call_with_deadline(lambda d=run_dir: _read_if_run(d, now), left, str(run_dir))
        except DeadlineExceeded:
            timed_out = True
            break
        except (OSError, ValueError) as err:
            problems.append(_unreadable(run_dir, err))
            found = None
        read += 1
        if isinstance(found, RunStatus):
            runs.append(found)
            problems += found.problems
        elif isinstance(found, dict):
            sweeps.append(sweep_records.brief(name, found))
        else:
            not_runs += 1
    unread = len(names) - read
    left = end - time.monotonic()
    champions: list[dict[str, Any]] = []
    if left > 0 and not timed_out:
        try:
            champions = call_with_deadline(lambda: _champions(root), left, str(root))
        except DeadlineExceeded:
            timed_out = True
    for run in runs:  # the champion each pointer names, beside that run's own last verdict
        run.champion_of = _champion_of(run, champions)
    return Listing(
        _path(root), runs, len(names), not_runs, unread, timed_out, problems, deadline_s, sweeps,
        champions,
    )  # fmt: skip


def _champion_of(run: RunStatus, champions: list[dict[str, Any]]) -> int | None:
    """The version of a champion pointer naming this run: of the model its last verdict names,
    or of any model where its last driver gave none (stopped, or still running: a rerun of a
    champion's run showed `-`, as if no export of it served, a red-team pass)."""
    model = (run.promotion or {}).get("model")
    versions = [
        c["version"] for c in champions
        if c.get("run") == run.name and model in (None, c.get("model")) and "version" in c
    ]  # fmt: skip
    return max(versions) if versions else None


def _champions(root: RunPath) -> list[dict[str, Any]]:
    """Each champion under `root` as its pointer names it (model, version, run), or why its
    pointer cannot be read: `promoted v1` in a run's row stays true after a later run became
    v2, and nothing said which run the pointer now names (a red-team pass). Shown as the
    pointer says, once it agrees with the model card it names (as `predict champion:` checks
    it): a pointer edited to name another run was shown as it said."""
    from app.promotion.champion import PointerDamaged, champion_export, champion_names

    found: list[dict[str, Any]] = []
    try:
        names = champion_names(root)
    except (OSError, ValueError, ConfigError):
        return found
    for name in names[:MAX_CHAMPIONS]:
        try:
            _, pointer = champion_export(root, name, None)
        except (PointerDamaged, OSError, ValueError, ConfigError) as err:
            found.append({"model": one_line(name, MAX_NAME), "problem": one_line(str(err), 300)})
            continue
        found.append(
            {
                "model": one_line(name, MAX_NAME),
                "version": pointer.get("version"),
                "run": one_line(str(pointer.get("run_name", "?")), MAX_NAME),
            }
        )
    return found


def _read_if_run(run_dir: RunPath, now: float | None) -> RunStatus | dict[str, Any] | None:
    """The run's status; a sweep's folder's sweep.json; None for any other folder."""
    kind = _folder_kind(run_dir)
    if kind == "sweep":
        unread = {"status": f"{run_folder.SWEEP_FILE} unreadable"}
        return run_folder.read_sweep(run_dir, damaged=None) or unread
    return read_run(run_dir, now) if kind == "run" else None


def _candidates(root: RunPath, problems: list[str]) -> list[str]:
    """Names of the folders under `root` that may be run folders: newest first on a volume
    (a folder's time changes as its records are replaced), by name in a bucket. A link is
    named in `problems` and not followed."""
    listed = entries(root)
    if len(listed) > MAX_ENTRIES:
        problems.append(
            f"{_path(root)}: over {MAX_ENTRIES:,} entries; only the first were looked at"
        )
        listed = listed[:MAX_ENTRIES]
    found = []
    for entry in listed:
        if not _candidate(entry.name):
            continue
        if entry.kind is Kind.LINK:
            problems.append(
                f"{_path(entry.path)}: is a symbolic link; trainctl never reads a run folder "
                "through a link"
            )
        elif entry.kind is Kind.DIR:
            found.append(entry)
    found.sort(key=lambda entry: (-(entry.mtime or 0.0), entry.name))  # a bucket: by name
    return [entry.name for entry in found]


def _candidate(name: str) -> bool:
    return not name.startswith(".") and name not in NOT_RUNS


# --- the command -----------------------------------------------------------------------------
def show_status(
    target: str | None,
    storage: str | None,
    echo: Callable[[str], None],
    *,
    as_json: bool = False,
    limit: int,
) -> None:
    """`trainctl status RUN_DIR`, `status NAME --storage DIR` or `status --storage DIR`: one
    run folder in labelled lines, or a folder of them as a table (exit 2 after showing what
    could be read, when a file could not be)."""
    from app.settings.env import settings_environ, storage_access, storage_location

    endpoint, timeout = storage_access(settings_environ())
    if target is None:
        assert storage is not None
        where = storage_location(storage, f"--storage {redact(storage)}", endpoint)
        # The root named may be a link (a mounted volume), as TRAIN_STORAGE_PATH may be.
        path = _folder(followed(where), "--storage", timeout)
    elif storage is not None and "/" not in target and "://" not in target:
        if target in ("", ".", ".."):
            raise ConfigError(f"run name {target!r}: give a run folder's name under --storage")
        where = storage_location(storage, f"--storage {redact(storage)}", endpoint)
        path = _folder(where / target, "--storage", timeout)
    else:
        path = storage_location(target, f"RUN_DIR {redact(target)!r}", endpoint)
        path = _folder(path, "RUN_DIR", timeout)
    try:
        one = call_with_deadline(lambda: _read_if_run(path, None), LIST_DEADLINE_S, str(path))
    except DeadlineExceeded:
        raise ConfigError(f"{_path(path)}: no answer within {LIST_DEADLINE_S:g} s") from None
    if isinstance(one, RunStatus):
        with contextlib.suppress(DeadlineExceeded):  # the run is shown, with or without it
            one.champion_now = call_with_deadline(
                lambda: _champion_now(one, path), LIST_DEADLINE_S, str(path)
            )
        if not one.promotion:  # an earlier attempt's export may still be the champion
            with contextlib.suppress(DeadlineExceeded):
                champions = call_with_deadline(
                    lambda: _champions(_storage_of(path)), LIST_DEADLINE_S, str(path)
                )
                one.champion_of = _champion_of(one, champions)
        show_run(one, echo, as_json)
    else:  # a folder of run folders (the storage root), listed (a sweep's: app/sweep/status)
        _refuse_a_part_of_the_storage(path, timeout)
        show_listing(list_runs(path, limit=limit), echo, as_json, limit)


def _refuse_a_part_of_the_storage(path: RunPath, timeout: float) -> None:
    """A run's export/ or the champions' folder, given where a run folder or a folder of them
    goes: `No run folders in ...` with exit 0 read as nothing amiss (a red-team pass)."""
    if path.name == run_folder.EXPORT_DIR and kind_within(path / CARD_FILE, "RUN_DIR", timeout):
        raise ConfigError(
            f"{_path(path)}: a run's export, not a run folder: give the run's folder, "
            f"{_path(path.parent)}"
        )
    if path.name in NOT_RUNS:
        raise ConfigError(
            f"{_path(path)}: the champions' pointers, not run folders: `trainctl status "
            f"--storage {_path(path.parent)}` lists the runs with the champions"
        )


def _folder(path: RunPath, variable: str, timeout: float) -> RunPath:
    """`path` when it is a folder (a bucket prefix with objects); exit 2 otherwise, and for
    a link (a run folder planted as a link is never read through)."""
    ensure_reachable(path, variable, timeout)
    try:
        found = kind_within(path, variable, timeout)
    except (OSError, ValueError) as err:  # ValueError: a NUL in the name
        why = getattr(err, "strerror", None) or err
        raise ConfigError(f"{_path(path)}: {_shown(str(why), 200)}") from None
    if found is None:
        raise ConfigError(f"{_path(path)}: no such folder (no run folder, no run folders)")
    if found is not Kind.DIR:
        not_a_link(path)
        raise ConfigError(f"{_path(path)}: not a folder; give a run folder or a folder of them")
    return path


# --- showing ----------------------------------------------------------------------------------
def show_run(run: RunStatus, echo: Callable[[str], None], as_json: bool) -> None:
    if as_json:
        echo(json.dumps(run.record(), indent=2))
    else:
        for line in run.lines():
            echo(line)
    if run.problems:
        raise RunFolderUnreadable(run.problems)


def show_listing(listing: Listing, echo: Callable[[str], None], as_json: bool, limit: int) -> None:
    if as_json:
        echo(json.dumps(listing.record(), indent=2))
    else:
        if listing.runs:
            echo(table(listing.runs))
        elif not listing.sweeps:  # sweeps alone are listed below, not "no run folders"
            echo(f"No run folders in {listing.root}.")
        # Right below the table, as `trainctl status` does for RayJobs: after the champions
        # and sweeps blocks they read as one of theirs (a red-team pass).
        for run in listing.runs:
            for line in run.interruptions.get("lines", []):
                echo(f"{run.name}: {line}")
        for note in listing_notes(listing, limit):
            echo(note)
    if listing.problems:
        raise RunFolderUnreadable(listing.problems)


def listing_notes(listing: Listing, limit: int) -> list[str]:
    notes = []
    if listing.timed_out and listing.folders:
        notes.append(
            f"(stopped after {listing.deadline_s:g} s: {listing.not_read} of {listing.folders} "
            "folders not read; name a run folder to see it)"
        )
    elif listing.not_read:
        notes.append(
            f"({listing.not_read} more folders not read: --limit {limit} reached; newest first)"
        )
    if listing.champions:
        notes.append(f"champions ({listing.root}/champions/, each pointer checked with its card):")
        notes += [
            f"  {c['model']}: "
            + (c["problem"] if "problem" in c else f"v{c['version']}, run {c['run']}")
            for c in listing.champions
        ]
    if listing.sweeps:
        notes.append(
            f"sweeps, each a folder of trial runs (`trainctl status {listing.root}/<sweep>` "
            "shows one):"
        )
        notes += [f"  {sweep_records.brief_line(sweep)}" for sweep in listing.sweeps]
    if listing.not_runs:
        folders = "folder" if listing.not_runs == 1 else "folders"
        notes.append(f"({listing.not_runs} {folders} without run records skipped)")
    return notes


def table(runs: Sequence[RunStatus]) -> str:
    rows = [HEADER, *(run.row() for run in runs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _figures(figures: Mapping[str, Any], metric: str, *, short: bool = False) -> str:
    names = list(dict.fromkeys((metric, "val_accuracy")))
    shown = ", ".join(f"{n} {figures[n]:.4f}" for n in names[: 1 if short else 2] if n in figures)
    epoch = figures.get("epoch")
    if short:
        return f"{shown} @{epoch}" if epoch is not None else shown
    return f"{shown} (epoch {epoch})" if epoch is not None else shown


def _epochs_text(run: RunStatus) -> str:
    done = "?" if run.epochs_completed is None else str(run.epochs_completed)
    done_n, target = run.epochs_completed, run.epochs_target
    if done_n is not None and target is not None and done_n > target:  # `4/2`: a miscount?
        return f"{done} (TRAIN_EPOCHS={target})"
    return f"{done}/{'?' if run.epochs_target is None else run.epochs_target}"


def _promotion_word(run: RunStatus) -> str:
    promotion = run.promotion
    if not promotion:
        return f"its v{run.champion_of} is champion" if run.champion_of is not None else "-"
    if promotion["promoted"] and promotion["version"]:
        return f"promoted v{promotion['version']}"
    if not promotion["promoted"] and run.champion_of is not None:
        # Rerun after its promotion and kept: `not promoted` alone read as if no export of it
        # served, beside a champions line naming it (a red-team pass).
        return f"not promoted; its v{run.champion_of} is champion"
    return "promoted" if promotion["promoted"] else "not promoted"


def _interruptions_text(counts: Mapping[str, Any], status: str) -> str:
    if not counts.get("count"):
        # An ending is recorded as an interruption by the rerun that resumes after it.
        ended = status in ("stopped", "failed")
        return "none recorded yet: a rerun records how this one ended" if ended else "none"
    words = (("preemptions", "preempted"), ("failures", "failed"), ("stopped", "stopped"))
    parts = [f"{counts[key]} {word}" for key, word in words if counts.get(key)]
    parts.append(f"{counts['steps_lost']} steps lost")
    return f"{counts['count']} ({', '.join(parts)})"


def _interruptions_short(counts: Mapping[str, Any]) -> str:
    if not counts.get("count"):
        return "0"
    return f"{counts['count']} ({counts['steps_lost']} steps lost)"


def _shown(text: str, limit: int) -> str:
    return one_line(text, limit)


def _path(path: object) -> str:
    return one_path(path, PATH_CHARS)


def _count(value: Any, *, zero: bool = False) -> int | None:
    """A count as a run folder may hold it: a non-negative int below 10**15, else None."""
    return whole(value, 0 if zero else 1, interruptions.MAX_SHOWN_COUNT - 1)
