"""Can each configured tracker work? The preflight of MLflow, TensorBoard and W&B.

`trainctl check` prints the verdict and `trainctl train` runs it before Ray starts: for
unattended retraining the tracker is the team's record, and a run meant to be tracked that
was not is lost data (TRAIN_TRACKING_REQUIRED=false opts out). Each probe asks the installed
client itself what it supports (MLflow's own tracking-store registry, not a list kept here),
and every probe that talks to a server runs under TRAIN_TRACKING_TIMEOUT_S: one try, no
retries, and a thread deadline over it all, since a server that accepts TCP and never answers
would otherwise hold the client for its default retries (41 s and more;
app/tracking/probing.py). The MLflow probe is app/tracking/mlflow_check.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from app.errors import ConfigError
from app.settings import TrainSettings
from app.storage.location import local_write_problem
from app.tracking.mlflow_check import probe_mlflow
from app.tracking.probing import OPT_OUT, installed

WANDB_MODES = ("online", "offline", "disabled", "dryrun", "run", "shared")


@dataclass(frozen=True)
class Verdict:
    """One tracker's preflight: what was found, or why it cannot work."""

    name: str
    detail: str = ""
    problem: str | None = None


def configured(env: Mapping[str, str], settings: TrainSettings) -> list[str]:
    """The trackers switched on, by each library's own variable (TensorBoard by a setting)."""
    names = []
    if env.get("MLFLOW_TRACKING_URI"):
        names.append("mlflow")
    if settings.tensorboard:
        names.append("tensorboard")
    # WANDB_MODE=disabled is W&B's own off switch, whatever else is set (an API key in the
    # image's environment): no run, nothing to check.
    if (env.get("WANDB_API_KEY") or env.get("WANDB_MODE")) and not _wandb_disabled(env):
        names.append("wandb")
    return names


def _wandb_disabled(env: Mapping[str, str]) -> bool:
    return (env.get("WANDB_MODE") or "").strip() == "disabled"


def check_trackers(settings: TrainSettings, env: Mapping[str, str] | None = None) -> list[Verdict]:
    env = os.environ if env is None else env
    probes: dict[str, Callable[[TrainSettings, Mapping[str, str]], str]] = {
        "mlflow": probe_mlflow,
        "tensorboard": _tensorboard,
        "wandb": _wandb,
    }
    verdicts = []
    for name in configured(env, settings):
        try:
            verdicts.append(Verdict(name, detail=probes[name](settings, env)))
        except ConfigError as err:
            problem = "; ".join(err.problems)
            if not settings.tracking_required:  # already set: advice to set it is noise
                problem = re.sub(rf"[,;]? ?{re.escape(OPT_OUT)}", "", problem)
            verdicts.append(Verdict(name, problem=problem))
    return verdicts


# --- MLflow ---------------------------------------------------------------------------------


# --- TensorBoard and W&B (MLflow: app/tracking/mlflow_check.py) --------------------------------


def _tensorboard(settings: TrainSettings, env: Mapping[str, str]) -> str:
    if not installed("tensorboard"):
        raise ConfigError(
            "TRAIN_TENSORBOARD=true: the tensorboard package is not installed; install it "
            f"(`pip install tensorboard`), set TRAIN_TENSORBOARD=false, {OPT_OUT}"
        )
    target = settings.run_dir / "tensorboard"
    # Nothing is created here (app/storage/location.py local_write_problem); in a bucket the
    # events go to a local folder copied up after every epoch, and the storage check covers it.
    problem = local_write_problem(target)
    if problem:
        raise ConfigError(
            f"TRAIN_TENSORBOARD=true: the log folder {target} cannot be written ({problem}); "
            "make the run folder under TRAIN_STORAGE_PATH writable, set "
            f"TRAIN_TENSORBOARD=false, {OPT_OUT}"
        )
    return f"{target} writable"


def _wandb(settings: TrainSettings, env: Mapping[str, str]) -> str:
    mode = (env.get("WANDB_MODE") or "").strip()
    switch = f"WANDB_MODE={mode}" if mode else "WANDB_API_KEY is set"
    if mode and mode not in WANDB_MODES:
        raise ConfigError(
            f"WANDB_MODE={mode!r}: W&B's modes are {', '.join(WANDB_MODES[:3])}; {OPT_OUT}"
        )
    if not installed("wandb"):
        raise ConfigError(
            f"W&B is configured ({switch}) but the wandb package is not installed in this "
            f"image: install wandb, unset WANDB_API_KEY and WANDB_MODE, {OPT_OUT}"
        )
    return f"{switch}, wandb installed (its server is not probed)"
