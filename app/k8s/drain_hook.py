"""The preStop hook of a spot pool's Ray workers: drain this pod's own Ray node, then wait.

Kubernetes runs a container's preStop hook before it sends SIGTERM, and counts the hook against
the pod's terminationGracePeriodSeconds (the chart's `preemption.gracePeriodSeconds`). The hook
asks Ray's GCS to drain the pod's node with reason preemption and a deadline, as `ray drain-node
--reason DRAIN_NODE_REASON_PREEMPTION --deadline-remaining-seconds S` does (the same GCS call,
made here so that finding the node, draining it and waiting take one Python start, not three).
Ray then reports the preemption to training (`ray.train.get_preemption_info()`), which writes
its checkpoint; the hook waits until the node has left the cluster or the deadline has passed,
so SIGTERM does not cut the checkpoint short.

The node is found by the pod's IP: KubeRay sets MY_POD_IP from the downward API and RAY_ADDRESS
to the head's GCS on every worker container. The hook never fails the pod's termination: every
problem is printed (it reaches the kubelet's event for the hook) and it exits 0; the chart also
wraps it in `timeout`, so it ends within the grace period whatever happens.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

REASON = "DRAIN_NODE_REASON_PREEMPTION"
# Each GCS call's own deadline: the hook's whole budget is the grace period.
RPC_TIMEOUT_S = 5
POLL_S = 1.0


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m app.k8s.drain_hook")
    parser.add_argument("--deadline-remaining-seconds", type=int, required=True)
    parser.add_argument("--reason-message", default="pod terminating")
    return parser.parse_args(argv)


def _alive_nodes(gcs: Any) -> dict[str, Any]:
    """Node id (hex) -> node info, for the nodes the GCS holds alive."""
    infos = gcs.get_all_node_info(timeout=RPC_TIMEOUT_S)
    return {info.node_id.hex(): info for info in infos.values() if info.state == 0}


def own_node(gcs: Any, pod_ip: str) -> str | None:
    """The hex id of the one alive node at pod_ip; None if there is none or several."""
    nodes = _alive_nodes(gcs).items()
    found = [node for node, info in nodes if info.node_manager_address == pod_ip]
    return found[0] if len(found) == 1 else None


def drain(address: str, pod_ip: str, deadline_s: int, message: str) -> str:
    """Drain the node at pod_ip and wait for it to leave (or the deadline); say what happened."""
    from ray._raylet import GcsClient
    from ray.core.generated import autoscaler_pb2

    gcs = GcsClient(address=address)
    node = own_node(gcs, pod_ip)
    if node is None:
        return f"no single alive Ray node at {pod_ip} in the cluster at {address}; nothing drained"
    accepted, refusal = gcs.drain_node(
        node,
        autoscaler_pb2.DrainNodeReason.Value(REASON),
        message,
        int(time.time() * 1000) + deadline_s * 1000,
    )
    if not accepted:
        return f"Ray refused to drain node {node}: {refusal}"
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if node not in _alive_nodes(gcs):
            return f"node {node} drained and gone"
        time.sleep(POLL_S)
    return f"node {node} draining; deadline of {deadline_s} s reached"


def main(argv: list[str]) -> int:
    args = _args(argv)
    address, pod_ip = os.environ.get("RAY_ADDRESS", ""), os.environ.get("MY_POD_IP", "")
    if not address or not pod_ip:
        print("drain hook: RAY_ADDRESS or MY_POD_IP unset; nothing drained", file=sys.stderr)
        return 0
    try:
        deadline_s = max(1, args.deadline_remaining_seconds)
        outcome = drain(address, pod_ip, deadline_s, args.reason_message)
    except Exception as err:  # the pod must terminate whatever went wrong here
        outcome = f"drain failed: {type(err).__name__}: {err}"
    print(f"drain hook: {outcome}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
