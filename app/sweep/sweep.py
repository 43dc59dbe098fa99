"""The `trainctl tune` driver: space -> trials -> Ray Tune -> records -> one promotion.

A sweep is a run folder of run folders, <TRAIN_STORAGE_PATH>/<TRAIN_RUN_NAME>/:

    sweep.json, trials.csv, sweep.png   the sweep's records (app/runfolder/sweep_records.py)
    trials/trial-0001/ ...              one normal run folder per trial
    tune/                               Ray Tune's own experiment files (not read back)

Everything that can be checked before Ray starts is checked (exit 2): the space, every drawn
trial's settings, the storage, the trackers, the data. A rerun with the same name continues:
trainctl's records are the truth, not Tune's experiment state. A trial whose folder says it
succeeded, or that the scheduler stopped (sweep.json's `stopped`), is not trained again; any
other resumes from its own checkpoints under the run folder's rules (app/run/resume.py). The
best trial that trained to the end is then exported and judged by TRAIN_PROMOTE_IF exactly as
a single run is (app/promotion/step.py): one promotion per sweep, none per trial.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import click

from app.data.schema import DatasetInfo
from app.errors import RunFailed
from app.formatting import counted, finite
from app.preflight import joins_cluster, preflight_for_training, sweep_data, trials_fit_the_data
from app.run.decisions import delivery_incomplete
from app.run.driver import Interrupted, run_training
from app.run.signals import SIGTERM_SEEN, just_in_time_each, sigterm_interrupts
from app.runfolder import log_capture as run_logs
from app.runfolder import sweep_records as results
from app.runfolder.folder import read_summary, read_sweep, recorded_tracking, refuse_the_other_kind
from app.runfolder.summary import record_interrupted
from app.runfolder.sweep_records import DONE, FAILED, HIGHER_IS_BETTER, WARM_START_KEY
from app.settings import TrainSettings
from app.settings.tune_continuation import kept_alike, same_trials, samples_raised
from app.settings.tune_plan import Trial, plan_sweep, space_warnings
from app.settings.tune_space import Dimension
from app.storage.location import storage_options
from app.sweep import parent_run
from app.sweep.warm_start import pin_champion
from app.sweep_capacity import TRIAL_DRIVER, concurrent_trials
from app.training.warm_weights import WarmStart

TUNE_DIR = "tune"


def run_sweep(settings: TrainSettings) -> dict[str, Any]:
    """The sweep, its own output kept in <sweep>/logs/attempt-K/driver.log (each trial's is in
    its own folder), written from when its checks pass: a refused sweep leaves nothing."""
    sweep_dir = settings.run_dir
    attempt = run_logs.next_attempt(sweep_dir)
    driver_log = run_logs.attempt_dir(sweep_dir, attempt) / "driver.log"
    banner = f"sweep, attempt {attempt}"
    with run_logs.capture(driver_log, settings.log_max_mb, banner, held=True) as log:
        return _sweep(settings, log.open)


def _sweep(settings: TrainSettings, open_log: Callable[[], None]) -> dict[str, Any]:
    started = time.monotonic()
    sweep_dir = settings.run_dir
    refuse_the_other_kind(sweep_dir, sweep=True, timeout_s=settings.storage_timeout_s)
    space, trials, per_trial = plan_sweep(settings)
    for warning in space_warnings(settings, space):
        click.echo(f"trainctl: warning: {warning}", err=True)
    before = read_sweep(sweep_dir) or {}
    same_trials(settings, before, trials, space)
    results.refuse_planted_trials(sweep_dir, trials)
    ready = preflight_for_training(settings)  # storage, trackers, the data (prepared once)
    info: DatasetInfo = ready.info
    data = sweep_data(before, info, settings)  # a rerun on other files is refused
    trials_fit_the_data(per_trial, info, ready.warm_start)
    sweep = _Sweep(settings, space, trials, results.recorded_stopped(before), before)
    sweep.extra[results.DATA_KEY] = data
    todo = results.left_to_train(sweep_dir, trials, settings.checkpoint_metric, before)
    per_trial, pinned, warm_record = pin_champion(
        settings, ready.warm_start, before, per_trial, trials_left=bool(todo)
    )
    open_log()  # the sweep goes on: from here its output is kept in its folder
    if warm_record is not None:
        sweep.extra[WARM_START_KEY] = warm_record
    if pinned is not None:
        _say(f"every trial starts from {pinned.described}")
    # A rerun's trials that checkpointed resume where they stopped, each from its own folder.
    resuming = sum(bool(results.checkpointed(sweep_dir, trial)) for trial in todo)
    raised = samples_raised(before, settings)
    _say(
        f"sweep {settings.run_name}: {counted(len(trials), 'trial')}, "
        f"{len(trials) - len(todo)} done, {len(todo)} to train"
        + (f" ({resuming} resuming from their checkpoints)" if resuming else "")
        + (f" (TRAIN_TUNE_SAMPLES raised from {raised}: the new trials follow)" if raised else "")
        + f" ({settings.tune_scheduler}, {settings.checkpoint_metric}) in {sweep_dir}"
    )
    deliver_owed([t for t in trials if t not in todo], per_trial, info)
    if todo:
        ready.join_cluster()  # joins or starts Ray; one trial must fit
        sweep.write("running")
        _tune_until_sigterm(settings, sweep, todo, per_trial, pinned)
    return _conclude(settings, sweep, per_trial, info, started)


def deliver_owed(done: list[Trial], per_trial: dict[str, TrainSettings], info: DatasetInfo) -> None:
    """The finished trials whose tracker runs missed epochs or their close (the server was
    down when they ended) get them now, as a rerun of a finished run does: Tune never runs a
    finished trial again, so what its summary said was owed stayed owed (a red-team pass)."""
    for trial in done:
        settings = per_trial[trial.trial_id]
        summary = read_summary(settings.run_dir) or {}
        if summary.get("status") == "succeeded" and delivery_incomplete(summary):
            _say(f"{trial.trial_id}: its trackers missed epochs or their close; delivering them")
            # The finished run's own path: nothing trains, no cluster is joined.
            run_training(settings, info, join_cluster=lambda: None, promote=False)


def _tune_until_sigterm(
    settings: TrainSettings,
    sweep: _Sweep,
    todo: list[Trial],
    per_trial: dict[str, TrainSettings],
    pinned: WarmStart | None,
) -> None:
    """The trials, trained by Ray Tune; SIGTERM (an evicted head) ends the sweep cleanly."""
    with sigterm_interrupts():
        try:
            _tune(settings, sweep, todo, per_trial, pinned)
        except KeyboardInterrupt:
            by = "Ctrl-C" if not SIGTERM_SEEN.is_set() else "SIGTERM"
            if SIGTERM_SEEN.is_set():
                sweep.checkpoint_training()
            sweep.interrupt_running(f"the sweep was stopped by {by}; rerun the sweep to go on")
            sweep.write("interrupted")
            sweep.parent.finish("incomplete", None)
            if not SIGTERM_SEEN.is_set():  # Ctrl-C: exit 130, nothing promoted
                _say(f"stopped by Ctrl-C; sweep folder {settings.run_dir} is consistent: rerun "
                     "to continue the sweep")  # fmt: skip
                raise
            # The trials' drivers end with this one (their Ray job ends): each resumes from its
            # last committed checkpoint when the sweep is rerun.
            raise Interrupted(
                f"stopped by SIGTERM; sweep folder {settings.run_dir} is consistent: rerun to "
                "continue the sweep"
            ) from None


class _Sweep:
    """The sweep's records as they stand, rewritten after every trial."""

    def __init__(
        self,
        settings: TrainSettings,
        space: dict[str, Dimension],
        trials: list[Trial],
        stopped: dict[str, dict[str, Any]],
        before: dict[str, Any],
    ) -> None:
        self.settings, self.space, self.trials, self.stopped = settings, space, trials, stopped
        self.judged: dict[str, int] = {}  # trial id -> the epoch the scheduler stopped it at
        self.introduced: set[str] = set()  # trials whose drawn values a line has named
        self.parent = parent_run.ParentRun.start(settings, recorded_tracking(before))
        self.extra: dict[str, Any] = {}
        started_at = finite(before.get("started_at"))  # a damaged record's is not carried
        self.started_at = started_at if started_at and started_at > 0 else time.time()

    def rows(self) -> list[dict[str, Any]]:
        metric = self.settings.checkpoint_metric
        return [
            results.trial_row(self.settings.run_dir, t, metric, self.stopped) for t in self.trials
        ]

    def checkpoint_training(self) -> None:
        """After SIGTERM (an evicted head), as a run's driver does: each training trial's
        workers asked for a just-in-time checkpoint, all awaited together within JIT_WAIT_S.
        Ray Tune leaves its trials running while a KeyboardInterrupt unwinds it (it cleans up
        on an Exception only); they end with this driver's Ray job. Without it, each resumed
        from its last committed checkpoint and trained the steps after it again."""
        training = results.training_trials(self.settings.run_dir, self.trials)
        runs = [(folder, invocation) for _, folder, invocation in training]
        signs = self.settings.signing_key is not None
        for (trial, _, _), line in zip(training, just_in_time_each(runs, signs=signs), strict=True):
            _say(f"{trial.trial_id}: {line}")

    def interrupt_running(self, why: str) -> None:
        """The trials training when the sweep stopped: their drivers end with the sweep's Ray
        job, before they can record it; each summary then says interrupted, and why, rather
        than `running` for good."""
        for trial in self.trials:
            record_interrupted(results.trial_dir(self.settings.run_dir, trial), why)

    def write(self, status: str) -> dict[str, Any]:
        s = self.settings
        rows = self.rows()
        best = results.best_row(rows, s.checkpoint_metric, s.epochs)
        record = {
            "sweep": s.run_name,
            "sweep_dir": str(s.run_dir),
            "status": status,
            "metric": s.checkpoint_metric,
            "mode": "max" if HIGHER_IS_BETTER[s.checkpoint_metric] else "min",
            "scheduler": s.tune_scheduler,
            "samples": s.tune_samples,
            "seed": s.seed,
            "epochs": s.epochs,
            "kept": kept_alike(s, self.space),
            "space": {d.key: {d.kind: list(d.values)} for d in self.space.values()},
            "trials": rows,
            "best": best,
            "stopped": self.stopped,
            "tracking": self.parent.ids,
            "started_at": self.started_at,
            **self.extra,
        }
        results.write_records(s.run_dir, record)
        self.parent.adopt(rows)
        return record

    def trial_reported(self, trial_id: str, result: dict[str, Any]) -> None:
        """The sweep's progress, one line per epoch a trial reports (the trials' own epoch
        lines stay in their logs)."""
        metric = self.settings.checkpoint_metric
        value = finite(result.get(metric))
        figure = f"{metric} {value:.4f}" if value is not None else f"no {metric}"
        _say(
            f"{self._named(trial_id)}: epoch {result.get('epoch')}/{self.settings.epochs}, {figure}"
        )

    def _named(self, trial_id: str) -> str:
        """`trial-0002 (lr 0.003, weight_decay 0.0213)` in a trial's first line, its id after:
        the lines said which trial, never what it tried (a red-team pass)."""
        if trial_id in self.introduced:
            return trial_id
        self.introduced.add(trial_id)
        trial = next((t for t in self.trials if t.trial_id == trial_id), None)
        if trial is None or not trial.values:
            return trial_id
        drawn = ", ".join(f"{k} {results.shown_value(v)}" for k, v in trial.values.items())
        return f"{trial_id} ({drawn})"

    def trial_ended(self, trial_id: str, last: dict[str, Any] | None, error: bool) -> None:
        last = last or {}
        epoch = int(last.get("epoch") or 0)
        trial = next(t for t in self.trials if t.trial_id == trial_id)
        ended = results.trial_row(self.settings.run_dir, trial, self.settings.checkpoint_metric, {})
        # Stopped: the scheduler said so (a trial Tune ends because the sweep is stopping was
        # recorded stopped, and never trained again), it reported epochs but fewer than
        # TRAIN_EPOCHS, and its driver did not end it.
        stopped = trial_id in self.judged
        if (
            stopped
            and not error
            and 0 < epoch < self.settings.epochs
            and ended["status"] == "running"
        ):
            # The scheduler's verdict, kept before anything else: a rerun does not retrain it.
            self.stopped[trial_id] = {"epoch": epoch, "time_s": last.get("time_total_s")}
            by = results.stopped_by(self.settings.tune_scheduler, epoch, ended["epochs"])
            _say(f"{trial_id}: stopped by {by}")
        else:
            _say(f"{trial_id}: {'failed' if error else ended['status']}")
        self.write("running")


