"""TRAIN_WARM_START=champion:<model-name> for a sweep: resolved once, every trial from it.

A trial's folder is <sweep>/trials/<trial-id>/, so its own TRAIN_STORAGE_PATH is the sweep's
trials folder, where no champion lives. The sweep's driver resolves the champion under the
sweep's TRAIN_STORAGE_PATH before Ray starts (app/run/warm_start.py: pointer, card, weights,
task and fit), then hands each trial the champion's copy the pointer named
(`champions/<name>/<sha>/`, which a later promotion never rewrites) and the WarmStart itself:
a trial checks that copy as `train` checks an export folder and loads only the bytes the sweep
verified. A champion promoted while the sweep runs changes nothing for its trials.

A rerun of a sweep continues its trials from the same weights or not at all: sweep.json keeps
the sha256 the sweep started from, and a rerun with trials left to train whose champion has
moved on is refused (exit 2) by `tune` and `check`, as a rerun whose settings changed is
(app/settings/tune_continuation.py). A rerun with none left (a RayJob retried after the sweep
promoted its best, which moved the champion itself) trains nothing and goes on.
"""

from __future__ import annotations

from typing import Any

from app.errors import ConfigError
from app.run.warm_start import champion_moved
from app.runfolder.sweep_records import WARM_START_KEY as RECORD_KEY
from app.settings import TrainSettings
from app.settings.model import ChampionRef
from app.training.warm_weights import WarmStart


def pin_champion(
    settings: TrainSettings,
    warm: WarmStart | None,
    before: dict[str, Any],
    per_trial: dict[str, TrainSettings],
    trials_left: bool,
) -> tuple[dict[str, TrainSettings], WarmStart | None, dict[str, Any] | None]:
    """(each trial's settings starting from the champion's copy, the WarmStart every trial
    loads, what sweep.json records of it); the settings as they were for any other warm
    start, which each trial resolves as `train` does. `trials_left`: whether any trial is
    still to train (none: the record is kept as it was, whatever the champion is now)."""
    if not isinstance(settings.warm_start, ChampionRef):
        return per_trial, None, None
    earlier = before.get(RECORD_KEY)
    if not trials_left:
        return per_trial, None, earlier if isinstance(earlier, dict) else None
    assert warm is not None  # preflight resolved it, or refused the sweep
    if problem := champion_moved(warm, earlier):
        raise ConfigError(problem)
    copy = warm.file.parent  # champions/<name>/<sha>/, its weights.pt the card lists
    pinned = {k: s.model_copy(update={"warm_start": copy}) for k, s in per_trial.items()}
    record = {"source": warm.source, "described": warm.described, "sha256": warm.sha256}
    return pinned, warm, record


def same_weights(trial_warm: WarmStart | None, pinned: WarmStart) -> WarmStart:
    """The sweep's WarmStart, once the trial's own check of the champion's copy found the same
    weights; ConfigError where the copy changed since the sweep read it (not loaded)."""
    if trial_warm is None or trial_warm.sha256 != pinned.sha256:
        found = trial_warm.sha256[:12] if trial_warm is not None else "no weights"
        raise ConfigError(
            f"TRAIN_WARM_START={pinned.source}: the champion's copy {pinned.file.parent} now "
            f"gives {found}, not the sha256 {pinned.sha256[:12]} the sweep verified; altered, "
            "and not loaded"
        )
    return pinned
