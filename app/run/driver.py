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
from app.export.witness import verified_only, witnessed
from app.formatting import one_line
from app.promotion.step import promote_run
from app.run import decisions, first_met, resume
from app.run.progress import EpochFollower
from app.run.signals import SIGTERM_SEEN, StopForSigterm, just_in_time, sigterm_interrupts
from app.runfolder import checkpoints, retention, usage
from app.runfolder import folder as run_folder
from app.runfolder import log_capture as run_logs
from app.runfolder.class_names import record as record_class_names
from app.runfolder.folder import (
    BAD_DATA_KEY,
    SummaryNotWritten,
    read_summary,
    recorded_tracking,
    write_final_summary,
    write_summary,
)
from app.runfolder.summary import build_summary, plot_curves
from app.settings import TrainSettings
from app.storage.location import RunPath, storage_options
from app.tracking.trackers import Trackers
from app.training.accel import resolve
from app.training.early_stop import recorded_stop, rule_of
from app.training.plan import WorkerPlan
from app.training.weights import pretrained_info


class Interrupted(TrainctlError):
    exit_code = EXIT_SIGTERM
    label = "interrupted"  # by SIGTERM, with what was saved: not a failure


def run_training(
    settings: TrainSettings,
    info: DatasetInfo,
    *,
    join_cluster: Callable[[], object],
    warm_start: Any = None,
    promote: bool = True,
    callbacks: Sequence[Any] = (),
    group_cleaner: bool = False,
) -> dict[str, Any]:
    """The run, after preflight (app/preflight.py `preflight_for_training`, which the CLI runs
    first): `info` is the dataset it inspected, `warm_start` TRAIN_WARM_START as it verified it,
    and `join_cluster` its last check, run here once the run folder is settled. `promote=False`
    and `callbacks` (Ray Train callbacks) are for a sweep's trials (app/sweep/trial.py): a trial
    reports its epochs to Ray Tune and is never promoted itself; the sweep promotes its best
    trial once. `group_cleaner`: keep Ray Train's placement-group cleaner (app/run/job_trainer.py),
    which a trial on a joined cluster needs."""
    started = time.monotonic()
    run_dir = settings.run_dir
    # The driver's output goes to <run_dir>/logs/attempt-K/driver.log too, and each worker's
    # to worker-N.log there: they outlive the Ray cluster (app/runfolder/log_capture.py).
    attempt = run_logs.next_attempt(run_dir)
    driver_log = run_logs.attempt_dir(run_dir, attempt) / "driver.log"
    banner = f"driver, attempt {attempt}"
    with run_logs.capture(driver_log, settings.log_max_mb, banner, held=True) as log:
        run = _Run(promote, tuple(callbacks), group_cleaner)
        return _train(settings, info, started, attempt, log.open, join_cluster, warm_start, run)


@dataclass(frozen=True)
class _Run:
    """How this run is driven: alone (promoted at its end), or as a sweep's trial."""

    promote: bool = True
    callbacks: tuple[Any, ...] = ()
    group_cleaner: bool = False

    @property
    def trial(self) -> bool:
        return not self.promote


