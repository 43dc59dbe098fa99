"""The driver's decisions, as pure functions: what a run starts from, whether anything is left
to train, how an ending is classified, and what the summary says.

app/run/driver.py performs the steps; what each step decides is here, free of Ray, torch and
storage, so that every branch has a unit test (tests/unit/test_driver_decisions.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from app.data.image_decode import ImageError
from app.formatting import is_finite, shown_figure, whole
from app.runfolder.checkpoints import CheckpointRef
from app.runfolder.folder import REFUSED_KEY, recorded_tracking
from app.runfolder.interruptions import Cause
from app.storage.location import RunPath
from app.training.early_stop import Stop, StopRule, recorded_stop, still_holds

if TYPE_CHECKING:
    from app.training.warm_weights import WarmStart

Ending = Literal["sigterm", "ctrl_c", "failure"]


@dataclass(frozen=True)
class Start:
    """Where this driver begins: a fresh run, a resume from a verified checkpoint, or nothing
    to do because the run already reached its target epochs."""

    kind: Literal["fresh", "resume", "finished"]
    checkpoint: RunPath | None
    epochs_done: int
    step: int | None = None  # a mid-epoch checkpoint's global step
    stopped: Stop | None = None  # finished by an early stop whose rule is still in force
    # The checkpoint's files' sha256s as verified: the workers load those bytes or none.
    files: dict[str, str] = field(default_factory=dict)

    def announcement(self, run_name: str, run_dir: RunPath, target_epochs: int) -> str:
        if self.kind == "finished" and self.stopped is not None:
            return (
                f"run {run_name} {self.stopped} (TRAIN_EPOCHS={target_epochs}); nothing to "
                f"train. Change {self.stopped.rule.split('=')[0]} to train on."
            )
        if self.kind == "finished":
            return (
                f"run {run_name} already finished {self.epochs_done} epochs "
                f"(TRAIN_EPOCHS={target_epochs}); nothing to train. Set TRAIN_EPOCHS above "
                f"{self.epochs_done} to continue."
            )
        if self.kind == "resume":
            within = f", step {self.step}" if self.step is not None else ""
            at = f"epoch {self.epochs_done + 1}{within}"
            return f"resuming run {run_name} at {at} from {self.checkpoint}"
        return f"starting run {run_name} in {run_dir}"


def warm_start_line(start: Start, warm: WarmStart | None) -> str | None:
    """What a fresh run starts from, said once and kept in driver.log: `champion:<name>` names
    whichever champion is current, so the run's own record says which one it was. A resumed
    run continues from its own checkpoint, never the warm start (app/training/loop.py)."""
    if warm is None or start.kind != "fresh":
        return None
    return f"warm start from {warm.described}, sha256 {warm.sha256[:12]} (checked before Ray)"


def plan_start(
    latest: CheckpointRef | None, target_epochs: int, rule: StopRule | None = None
) -> Start:
    """What to resume, given the newest verified checkpoint (app/run/resume.py proved it). A
    run that stopped early is finished while the rule that stopped it is still in force."""
    if latest is None:
        return Start("fresh", None, 0)
    stop = recorded_stop(latest.stopped)
    if rule is not None and latest.step is None and still_holds(stop, rule):
        return Start("finished", latest.path, latest.epoch, stopped=stop)
    kind: Literal["resume", "finished"] = "finished" if latest.epoch >= target_epochs else "resume"
    return Start(kind, latest.path, latest.epoch, latest.step, files=latest.files)


@dataclass(frozen=True)
class AsTrained:
    """What a run's summary says it was trained with: its settings, TRAIN_EPOCHS, and the unit
    its accelerator-hours are counted in."""

    settings: dict[str, Any]
    target_epochs: int
    use_gpu: bool
    cpus_per_worker: float


def as_trained(before: Mapping[str, Any], current: AsTrained, trained_now: bool) -> AsTrained:
    """`current` (this driver's) where it trained; else, on a rerun of a finished run, which
    trains nothing, what the run's last training driver recorded (`before`, its summary), so a
    rerun with other settings (TRAIN_USE_GPU, TRAIN_LR, fewer TRAIN_EPOCHS) does not rewrite
    what the run was trained with, nor count its hours as another kind. A recorded value that
    is not what a driver writes is replaced by this driver's."""
    recorded = before.get("settings")
    if trained_now or not isinstance(recorded, Mapping) or not recorded:
        return current
    target, gpu, cpus = (
        before.get("epochs_target"),
        recorded.get("use_gpu"),
        recorded.get("cpus_per_worker"),
    )
    return AsTrained(
        settings=dict(recorded),
        target_epochs=whole(target, least=1) or current.target_epochs,
        use_gpu=gpu if isinstance(gpu, bool) else current.use_gpu,
        cpus_per_worker=float(cpus)
        if is_finite(cpus) and 0 < cpus <= 512
        else current.cpus_per_worker,
    )


def trackers_to_close(previous: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """On a finished run, the tracker runs to finish now: those a killed driver left open (its
    summary never said succeeded), or, after a driver that did finish, those its delivery record
    says missed epochs or their close (the tracker's server was down at the end: a rerun of the
    finished run delivered nothing, and dropped that record). {} starts fresh runs for trackers
    switched off then; None when there is nothing to finish."""
    previous = previous or {}
    if previous.get("status") != "succeeded":
        return recorded_tracking(previous) or None
    return recorded_tracking(previous) if delivery_incomplete(previous) else None


def delivery_incomplete(summary: Mapping[str, Any]) -> bool:
    """Whether summary.json's `tracking_delivery` names an epoch some tracker did not get, or a
    tracker run left open."""
    record = summary.get("tracking_delivery")
    if not isinstance(record, Mapping):
        return False
    return any(
        isinstance(one, Mapping)
        and (bool(one.get("undelivered_epochs")) or one.get("closed") is False)
        for one in record.values()
    )


def classify_ending(err: BaseException, sigterm: bool) -> Ending:
    """Why fit() ended early. SIGTERM is told by its flag, not by the exception: Ray may wrap
    or replace what the handler raised (ray.get turns it into a plain KeyboardInterrupt)."""
    if sigterm:
        return "sigterm"
    if isinstance(err, KeyboardInterrupt):
        return "ctrl_c"
    return "failure"


def previous_interrupted(previous: Mapping[str, Any] | None) -> Cause | None:
    """How the last driver of this run folder ended without finishing: `stopped` by SIGTERM or
    Ctrl-C (its summary says interrupted), a `failure` (it failed, or was killed while its
    summary still said running); None where it finished, or there was none."""
    status = (previous or {}).get("status")
    if status == "interrupted":
        return "stopped"
    return "failure" if status in ("failed", "running") else None


def root_cause(err: BaseException) -> str:
    """The innermost error's one-line message, not Ray's layers of wrapping.

    Ray Train wraps the workers' errors in a WorkerGroupError (`worker_failures`, by rank) and
    a remote task's error in a RayTaskError (`cause`), whose own __cause__ is lost on the way
    (exceptions pickle without it); Ray Data then wraps a failed UDF in a UserCodeException
    whose message is advice on retries. The error that started it survives only as the first
    line of the remote traceback's text that names an exception, and is preferred then."""
    chain = list(_chain(err))
    innermost = chain[-1]
    origin = next((found for e in chain if (found := _remote_origin(e))), None)
    if origin and type(innermost).__name__ in RAY_DATA_WRAPPERS:
        return origin
    lines = [line for line in str(innermost).strip().splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    return f"{type(innermost).__name__}: {last}" if last else type(innermost).__name__


def is_bad_image(cause: str, err: BaseException) -> bool:
    """A worker's image decode failure, whose row is block-relative: the file must be found.
    Any kind of ImageError: a remote traceback names the raised class only (a decompression
    bomb's TooManyPixelsError ended as Ray Data's advice on retries, naming no file)."""
    texts = [cause, *(str(e) for e in _chain(err))]
    return any(name in text for name in _BAD_IMAGE_ERRORS for text in texts)


_BAD_IMAGE_ERRORS = tuple(kind.__name__ for kind in (ImageError, *ImageError.__subclasses__()))


def is_refused_read(err: BaseException) -> bool:
    """A failure of one of Ray Data's reading tasks (a file its reader refused), whose error
    names no file: the file must be found. Ray's error keeps the task's name only in its text,
    as the process title `ray::<task>()`."""
    return any(READING_TASK.search(str(e)) for e in _chain(err))


# Ray Data's reads (fused with what follows: "ReadFilesParquetV2->MapBatches(...)") and the
# sampling of Parquet files it does while planning one.
READING_TASK = re.compile(r"ray::(?:Read\w*|_fetch_parquet_file_info)\b")


def _chain(err: BaseException) -> Iterator[BaseException]:
    """`err`, then what it wraps, down to the innermost: Python's __cause__, a Ray task
    error's `cause`, the first failed rank of a worker group."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        failures = getattr(current, "worker_failures", None)
        if isinstance(failures, Mapping) and failures:
            current = failures[min(failures)]
            continue
        wrapped = getattr(current, "cause", None)
        current = current.__cause__ or (wrapped if isinstance(wrapped, BaseException) else None)


_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception)): (\S.*)$")


# Ray Data's wrappers of a failed task: a UDF's (advice on retries) and its own code's (no
# message: a file refused by its reader ended as "training failed: SystemException").
RAY_DATA_WRAPPERS = ("UserCodeException", "SystemException")


def _remote_origin(err: BaseException) -> str | None:
    """'ImageError: row 15 ...' from a remote traceback's text (Python prints the first
    exception of a chain first), or None."""
    for line in str(err).splitlines():
        match = _EXCEPTION_LINE.match(line.strip())
        if match and match.group(1) not in RAY_DATA_WRAPPERS:
            return f"{match.group(1)}: {match.group(2).strip()}"
    return None


def restored_from(starts: Sequence[Mapping[str, Any]], resumed: str | None) -> str | None:
    """The checkpoint the latest worker-group start restored, else what the driver chose."""
    return next((a["restored_from"] for a in reversed(starts) if a.get("restored_from")), resumed)


def failures_recovered(starts: Sequence[Mapping[str, Any]]) -> int:
    """Worker-group starts after the first one are failures Ray recovered from."""
    return max(0, len(starts) - 1)


def running_summary(
    previous: Mapping[str, Any],
    *,
    run_name: str,
    run_dir: str,
    target_epochs: int,
    resume_from: str | None,
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """The summary while training: the previous one updated, minus the last driver's outcome
    (this one's is written when it finishes)."""
    summary = {**previous}
    summary.update(
        status="running",
        run_name=run_name,
        run_dir=run_dir,
        epochs_target=target_epochs,
        restored_from=resume_from,
        settings=dict(settings),
    )
    summary.pop("error", None)
    summary.pop(REFUSED_KEY, None)  # this start got through
    summary.pop("tracking_delivery", None)
    summary.pop("stopped_early", None)  # the last driver's; this one's is decided at its end
    for key in ("promoted", "promotion", "champion_version"):  # the last driver's decision
        summary.pop(key, None)
    return summary


def outcome_line(run_name: str, status: str, summary: Mapping[str, Any], target: int) -> str:
    """The one line the driver ends with: the last epoch's figure and the best checkpoint's,
    each labelled (the promotion line that follows is about the best checkpoint)."""
    done = summary["epochs_completed"]
    # More than TRAIN_EPOCHS asks for now (an earlier driver's target): `4/2` read as a miscount.
    count = (
        f"{done}/{target} epochs" if done <= target else f"{done} epochs (TRAIN_EPOCHS={target})"
    )
    parts = [f"run {run_name} {status}: {count}"]
    best = summary.get("best") or {}
    metric = best.get("metric", "val_accuracy")
    last = _figures(summary.get("metrics") or {}, metric)
    if last:
        parts.append(f"last epoch {last}")
    if best:
        parts.append(f"best checkpoint (epoch {best['epoch']}) {_figures(best, metric)}".rstrip())
    stop = recorded_stop(summary.get("stopped_early"))
    if stop is not None:
        parts.append(str(stop))
    return "; ".join(parts) + f"; {summary['failures']} failure(s) recovered"


def _figures(metrics: Mapping[str, Any], metric: str) -> str:
    """The checkpoint metric's value, then val_accuracy's where that is not the metric."""
    names = [metric] + (["val_accuracy"] if metric != "val_accuracy" else [])
    figures = [(name, shown_figure(metrics.get(name))) for name in names]
    return ", ".join(f"{name} {value:.4f}" for name, value in figures if value is not None)


def diverged_since(epochs: Sequence[Mapping[str, Any]]) -> int | None:
    """The epoch from which the training loss was not a finite number to the last; None when
    the last epoch's is finite (or there are none)."""
    since = None
    for record in epochs:
        loss = record.get("train_loss")
        since = None if is_finite(loss) else (since or record.get("epoch"))
    return since


def diverged_line(since: int, lr: float) -> str:
    """What the driver says when training diverged: the training loss not a finite number
    (NaN or infinite, written as null in metrics.jsonl) from epoch `since` (diverged_since) to
    the last. The run still ends as it would (the best checkpoint, the gate that keeps a worse
    model from the champion), but its epoch lines alone do not say why its figures stopped
    moving."""
    return (
        f"training diverged: train_loss was not a finite number (NaN or infinite) from epoch "
        f"{since} on; a lower TRAIN_LR (now {lr:g}) usually keeps it finite"
    )


def compile_fell_back(compile_setting: str, epochs: Sequence[Mapping[str, Any]]) -> bool:
    """TRAIN_COMPILE=on, but an epoch trained uncompiled: the workers' output does not reach
    the driver's terminal, so the driver says it once."""
    return compile_setting == "on" and any(e.get("compiled") == 0.0 for e in epochs)
