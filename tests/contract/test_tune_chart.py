"""The chart's `tune:` section: a sweep is a RayJob per pool like a run (Helm rendering; the
jinja2 engine is held equal to it by test_render_parity.py, examples/values-nightly-sweep.yaml
among its files)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from app.errors import ConfigError
from app.k8s.render import load_values, render_objects
from app.settings import TrainSettings
from app.settings.tune_space import parse_space
from tests.contract.k8s_support import (
    EXAMPLES,
    config_data,
    containers,
    helm_render,
    load_yaml,
    of_kind,
    rayjob_groups,
    refusals,
)

SWEEP = load_yaml(EXAMPLES / "values-nightly-sweep.yaml")
SPACE_FILE = "/etc/trainctl/tune-space.yaml"


@pytest.fixture(scope="module")
def sweep_objects() -> list[dict]:
    return helm_render(SWEEP, release="train", namespace="ml")


def test_the_sweeps_rayjob_runs_trainctl_tune_with_its_space_on_the_head(
    sweep_objects: list[dict],
) -> None:
    (job,) = of_kind(sweep_objects, "RayJob")
    assert job["spec"]["entrypoint"] == "bash -c 'trainctl check && exec trainctl tune'"
    data = config_data(sweep_objects, job["metadata"]["name"])
    assert data["TRAIN_TUNE_SPACE"] == SPACE_FILE
    assert data["TRAIN_TUNE_SAMPLES"] == "16" and data["TRAIN_TUNE_SCHEDULER"] == "asha"
    assert data["TRAIN_TUNE_GRACE_PERIOD"] == "2" and data["TRAIN_TUNE_REDUCTION_FACTOR"] == "3"
    assert data["TRAIN_NUM_WORKERS"] == "1"  # tune.workersPerTrial, not the pool's 4
    # The file the head reads is the values' space, as YAML (JSON is YAML).
    assert yaml.safe_load(data["tune_space.yaml"]) == SWEEP["tune"]["space"]
    head, groups = rayjob_groups(job)
    (head_container,) = containers(head["template"])
    mount = next(m for m in head_container["volumeMounts"] if m["name"] == "tune-space")
    # A subPath mount is the file itself: a ConfigMap folder's files are links, refused.
    assert mount == {"name": "tune-space", "mountPath": SPACE_FILE, "subPath": "space.yaml",
                     "readOnly": True}  # fmt: skip
    for group in groups:
        for container in containers(group["template"]):
            assert all(m["name"] != "tune-space" for m in container["volumeMounts"])


def test_the_rendered_settings_and_space_are_what_trainctl_tune_accepts(
    sweep_objects: list[dict], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (job,) = of_kind(sweep_objects, "RayJob")
    data = config_data(sweep_objects, job["metadata"]["name"])
    for key in [k for k in __import__("os").environ if k.startswith("TRAIN_")]:
        monkeypatch.delenv(key)
    for key, value in data.items():
        if key.startswith("TRAIN_"):
            monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    settings = TrainSettings()
    space = parse_space(yaml.safe_load(data["tune_space.yaml"]), settings)
    assert space["lr"].values == (1e-4, 3e-2) and space["augment"].kind == "choice"


def test_without_tune_a_pool_trains_and_carries_no_sweep_settings() -> None:
    values = copy.deepcopy(SWEEP)
    values["tune"]["enabled"] = False
    objects = helm_render(values, release="train", namespace="ml")
    (job,) = of_kind(objects, "RayJob")
    assert job["spec"]["entrypoint"].endswith("exec trainctl train'")
    data = config_data(objects, job["metadata"]["name"])
    assert not [k for k in data if "TUNE" in k or k == "tune_space.yaml"]
    assert data["TRAIN_NUM_WORKERS"] == "4"


def test_both_engines_hold_the_space_to_the_settings_schema(tmp_path: Path) -> None:
    """Helm (what Argo CD and Flux render with) refused none of these: the sweep failed in the
    job's `trainctl check`, after the GPU pods were scheduled."""
    values = copy.deepcopy(SWEEP)
    values["tune"]["space"] = {
        "lr": {"uniform": [0, 0.1]},  # TRAIN_LR must be > 0
        "lrr": {"choice": [1]},  # no such setting
        "epochs": {"choice": [1, 2]},  # the sweep's budget, fixed
        "global_batch_size": {"choice": [0, 64]},
        "weight_decay": {"loguniform": [0, 0.1]},  # log of 0
        "model": {"choice": ["resnet1800"]},
        "augment": {"uniform": [0, 1]},  # a range over words
    }
    helm, problems = refusals(values, tmp_path)
    text = "\n".join(problems)
    for needle in ("tune.space: 'lrr' is not one of", "'epochs' is not one of", "'model'",
                   "tune.space.lr.uniform.0: TRAIN_LR='0': Input should be greater than 0",
                   "tune.space.global_batch_size.choice.0: TRAIN_GLOBAL_BATCH_SIZE='0'",
                   "tune.space.weight_decay.loguniform.0: loguniform takes [low, high] above 0",
                   "tune.space.model.choice.0: TRAIN_MODEL='resnet1800'", "did you mean resnet18",
                   "tune.space.augment: Additional properties are not allowed ('uniform' was "
                   "unexpected); allowed: choice, grid"):  # fmt: skip
        assert needle in text, text
    for key in ("'lrr'", "'epochs'", "/tune/space/lr/", "/tune/space/global_batch_size/",
                "/tune/space/weight_decay/", "/tune/space/model/",
                "/tune/space/augment"):  # fmt: skip
        assert key in helm, helm
    values["tune"]["space"] = {}  # enabled, with nothing to vary
    helm, problems = refusals(values, tmp_path)
    assert "/tune/space" in helm, helm
    assert problems == [
        "tune.space: {} should be non-empty: tune.enabled is true: name what the trials vary, "
        "e.g. lr: {loguniform: [1.0e-4, 1.0e-1]}"
    ], problems