def _train(
    settings: TrainSettings,
    info: DatasetInfo,
    started: float,
    attempt: int,
    open_log: Callable[[], None],
    join_cluster: Callable[[], object],
    warm_start: Any = None,
    run: _Run = _Run(),
) -> dict[str, Any]:
    run_dir = settings.run_dir
    settings, info = _resolved(settings, info)
    latest = resume.usable_checkpoint(settings, info, _say)
    resume.restore_epoch_line(run_dir, latest, _say)
    start = decisions.plan_start(latest, settings.epochs, rule_of(settings))
    _say(start.announcement(settings.run_name, run_dir, settings.epochs))
    if start.kind == "resume" and (changed := resume.changed_since(settings)):
        _say(
            f"settings changed since the run's last driver: {', '.join(changed)}; the epochs "
            "trained so far keep the recorded ones, and summary.json records these from now on"
        )
    if warm_line := decisions.warm_start_line(start, warm_start):
        _say(warm_line)
    resume_from = start.checkpoint
    if start.kind == "finished":
        return _conclude_finished(settings, info, started, resume_from, run)

    invocation = uuid.uuid4().hex
    # A rerun after a driver that never finished (SIGTERM, killed, failed) is an interruption.
    previous = read_summary(run_dir) if start.kind == "resume" else None
    interrupted = decisions.previous_interrupted(previous)
    _join(run_dir, join_cluster)
    open_log()  # training starts: from here on the driver's output is kept in the run folder
    trackers = _begin(settings, info, resume_from, start.epochs_done)
    plan = WorkerPlan(
        settings=settings, info=info, invocation=invocation, log_attempt=attempt,
        resume_from=resume_from, resume_files=start.files, interrupted=interrupted,
        warm_start=warm_start,  # TRAIN_WARM_START as preflight verified it: workers load it
    )  # fmt: skip
    with sigterm_interrupts():
        try:
            _fit(plan, trackers, run)
        except (Exception, KeyboardInterrupt) as err:  # any training failure: a clear exit 1
            stopped = _stopped(
                err, settings, info, started, invocation, resume_from, attempt, trackers
            )
            if stopped is None:  # Ctrl-C: the CLI reports it
                raise
            raise stopped from None
    return _conclude(settings, info, started, invocation, resume_from, trackers, run=run)


def _resolved(settings: TrainSettings, info: DatasetInfo) -> tuple[TrainSettings, DatasetInfo]:
    """auto values made concrete once, here: the workers and the summary see what ran."""
    settings, choices = resolve(settings, info)
    info = pretrained_info(settings, info)  # TRAIN_WEIGHTS by name: the weights' mean and std
    if choices:
        _say(f"gpu: {', '.join(choices)}")
    return settings, info


def _conclude_finished(
    settings: TrainSettings,
    info: DatasetInfo,
    started: float,
    resume_from: RunPath | None,
    run: _Run,
) -> dict[str, Any]:
    """A run that already reached TRAIN_EPOCHS: not trained again, its summary and verdict
    written again (the earlier verdict on the same checkpoint stands: app/promotion/step.py)."""
    run_dir = settings.run_dir
    # A driver killed after the last checkpoint left its tracker runs open: close them.
    before = read_summary(run_dir) or {}
    previous = decisions.trackers_to_close(before)
    trackers = Trackers.start(settings, previous) if previous is not None else None
    if trackers is not None:
        trackers.catch_up(run_folder.epochs(run_dir))
    return _conclude(
        settings, info, started, "", resume_from, trackers, before.get("promotion"),
        before.get("evaluation"), run,
    )  # fmt: skip


def _join(run_dir: RunPath, join_cluster: Callable[[], object]) -> None:
    """Preflight's last check, joining the cluster: it may take a while, so SIGTERM and Ctrl-C
    end it cleanly too; a request the cluster never holds is recorded as bad input."""
    with sigterm_interrupts():
        try:
            join_cluster()
        except StopForSigterm:
            raise Interrupted(
                f"stopped by SIGTERM while joining the Ray cluster; run folder {run_dir} is "
                "unchanged"
            ) from None
        except ConfigError as err:
            run_folder.record_invalid(run_dir, err)
            raise


def _begin(
    settings: TrainSettings, info: DatasetInfo, resume_from: RunPath | None, epochs_done: int
) -> Trackers:
    """The trackers started (and caught up with the epochs already trained), and the run
    folder made ready: the running summary, the class names, Ray's stale snapshot gone."""
    run_dir = settings.run_dir
    trackers = Trackers.start(settings, recorded_tracking(read_summary(run_dir)))
    trackers.catch_up([r for r in run_folder.epochs(run_dir) if r["epoch"] <= epochs_done])
    running = {**_running_summary(settings, resume_from), "tracking": trackers.ids}
    try:
        write_summary(run_dir, running)
    except OSError as err:  # a full disk, a quota: before anything trained, say so plainly
        raise RunFailed(
            f"{run_dir}/summary.json could not be written ({err.strerror or err}); nothing was "
            "trained: free space on the store and rerun"
        ) from None
    record_class_names(run_dir, info.class_names)  # checked against the data in preflight
    run_folder.forget_ray_files(run_dir)  # resume was decided above, from verified files
    return trackers


