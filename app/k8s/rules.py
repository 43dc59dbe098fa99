"""KubeRay, Kueue and batch-scheduler rules that the CRD schema cannot express.

The operator only refuses these after the RayJob exists (as a failed status), so both engines
refuse them at render instead: charts/trainctl/templates/_checks.tpl and _helpers.tpl fail with
the same messages as `values_problems` and `rayjob_problems` here. The tests also run
`rayjob_problems` on what Helm renders.
"""

from __future__ import annotations

import re
from typing import Any

from app.formatting import finite
from app.k8s import capacity, deprecated
from app.k8s.values import enabled_pools
from app.settings.tune_plan import listed, nothing_to_list, too_many_trials
from app.settings.tune_space import RANGES

MAX_RAYJOB_NAME = 47  # KubeRay's MaxRayJobNameLength: the cluster name adds a suffix to it
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
RAY_START_RESOURCES = ("num-cpus", "num-gpus", "memory", "resources")
MIN_AUTH_RAY = (2, 52, 0)
# The data pool's worker group in every RayJob (dataPool), and the Ray node label (key, value)
# its nodes carry: what the app's Ray Data stages select (docs/kubernetes.md, Data pool).
DATA_GROUP = "data"
DATA_NODE_LABEL = ("trainctl.io/role", "data")


def name_problem(name: str, release: str, pool: str) -> str | None:
    """The chart's trainctl.runName checks, word for word."""
    if len(name) > MAX_RAYJOB_NAME:
        return (
            f'RayJob name "{name}" is {len(name)} characters; KubeRay allows at most 47: '
            f'shorten the release name ("{release}") or the pool name ("{pool}") so that '
            "release + pool is at most 37 characters"
        )
    if not DNS_1035.match(name):
        return (
            f'RayJob name "{name}" is not a valid DNS-1035 label: the release name must start '
            "with a lowercase letter and use only a-z, 0-9 and '-'"
        )
    return None


def values_problems(values: dict[str, Any]) -> list[str]:
    """The chart's trainctl.checks: cross-field rules on the values."""
    job = values.get("rayJob") or {}
    shutdown = bool(job.get("shutdownAfterJobFinishes"))
    scheduler = deprecated.effective_scheduler(values).get("name", "")
    problems = []
    clash = deprecated.conflict(values)
    if clash:
        problems.append(clash)
    if scheduler == "kueue" and not shutdown:
        problems.append(
            "scheduler.name=kueue needs rayJob.shutdownAfterJobFinishes=true: Kueue creates "
            "RayJobs suspended, and KubeRay refuses to suspend one that keeps its cluster"
        )
    if scheduler == "kai-scheduler" and job.get("submissionMode") != "HTTPMode":
        problems.append(
            "scheduler.name=kai-scheduler needs rayJob.submissionMode=HTTPMode: KubeRay v1.7's "
            "KAI plugin refuses K8sJobMode RayJobs, whose submitter pod would start only after "
            "the gang"
        )
    problems += _data_pool_problems(values, scheduler)
    if not shutdown and int(job.get("ttlSecondsAfterFinished") or 0) > 0:
        problems.append(
            "rayJob.ttlSecondsAfterFinished needs rayJob.shutdownAfterJobFinishes=true (KubeRay "
            "refuses a TTL on a RayJob that keeps its cluster); set the TTL to 0"
        )
    if shutdown and (job.get("deletionStrategy") or {}).get("deletionRules"):
        problems.append(
            "rayJob.deletionStrategy.deletionRules and rayJob.shutdownAfterJobFinishes=true are "
            "mutually exclusive in KubeRay: set shutdownAfterJobFinishes to false and "
            "ttlSecondsAfterFinished to 0"
        )
    pools, schedule = values.get("nodePools") or {}, values.get("schedule") or {}
    for pool in schedule.get("pools") or []:
        if pool not in pools:
            problems.append(
                f'schedule.pools names "{pool}", which is not in nodePools '
                f"({', '.join(sorted(pools))})"
            )
        elif schedule.get("enabled") and pool not in enabled_pools(values):
            problems.append(
                f'schedule.pools names "{pool}", whose pool is disabled (nodePools.{pool}.enabled: '
                "false), so no CronJob would retrain it: enable the pool or remove it from "
                "schedule.pools"
            )
    problems += _secret_env_clashes(values)
    problems += _grid_without_lists(values.get("tune") or {})
    too_many = _sweep_too_large(values.get("tune") or {})
    if too_many:
        problems.append(too_many)
    problems += _reversed_ranges(values.get("tune") or {})
    return problems + capacity.problems(values)


