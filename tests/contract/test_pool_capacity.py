"""A pool whose pods cannot hold its run is refused by both engines, with the same message.

Each case here would render, be admitted and get its GPU pods, then wait forever: the training
workers' placement group (or Ray Data's tasks, or a sweep's trial) fits on no Ray node. The
boundaries are exact: the values one step inside them render in both engines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.errors import ConfigError
from app.k8s import capacity
from app.k8s.render import load_values, render_objects
from tests.contract.k8s_support import HelmFailed, helm_render


def _python(values: dict[str, Any], tmp_path: Path) -> list[str] | None:
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    try:
        render_objects(load_values([path]), release="demo", namespace="ml")
    except ConfigError as err:
        return list(err.problems)
    return None


def _helm(values: dict[str, Any]) -> str | None:
    try:
        helm_render(values)
    except HelmFailed as err:
        return str(err)
    return None


def _gpu_pool(gpus: int, cpus: Any, **more: Any) -> dict[str, Any]:
    return {"nodePools": {"a100": {"gpusPerWorker": gpus, "cpusPerWorker": cpus, **more}}}


SPACE = {"lr": {"loguniform": [1e-4, 1e-1]}}
WAITS_FOREVER = {
    # 8 GPU workers x 1 CPU (the settings' default) on a 4-CPU pod: never placed.
    "workers-do-not-fit": (
        _gpu_pool(8, "4"),
        "nodePools.a100: 8 training worker(s) per pod at train.cpus_per_worker 1 do not fit in "
        "cpusPerWorker 4 (a Ray node of 4 CPUs: KubeRay rounds the limit up)",
    ),
    "workers-do-not-fit-set": (
        {**_gpu_pool(2, "3500m"), "train": {"cpus_per_worker": 2.5}},
        "nodePools.a100: 2 training worker(s) per pod at train.cpus_per_worker 2.5 do not fit "
        "in cpusPerWorker 3500m (a Ray node of 4 CPUs",
    ),
    # Fits exactly, leaving Ray Data no CPU (the head's num-cpus is 0 by default).
    "no-cpu-for-ray-data": (
        _gpu_pool(8, "7.5"),
        "nodePools.a100: 8 training worker(s) per pod at train.cpus_per_worker 1 take every CPU "
        "of its pods (cpusPerWorker 7.5), and the head has none for Ray",
    ),
    "trial-over-the-gpus": (
        {
            **_gpu_pool(2, "8", replicas=2),
            "tune": {"enabled": True, "workersPerTrial": 5, "space": SPACE},
        },
        "tune.workersPerTrial (5) is more training workers than pool a100 has (2 pod(s) x 2 "
        "GPU(s)), so no trial could start",
    ),
    "trial-over-the-cpus": (
        {
            **_gpu_pool(0, "2", replicas=2),
            "tune": {"enabled": True, "workersPerTrial": 5, "space": SPACE},
        },
        "tune.workersPerTrial (5) at train.cpus_per_worker 1 needs more CPUs than pool a100 has "
        "(2 pod(s) of 2), so no trial could start",
    ),
    "pool-memory-in-bytes": (
        _gpu_pool(1, "8", memoryPerWorker="1000"),
        "nodePools.a100.memoryPerWorker is 1000, below 512Mi",
    ),
    "data-pool-memory-zero": (
        {"dataPool": {"enabled": True, "replicas": 1, "memoryPerWorker": "0"}},
        "dataPool.memoryPerWorker is 0, below 512Mi",
    ),
    "head-memory-without-unit": ({"head": {"memory": 4096}}, "head.memory is 4096, below 512Mi"),
}


@pytest.mark.parametrize("case", list(WAITS_FOREVER), ids=str)
def test_a_run_that_would_wait_forever_is_refused_alike(case: str, tmp_path: Path) -> None:
    values, message = WAITS_FOREVER[case]
    ours = _python(values, tmp_path)
    assert ours is not None and len(ours) == 1, ours
    assert ours[0].startswith(message), ours
    helm = _helm(values)
    assert helm is not None and ours[0] in helm, helm


FITS = {
    # 7.5 CPUs round up to 8 on Ray: 7 workers leave one for Ray Data.
    "rounded-up-leaves-one": _gpu_pool(7, "7.5"),
    "a-data-pool-takes-ray-data": {**_gpu_pool(8, "8"), "dataPool": {"enabled": True}},
    "the-head-takes-ray-data": {**_gpu_pool(8, "8"), "head": {"rayStartParams": {"num-cpus": "2"}}},
    # 10 x 0.3 is 3 exactly in both engines (3.0000000000000004 in IEEE arithmetic).
    "decimal-arithmetic": {
        **_gpu_pool(10, 3),
        "train": {"cpus_per_worker": 0.3},
        "head": {"rayStartParams": {"num-cpus": "1"}},
    },
    "trial-fills-the-pool": {
        **_gpu_pool(2, "8", replicas=2),
        "tune": {"enabled": True, "workersPerTrial": 4, "space": SPACE},
    },
    "memory-at-the-floor": _gpu_pool(1, "8", memoryPerWorker="512Mi"),
}


@pytest.mark.parametrize("case", list(FITS), ids=str)
def test_a_run_that_fits_exactly_renders_in_both(case: str, tmp_path: Path) -> None:
    assert _python(FITS[case], tmp_path) is None
    assert _helm(FITS[case]) is None


@pytest.mark.parametrize(
    ("quantity", "value"),
    [
        ("8", 8.0),
        (8, 8.0),
        ("500m", 0.5),
        ("1.5", 1.5),
        ("1e3", 1000.0),
        ("2k", 2000.0),
        ("1Gi", 2.0**30),
        ("1.5Ti", 1.5 * 2**40),
        (".5", 0.5),
        ("+2", 2.0),
        ("1E", 1e18),
        ("9e999", 0.0),  # out of float64's range: Go's ParseFloat fails, sprig reads 0
    ],
)
def test_quantities_read_as_the_chart_reads_them(quantity: Any, value: float) -> None:
    assert capacity.amount(quantity) == value