def _stopped(
    err: BaseException,
    settings: TrainSettings,
    info: DatasetInfo,
    started: float,
    invocation: str,
    resume_from: RunPath | None,
    attempt: int,
    trackers: Trackers,
) -> TrainctlError | None:
    """What a run that ended early raises once its summary is written: Interrupted after
    SIGTERM, RunFailed naming the cause and the logs; None for Ctrl-C (the CLI reports it,
    exit 130)."""
    run_dir = settings.run_dir
    ending = decisions.classify_ending(err, SIGTERM_SEEN.is_set())
    if ending in ("ctrl_c", "sigterm"):
        signal_name = "SIGTERM" if ending == "sigterm" else "Ctrl-C"
        try:
            _say(just_in_time(run_dir, invocation, signs=settings.signing_key is not None))
        except KeyboardInterrupt:  # Ctrl-C (or SIGTERM) again while waiting: stop at once
            _say(f"no just-in-time checkpoint ({signal_name} again while waiting for it)")
        _finish(
            settings, "interrupted", started, invocation, resume_from,
            f"stopped by {signal_name}", trackers=trackers,
        )  # fmt: skip
        if ending == "ctrl_c":  # the CLI says `interrupted` (exit 130); where to go on is said here
            _say(f"stopped by Ctrl-C; run folder {run_dir} is consistent: rerun to resume")
            return None
        return Interrupted(
            f"stopped by SIGTERM; run folder {run_dir} is consistent: rerun to resume"
        )
    cause, bad_data = _cause(err, settings, info)
    _finish(
        settings, "failed", started, invocation, resume_from, cause, trackers=trackers,
        bad_data=bad_data,
    )  # fmt: skip
    return RunFailed(
        [
            f"training failed: {cause}",
            f"checkpoints and summary: {run_dir}",
            _logs_line(run_dir, attempt),
        ]
    )


def _logs_line(run_dir: RunPath, attempt: int) -> str:
    """Where this attempt's logs are, naming only the ones it wrote: a run that failed before
    its workers trained has the driver's alone (`--worker 0` then answered 'no worker-0.log')."""
    logs = run_logs.attempt_dir(run_dir, attempt)
    try:
        ranks = run_logs.worker_ranks(run_dir, attempt)
    except (OSError, TrainctlError):  # the store itself may be what failed: say the usual
        ranks = [0]
    if not ranks:
        return (
            f"driver log: {logs}/driver.log (`trainctl logs {run_dir} --driver`); no worker "
            "wrote a log in this attempt"
        )
    shown = f"N = {ranks[0]}" if len(ranks) == 1 else f"N = {ranks[0]} to {ranks[-1]}"
    return (
        f"driver and worker logs: {logs}/ (`trainctl logs {run_dir} --worker N`, {shown}, the "
        "worker's rank; --driver for the driver's)"
    )


def _cause(
    err: BaseException, settings: TrainSettings, info: DatasetInfo
) -> tuple[str, str | None]:
    """The failure in one line; for a bad image, the file (and row) it came from; for a file
    Ray Data's reader refused, that file and why. Second: where the data is bad, when the
    failure was the data's (recorded, so that a retry looks there before training again)."""
    cause = decisions.root_cause(err)
    bad_image = decisions.is_bad_image(cause, err)
    if not (bad_image or decisions.is_refused_read(err)):
        return cause, None
    from app.data.kinds import dataset_kind

    where = dataset_kind(settings.dataset).locate_bad_image(info)
    if bad_image:
        said = cause.split(": ", 1)[-1]  # the decoder's message, less its class's name
        found = where or "the data"
        cause = f"bad image in {found}" if said in found else f"bad image in {found}: {cause}"
    elif where:
        cause = f"unreadable data in {where}"
    return cause, where or "the data"


