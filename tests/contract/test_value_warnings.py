"""Values that render but are likely a mistake: Helm's NOTES.txt and `trainctl render` warn of
them with the same words (app/k8s/value_warnings.py). Found by a red-team pass: a `latest` tag
and a DeleteSelf rule rendered with nothing said."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.k8s.value_warnings import (
    ANY_ADMITTED,
    ANY_POD,
    DASHBOARD_SHUT,
    DEADLINES,
    DELETE_SELF,
    DRAWN,
    KEPT_CLUSTER,
    LATEST,
    NO_AUTH,
    SHELL_OUTSIDE_QUOTES,
    SHM,
    value_warnings,
)
from tests.contract.k8s_support import helm_notes

POOL: dict[str, Any] = {"nodePools": {"a100": {}}, "rayAuth": {"existingSecret": "mine"}}
KEEP = {"shutdownAfterJobFinishes": False, "ttlSecondsAfterFinished": 0}
DRAWN_KEYS = ("lr", "lr, weight_decay")
SHM_ALL = "head.memory 8Gi, nodePools.a100.memoryPerWorker 32Gi, dataPool.memoryPerWorker 16Gi"
SHM_SAID = {
    "40Gi": SHM_ALL,
    "32Gi": "nodePools.a100.memoryPerWorker 32Gi",
    "9000M": "head.memory 8Gi, nodePools.a100.memoryPerWorker 8Gi",
}
SPACE = {"lr": {"loguniform": [0.001, 0.1]}, "weight_decay": {"uniform": [0, 0.2]}}
CASES = {
    "latest": ({"image": {"tag": "latest"}}, [LATEST]),
    "latest-pinned": ({"image": {"tag": "latest", "digest": "sha256:" + "a" * 64}}, []),
    "version": ({"image": {"tag": "1.2.3"}}, []),
    "delete-self-rule": (
        {
            "rayJob": {
                **KEEP,
                "deletionStrategy": {
                    "deletionRules": [
                        {"policy": "DeleteCluster", "condition": {"jobStatus": "FAILED"}},
                        {
                            "policy": "DeleteSelf",
                            "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 0},
                        },
                    ]
                },
            }
        },
        [DELETE_SELF],
    ),
    "delete-self-old-form": (
        {
            "rayJob": {
                **KEEP,
                "deletionStrategy": {
                    "onSuccess": {"policy": "DeleteSelf"},
                    "onFailure": {"policy": "DeleteNone"},
                },
            }
        },
        [DELETE_SELF],
    ),
    "delete-cluster": (
        {
            "rayJob": {
                **KEEP,
                "deletionStrategy": {
                    "deletionRules": [
                        {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED"}}
                    ]
                },
            }
        },
        [],
    ),
    # A red-team pass: a pool's train.lr beside tune.space.lr rendered without a word, and no
    # trial trained with it.
    "drawn-and-pool-train": (
        {
            "tune": {"enabled": True, "space": SPACE},
            "train": {"epochs": 3},
            "nodePools": {"a100": {"train": {"lr": 0.01, "weight_decay": 0.1}}},
        },
        [DRAWN.format(keys="lr, weight_decay")],
    ),
    "drawn-and-train": (
        {"tune": {"enabled": True, "space": SPACE}, "train": {"lr": 0.01}},
        [DRAWN.format(keys="lr")],
    ),
    "drawn-only-in-a-disabled-pool": (
        {
            "tune": {"enabled": True, "space": SPACE},
            "nodePools": {"a100": {}, "l4": {"enabled": False, "train": {"lr": 0.01}}},
        },
        [],
    ),
    "drawn-and-fixed-but-no-sweep": ({"tune": {"space": SPACE}, "train": {"lr": 0.01}}, []),
    # /dev/shm is pod memory: a size at or over a pod's limit is an OOMKill, not a size limit.
    "shm-over-every-pod": (
        {"sharedMemorySize": "40Gi", "dataPool": {"enabled": True, "memoryPerWorker": "16Gi"}},
        [SHM.format(size="40Gi", pods=SHM_ALL)],
    ),
    "shm-equal-to-the-pools": (
        {"sharedMemorySize": "32Gi", "head": {"memory": "64Gi"}},
        [SHM.format(size="32Gi", pods="nodePools.a100.memoryPerWorker 32Gi")],
    ),
    "shm-in-another-unit": (
        {"sharedMemorySize": "9000M", "nodePools": {"a100": {"memoryPerWorker": "8Gi"}}},
        [SHM.format(size="9000M", pods="head.memory 8Gi, nodePools.a100.memoryPerWorker 8Gi")],
    ),
    "shm-below-every-pod": ({"sharedMemorySize": "4Gi"}, []),
    "drawn-and-fixed-apart": (
        {"tune": {"enabled": True, "space": SPACE}, "train": {"epochs": 3}},
        [],
    ),
    # A red-team pass: these three reached Helm's NOTES.txt or nobody, never `render`.
    "kept-cluster": ({"rayJob": KEEP}, [KEPT_CLUSTER]),
    "no-auth": ({"rayAuth": {"enabled": False}}, [NO_AUTH.format(who=ANY_ADMITTED)]),
    "no-auth-no-policy": (
        {"rayAuth": {"enabled": False}, "networkPolicy": {"enabled": False}},
        [NO_AUTH.format(who=ANY_POD)],
    ),
    "dashboard-shut": ({"networkPolicy": {"dashboardFrom": []}}, [DASHBOARD_SHUT]),
    # A red-team pass: a job cut off before its start deadline rendered without a word.
    "deadlines-crossed": (
        {"rayJob": {"activeDeadlineSeconds": 60, "preRunningDeadlineSeconds": 3600}},
        [DEADLINES.format(active=60, pre=3600)],
    ),
    "deadlines-in-order": (
        {"rayJob": {"activeDeadlineSeconds": 7200, "preRunningDeadlineSeconds": 3600}},
        [],
    ),
    # A red-team pass: `a && b` rendered without a word, though KubeRay's submitter runs only
    # `a` as the Ray job and `b` in its own pod (docs/gitops.md).
    "and-outside-quotes": (
        {"rayJob": {"entrypoint": "trainctl check && trainctl train"}},
        [SHELL_OUTSIDE_QUOTES.format(key="rayJob.entrypoint")],
    ),
    "line-break": (
        {"rayJob": {"entrypoint": "trainctl train\nshutdownAfterJobFinishes: false"}},
        [SHELL_OUTSIDE_QUOTES.format(key="rayJob.entrypoint")],
    ),
    "tune-pipe": (
        {"tune": {"enabled": True, "space": SPACE, "entrypoint": "trainctl tune | tee log"}},
        [SHELL_OUTSIDE_QUOTES.format(key="tune.entrypoint")],
    ),
    "inside-quotes": (
        {"rayJob": {"entrypoint": 'bash -c "trainctl check && exec trainctl train > x"'}},
        [],
    ),
    "http-mode": (
        {
            "rayJob": {
                "entrypoint": "trainctl check && trainctl train",
                "submissionMode": "HTTPMode",
            }
        },
        [],
    ),
}


@pytest.mark.parametrize(("more", "said"), CASES.values(), ids=CASES.keys())
def test_helm_and_render_warn_alike(more: dict, said: list[str], tmp_path: Path) -> None:
    values = {**POOL, **more}
    assert value_warnings(values) == said
    notes = helm_notes(values)
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    render = subprocess.run(
        [sys.executable, "-m", "app", "render", "-f", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert render.returncode == 0, render.stderr
    shm = [SHM.format(size=k, pods=v) for k, v in SHM_SAID.items()]
    auth = [NO_AUTH.format(who=who) for who in (ANY_ADMITTED, ANY_POD)]
    drawn = [DRAWN.format(keys=k) for k in DRAWN_KEYS]
    for line in (KEPT_CLUSTER, LATEST, DELETE_SELF, *drawn, *shm, *auth, DASHBOARD_SHUT):
        assert (line in notes.splitlines()) == (line in said), (line, notes)
        assert (f"trainctl: {line}" in render.stderr.splitlines()) == (line in said), render.stderr