def _secret_env_clashes(values: dict[str, Any]) -> list[str]:
    """A secretEnv name given twice, or also in env (the schema cannot compare items): each
    becomes one of a container's env entries, which override its envFrom (env's ConfigMap)."""
    problems, seen = [], set()
    plain = values.get("env") or {}
    for item in values.get("secretEnv") or []:
        name = item.get("name")
        if name in seen:
            problems.append(
                f'secretEnv names "{name}" twice: a container holds each variable once (the API '
                "server refuses the pods, or one value silently replaces the other); give each "
                "name once"
            )
        if name in plain:
            problems.append(
                f'"{name}" is in both env and secretEnv: the Secret\'s value would silently '
                "replace env's in every container; keep it in one"
            )
        seen.add(name)
    return problems


def _reversed_ranges(tune: dict[str, Any]) -> list[str]:
    """A range whose low is above its high (the schema cannot compare two items): `trainctl
    tune` refuses it in the job, after the pods are scheduled."""
    if not tune.get("enabled"):
        return []
    problems = []
    for key, dimension in (tune.get("space") or {}).items():
        for kind, ends in (dimension if isinstance(dimension, dict) else {}).items():
            if kind in RANGES and isinstance(ends, list) and len(ends) == 2:
                low, high = (finite(end) for end in ends)
                if low is not None and high is not None and low > high:
                    problems.append(f"tune.space.{key}: {kind} takes [low, high], low <= high")
    return problems


def _grid_without_lists(tune: dict[str, Any]) -> list[str]:
    """scheduler grid over a space of ranges only: `trainctl tune` refuses it in the job."""
    if not tune.get("enabled"):
        return []
    kinds = {
        str(key): str(kind)
        for key, dimension in (tune.get("space") or {}).items()
        if isinstance(dimension, dict)
        for kind in dimension
    }
    scheduler = str(tune.get("scheduler") or "")
    problem = nothing_to_list(scheduler, kinds, ("tune.space", "tune.scheduler"))
    return [problem] if problem else []


def _sweep_too_large(tune: dict[str, Any]) -> str | None:
    """A sweep over MAX_TRIALS trials would pass render and fail in the job's `trainctl check`."""
    if not tune.get("enabled"):
        return None
    scheduler = str(tune.get("scheduler") or "")
    lengths = [
        len(values) if isinstance(values, list) else 1
        for dimension in (tune.get("space") or {}).values()
        if isinstance(dimension, dict)
        for kind, values in dimension.items()
        if listed(kind, scheduler)
    ]
    return too_many_trials(lengths, int(tune.get("samples") or 1), ("tune.space", "tune.samples"))


# Why each scheduler cannot let a running gang grow (dataPool.autoscaling).
FIXED_GANG = {
    "kueue": "Kueue admits a RayJob once, at the size it asks for, and does not support "
    "autoscaling RayJobs",
    "scheduler-plugins": "the chart's PodGroup fixes the gang's size (minMember) when the RayJob "
    "is created, and data nodes the autoscaler adds later would be scheduled outside it",
}


# Ray 2.60's KubeRay autoscaler does not report its node groups to Ray, so a run finds the pool
# only in the data nodes up when it starts (docs/kubernetes.md, "An autoscaled pool at
# minReplicas: 0").
EMPTY_DATA_POOL = (
    "dataPool.minReplicas is 0: a run that starts with no data node up decodes on the training "
    "nodes for the whole run, and no task then asks the autoscaler for a data node, so the pool "
    "is never used; set dataPool.minReplicas to 1 or more"
)


# The autoscaler's rights go to whatever account the head runs as (docs/kubernetes.md).
DEFAULT_ACCOUNT_AUTOSCALER = (
    "dataPool.autoscaling with the namespace's default ServiceAccount: KubeRay binds its "
    "autoscaler's Role (create and delete the namespace's pods) to the head's account, so every "
    "pod running as default there would get those rights; let the chart create one "
    "(serviceAccount.create: true, name empty) or name another (serviceAccount.name)"
)