def _conclude(
    settings: TrainSettings,
    info: DatasetInfo,
    started: float,
    invocation: str,
    resumed: RunPath | None,
    trackers: Trackers | None,
    previous: dict[str, Any] | None = None,
    evaluated: dict[str, Any] | None = None,
    run: _Run = _Run(),
) -> dict[str, Any]:
    """A succeeded run's summary, then its promotion, from one scan of its checkpoints: each
    file is read and hashed once (in a bucket a second pass would download them all again).
    `evaluated`: the run-end evaluation an earlier driver of this finished run recorded, kept
    where the step does not export and evaluate again (the same checkpoint, the same gate)."""
    summary, kept = _finish(settings, "succeeded", started, invocation, resumed, trackers=trackers)
    if evaluated is not None:
        summary["evaluation"] = evaluated
    if run.trial:  # the sweep promotes its best trial once
        return summary
    # Exported, evaluated on valid/ (and test/), gated: its line is the run's last.
    return promote_run(settings, info, summary, previous, good=kept, evaluate=True)


def _fit(plan: WorkerPlan, trackers: Trackers, run: _Run) -> None:
    """Ray Train's run, with the driver following the epochs: each one tracked, and the
    checkpoints pruned as they come."""
    from app.data.cache import cache_datasets
    from app.data.kinds import build_datasets
    from app.data.pool import placed

    settings, info = plan.settings, plan.info
    pool = _find_pool(settings)
    read_started = time.monotonic()
    with placed(pool):  # without a pool: Ray's defaults, as before there were pools
        datasets, cache = cache_datasets(build_datasets(settings, info), settings, info)
    took = f" ({time.monotonic() - read_started:.1f} s)" if cache.cache else ""
    _say(f"data: {cache.reason}{took}")
    trainer = _trainer(settings, plan.config(), datasets, pool, run)
    pruner = checkpoints.in_run_pruner(
        settings.run_dir, keep=settings.checkpoints_to_keep, metric=settings.checkpoint_metric,
        warn=_say, trusted=lambda refs: verified_only(refs, settings.signing_key),
    )  # fmt: skip

    def on_epoch(row: dict[str, Any]) -> None:
        trackers.log_epoch(row)
        pruner.after_checkpoint()

    follower = EpochFollower(
        settings.run_dir, settings.epochs, since=time.time(), emit=click.echo, on_epoch=on_epoch,
        on_checkpoint=pruner.after_checkpoint if settings.checkpoint_every.mid_epoch else None,
    )  # fmt: skip
    with follower:
        trainer.fit()


