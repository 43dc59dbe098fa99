"""The `trainctl train` driver: settings -> dataset -> TorchTrainer -> run folder.

Everything that can be checked cheaply is checked before Ray starts (exit 2). The run folder
<storage_path>/<run_name> is the run's identity: rerunning with the same settings resumes from the
newest intact checkpoint there, and a run that already reached TRAIN_EPOCHS is not trained again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click

from app.data.schema import DatasetInfo
from app.errors import EXIT_SIGTERM, ConfigError, RunFailed, TrainctlError
from app.preflight import Found, cluster_check, preflight_for_training
from app.promotion.step import promote_run
from app.run import checkpoints, decisions, resume
from app.run import folder as run_folder
from app.run import log_capture as run_logs
from app.run.class_names import record as record_class_names
from app.run.folder import SummaryNotWritten, read_summary, write_final_summary, write_summary
from app.run.interrupts import SIGTERM_SEEN, StopForSigterm, just_in_time, sigterm_interrupts
from app.run.progress import EpochFollower
from app.run.retention import in_run_pruner
from app.run.summary import build_summary, plot_curves
from app.run.usage import accelerator_hours
from app.settings import TrainSettings
from app.storage.location import RunPath, storage_options
from app.tracking.trackers import Trackers
from app.training.accel import resolve
from app.training.weights import pretrained_info


class Interrupted(TrainctlError):
    exit_code = EXIT_SIGTERM


def run_training(
    settings: TrainSettings, *, promote: bool = True, callbacks: Sequence[Any] = ()
) -> dict[str, Any]:
    """One run, start to end. `promote=False` and `callbacks` (Ray Train callbacks) are for a
    sweep's trials (app/sweep/trial.py): a trial reports its epochs to Ray Tune and is never
    promoted itself; the sweep promotes its best trial once."""
    started = time.monotonic()
    run_dir = settings.run_dir
    try:
        found = preflight_for_training(settings)
    except ConfigError as err:
        run_folder.record_invalid(run_dir, err)
        raise
    info: DatasetInfo = found.info  # type: ignore[assignment]
    # The driver's output goes to <run_dir>/logs/attempt-K/driver.log too, and each worker's
    # to worker-N.log there: they outlive the Ray cluster (app/run/log_capture.py).
    attempt = run_logs.next_attempt(run_dir)
    driver_log = run_logs.attempt_dir(run_dir, attempt) / "driver.log"
    banner = f"driver, attempt {attempt}"
    with run_logs.capture(driver_log, settings.log_max_mb, banner, held=True) as log:
        run = _Run(promote, tuple(callbacks))
        return _train(settings, info, started, attempt, log.open, found.warm_start, run)


def _train(
    settings: TrainSettings,
    info: DatasetInfo,
    started: float,
    attempt: int,
    open_log: Callable[[], None],
    warm_start: Any = None,
    run: _Run | None = None,
) -> dict[str, Any]:
    run = run or _Run()
    run_dir = settings.run_dir
    # auto values become concrete once, here: the workers and the summary see what ran.
    settings, choices = resolve(settings, info)
    info = pretrained_info(settings, info)  # TRAIN_WEIGHTS by name: the weights' mean and std
    if choices:
        _say(f"gpu: {', '.join(choices)}")

    start = decisions.plan_start(resume.usable_checkpoint(settings, info, _say), settings.epochs)
    _say(start.announcement(settings.run_name, run_dir, settings.epochs))
    resume_from = start.checkpoint
    if start.kind == "finished":
        # A driver killed after the last checkpoint left its tracker runs open: close them.
        before = read_summary(run_dir) or {}
        previous = decisions.trackers_to_close(before)
        trackers = Trackers.start(settings, previous) if previous else None
        if trackers is not None:
            trackers.catch_up(run_folder.epochs(run_dir))
        # The earlier verdict on the same checkpoint stands (app/promotion/step.py).
        return _conclude(
            settings, info, started, "", resume_from, trackers, before.get("promotion"), run
        )

    invocation = uuid.uuid4().hex
    # A rerun after a driver that never finished (SIGTERM, killed, failed) is an interruption.
    interrupted = start.kind == "resume" and decisions.previous_interrupted(read_summary(run_dir))
    # Joining a cluster may take a while: SIGTERM and Ctrl-C end it cleanly too.
    with sigterm_interrupts():
        try:
            cluster_check(settings, Found(info))  # the last of `trainctl check`'s checks
        except StopForSigterm:
            raise Interrupted(
                f"stopped by SIGTERM while joining the Ray cluster; run folder {run_dir} is "
                "unchanged"
            ) from None
        except ConfigError as err:  # a request the cluster never holds is bad input too
            run_folder.record_invalid(run_dir, err)
            raise
    open_log()  # training starts: from here on the driver's output is kept in the run folder
    trackers = Trackers.start(settings, (read_summary(run_dir) or {}).get("tracking"))
    trackers.catch_up([r for r in run_folder.epochs(run_dir) if r["epoch"] <= start.epochs_done])
    running = {**_running_summary(settings, resume_from), "tracking": trackers.ids}
    try:
        write_summary(run_dir, running)
    except OSError as err:  # a full disk, a quota: before anything trained, say so plainly
        raise RunFailed(
            f"{run_dir}/summary.json could not be written ({err.strerror or err}); nothing was "
            "trained: free space on the store and rerun"
        ) from None
    record_class_names(run_dir, info)  # checked against the data in preflight
    run_folder.forget_ray_snapshot(run_dir)  # resume was decided above, from verified files

    with sigterm_interrupts():
        try:
            _fit(
                settings, info, invocation, resume_from, attempt, trackers, interrupted,
                warm_start, run.callbacks,
            )  # fmt: skip
        except (Exception, KeyboardInterrupt) as err:  # any training failure: a clear exit 1
            ending = decisions.classify_ending(err, SIGTERM_SEEN.is_set())
            if ending == "sigterm":
                _say(just_in_time(settings.run_dir, invocation))
                _finish(
                    settings, "interrupted", started, invocation, resume_from, "stopped by SIGTERM",
                    trackers=trackers,
                )  # fmt: skip
                raise Interrupted(
                    f"stopped by SIGTERM; run folder {run_dir} is consistent: rerun to resume"
                ) from None
            if ending == "ctrl_c":  # the CLI reports it
                raise
            cause = decisions.root_cause(err)
            if decisions.is_bad_image(cause, err):
                from app.data.kinds import dataset_kind

                where = dataset_kind(settings.dataset).locate_bad_image(info)
                cause = f"bad image in {where or 'the data'}: {cause}"
            _finish(settings, "failed", started, invocation, resume_from, cause, trackers=trackers)
            logs = run_logs.attempt_dir(run_dir, attempt)
            raise RunFailed(
                [
                    f"training failed: {cause}",
                    f"checkpoints and summary: {run_dir}",
                    f"driver and worker logs: {logs}/ (`trainctl logs {run_dir} --worker N`, "
                    "N = 0 for rank 0; --driver for the driver's)",
                ]
            ) from None
    return _conclude(settings, info, started, invocation, resume_from, trackers, None, run)


@dataclass(frozen=True)
class _Run:
    """How this run is driven: alone (promoted at its end), or as a sweep's trial."""

    promote: bool = True
    callbacks: tuple[Any, ...] = ()


