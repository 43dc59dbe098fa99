"""The sweep's trials, drawn once from the space and TRAIN_SEED (pure).

Trial N's values depend only on the seed, N and the space: a rerun of the sweep draws the
same trials into the same folders (trial-0001, ...), and a rerun with more TRAIN_TUNE_SAMPLES
keeps the trials already drawn and adds new ones after them. `grid:` keys (and, with
TRAIN_TUNE_SCHEDULER=grid, `choice:` keys) are enumerated in every combination, once per
sample; the other keys are drawn per trial.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.errors import ConfigError
from app.runfolder.folder import TRIALS_DIR as TRIALS_DIR  # a sweep's trial folders
from app.settings import TrainSettings
from app.settings.train import env_name
from app.settings.tune import MAX_TRIALS
from app.settings.tune_space import SPACE, Dimension, load_space, settings_message
from app.storage.location import RunPath


@dataclass(frozen=True)
class Trial:
    number: int  # 1-based
    values: dict[str, Any]

    @property
    def trial_id(self) -> str:
        return trial_id(self.number)


def trial_id(number: int) -> str:
    return f"trial-{number:04d}"


TRIAL_NAME = re.compile(r"trial-[0-9]{4,6}")  # what trial_id names, up to MAX_TRIALS


def draw(space: dict[str, Dimension], samples: int, seed: int, scheduler: str) -> list[Trial]:
    """Every trial of the sweep, in order: combinations within a sample, samples after
    each other (so more samples only add trials at the end)."""
    enumerated = [d for d in space.values() if listed(d.kind, scheduler)]
    drawn = [d for d in space.values() if not listed(d.kind, scheduler)]
    nothing = nothing_to_list(
        scheduler, {d.key: d.kind for d in space.values()}, (SPACE, "TRAIN_TUNE_SCHEDULER")
    )
    if nothing:
        raise ConfigError(nothing)
    too_many = too_many_trials(
        [len(d.values) for d in enumerated], samples, (SPACE, "TRAIN_TUNE_SAMPLES")
    )
    if too_many:
        raise ConfigError(too_many)
    combos = list(itertools.product(*(d.values for d in enumerated)))
    trials = []
    for _sample in range(samples):
        for combo in combos:
            number = len(trials) + 1
            values = {d.key: value for d, value in zip(enumerated, combo, strict=True)}
            for dimension in drawn:
                rng = random.Random(f"{seed}/{number}/{dimension.key}")
                values[dimension.key] = _draw(dimension, rng)
            trials.append(Trial(number, {k: values[k] for k in space}))
    return trials


def listed(kind: str, scheduler: str) -> bool:
    """Whether a key of this distribution is listed in every combination, not drawn."""
    return kind == "grid" or (scheduler == "grid" and kind == "choice")


def nothing_to_list(scheduler: str, kinds: dict[str, str], names: tuple[str, str]) -> str | None:
    """Why the grid scheduler has nothing to enumerate (None when it has): every key of the
    space (`kinds`: key -> distribution) is a range, so each trial would be a random draw, a
    random sweep under another name. `names` as in `too_many_trials`."""
    if scheduler != "grid" or not kinds or any(listed(k, scheduler) for k in kinds.values()):
        return None
    space, scheduler_name = names
    ranges = ", ".join(f"{key}: {kind}" for key, kind in sorted(kinds.items()))  # as Helm ranges
    return (
        f"{scheduler_name}=grid lists every combination of the space's grid: and choice: keys, "
        f"and {space} has none ({ranges}): list values with grid: or choice:, or set "
        f"{scheduler_name}=random to draw each trial from the ranges"
    )


def too_many_trials(lengths: list[int], samples: int, names: tuple[str, str]) -> str | None:
    """Why a sweep whose enumerated keys list `lengths` values each, times `samples`, is over
    MAX_TRIALS trials (None when it is not). `names` are how the space and the sample count
    are called where they were given (TRAIN_TUNE_SPACE and TRAIN_TUNE_SAMPLES, or the chart's
    tune.space and tune.samples). The product is counted no further than MAX_TRIALS: 50 keys
    of 1000 values each would make a number nobody needs to see."""
    combos = 1
    for length in lengths:
        combos = min(combos * length, MAX_TRIALS + 1)
    if combos * samples <= MAX_TRIALS:
        return None
    counted = f"more than {MAX_TRIALS}" if combos > MAX_TRIALS else str(combos)
    space, samples_name = names
    return (
        f"{space}: {counted} grid combinations x {samples_name}={samples} is over "
        f"{MAX_TRIALS} trials; list fewer values or draw fewer samples"
    )


def _draw(dimension: Dimension, rng: random.Random) -> Any:
    kind, values = dimension.kind, dimension.values
    if kind == "choice" or kind == "grid":
        return values[rng.randrange(len(values))]
    low, high = values
    if kind == "randint":
        return rng.randint(low, high)
    if kind == "loguniform":
        value = math.exp(rng.uniform(math.log(low), math.log(high)))
    else:
        value = rng.uniform(low, high)
    if dimension.integer:
        return min(max(round(value), low), high)
    return min(max(float(f"{value:.6g}"), low), high)  # readable, and still inside the range


def trial_settings(base: TrainSettings, trial: Trial, sweep_dir: RunPath) -> TrainSettings:
    """The settings trial `trial` trains with: the sweep's, with the trial's values and its run
    folder <sweep_dir>/trials/<trial-id>/ (TRAIN_STORAGE_PATH and TRAIN_RUN_NAME of a normal
    run); held to every rule of the settings (ConfigError naming the trial and its values)."""
    values = {
        **base.model_dump(mode="json"),
        **trial.values,
        "storage_path": str(sweep_dir / TRIALS_DIR),
        "run_name": trial.trial_id,
    }
    try:
        return TrainSettings.from_values(values)
    except ValidationError as err:
        shown = ", ".join(f"{k}={v!r}" for k, v in trial.values.items())
        raise ConfigError(f"{SPACE}: {trial.trial_id} ({shown}): {settings_message(err)}") from None


def unused_settings(settings: TrainSettings, space: dict[str, Dimension]) -> str | None:
    """The settings given (environment, .env, the chart's train:) that the space draws anew for
    every trial, so that no trial trains with them; None when there are none."""
    given = [key for key in space if key in settings.model_fields_set]
    if not given:
        return None
    shown = ", ".join(f"{env_name(key)}={getattr(settings, key)}" for key in given)
    verb = "is" if len(given) == 1 else "are"
    return f"{shown} {verb} not used: every trial draws its own {', '.join(given)} ({SPACE})"


def fixed_dimensions(space: dict[str, Dimension]) -> str | None:
    """Keys whose distribution holds one value (`randint: [4, 4]`, `uniform: [3.5, 4.4]` over a
    whole-number setting, a one-item choice): every trial gets it, so nothing is searched there
    (a red-team pass: a sweep of such a space trained the same settings in every trial)."""
    fixed = [dim for dim in space.values() if len({repr(v) for v in dim.values}) == 1]
    if not fixed:
        return None
    shown = ", ".join(f"{dim.key}: {dim.describe()}" for dim in fixed)
    instead = ", ".join(f"{env_name(dim.key)}={dim.values[0]}" for dim in fixed)
    holds = "holds one value" if len(fixed) == 1 else "hold one value each"
    every = " (every trial trains the same settings)" if len(fixed) == len(space) else ""
    return f"{shown} {holds}, the same in every trial{every}: set {instead} instead"


def champion_named_by_one_model(settings: TrainSettings, space: dict[str, Dimension]) -> str | None:
    """A space that varies `model` with TRAIN_MODEL_NAME unset: the winner would be promoted
    under the name TRAIN_MODEL makes (`digits-cnn` for a resnet18 winner, a red-team pass)."""
    if "model" not in space or "model_name" in settings.model_fields_set:
        return None
    return (
        f"the space varies model and TRAIN_MODEL_NAME is unset: whichever model wins is "
        f"promoted as {settings.champion_name!r} (named after TRAIN_MODEL={settings.model}); "
        "set TRAIN_MODEL_NAME to name the champion for its task"
    )


def asha_stops_none(settings: TrainSettings) -> str | None:
    """Where ASHA's grace period is the whole run: no trial can be stopped early."""
    if settings.tune_scheduler != "asha" or settings.tune_grace_period < settings.epochs:
        return None
    return (
        f"TRAIN_TUNE_GRACE_PERIOD={settings.tune_grace_period} is not below TRAIN_EPOCHS="
        f"{settings.epochs}: ASHA judges a trial only after its grace period, so it stops "
        "none and every trial trains to the end"
    )


def space_warnings(settings: TrainSettings, space: dict[str, Dimension]) -> list[str]:
    """What `check` and `tune` warn of in a valid sweep (it trains either way): `tune` said
    none of the grace period's, which only `check` judged (a red-team pass)."""
    said = [
        unused_settings(settings, space),
        fixed_dimensions(space),
        champion_named_by_one_model(settings, space),
        asha_stops_none(settings),
    ]
    return [warning for warning in said if warning]


def plan_sweep(
    settings: TrainSettings,
) -> tuple[dict[str, Dimension], list[Trial], dict[str, TrainSettings]]:
    """The space, the trials and each trial's settings, all checked: ConfigError (exit 2)."""
    if settings.tune_space is None:
        raise ConfigError(f"{SPACE} is not set: `trainctl tune` needs a search space file")
    space = load_space(settings.tune_space, settings)
    trials = draw(space, settings.tune_samples, settings.seed, settings.tune_scheduler)
    per_trial = {t.trial_id: trial_settings(settings, t, settings.run_dir) for t in trials}
    return space, trials, per_trial
