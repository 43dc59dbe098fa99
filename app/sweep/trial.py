"""One trial of a sweep: a normal `trainctl train` run, inside a Ray Tune trial.

Ray Train V2's pattern for Tune: the Tune trainable is a function that builds and fits a
TorchTrainer (here: the driver's own run_training, so the same loop, data pipeline,
checkpoints, run-folder layout and resume rules), and `TuneReportCallback` forwards the
trial's Ray Train reports to Tune. Only the end-of-epoch reports go (a mid-epoch checkpoint
has no validation metric for the scheduler to judge). A trial is never promoted: the sweep
promotes its best trial once (app/sweep/sweep.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ray.tune.integration.ray_train import TuneReportCallback

from app.settings import TrainSettings

if TYPE_CHECKING:
    from app.training.warm_weights import WarmStart

# What the trial's driver (a Tune actor, perhaps on another node) needs from the sweep's
# environment that the cluster's own environment may lack: the trackers' switches.
FORWARDED_PREFIXES = ("MLFLOW_", "WANDB_")


class EpochReports(TuneReportCallback):
    """TuneReportCallback for the reports that carry `metric` (the end-of-epoch ones)."""

    def __init__(self, metric: str) -> None:
        super().__init__()
        self._metric = metric

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any):
        if metrics and self._metric in metrics[0]:
            super().after_report(run_context, metrics, checkpoint)


def forwarded_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(FORWARDED_PREFIXES)}


def run_trial(
    config: dict[str, Any],
    trials: dict[str, TrainSettings],
    env: dict[str, str],
    pinned: WarmStart | None,
    group_cleaner: bool,
) -> None:
    """The Tune trainable: trial config["trial"], trained as a normal run in its folder;
    `pinned`: the champion the sweep resolved for every trial (app/sweep/warm_start.py);
    `group_cleaner`: whether the trial keeps Ray Train's placement-group cleaner
    (app/sweep/sweep.py says when)."""
    from app.preflight import preflight_for_training
    from app.run.driver import run_training
    from app.sweep.warm_start import same_weights

    settings = trials[config["trial"]]
    for key, value in env.items():
        os.environ.setdefault(key, value)
    # What `trainctl train` checks, per trial. A refusal is recorded in the trial's folder,
    # made for it if need be: the sweep reads each trial's status there, and a trial refused
    # before its first start read `pending`, which a rerun was said to resume.
    ready = preflight_for_training(settings, own_folder=True, trackers_checked=True)
    warm = ready.warm_start if pinned is None else same_weights(ready.warm_start, pinned)
    run_training(
        settings, ready.info, join_cluster=ready.join_cluster, warm_start=warm,
        promote=False, callbacks=[EpochReports(settings.checkpoint_metric)],
        group_cleaner=group_cleaner,
    )  # fmt: skip