def _trainer(
    settings: TrainSettings,
    config: dict[str, Any],
    datasets: dict[str, Any],
    pool: Any,
    run: _Run,
) -> Any:
    """The TorchTrainer: the workers the settings ask for (off the data pool's nodes), the
    run folder on storage, Ray's retries, and the datasets split the same way at every start."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig

    from app.data.exact_split import ExactSplit
    from app.data.pool import training_selector
    from app.run.job_trainer import trainer_class
    from app.training.loop import train_loop_per_worker

    workers = settings.workers
    trainer = trainer_class(own_job=not run.group_cleaner)
    return trainer(
        train_loop_per_worker,
        train_loop_config=config,
        scaling_config=ScalingConfig(
            num_workers=(workers.min, workers.max) if workers.elastic else workers.max,
            use_gpu=settings.use_gpu,
            resources_per_worker={"CPU": settings.cpus_per_worker},
            accelerator_type=settings.accelerator_type,
            label_selector=training_selector(pool),  # off the data nodes (None: no pool)
        ),
        run_config=RunConfig(
            name=settings.run_name,
            **storage_options(settings.storage_path),
            failure_config=FailureConfig(
                max_failures=settings.max_failures,
                max_preemption_failures=settings.max_preemptions,
            ),
            # Ray keeps every checkpoint: trainctl's own pruning decides
            # (app/runfolder/retention.py).
            checkpoint_config=CheckpointConfig(num_to_keep=None),
            # A signing run: its checkpoints witnessed as they are reported
            # (app/export/witness.py); a sweep's trial: its epochs reported to Ray Tune. In that
            # order, as the controller calls them: Tune may end the trial (ASHA) on the report,
            # and with Tune first a stopped trial's checkpoints went unwitnessed, the epochs
            # Tune had judged included, and were set aside.
            callbacks=[*_witness(settings), *run.callbacks],
        ),
        datasets=datasets,
        # The same shards at every start (exact mid-epoch resume), read on the data pool's nodes.
        dataset_config=ExactSplit(pool=pool),
    )


def _witness(settings: TrainSettings) -> list[Any]:
    from app.export.witness_callback import Witness

    return [Witness(settings.run_dir, settings.signing_key)] if settings.signing_key else []


def _find_pool(settings: TrainSettings) -> Any:
    """The cluster's data pool (app/data/pool.py), said and recorded in the running summary
    (`ingest`), which the final summary carries on."""
    from app.data.pool import find_data_pool, ingest_line, ingest_record

    pool = find_data_pool()
    _say(f"data: {ingest_line(pool)}")
    running = read_summary(settings.run_dir) or {}
    write_summary(settings.run_dir, {**running, "ingest": ingest_record(pool)})
    return pool


def _finish(
    settings: TrainSettings,
    status: str,
    started: float,
    invocation: str,
    resumed: RunPath | None,
    error: str | None = None,
    trackers: Trackers | None = None,
    bad_data: str | None = None,
) -> tuple[dict[str, Any], list[checkpoints.CheckpointRef]]:
    """The run's summary written; returned with the verified checkpoints retention kept.
    `bad_data`: where the data a failed run met is bad (app/preflight.py looks there again)."""
    run_dir = settings.run_dir
    # Every checkpoint hashed once, for all uses below; with a signing key, only those this
    # run's workers wrote (app/export/witness.py).
    good = witnessed(checkpoints.scan(run_dir).good, settings.signing_key, _say)
    removed = checkpoints.prune(
        run_dir, keep=settings.checkpoints_to_keep, metric=settings.checkpoint_metric, good=good
    )
    kept = [ref for ref in good if ref.path not in removed]
    epochs = run_folder.epochs(run_dir)  # read once: the summary's figures, and the notes below
    summary = _summary(settings, status, started, invocation, resumed, error, kept, epochs)
    if bad_data is not None:
        summary[BAD_DATA_KEY] = bad_data
    # Said by the driver whose workers trained (a rerun of a finished run trains nothing).
    if invocation and decisions.compile_fell_back(settings.compile, epochs):
        _say("torch.compile failed on the workers; trained uncompiled (the worker log says why)")
    if (diverged := decisions.diverged_since(epochs)) is not None:
        _say(decisions.diverged_line(diverged, settings.lr))
        summary["diverged_since_epoch"] = diverged  # status says it
    try:
        curves = plot_curves(run_dir)
    except Exception as err:  # a plot must never leave the summary at "running"
        _say(f"curves not drawn ({type(err).__name__}: {err})")
        curves = None
    _close_trackers(settings, status, summary, trackers, kept, epochs, invocation)
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
    url = recorded_tracking(summary).get("mlflow", {}).get("run_url")
    if isinstance(url, str):
        _say(f"  mlflow:  {one_line(url, 300)}")
    return summary, kept


def _summary(
    settings: TrainSettings,
    status: str,
    started: float,
    invocation: str,
    resumed: RunPath | None,
    error: str | None,
    kept: list[checkpoints.CheckpointRef],
    trained: list[dict[str, Any]],
) -> dict[str, Any]:
    """The final summary's figures: the run's own, its restarts, and its accelerator-hours.
    `trained`: metrics.jsonl's epochs, every driver's (a killed driver's training clock too)."""
    run_dir = settings.run_dir
    starts = run_folder.attempts(run_dir, invocation) if invocation else []
    before = read_summary(run_dir) or {}  # the running summary: what earlier drivers recorded
    this_driver_s = time.monotonic() - started
    this_driver = decisions.AsTrained(
        _recorded_settings(settings), settings.epochs, settings.use_gpu, settings.cpus_per_worker
    )
    ran = decisions.as_trained(before, this_driver, trained_now=bool(invocation))
    summary = build_summary(
        run_dir,
        status=status,
        run_name=settings.run_name,
        target_epochs=ran.target_epochs,
        settings=ran.settings,
        duration_s=max(
            usage.run_seconds(before.get("duration_s"), this_driver_s),
            usage.clock_seconds(trained),
        ),
        failures=decisions.failures_recovered(starts),
        restored_from=decisions.restored_from(starts, str(resumed) if resumed else None),
        metric=settings.checkpoint_metric,
        error=error,
        good=kept,
        epochs=trained,
    )
    # What this run has held so far: this driver's worker groups on top of earlier drivers'.
    use_gpu, cpus = ran.use_gpu, ran.cpus_per_worker
    summary["accelerator_hours"] = usage.at_least(
        usage.accelerator_hours(
            before.get("accelerator_hours"),
            starts,
            end=time.time(),
            use_gpu=use_gpu,
            cpus_per_worker=cpus,
        ),
        usage.from_training_clock(trained, use_gpu=use_gpu, cpus_per_worker=cpus),
    )
    summary.update(_stop_and_costs(settings, summary["accelerator_hours"], kept, before))
    # Carried over: where this attempt's ingest ran (_find_pool), and the tracker runs an
    # earlier driver recorded where this one has none (_close_trackers records its own).
    if before.get("ingest") is not None:
        summary["ingest"] = before["ingest"]
    if tracking := recorded_tracking(before):
        summary["tracking"] = tracking
    # What each tracker got, until a driver with trackers records it again (_close_trackers):
    # a rerun of a finished run that starts none keeps the record of what they missed.
    if isinstance(before.get("tracking_delivery"), dict):
        summary["tracking_delivery"] = before["tracking_delivery"]
    return summary


def _stop_and_costs(
    settings: TrainSettings,
    hours: dict[str, Any],
    kept: list[checkpoints.CheckpointRef],
    before: dict[str, Any],
) -> dict[str, Any]:
    """The early stop that ended the run (recorded in its newest checkpoint), the cost of its
    accelerator-hours (in `hours`, in place) and the time and hours to each threshold."""
    out: dict[str, Any] = {}
    newest = kept[0] if kept else None
    stop = recorded_stop(newest.stopped) if newest and newest.step is None else None
    if stop is not None and stop.epoch < settings.epochs:
        out["stopped_early"] = stop.record()
    price = settings.gpu_hour_price
    if price > 0:
        hours.update(price_per_hour=price, cost=first_met.cost(hours["hours"], price))
    wanted = first_met.terms(settings.stop_at, settings.promote_if)
    if wanted:
        computed = first_met.first_met(
            run_folder.epochs(settings.run_dir), wanted, per_worker=hours["per_worker"],
            price=price,
        )  # fmt: skip
        out["time_to_threshold"] = first_met.keep_first(before.get("time_to_threshold"), computed)
    return out


def _close_trackers(
    settings: TrainSettings,
    status: str,
    summary: dict[str, Any],
    trackers: Trackers | None,
    kept: list[checkpoints.CheckpointRef],
    epochs: list[dict[str, Any]],
    invocation: str,
) -> None:
    """The trackers' runs ended with the best checkpoint, and what each got in the summary,
    beside the records of trackers this driver did not start (not configured this time: what
    they missed stays owed). `epochs`: metrics.jsonl's, where an epoch that ended after the
    driver stopped following (Ctrl-C reaches the workers seconds later) is too: sent once this
    driver's workers started, whose first report dropped the lines past the checkpoint they
    resumed (before that, those lines are a set-aside checkpoint's, not this run's)."""
    if trackers is None:
        return
    if invocation and run_folder.attempts(settings.run_dir, invocation):
        trackers.catch_up(epochs)
    # The summary's best, as the object it was ranked from (not located again from text).
    best = next(iter(retention.ranked(kept, settings.checkpoint_metric)), None)
    trackers.finish(status, best.path if best else None)
    summary["tracking"] = {**recorded_tracking(summary), **trackers.ids}
    # Per tracker, the epochs it got and did not: no metric is lost without a record.
    earlier = summary.get("tracking_delivery")
    summary["tracking_delivery"] = {
        **(earlier if isinstance(earlier, dict) else {}),
        **trackers.delivery(),
    }


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