def _tune(
    settings: TrainSettings,
    sweep: _Sweep,
    todo: list[Trial],
    per_trial: dict[str, TrainSettings],
    pinned: WarmStart | None,
) -> None:
    from ray import tune

    from app.sweep.trial import forwarded_env, run_trial

    metric = settings.checkpoint_metric
    # A trial's training ends long before the sweep's job: on a cluster the sweep joined, Ray
    # Train's placement-group cleaner frees the group of a trial ASHA stopped. On a cluster
    # the sweep started itself (no dashboard) it cannot reach its own cluster's state API: it
    # asks the Ray cluster this machine started last, and where that is another one, which
    # knows no such controller, it removed the live trial's group (a CI run: every trial
    # failed "Destroying worker since its placement group was removed").
    trainable = tune.with_parameters(
        run_trial, trials={t.trial_id: per_trial[t.trial_id] for t in todo},
        env=forwarded_env(os.environ), pinned=pinned, group_cleaner=joins_cluster(settings),
    )  # fmt: skip
    # The trial's function only drives its TorchTrainer (as `trainctl train`'s process does):
    # the workers hold the CPUs and GPUs, and TRAIN_TUNE_CONCURRENT bounds the trials. It runs on
    # the head, as the sweep's driver does, whatever CPUs the head has (none, on Kubernetes):
    # the chart mounts the signing keys there only, and Ray Train's controller, which witnesses
    # each checkpoint with them (app/export/witness_callback.py), starts on its driver's node.
    # On a worker pod the trial could not load the keys, and a signed sweep failed every trial.
    trainable = tune.with_resources(trainable, TRIAL_DRIVER)
    concurrent, why = concurrent_trials(settings, len(todo))
    _say(f"{counted(concurrent, 'trial')} at a time ({why})")
    # Tune's default output engine prints a banner whatever `verbose` says (a configuration
    # table, a TensorBoard command into Ray's temporary session folder); the classic engine at
    # verbose 0 prints nothing, and the sweep's own lines give the progress (trial_reported).
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # A failed trial is said in one line by the sweep (trial_ended) and its reason in the
    # sweep's last lines, from the trial's own folder; Tune printed its traceback (some 50
    # lines of Ray's frames) and "Trials did not complete" besides.
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
    logging.getLogger("ray.tune.tune").addFilter(_NOT_INCOMPLETE_TRIALS)  # once: one object
    # Tune's own Ctrl-C handler ends fit() as if the sweep had finished, and the best trial so
    # far would be promoted with exit 0: Ctrl-C stops the sweep here instead, as in `train`.
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    tuner = tune.Tuner(
        trainable,
        param_space={"trial": tune.grid_search([t.trial_id for t in todo])},
        tune_config=tune.TuneConfig(
            metric=metric,
            mode="max" if HIGHER_IS_BETTER[metric] else "min",
            scheduler=_scheduler(settings, sweep.judged),
            max_concurrent_trials=concurrent,
            reuse_actors=False,
        ),
        run_config=tune.RunConfig(
            name=TUNE_DIR,
            **storage_options(settings.run_dir),
            callbacks=[_recorder(sweep), _quiet_progress()],
            failure_config=tune.FailureConfig(max_failures=0),  # a trial retries by its own rules
            verbose=0,
        ),
    )
    tuner.fit()


