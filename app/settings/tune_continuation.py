"""Whether a rerun of a sweep continues it: the trials its folders hold drawn again (the same
space and seed) and trained and judged alike (KEPT_ALIKE), since a sweep compares its trials
with each other. `trainctl tune` refuses a rerun that does not (exit 2, before Ray starts), and
`trainctl check` says so on its sweep line: the RayJob's first step.
"""

from __future__ import annotations

import json
from typing import Any

from app.errors import ConfigError
from app.formatting import one_line, whole
from app.settings import TrainSettings, env_name
from app.settings.tune_plan import Trial
from app.settings.tune_space import Dimension

# What every trial of a sweep trains and is judged alike by: a rerun that changed one would mix
# trials that cannot be compared (another dataset, metric, length, trial count...). Settings
# of where and how it runs (paths, addresses, concurrency, deadlines, trackers, the gate) may
# change between reruns.
KEPT_ALIKE = (
    "amp", "augment", "backbone_lr_scale", "checkpoint_metric", "dataset", "epochs", "freeze",
    "global_batch_size", "image_size", "lr", "model", "patience", "seed", "stop_at",
    "tune_grace_period", "tune_reduction_factor", "tune_samples", "tune_scheduler", "vit_patch",
    "warm_start", "weight_decay", "weights",
)  # fmt: skip


def kept_alike(settings: TrainSettings, space: dict[str, Dimension]) -> dict[str, Any]:
    """The settings every trial of the sweep shares (those the space does not vary), as JSON
    writes them: sweep.json's `kept`, which a rerun must match."""
    found = settings.model_dump(mode="json", include=set(KEPT_ALIKE) - set(space))
    return {field: found[field] for field in sorted(found)}


def same_trials(
    settings: TrainSettings,
    before: dict[str, Any],
    trials: list[Trial],
    space: dict[str, Dimension],
) -> None:
    """A rerun must draw the trials the sweep's folders hold (the same space and seed) and
    train and judge them alike (KEPT_ALIKE): its trials are compared with each other."""
    said = before.get("kept")
    recorded = (said if isinstance(said, dict) else {}) or {
        # Written before `kept` was: what those records held.
        **({"epochs": before["epochs"]} if "epochs" in before else {}),
        **({"tune_scheduler": before["scheduler"]} if "scheduler" in before else {}),
    }
    given = kept_alike(settings, space)
    _samples_kept_or_raised(recorded.get("tune_samples"), settings.tune_samples, len(trials))
    for field in sorted(set(recorded) & set(given) - {"tune_samples"}):
        if recorded[field] != given[field]:
            variable, kept = env_name(field), _shown(recorded[field])
            raise ConfigError(
                f"{variable}={_shown(given[field])}: this sweep's trials were trained with "
                f"{variable}={kept}, and trials trained alike are what a sweep compares: keep "
                f"{variable}={kept} to continue the sweep, or give a new TRAIN_RUN_NAME"
            )
    drawn = {t.trial_id: t.values for t in trials}
    rows = before.get("trials")
    for row in rows if isinstance(rows, list) else []:
        # sweep.json lies where many hands write: a row or name of another type is no trial.
        name = row.get("trial") if isinstance(row, dict) else None
        if not isinstance(name, str) or name not in drawn:
            continue
        if row.get("values") != drawn[name]:
            raise ConfigError(
                f"{name} of this sweep was drawn with {one_line(repr(row.get('values')), 200)}, "
                "this space and TRAIN_SEED "
                f"draw {drawn[name]}: keep the space and seed to continue the sweep, or give "
                "a new TRAIN_RUN_NAME"
            )


def samples_raised(before: dict[str, Any], settings: TrainSettings) -> int | None:
    """The TRAIN_TUNE_SAMPLES the sweep recorded in `before`, where this rerun raises it."""
    said = before.get("kept")
    recorded = whole(said.get("tune_samples") if isinstance(said, dict) else None)
    return recorded if recorded is not None and recorded < settings.tune_samples else None


def _samples_kept_or_raised(recorded: Any, given: int, trials: int) -> None:
    """More samples continue a sweep: trials are drawn one after another, each from (seed,
    number, key) alone, so the trials drawn so far stay as they are and the new ones follow
    (a user asking for 5 more trials was refused as if they would be trained otherwise, a
    red-team pass). Fewer would leave trials it may have trained out of its comparison."""
    recorded = whole(recorded)
    if recorded is None or given >= recorded:
        return
    raise ConfigError(
        f"TRAIN_TUNE_SAMPLES={given}: this sweep drew TRAIN_TUNE_SAMPLES={recorded}, and fewer "
        f"samples ({trials} trials) would leave trials it may have trained out of its "
        f"comparison: keep TRAIN_TUNE_SAMPLES={recorded}, raise it to add trials (those drawn "
        "so far stay as they are), or give a new TRAIN_RUN_NAME"
    )


def _shown(value: Any) -> str:
    """A recorded setting as its TRAIN_* variable is written."""
    if value is None:
        return "(unset)"
    return value if isinstance(value, str) else json.dumps(value)
