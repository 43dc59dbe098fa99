"""Shared fixtures: one real multi-node Ray cluster for the whole session.

Starting Ray costs seconds, so every test that needs a cluster shares this one. Tests that
run `trainctl` as a subprocess point it at the cluster through TRAIN_RAY_ADDRESS.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Quiet, deterministic Ray: no usage stats prompt, no log-to-driver spam in test output.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    """A head node (no training capacity of its own) and two worker 'nodes' on this machine.

    Each worker node carries a fake accelerator label so pool targeting can be tested on CPU.
    """
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": True,
            "dashboard_host": "127.0.0.1",
            "dashboard_port": _free_port(),
        },
    )
    for _ in range(2):
        cluster.add_node(num_cpus=2, resources={"accelerator_type:A100": 1})
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="session")
def ray_session(ray_cluster: object) -> Iterator[None]:
    """This test process connected to the shared cluster as a driver."""
    import ray

    ray.init(address=ray_cluster.address, log_to_driver=False)  # type: ignore[attr-defined]
    yield
    ray.shutdown()
