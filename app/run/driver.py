"""The `trainctl train` driver: settings -> dataset -> TorchTrainer -> run folder.

Everything that can be checked cheaply is checked before Ray starts (exit 2). The run folder
<storage_path>/<run_name> is the run's identity: rerunning with the same settings resumes from the
newest intact checkpoint there, and a run that already reached TRAIN_EPOCHS is not trained again.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import click

from app.data.schema import DatasetInfo
from app.errors import EXIT_SIGTERM, ConfigError, RunFailed, TrainctlError
from app.preflight import Found, cluster_check, preflight_for_training
from app.run import checkpoints, resume
from app.run import folder as run_folder
from app.run import log_capture as run_logs
from app.run.folder import read_summary, write_summary
from app.run.progress import EpochFollower
from app.run.summary import build_summary, plot_curves
from app.settings import TrainSettings
from app.storage.buckets import locate
from app.storage.location import RunPath, storage_options
from app.storage.probe import StoreUnavailable
from app.tracking.trackers import Trackers
from app.training.accel import resolve


class Interrupted(TrainctlError):
    exit_code = EXIT_SIGTERM


def run_training(settings: TrainSettings) -> dict[str, Any]:
    started = time.monotonic()
    run_dir = settings.run_dir
    try:
        info = preflight_for_training(settings)
    except ConfigError as err:
        _record_invalid(run_dir, err)
        raise
    # The driver's output goes to <run_dir>/logs/attempt-K/driver.log too, and each worker's
    # to worker-N.log there: they outlive the Ray cluster (app/run/log_capture.py).
    attempt = run_logs.next_attempt(run_dir)
    driver_log = run_logs.attempt_dir(run_dir, attempt) / "driver.log"
    banner = f"driver, attempt {attempt}"
    with run_logs.capture(driver_log, settings.log_max_mb, banner, held=True) as log:
        return _train(settings, info, started, attempt, log.open)


def _train(
    settings: TrainSettings,
    info: DatasetInfo,
    started: float,
    attempt: int,
    open_log: Callable[[], None],
) -> dict[str, Any]:
    run_dir = settings.run_dir
    # auto values become concrete once, here: the workers and the summary see what ran.
    settings, choices = resolve(settings, info)
    if choices:
        _say(f"gpu: {', '.join(choices)}")

    latest = resume.usable_checkpoint(settings, info, _say)
    if latest and latest.epoch >= settings.epochs:
        _say(
            f"run {settings.run_name} already finished {latest.epoch} epochs "
            f"(TRAIN_EPOCHS={settings.epochs}); nothing to train. Raise TRAIN_EPOCHS to continue."
        )
        # A driver killed after the last checkpoint left its tracker runs open: close them.
        before = read_summary(run_dir) or {}
        previous = before.get("tracking") if before.get("status") != "succeeded" else None
        trackers = Trackers.start(settings, previous) if previous else None
        if trackers is not None:
            trackers.catch_up(run_folder.epochs(run_dir))
        return _finish(
            settings, "succeeded", started, invocation="", resumed=str(latest.path),
            trackers=trackers,
        )  # fmt: skip
    if latest:
        _say(f"resuming run {settings.run_name} at epoch {latest.epoch + 1} from {latest.path}")
    else:
        _say(f"starting run {settings.run_name} in {run_dir}")

    invocation = uuid.uuid4().hex
    resume_from = str(latest.path) if latest else None
    # Joining a cluster may take a while: SIGTERM and Ctrl-C end it cleanly too.
    with _sigterm_interrupts():
        try:
            cluster_check(settings, Found(info))  # the last of `trainctl check`'s checks
        except _StopForSigterm:
            raise Interrupted(
                f"stopped by SIGTERM while joining the Ray cluster; run folder {run_dir} is "
                "unchanged"
            ) from None
        except ConfigError as err:  # a request the cluster never holds is bad input too
            _record_invalid(run_dir, err)
            raise
    open_log()  # training starts: from here on the driver's output is kept in the run folder
    trackers = Trackers.start(settings, (read_summary(run_dir) or {}).get("tracking"))
    trackers.catch_up(
        [r for r in run_folder.epochs(run_dir) if latest and r["epoch"] <= latest.epoch]
    )
    write_summary(run_dir, {**_running_summary(settings, resume_from), "tracking": trackers.ids})
    run_folder.forget_ray_snapshot(run_dir)  # resume was decided above, from verified files

    with _sigterm_interrupts():
        try:
            _fit(settings, info, invocation, resume_from, attempt, trackers)
        except (Exception, KeyboardInterrupt) as err:  # any training failure: a clear exit 1
            # What the SIGTERM handler raised may reach here wrapped or replaced by Ray (ray.get
            # turns it into a plain KeyboardInterrupt); the flag tells.
            if _SIGTERM.is_set():
                _finish(
                    settings, "interrupted", started, invocation, resume_from, "stopped by SIGTERM",
                    trackers=trackers,
                )  # fmt: skip
                raise Interrupted(
                    f"stopped by SIGTERM; run folder {run_dir} is consistent: rerun to resume"
                ) from None
            if isinstance(err, KeyboardInterrupt):  # Ctrl-C: the CLI reports it
                raise
            cause = _root_cause(err)
            if "ImageError" in f"{cause} {err}":  # a worker's block-relative row: find the file
                from app.data.locate import locate_bad_image

                where = locate_bad_image(info, endpoint=settings.storage_endpoint)
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
    return _finish(settings, "succeeded", started, invocation, resume_from, trackers=trackers)


def _fit(
    settings: TrainSettings,
    info: DatasetInfo,
    invocation: str,
    resume_from: str | None,
    attempt: int,
    trackers: Trackers,
) -> None:
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from app.data.cache import cache_datasets
    from app.data.pipeline import build_datasets
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
            failure_config=FailureConfig(max_failures=settings.max_failures),
            checkpoint_config=CheckpointConfig(
                num_to_keep=settings.checkpoints_to_keep,
                checkpoint_score_attribute=settings.checkpoint_metric,
                checkpoint_score_order=(
                    "max" if checkpoints.higher_is_better(settings.checkpoint_metric) else "min"
                ),
            ),
        ),
        datasets=datasets,
    )
    follower = EpochFollower(
        settings.run_dir, settings.epochs, since=time.time(), emit=click.echo,
        on_epoch=trackers.log_epoch,
    )  # fmt: skip
    with follower:
        trainer.fit()


def _finish(
    settings: TrainSettings,
    status: str,
    started: float,
    invocation: str,
    resumed: str | None,
    error: str | None = None,
    trackers: Trackers | None = None,
) -> dict[str, Any]:
    run_dir = settings.run_dir
    good = checkpoints.scan(run_dir).good  # every checkpoint hashed once, for both uses below
    removed = checkpoints.prune(
        run_dir, keep=settings.checkpoints_to_keep, metric=settings.checkpoint_metric, good=good
    )
    starts = run_folder.attempts(run_dir, invocation) if invocation else []
    restored_from = next(
        (a["restored_from"] for a in reversed(starts) if a.get("restored_from")), resumed
    )
    summary = build_summary(
        run_dir,
        status=status,
        run_name=settings.run_name,
        target_epochs=settings.epochs,
        settings=_recorded_settings(settings),
        duration_s=time.monotonic() - started,
        failures=max(0, len(starts) - 1),
        restored_from=restored_from,
        metric=settings.checkpoint_metric,
        error=error,
        good=[ref for ref in good if ref.path not in removed],
    )
    if settings.compile == "on" and any(
        e.get("compiled") == 0.0 for e in run_folder.epochs(run_dir)
    ):  # workers' output does not reach this terminal: say it here, once
        _say("torch.compile failed on the workers; trained uncompiled (the worker log says why)")
    try:
        curves = plot_curves(run_dir)
    except Exception as err:  # a plot must never leave the summary at "running"
        _say(f"curves not drawn ({type(err).__name__}: {err})")
        curves = None
    if trackers is not None:
        best = (summary.get("best") or {}).get("checkpoint")
        trackers.finish(status, locate(best, settings.storage_endpoint) if best else None)
        summary["tracking"] = trackers.ids
        # Per tracker, the epochs it got and did not: no metric is lost without a record.
        summary["tracking_delivery"] = trackers.delivery()
    elif (read_summary(run_dir) or {}).get("tracking"):
        summary["tracking"] = read_summary(run_dir)["tracking"]  # type: ignore[index]
    path = write_summary(run_dir, summary)
    metrics = summary["metrics"]
    accuracy = f", val_accuracy {metrics['val_accuracy']:.4f}" if "val_accuracy" in metrics else ""
    _say(
        f"run {settings.run_name} {status}: {summary['epochs_completed']}/{settings.epochs} "
        f"epochs{accuracy}, {summary['failures']} failure(s) recovered"
    )
    _say(f"  summary: {path}")
    if curves:
        _say(f"  curves:  {curves}")
    return summary


def _running_summary(settings: TrainSettings, resume_from: str | None) -> dict[str, Any]:
    summary = read_summary(settings.run_dir) or {}
    summary.update(
        status="running",
        run_name=settings.run_name,
        run_dir=str(settings.run_dir),
        epochs_target=settings.epochs,
        restored_from=resume_from,
        settings=_recorded_settings(settings),
    )
    # The last driver's outcome: this one's is written when it finishes.
    summary.pop("error", None)
    summary.pop("tracking_delivery", None)
    return summary


def _recorded_settings(settings: TrainSettings) -> dict[str, Any]:
    """The effective settings, plus the one choice that is not a setting: the optimizer."""
    return {**settings.redacted(), "fused_adamw": settings.use_gpu}


def _record_invalid(run_dir: RunPath, err: ConfigError) -> None:
    """Where the run folder already exists, leave the reason there; never create it for this."""
    if isinstance(err, StoreUnavailable) and err.variable == "TRAIN_STORAGE_PATH":
        return  # the run folder's store did not answer its probe: do not wait on it again

    try:
        if not run_dir.is_dir():
            return
    except OSError:  # an unreachable store is itself the error being reported
        return
    summary = read_summary(run_dir) or {"run_name": run_dir.name}
    summary.update(status="invalid", error="; ".join(err.problems))
    # An unwritable run folder is itself the error being reported.
    with contextlib.suppress(OSError):
        write_summary(run_dir, summary)


_SIGTERM = threading.Event()


class _StopForSigterm(KeyboardInterrupt):
    """What the SIGTERM handler raises.

    Ray's blocking calls (the ray.get inside trainer.fit) let only a KeyboardInterrupt out of a
    signal handler at once; any other exception is held back until the call returns, which in
    fit() is when training ends, long after Kubernetes has given up and sent SIGKILL.
    """


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Inside: SIGTERM raises _StopForSigterm and sets _SIGTERM (cleared on entry, so that a
    flag left by an earlier run in this process does not count); the old handler after."""
    _SIGTERM.clear()
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    _SIGTERM.set()
    raise _StopForSigterm("SIGTERM")


def _root_cause(err: BaseException) -> str:
    """The innermost error's one-line message, not Ray's layers of wrapping."""
    while err.__cause__ is not None:
        err = err.__cause__
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    return f"{type(err).__name__}: {last}" if last else type(err).__name__


def _say(message: str) -> None:
    click.echo(f"trainctl: {message}", err=False)