def _conclude(
    settings: TrainSettings,
    info: DatasetInfo,
    started: float,
    invocation: str,
    resumed: RunPath | None,
    trackers: Trackers | None,
    previous: dict[str, Any] | None = None,
    run: _Run | None = None,
) -> dict[str, Any]:
    """A succeeded run's summary, then its promotion, from one scan of its checkpoints: each
    file is read and hashed once (in a bucket a second pass would download them all again)."""
    summary, kept = _finish(settings, "succeeded", started, invocation, resumed, trackers=trackers)
    if run is not None and not run.promote:
        return summary
    return promote_run(settings, info, summary, previous, good=kept)  # its line is the run's last


def _fit(
    settings: TrainSettings,
    info: DatasetInfo,
    invocation: str,
    resume_from: RunPath | None,
    attempt: int,
    trackers: Trackers,
    interrupted: bool,
    warm_start: Any = None,
    callbacks: tuple[Any, ...] = (),
) -> None:
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from app.data.cache import cache_datasets
    from app.data.exact_split import ExactSplit
    from app.data.kinds import build_datasets
    from app.training.loop import train_loop_per_worker

    read_started = time.monotonic()
    datasets, cache = cache_datasets(build_datasets(settings, info), settings, info)
    took = f" ({time.monotonic() - read_started:.1f} s)" if cache.cache else ""
    _say(f"data: {cache.reason}{took}")
    workers = settings.workers
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={
            "settings": settings,
            "info": info,
            "invocation": invocation,
            "resume_from": resume_from,
            "log_attempt": attempt,
            "interrupted": interrupted,
            # TRAIN_WARM_START as preflight verified it: each worker loads these bytes only.
            "warm_start": warm_start,
        },
        scaling_config=ScalingConfig(
            num_workers=(workers.min, workers.max) if workers.elastic else workers.max,
            use_gpu=settings.use_gpu,
            resources_per_worker={"CPU": settings.cpus_per_worker},
            accelerator_type=settings.accelerator_type,
        ),
        run_config=RunConfig(
            name=settings.run_name,
            **storage_options(settings.storage_path),
            failure_config=FailureConfig(
                max_failures=settings.max_failures,
                max_preemption_failures=settings.max_preemptions,
            ),
            # Ray keeps every checkpoint: trainctl's own pruning decides (app/run/retention.py).
            checkpoint_config=CheckpointConfig(num_to_keep=None),
            callbacks=list(callbacks),
        ),
        datasets=datasets,
        dataset_config=ExactSplit(),  # the same shards at every start: exact mid-epoch resume
    )
    pruner = in_run_pruner(settings, warn=_say)

    def on_epoch(row: dict[str, Any]) -> None:
        trackers.log_epoch(row)
        pruner.after_checkpoint()

    follower = EpochFollower(
        settings.run_dir, settings.epochs, since=time.time(), emit=click.echo, on_epoch=on_epoch,
        on_checkpoint=pruner.after_checkpoint if settings.checkpoint_every.mid_epoch else None,
    )  # fmt: skip
    with follower:
        trainer.fit()


