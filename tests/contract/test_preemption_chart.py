"""The chart's side of preemption, rendered by Helm: grace periods, spot labels, the drain hook.

tests/cluster/test_drain_hook.py runs the rendered hook against a local Ray cluster.
"""

from __future__ import annotations

import kubernetes_validate
import pytest

from app.k8s import drain_hook
from tests.contract.k8s_support import HelmFailed, helm_render, of_kind, rayjob_groups

SPOT = {
    "preemption": {"gracePeriodSeconds": 90},
    "nodePools": {"spot": {"spot": True}, "steady": {}},
}


def _pools(values: dict) -> dict[str, dict]:
    """Pool name -> (head pod spec, worker group) of its RayJob."""
    pools = {}
    for job in of_kind(helm_render(values), "RayJob"):
        head, (group,) = rayjob_groups(job)
        pools[group["groupName"]] = {"head": head["template"], "group": group}
    return pools


def test_every_ray_pod_gets_the_grace_period_and_spot_workers_the_drain_hook() -> None:
    pools = _pools(SPOT)
    for name, pool in pools.items():
        worker_pod = pool["group"]["template"]
        assert pool["head"]["spec"]["terminationGracePeriodSeconds"] == 90, name
        assert worker_pod["spec"]["terminationGracePeriodSeconds"] == 90, name
        # As a Pod, by Kubernetes' own schema (the RayJob CRD check is in test_chart.py).
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"}, **worker_pod}
        kubernetes_validate.validate(pod, "1.31", strict=True)
    spot_pod = pools["spot"]["group"]["template"]
    (worker,) = spot_pod["spec"]["containers"]
    assert spot_pod["metadata"]["labels"]["trainctl.io/spot"] == "true"
    assert worker["lifecycle"] == {
        "preStop": {
            "exec": {
                "command": [
                    # killed 1 s before the grace period ends, the drain's deadline 5 s before
                    *("timeout", "-k", "1", "88"),
                    *("python", "-m", "app.k8s.drain_hook"),
                    *("--deadline-remaining-seconds", "85"),
                ]
            }
        }
    }
    # The command's module and flags are the real ones.
    assert drain_hook._args(worker["lifecycle"]["preStop"]["exec"]["command"][7:])
    steady_pod = pools["steady"]["group"]["template"]
    assert "trainctl.io/spot" not in steady_pod["metadata"]["labels"]
    assert "lifecycle" not in steady_pod["spec"]["containers"][0]


def test_spot_changes_nothing_else_about_the_pool() -> None:
    """Tolerations and node selectors stay the user's own: spot adds no scheduling rule."""
    pools = _pools(
        {"nodePools": {"a": {"spot": True}, "b": {"spot": False}}, "poolDefaults": {"train": {}}}
    )
    a, b = (pools[n]["group"]["template"]["spec"] for n in ("a", "b"))
    for spec in (a, b):
        spec["containers"][0].pop("lifecycle", None)
        spec["containers"][0].pop("envFrom")  # names the run's ConfigMap, different per pool
    assert a == b


def test_the_default_grace_period_is_documented_and_covers_a_checkpoint() -> None:
    (pool,) = _pools({"nodePools": {"p": {}}}).values()
    assert pool["group"]["template"]["spec"]["terminationGracePeriodSeconds"] == 120


@pytest.mark.parametrize("bad", [5, 3601, "120", 12.5, None])
def test_a_grace_period_out_of_range_is_refused(bad: object) -> None:
    with pytest.raises(HelmFailed, match=r"gracePeriodSeconds|preemption"):
        helm_render({"preemption": {"gracePeriodSeconds": bad}, "nodePools": {"p": {}}})


def test_spot_must_be_a_boolean() -> None:
    with pytest.raises(HelmFailed, match="spot"):
        helm_render({"nodePools": {"p": {"spot": "yes"}}})