def _account_name(values: dict[str, Any]) -> str:
    """The Ray pods' ServiceAccount as the chart names it (trainctl.serviceAccountName), where
    only "default" matters here."""
    account = values.get("serviceAccount") or {}
    return str(account.get("name") or ("" if account.get("create") else "default"))


def _data_pool_problems(values: dict[str, Any], scheduler: str) -> list[str]:
    data = values.get("dataPool") or {}
    problems = []
    if data.get("enabled") and data.get("autoscaling"):
        if scheduler in FIXED_GANG:
            problems.append(
                f"dataPool.autoscaling cannot work with scheduler.name={scheduler}: "
                f"{FIXED_GANG[scheduler]}; give the data pool a fixed size "
                "(dataPool.autoscaling: false, dataPool.replicas)"
            )
        low, high = int(data.get("minReplicas") or 0), int(data.get("maxReplicas") or 0)
        if low > high:
            problems.append(f"dataPool.minReplicas ({low}) is above dataPool.maxReplicas ({high})")
        if _account_name(values) == "default":
            problems.append(DEFAULT_ACCOUNT_AUTOSCALER)
        if low == 0:
            problems.append(EMPTY_DATA_POOL)
    if data.get("enabled") and DATA_GROUP in enabled_pools(values):
        problems.append(
            f"nodePools.{DATA_GROUP}: with dataPool.enabled every RayJob has a worker group "
            f"named {DATA_GROUP} for the data pool; give the pool another name"
        )
    return problems


def rayjob_problems(job: dict[str, Any]) -> list[str]:
    """Operator-side validation of one rendered RayJob (KubeRay v1.7 ValidateRayJob*)."""
    name = job.get("metadata", {}).get("name", "")
    spec = job.get("spec", {})
    cluster = spec.get("rayClusterSpec") or {}
    problems = []
    if len(name) > MAX_RAYJOB_NAME or not DNS_1035.match(name):
        problems.append(f"{name!r}: RayJob names are DNS-1035 labels of at most 47 characters")
    shutdown = bool(spec.get("shutdownAfterJobFinishes"))
    if spec.get("suspend") and not shutdown:
        problems.append(f"{name}: a suspended RayJob needs shutdownAfterJobFinishes=true")
    if not shutdown and int(spec.get("ttlSecondsAfterFinished") or 0) > 0:
        problems.append(f"{name}: ttlSecondsAfterFinished needs shutdownAfterJobFinishes=true")
    if shutdown and (spec.get("deletionStrategy") or {}).get("deletionRules"):
        problems.append(f"{name}: deletionRules and shutdownAfterJobFinishes are exclusive")
    if spec.get("activeDeadlineSeconds") is not None and spec["activeDeadlineSeconds"] <= 0:
        problems.append(f"{name}: activeDeadlineSeconds must be positive")
    if spec.get("backoffLimit") is not None and spec["backoffLimit"] < 0:
        problems.append(f"{name}: backoffLimit must not be negative")
    if spec.get("submissionMode") == "SidecarMode" and spec.get("submitterPodTemplate"):
        problems.append(f"{name}: SidecarMode does not take a submitterPodTemplate")
    groups = [("head", cluster.get("headGroupSpec") or {})]
    groups += [(g.get("groupName", "?"), g) for g in cluster.get("workerGroupSpecs") or []]
    for group_name, group in groups:
        if int(group.get("minReplicas") or 0) > int(group.get("maxReplicas", 2**31 - 1)):
            problems.append(f"{name}: group {group_name} has minReplicas above maxReplicas")
        params = group.get("rayStartParams") or {}
        if any(params.get(key) for key in RAY_START_RESOURCES) and group.get("resources"):
            problems.append(
                f"{name}: group {group_name} sets resources in both rayStartParams and resources"
            )
        if "labels" in params:
            problems.append(f"{name}: group {group_name} sets rayStartParams['labels']")
    auth = cluster.get("authOptions") or {}
    if auth.get("mode") == "token":
        version = tuple(int(p) for p in re.findall(r"\d+", cluster.get("rayVersion", ""))[:3])
        if version < MIN_AUTH_RAY:
            problems.append(f"{name}: token authentication needs rayVersion >= 2.52.0")
    if cluster.get("enableInTreeAutoscaling") and (
        spec.get("suspend") or "kueue.x-k8s.io/queue-name" in job["metadata"].get("labels", {})
    ):
        problems.append(f"{name}: Kueue-managed RayJobs cannot autoscale")
    return problems
