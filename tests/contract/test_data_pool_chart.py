"""The data pool (dataPool): a CPU worker group beside each RayJob's GPU pool, fixed or autoscaled.

Rendered by the real Helm engine and by `trainctl render` (which must agree), and checked
against KubeRay v1.7's CRD and the operator's own rules.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from app.errors import ConfigError
from app.k8s import rules
from app.k8s.render import load_values, render_objects
from tests.contract.examples_support import unknown_fields
from tests.contract.k8s_support import (
    EXAMPLES,
    HelmFailed,
    by_key,
    config_data,
    containers,
    crd_schema,
    crd_validator,
    helm_render,
    load_yaml,
    of_kind,
    rayjob_groups,
)

THREE_POOLS = load_yaml(EXAMPLES / "values-three-pools.yaml")
EXAMPLE = load_yaml(EXAMPLES / "values-data-pool.yaml")
FIXED = {"enabled": True, "replicas": 3, "cpusPerWorker": "16", "memoryPerWorker": "64Gi"}
AUTOSCALED = {"enabled": True, "autoscaling": True, "minReplicas": 1, "maxReplicas": 6}
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


def _with(data_pool: dict[str, Any], base: dict[str, Any] = THREE_POOLS, **more: Any) -> dict:
    values = copy.deepcopy(base)
    values["dataPool"] = data_pool
    values.update(more)
    return values


def _jobs(values: dict[str, Any]) -> list[dict[str, Any]]:
    return of_kind(helm_render(values, release="train"), "RayJob")


def _by_name(jobs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """RayJobs by name, without the one label the engines set differently (managed-by)."""
    out = {}
    for job in copy.deepcopy(jobs):
        job["metadata"]["labels"].pop("app.kubernetes.io/managed-by")
        out[job["metadata"]["name"]] = job
    return out


def _python_jobs(values: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    pools = render_objects(load_values([path]), release="train", namespace="ml")
    return [o for objects in pools.values() for o in objects if o["kind"] == "RayJob"]


def _data_group(job: dict[str, Any]) -> dict[str, Any]:
    _, groups = rayjob_groups(job)
    (group,) = [g for g in groups if g["groupName"] == rules.DATA_GROUP]
    return group


def test_a_disabled_data_pool_renders_nothing_whatever_its_settings() -> None:
    """dataPool.enabled: false leaves every object as without the block (manifests/ and the
    committed renders of the other values files are the byte-for-byte proof)."""
    off = _with({**FIXED, "enabled": False, "spot": True, "nodeSelector": {"x.io/y": "z"}})
    assert by_key(helm_render(off, release="train")) == by_key(
        helm_render(THREE_POOLS, release="train")
    )


def test_a_fixed_data_pool_is_a_cpu_worker_group_in_every_rayjob() -> None:
    plain_objects = helm_render(THREE_POOLS, release="train")
    plain = {
        j["metadata"]["labels"]["trainctl.io/pool"]: j for j in of_kind(plain_objects, "RayJob")
    }
    values = _with({**FIXED, "nodeSelector": {"x.io/cpu": "yes"}, "tolerations": []})
    objects = helm_render(values, release="train")
    jobs = of_kind(objects, "RayJob")
    assert len(jobs) == 3
    for job in jobs:
        pool = job["metadata"]["labels"]["trainctl.io/pool"]
        cluster = job["spec"]["rayClusterSpec"]
        head, (gpu, data) = rayjob_groups(job)
        # The head and the GPU group are what they are without a data pool, but for the name.
        renamed = json.dumps([head, gpu]).replace(
            job["metadata"]["name"], plain[pool]["metadata"]["name"]
        )
        plain_head, (plain_gpu,) = rayjob_groups(plain[pool])
        assert json.loads(renamed) == [plain_head, plain_gpu]
        assert cluster["enableInTreeAutoscaling"] is False
        assert "autoscalerOptions" not in cluster
        assert data["groupName"] == "data"
        assert data["replicas"] == data["minReplicas"] == data["maxReplicas"] == 3
        assert data["labels"] == dict([rules.DATA_NODE_LABEL])  # what the app selects on
        assert data["rayStartParams"] == {} and "resources" not in data
        spec = data["template"]["spec"]
        assert spec["nodeSelector"] == {"x.io/cpu": "yes"}
        assert "tolerations" not in spec  # no GPU toleration for CPU nodes
        (worker,) = containers(data["template"])
        assert worker["resources"] == {
            "requests": {"cpu": "16", "memory": "64Gi"},
            "limits": {"cpu": "16", "memory": "64Gi"},
        }
        # The run's own pods: its ConfigMap and volume, its NetworkPolicy, its metrics.
        labels = data["template"]["metadata"]["labels"]
        assert labels["trainctl.io/run"] == job["metadata"]["name"]
        assert labels["app.kubernetes.io/component"] == "ray-worker"
        # Told apart from the GPU workers by a pod selector too (found by a red-team pass).
        assert labels["trainctl.io/role"] == "data"
        (gpu,) = [g for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"] if g is not data]
        assert "trainctl.io/role" not in gpu["template"]["metadata"]["labels"]
        assert {"configMapRef": {"name": job["metadata"]["name"]}} in worker["envFrom"]
        assert {m["name"] for m in worker["volumeMounts"]} == {"shared", "dshm"}
        assert spec["automountServiceAccountToken"] is False
        assert "lifecycle" not in worker and "trainctl.io/spot" not in labels
        # Data workers are not training workers: the settings are the GPU pool's, as before.
        data_of = config_data(objects, job["metadata"]["name"])
        plain_data = config_data(plain_objects, plain[pool]["metadata"]["name"])
        assert {k: v for k, v in data_of.items() if k != "TRAIN_RUN_NAME"} == {
            k: v for k, v in plain_data.items() if k != "TRAIN_RUN_NAME"
        }


def test_an_autoscaled_data_pool_turns_on_kuberays_autoscaler_for_that_group_only() -> None:
    resources = {
        "requests": {"cpu": "300m", "memory": "600Mi"},
        "limits": {"cpu": 2, "memory": "2Gi"},
    }
    values = _with(
        {**AUTOSCALED, "idleTimeoutSeconds": 120, "autoscaler": {"resources": resources}}
    )
    for job in _jobs(values):
        cluster = job["spec"]["rayClusterSpec"]
        head, (gpu, data) = rayjob_groups(job)
        assert cluster["enableInTreeAutoscaling"] is True
        options = cluster["autoscalerOptions"]
        assert options["version"] == "v2"  # label-aware autoscaling (Ray 2.51+, KubeRay 1.5.1+)
        assert options["upscalingMode"] == "Default"
        assert options["idleTimeoutSeconds"] == 120
        assert options["resources"] == {
            "requests": {"cpu": "300m", "memory": "600Mi"},
            "limits": {"cpu": "2", "memory": "2Gi"},
        }
        assert options["securityContext"]["allowPrivilegeEscalation"] is False
        assert options["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert options["securityContext"]["runAsNonRoot"] is True
        assert (data["minReplicas"], data["maxReplicas"], data["replicas"]) == (1, 6, 1)
        assert gpu["replicas"] == gpu["minReplicas"] == gpu["maxReplicas"]  # never scaled
        # The autoscaler container alone reads a ServiceAccount token: KubeRay binds its Role to
        # the head's ServiceAccount, and the pods keep automountServiceAccountToken off.
        (mount,) = options["volumeMounts"]
        assert mount == {"name": "autoscaler-token", "mountPath": TOKEN_PATH, "readOnly": True}
        volumes = {v["name"]: v for v in head["template"]["spec"]["volumes"]}
        sources = volumes["autoscaler-token"]["projected"]["sources"]
        assert {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}} in sources
        assert any(s.get("configMap", {}).get("name") == "kube-root-ca.crt" for s in sources)
        for group in (head, gpu, data):
            spec = group["template"]["spec"]
            assert spec["automountServiceAccountToken"] is False
            for container in spec["containers"]:
                assert all(m["name"] != "autoscaler-token" for m in container["volumeMounts"])
        for group in (gpu, data):
            names = {v["name"] for v in group["template"]["spec"]["volumes"]}
            assert "autoscaler-token" not in names
        assert rules.rayjob_problems(job) == []


def test_a_spot_data_pool_drains_its_ray_nodes_like_a_spot_gpu_pool() -> None:
    values = _with({**FIXED, "spot": True}, preemption={"gracePeriodSeconds": 60})
    (t4,) = [j for j in _jobs(values) if j["metadata"]["labels"]["trainctl.io/pool"] == "t4"]
    _, (gpu, data) = rayjob_groups(t4)  # t4 is a spot pool in the three-pool example
    assert data["template"]["metadata"]["labels"]["trainctl.io/spot"] == "true"
    (gpu_worker,) = containers(gpu["template"])
    (data_worker,) = containers(data["template"])
    assert data_worker["lifecycle"] == gpu_worker["lifecycle"]
    assert data_worker["lifecycle"]["preStop"]["exec"]["command"][3:] == [
        "58", "python", "-m", "app.k8s.drain_hook", "--deadline-remaining-seconds", "55",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "data_pool",
    [FIXED, AUTOSCALED, {**AUTOSCALED, "spot": True, "tolerations": [{"operator": "Exists"}]}],
    ids=["fixed", "autoscaled", "autoscaled-spot"],
)
def test_data_pool_rayjobs_are_valid_for_kuberay_and_alike_in_both_engines(
    data_pool: dict, tmp_path: Path
) -> None:
    values = _with(data_pool, metrics={"enabled": True})
    helm = _jobs(values)
    assert _by_name(helm) == _by_name(_python_jobs(values, tmp_path))
    for job in helm:
        assert list(crd_validator("rayjobs").iter_errors(job)) == []
        assert unknown_fields(job, crd_schema("rayjobs"), "") == []
        assert rules.rayjob_problems(job) == []
        (data_worker,) = containers(_data_group(job)["template"])
        assert data_worker["ports"] == [{"name": "metrics", "containerPort": 8080}]


def test_the_data_pool_changes_the_run_name_and_only_with_it() -> None:
    names = {j["metadata"]["name"] for j in _jobs(THREE_POOLS)}
    with_pool = {j["metadata"]["name"] for j in _jobs(_with(FIXED))}
    bigger = {j["metadata"]["name"] for j in _jobs(_with({**FIXED, "replicas": 4}))}
    assert names.isdisjoint(with_pool) and with_pool.isdisjoint(bigger)


def test_the_example_renders_an_autoscaled_spot_data_pool() -> None:
    (job,) = _jobs(EXAMPLE)
    data = _data_group(job)
    assert (data["minReplicas"], data["maxReplicas"]) == (1, 8)
    assert data["template"]["metadata"]["labels"]["trainctl.io/spot"] == "true"
    assert job["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] is True


REFUSED = [
    # (values over the three-pool example, what both engines must say)
    (_with({"enabled": True, "autoscaling": True}), "minReplicas"),
    (_with({"enabled": True, "minReplicas": 1, "maxReplicas": 4}), "dataPool"),
    (_with({**AUTOSCALED, "minReplicas": 5, "maxReplicas": 2}), "dataPool.minReplicas (5)"),
    # Ray 2.60's KubeRay autoscaler reports no node groups: a run finds no pool at 0, decodes
    # on the training nodes, and never asks for a data node.
    (_with({**AUTOSCALED, "minReplicas": 0}), "dataPool.minReplicas is 0: a run that starts"),
    (
        _with(AUTOSCALED, scheduler={"name": "kueue", "queue": "gpu"}),
        "dataPool.autoscaling cannot work with scheduler.name=kueue",
    ),
    (
        _with(AUTOSCALED, scheduler={"name": "scheduler-plugins"}),
        "dataPool.autoscaling cannot work with scheduler.name=scheduler-plugins",
    ),
    (
        _with(FIXED, nodePools={"data": {"gpusPerWorker": 1}}),
        "nodePools.data: with dataPool.enabled",
    ),
    # KubeRay gives the autoscaler's Role to the head's account: the namespace's default one
    # would hand every pod there the rights to create and delete pods (a red-team pass).
    (
        _with(AUTOSCALED, serviceAccount={"create": False}),
        "dataPool.autoscaling with the namespace's default ServiceAccount",
    ),
    (
        _with(AUTOSCALED, serviceAccount={"create": False, "name": "default"}),
        "dataPool.autoscaling with the namespace's default ServiceAccount",
    ),
    (_with({**FIXED, "replicas": 0}), "dataPool.replicas"),
    (_with({**FIXED, "gpusPerWorker": 1}), "dataPool"),
]


@pytest.mark.parametrize(("values", "says"), REFUSED, ids=[s for _, s in REFUSED])
def test_what_cannot_work_is_refused_by_both_engines(
    values: dict, says: str, tmp_path: Path
) -> None:
    with pytest.raises(HelmFailed) as helm:
        helm_render(values)
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError) as ours:
        render_objects(load_values([path]), release="demo", namespace="ml")
    assert any(says in problem for problem in ours.value.problems), ours.value.problems
    chart_rules = ("cannot work", "nodePools.data", "(5)", "is 0", "default ServiceAccount")
    if any(rule in says for rule in chart_rules):
        (problem,) = ours.value.problems  # a chart rule: Helm fails with the same words
        assert problem in str(helm.value)


def test_a_size_rule_names_the_rule_not_the_whole_pool(tmp_path: Path) -> None:
    """The rule over the pool's keys said `dataPool: {'enabled': True, 'replicas': -1, ...}
    is not allowed: ...`, the whole mapping, and not what to change."""
    values = _with({**FIXED, "minReplicas": 1})
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError) as ours:
        render_objects(load_values([path]), release="demo", namespace="ml")
    assert ours.value.problems == [
        "dataPool: minReplicas and maxReplicas size an autoscaled data pool: set "
        "dataPool.autoscaling to true, or give the fixed size as dataPool.replicas"
    ]


def test_a_fixed_data_pool_fits_kueue() -> None:
    values = _with(FIXED, scheduler={"name": "kueue", "queue": "gpu"})
    for job in _jobs(values):
        assert job["spec"]["suspend"] is True
        assert job["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] is False
        assert rules.rayjob_problems(job) == []