def test_both_engines_refuse_a_range_whose_low_is_above_its_high(tmp_path: Path) -> None:
    values = copy.deepcopy(SWEEP)
    values["tune"]["space"] = {"lr": {"loguniform": [0.1, 1e-4]}}
    helm, problems = refusals(values, tmp_path)
    expected = "tune.space.lr: loguniform takes [low, high], low <= high"
    assert expected in helm and problems == [expected], (helm, problems)


def test_both_engines_refuse_the_grid_scheduler_over_ranges_only(tmp_path: Path) -> None:
    """scheduler grid with no grid: or choice: key rendered, and each trial was a random draw:
    a random sweep under another name, said nowhere (a red-team pass)."""
    values = copy.deepcopy(SWEEP)
    values["tune"].update(
        scheduler="grid",
        space={"weight_decay": {"uniform": [0.0, 0.1]}, "lr": {"loguniform": [1e-4, 1e-1]}},
    )
    helm, problems = refusals(values, tmp_path)
    expected = (
        "tune.scheduler=grid lists every combination of the space's grid: and choice: keys, "
        "and tune.space has none (lr: loguniform, weight_decay: uniform): list values with "
        "grid: or choice:, or set tune.scheduler=random to draw each trial from the ranges"
    )
    assert expected in helm and problems == [expected], (helm, problems)
    # One listed key is a grid to enumerate, the ranges drawn per trial beside it: both render.
    values["tune"]["space"]["lr"] = {"choice": [1e-3, 1e-2]}
    assert of_kind(helm_render(values, release="train", namespace="ml"), "RayJob")
    path = tmp_path / "values.yaml"
    path.write_text(json.dumps(values))
    assert render_objects(load_values([path]), release="train", namespace="ml")


def test_render_holds_the_space_to_each_pools_settings(tmp_path: Path) -> None:
    """What only the settings model can judge, each pool's settings with the trial's value:
    a trial's batch smaller than its workers. Helm renders it; `trainctl render` refuses it
    with the job's own words, as the parity test holds it to."""
    values = copy.deepcopy(SWEEP)
    values["tune"]["workersPerTrial"] = 4
    values["tune"]["space"] = {"global_batch_size": {"choice": [2, 64]}}
    helm_render(values)
    path = tmp_path / "values.yaml"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError) as refused:
        render_objects(load_values([path]), release="train", namespace="ml")
    text = "\n".join(refused.value.problems)
    assert "pool l4: tune.space: global_batch_size" in text and "TRAIN_GLOBAL_BATCH_SIZE" in text


@pytest.mark.parametrize(
    ("space", "scheduler", "samples", "counted"),
    [
        # 100 x 11 grid combinations, 10 samples each: 11,000 trials.
        ({"seed": {"grid": list(range(100))}, "lr": {"grid": [0.001 * i for i in range(1, 12)]}},
         "asha", 10, "1100"),
        # With the grid scheduler a choice is listed too; 1000^3 is not counted to the end.
        ({key: {"choice": [round(0.001 * i, 3) for i in range(1, 1001)]}
          for key in ("lr", "weight_decay", "backbone_lr_scale")},
         "grid", 1, "more than 10000"),
    ],
)  # fmt: skip
def test_both_engines_refuse_a_sweep_over_the_trial_limit_as_tune_will(
    space: dict, scheduler: str, samples: int, counted: str, tmp_path: Path
) -> None:
    values = copy.deepcopy(SWEEP)
    values["tune"].update(space=space, scheduler=scheduler, samples=samples)
    message = (
        f"tune.space: {counted} grid combinations x tune.samples={samples} is over 10000 "
        "trials; list fewer values or draw fewer samples"
    )
    helm, ours = refusals(values, tmp_path)
    assert message in helm and message in ours
    # One sample fewer (or choices drawn, not listed) is within the limit: both render.
    values["tune"].update(samples=max(1, samples - 1), scheduler="random")
    if scheduler == "grid":
        values["tune"]["space"] = {"seed": {"choice": list(range(1000))}}
    assert of_kind(helm_render(values, release="train", namespace="ml"), "RayJob")
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    assert render_objects(load_values([path]), release="train", namespace="ml")
