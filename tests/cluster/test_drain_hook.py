"""The chart's preStop hook for spot workers, run as Helm renders it, drains its own Ray node.

A pod cannot be had here, so the test gives the command what KubeRay gives a worker container:
RAY_ADDRESS (the head's GCS) and MY_POD_IP (the downward API's status.podIP). The session
cluster's nodes all share this machine's address, so a node of its own is added at 127.0.0.2
(any 127/8 address reaches this machine) with no CPUs, so no other test's work lands on it;
the hook must pick that node by its IP and no other. The node is removed afterwards.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.contract.k8s_support import helm_render, of_kind, rayjob_groups
from tests.support import REPO

pytestmark = [pytest.mark.cluster]

POD_IP = "127.0.0.2"


def _rendered_hook() -> list[str]:
    values = {"preemption": {"gracePeriodSeconds": 30}, "nodePools": {"spot": {"spot": True}}}
    (job,) = of_kind(helm_render(values), "RayJob")
    _, (group,) = rayjob_groups(job)
    (worker,) = group["template"]["spec"]["containers"]
    return worker["lifecycle"]["preStop"]["exec"]["command"]


@pytest.fixture
def spot_node(ray_cluster: object) -> Iterator[str]:
    node = ray_cluster.add_node(num_cpus=0, node_ip_address=POD_IP)  # type: ignore[attr-defined]
    ray_cluster.wait_for_nodes()  # type: ignore[attr-defined]
    try:
        yield node.node_id
    finally:
        ray_cluster.remove_node(node, allow_graceful=False)  # type: ignore[attr-defined]


def _nodes(address: str) -> dict[str, object]:
    """Node id -> the state API's record, dead nodes included (filters are applied here: the
    state API counts the rows a filter drops as missing output and raises)."""
    from ray.util.state import list_nodes

    return {node.node_id: node for node in list_nodes(address=address, detail=True)}


def _alive(address: str) -> set[str]:
    return {node_id for node_id, node in _nodes(address).items() if node.state == "ALIVE"}


def test_the_rendered_prestop_command_drains_the_pods_own_node(
    ray_cluster: object, spot_node: str
) -> None:
    address = ray_cluster.address  # type: ignore[attr-defined]
    others = _alive(address) - {spot_node}
    env = {**os.environ, "RAY_ADDRESS": address, "MY_POD_IP": POD_IP, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    result = subprocess.run(
        _rendered_hook(), env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    # The hook ends well within the grace period (30 s): an idle node leaves at once.
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 25, result.stderr
    assert f"node {spot_node} drained and gone" in result.stderr, result.stderr
    node = _nodes(address)[spot_node]
    assert node.state == "DEAD", node
    assert "preempt" in (node.state_message or "").lower(), node
    # Only the pod's own node: every other node of the shared cluster is alive.
    assert others <= _alive(address)


def test_the_hook_drains_nothing_when_no_node_has_the_pods_ip(ray_cluster: object) -> None:
    address = ray_cluster.address  # type: ignore[attr-defined]
    before = _alive(address)
    env = {**os.environ, "RAY_ADDRESS": address, "MY_POD_IP": "127.0.0.3", "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        _rendered_hook(), env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "no single alive Ray node at 127.0.0.3" in result.stderr, result.stderr
    assert before <= _alive(address)
