"""The `train:` values held to the settings model, pool by pool, before anything is written or
sent.

A pool's pods read their settings from its ConfigMap's TRAIN_* variables: the `train:` values
(`nodePools.<pool>.train` over the top-level `train`), printed as the chart prints them, and
the ones the chart derives per pool (TRAIN_NUM_WORKERS from replicas and gpusPerWorker, the
run name, the storage paths). `trainctl train` reads those variables through app/settings;
here the rendered variables go through the same model (`check_env`), so whatever the
pods would refuse after their GPUs were scheduled is refused at `render` and `submit` with the
same message, the pool and the values key named. Pure validation: no torch, no Ray.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from app.errors import ConfigError
from app.k8s.values import merged_pool
from app.settings import ENV_PREFIX, TrainSettings
from app.settings.env import check_env
from app.settings.model_names import is_weights_name, weights_pairing_problem
from app.settings.tune_space import CHART_KEYS, parse_space

# Where the chart takes each derived variable from (app/k8s/train_schema.py's DERIVED).
DERIVED_FROM = {
    "use_gpu": "nodePools.{pool}.gpusPerWorker",
    "accelerator_type": "nodePools.{pool}.acceleratorType",
    "run_name": "the release and pool names",
    "storage_path": "storage (its volume or bucket, and runsSubPath)",
    "data_path": "storage (its volume or bucket, and dataSubPath)",
    "storage_endpoint": "storage.endpoint",
    **CHART_KEYS,  # the sweep's own settings
    "signing_key": "signing.secretName",
    "verify_key": "signing.secretName",
}
TUNE_SPACE_KEY = "tune_space.yaml"  # the ConfigMap's copy of tune.space (a file on the head)
_ENV_NAME = re.compile(rf"\b{ENV_PREFIX}[A-Z0-9_]+\b")


def values_key(setting: str, pool: str, values: Mapping[str, Any]) -> str:
    """The values key a pool's TRAIN_<SETTING> comes from: the pool's own `train`, then
    poolDefaults' (a pool's key replaces the default's), then the top-level `train`."""
    own = (values.get("nodePools") or {}).get(pool) or {}
    source = "nodePools." + pool if "train" in own else "poolDefaults"
    pool_train = merged_pool(dict(values), own).get("train") or {}
    if setting in pool_train:
        return f"{source}.train.{setting}"
    if setting == "num_workers":
        tune = values.get("tune") or {}
        if tune.get("enabled") and int(tune.get("workersPerTrial") or 0) > 0:
            return "tune.workersPerTrial"  # a sweep's trials, as the ConfigMap sets them
        gpus = merged_pool(dict(values), own).get("gpusPerWorker") or 0
        return f"nodePools.{pool}.replicas" + (" x gpusPerWorker" if gpus else "")
    if setting in DERIVED_FROM:
        return DERIVED_FROM[setting].format(pool=pool)
    return f"train.{setting}"


def problems(configs: Mapping[str, Mapping[str, str]], values: Mapping[str, Any]) -> list[str]:
    """Each way the pools' ConfigMap data (pool -> data) fail the settings model, one line
    each; the same line for several pools (a top-level `train:` value) is given once, naming
    them all."""
    pools: dict[str, list[str]] = {}
    for pool, data in configs.items():
        env = {name: value for name, value in data.items() if name.startswith(ENV_PREFIX)}
        settings, found = check_env(env)
        for name, line in found:
            pools.setdefault(_located(name, line, pool, values), []).append(pool)
        if settings is not None and TUNE_SPACE_KEY in data:
            for line in _space_problems(data[TUNE_SPACE_KEY], settings):
                pools.setdefault(line, []).append(pool)
        if settings is not None and (problem := _weights_problem(settings)):
            pools.setdefault(f"{values_key('weights', pool, values)}: {problem}", []).append(pool)
    return [
        f"pool{'s' if len(names) > 1 else ''} {', '.join(names)}: {line}"
        for line, names in pools.items()
    ]


def _located(name: str, line: str, pool: str, values: Mapping[str, Any]) -> str:
    """The settings' message, led by the values key of the variable it is about; a rule across
    settings, whose message names the variables, is followed by where each comes from."""
    if name:
        return f"{values_key(_setting(name), pool, values)}: {line}"
    names = dict.fromkeys(_ENV_NAME.findall(line))
    where = ", ".join(f"{n} is {values_key(_setting(n), pool, values)}" for n in names)
    return line + (f" ({where})" if where else "")


def _space_problems(text: str, settings: TrainSettings) -> list[str]:
    """tune.space held to the pool's settings, as the job's `trainctl tune` will hold it."""
    try:
        parse_space(json.loads(text), settings, "tune.space")
    except ConfigError as err:
        return list(err.problems)
    return []


def _weights_problem(settings: TrainSettings) -> str | None:
    """TRAIN_WEIGHTS naming torchvision weights of another model, as the pods' `check` refuses
    it (app/training/weights.py), by their names alone."""
    if settings.weights is None or not is_weights_name(settings.weights):
        return None
    return weights_pairing_problem(settings.model, settings.weights)


def _setting(name: str) -> str:
    return name.removeprefix(ENV_PREFIX).lower()