def _finish(
    settings: TrainSettings,
    status: str,
    started: float,
    invocation: str,
    resumed: RunPath | None,
    error: str | None = None,
    trackers: Trackers | None = None,
) -> tuple[dict[str, Any], list[checkpoints.CheckpointRef]]:
    """The run's summary written; returned with the verified checkpoints retention kept."""
    run_dir = settings.run_dir
    good = checkpoints.scan(run_dir).good  # every checkpoint hashed once, for all uses below
    removed = checkpoints.prune(
        run_dir, keep=settings.checkpoints_to_keep, metric=settings.checkpoint_metric, good=good
    )
    kept = [ref for ref in good if ref.path not in removed]
    starts = run_folder.attempts(run_dir, invocation) if invocation else []
    summary = build_summary(
        run_dir,
        status=status,
        run_name=settings.run_name,
        target_epochs=settings.epochs,
        settings=_recorded_settings(settings),
        duration_s=time.monotonic() - started,
        failures=decisions.failures_recovered(starts),
        restored_from=decisions.restored_from(starts, str(resumed) if resumed else None),
        metric=settings.checkpoint_metric,
        error=error,
        good=kept,
    )
    # What this run has held so far: this driver's worker groups on top of earlier drivers'.
    summary["accelerator_hours"] = accelerator_hours(
        (read_summary(run_dir) or {}).get("accelerator_hours"),
        starts,
        end=time.time(),
        use_gpu=settings.use_gpu,
        cpus_per_worker=settings.cpus_per_worker,
    )
    if decisions.compile_fell_back(settings.compile, run_folder.epochs(run_dir)):
        _say("torch.compile failed on the workers; trained uncompiled (the worker log says why)")
    try:
        curves = plot_curves(run_dir)
    except Exception as err:  # a plot must never leave the summary at "running"
        _say(f"curves not drawn ({type(err).__name__}: {err})")
        curves = None
    if trackers is not None:
        # The summary's best, as the object it was ranked from (not located again from text).
        best = next(iter(checkpoints.ranked(kept, settings.checkpoint_metric)), None)
        trackers.finish(status, best.path if best else None)
        summary["tracking"] = trackers.ids
        # Per tracker, the epochs it got and did not: no metric is lost without a record.
        summary["tracking_delivery"] = trackers.delivery()
    elif (read_summary(run_dir) or {}).get("tracking"):
        summary["tracking"] = read_summary(run_dir)["tracking"]  # type: ignore[index]
    try:
        path = write_final_summary(run_dir, summary)
    except SummaryNotWritten as err:
        if status == "succeeded":
            raise  # the run's record is lost: a failure, exit 1 with the cause
        _say(f"{'; '.join(err.problems)}")  # the run's own failure is what the caller raises
        return summary, kept
    _say(decisions.outcome_line(settings.run_name, status, summary, settings.epochs))
    _say(f"  summary: {path}")
    if curves:
        _say(f"  curves:  {curves}")
    return summary, kept


def _running_summary(settings: TrainSettings, resume_from: RunPath | None) -> dict[str, Any]:
    return decisions.running_summary(
        read_summary(settings.run_dir) or {},
        run_name=settings.run_name,
        run_dir=str(settings.run_dir),
        target_epochs=settings.epochs,
        resume_from=str(resume_from) if resume_from else None,
        settings=_recorded_settings(settings),
    )


def _recorded_settings(settings: TrainSettings) -> dict[str, Any]:
    """The effective settings, plus the one choice that is not a setting: the optimizer."""
    return {**settings.redacted(), "fused_adamw": settings.use_gpu}


def _say(message: str) -> None:
    click.echo(f"trainctl: {message}", err=False)