class _NotIncompleteTrials(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Trials did not complete")


_NOT_INCOMPLETE_TRIALS = _NotIncompleteTrials()


def _quiet_progress() -> Any:
    """Tune's per-trial progress printer, silenced: at verbose 0 it still printed a raw
    "Trial run_trial_... completed. Last result: " line for each trial a resumed sweep finished
    without a new result. Given one, Tune adds none of its own; the sweep's own lines say
    each trial's end (trial_reported)."""
    from ray.tune.progress_reporter import TrialProgressCallback

    class QuietProgress(TrialProgressCallback):  # type: ignore[misc]
        def _print(self, msg: str) -> None:
            pass

    return QuietProgress()


def _scheduler(settings: TrainSettings, judged: dict[str, int] | None = None) -> Any:
    """Tune's scheduler for TRAIN_TUNE_SCHEDULER; `judged` collects, by trial id, the epoch
    whose result the scheduler stopped each trial at: the only trials the sweep records as
    stopped (a trial Tune ends as the sweep itself stops is interrupted, and trains again)."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

    if settings.tune_scheduler != "asha":
        return FIFOScheduler()
    verdicts = judged if judged is not None else {}

    class LastEpochEndsItself(ASHAScheduler):  # type: ignore[misc]
        """ASHA, except at TRAIN_EPOCHS: a rung there (grace period x reduction factor^k equal
        to it) saves no training, and its stop killed the trial's driver before it wrote the
        run's end: the trial stayed "running" and the sweep incomplete. Its result still
        counts toward the rung's cutoff."""

        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
            action = super().on_trial_result(tune_controller, trial, result)
            if result.get("epoch", 0) >= settings.epochs:
                return TrialScheduler.CONTINUE
            if action == TrialScheduler.STOP:
                verdicts[trial.config["trial"]] = int(result.get("epoch", 0))
            return str(action)

    return LastEpochEndsItself(
        time_attr="epoch",
        max_t=settings.epochs,
        grace_period=min(settings.tune_grace_period, settings.epochs),
        reduction_factor=settings.tune_reduction_factor,
        # A trial that reaches TRAIN_EPOCHS ends by itself: stopped by Tune at its last report,
        # its driver would be killed before it writes the run's end (summary, pruning).
        stop_last_trials=False,
    )


def _recorder(sweep: _Sweep) -> Any:
    from ray import tune

    class Recorder(tune.Callback):
        def on_trial_result(
            self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
        ) -> None:
            sweep.trial_reported(trial.config["trial"], result)

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            sweep.trial_ended(trial.config["trial"], trial.last_result, error=False)

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            sweep.trial_ended(trial.config["trial"], trial.last_result, error=True)

    return Recorder()


def _conclude(
    settings: TrainSettings,
    sweep: _Sweep,
    per_trial: dict[str, TrainSettings],
    info: DatasetInfo,
    started: float,
) -> dict[str, Any]:
    from app.sweep.ship import mark_stopped, promote_best

    rows = sweep.rows()
    for row in rows:
        if row["status"] == "stopped":
            mark_stopped(per_trial[row["trial"]], sweep.stopped.get(row["trial"]) or {}, info)
    sweep.extra["duration_s"] = round(time.monotonic() - started, 2)
    record = sweep.write("running")
    pending = [r["trial"] for r in record["trials"] if r["status"] not in DONE]
    failed = [_failed_line(r) for r in record["trials"] if r["status"] in FAILED]
    unfinished = [r["trial"] for r in record["trials"] if r["status"] not in (*DONE, *FAILED)]
    _plot(settings, sweep, record)
    best = record["best"]
    if best is None:
        sweep.write("failed")
        sweep.parent.finish("failed", None)
        raise RunFailed(
            [f"sweep {settings.run_name}: no trial trained to the end; nothing to promote",
             *failed,
             f"trials: {settings.run_dir}/trials.csv (`trainctl status {settings.run_dir}`)"]
        )  # fmt: skip
    _say(best_line(record, settings.checkpoint_metric, settings.epochs))
    try:
        summary = promote_best(settings, per_trial[best["trial"]], info)
    finally:
        shipped = read_summary(results.trial_dir(settings.run_dir, _trial(sweep, best))) or {}
        sweep.extra["promoted"] = shipped.get("promoted")
        sweep.extra["promotion"] = shipped.get("promotion")
        status = "succeeded" if not pending else "incomplete"
        record = sweep.write(status)
        sweep.parent.finish(status, record)
    if pending:  # exit 1: a RayJob's retry (or a rerun) trains them, and nothing reads as done
        unended = f"{counted(len(unfinished), 'trial')} did not finish ({', '.join(unfinished)})"
        raise RunFailed(
            [f"sweep {settings.run_name} incomplete: {counted(len(pending), 'trial')} of "
             f"{len(record['trials'])} did not end, and the best of the others was judged",
             *failed,
             *([f"{unended}: rerun the sweep to resume them"] if unfinished else []),
             f"trials: {settings.run_dir}/trials.csv (`trainctl status {settings.run_dir}`)"]
        )  # fmt: skip
    return summary


def best_line(record: dict[str, Any], metric: str, epochs: int) -> str:
    """`best: trial-0002 (val_accuracy 0.9000) with lr 0.003`: which trial won, with what, and
    the trials it tied with."""
    best = record["best"]
    said = f"best: {best['trial']} ({metric} {best['best']:.4f})"
    if drawn := ", ".join(f"{k} {results.shown_value(v)}" for k, v in best["values"].items()):
        said += f" with {drawn}"  # what won, not only which trial
    if tied := results.tied_with(record["trials"], best, epochs):
        said += f"; tied with {', '.join(tied)}: the first drawn is kept"
    if best["status"] == "stopped":  # trained out before the scheduler's stop reached it
        said += f"; the scheduler's stop reached it after its last epoch: all {epochs} trained"
    return said


def _failed_line(row: dict[str, Any]) -> str:
    """A trial that failed or was refused, with its reason: a rerun trains it again, but only
    a change (of its values, of the data) makes it end otherwise."""
    return f"{row['trial']} {row['status']}: {row.get('error') or 'no reason recorded'}"


def _trial(sweep: _Sweep, row: dict[str, Any]) -> Trial:
    return next(t for t in sweep.trials if t.trial_id == row["trial"])


def _plot(settings: TrainSettings, sweep: _Sweep, record: dict[str, Any]) -> None:
    try:
        path = results.plot(settings.run_dir, record, {d.key: d.kind for d in sweep.space.values()})
    except Exception as err:  # a plot must never cost the sweep its promotion
        _say(f"sweep.png not drawn ({type(err).__name__}: {err})")
        return
    _say(f"plot: {path}")


def _say(message: str) -> None:
    click.echo(f"trainctl: {message}")
