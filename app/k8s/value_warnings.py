"""What NOTES.txt warns of in values that render but are likely a mistake, said by `trainctl
render` and `submit` on stderr with the same words (charts/trainctl/templates/NOTES.txt holds
the Helm side; tests/contract/test_value_warnings.py holds the two alike).

- A mutable `latest` tag without a digest: replacement nodes pull the moved tag while nodes
  that pulled it earlier keep theirs (IfNotPresent), so one Ray cluster runs two images, and a
  moved tag changes no RayJob name, so GitOps starts no run for it.
- A RayJob that keeps its Ray cluster with nothing to delete it: its GPUs stay held.
- Token auth off: the job API runs any admitted pod's code, with the pods' volume and secrets;
  and a dashboard rule that lets nobody in, where KubeRay's operator must reach it.
- A deletion rule with DeleteSelf: GitOps (Argo CD self-heal, Flux) creates the deleted RayJob
  again at its next sync, and it trains again, a GPU cluster start each time.
"""

from __future__ import annotations

import re
from typing import Any

from app.formatting import mapping
from app.k8s.canonical import scalar
from app.k8s.capacity import amount
from app.k8s.values import coalesce, default_values, enabled_pools

KEPT_CLUSTER = (
    "WARNING: rayJob.shutdownAfterJobFinishes is false and no rayJob.deletionStrategy is set: a "
    "kept run's Ray cluster stays up, holding its GPUs, until its RayJob is deleted."
)
LATEST = (
    "WARNING: image.tag is latest and image.digest is empty: nodes that pulled it before keep "
    "their copy (pullPolicy IfNotPresent) beside new nodes pulling the moved tag, and a moved tag "
    "renames no RayJob, so GitOps starts no run for it; pin a version tag or image.digest."
)
DELETE_SELF = (
    "WARNING: a rayJob.deletionStrategy rule deletes the RayJob itself (DeleteSelf): Argo CD "
    "self-heal or Flux creates it again at the next sync, and it trains again; under GitOps use "
    "DeleteCluster or DeleteWorkers, or shutdownAfterJobFinishes (docs/gitops.md)."
)

DRAWN = (
    "WARNING: tune.space draws {keys} anew for every trial, so the value in train (or a pool's "
    "train) is not used; take it out of one of them."
)

NO_AUTH = (
    "WARNING: rayAuth.enabled is false: each run's Ray job API (port 8265 on its head) runs the "
    "code of {who}, with the shared volume and the secretEnv credentials the Ray pods hold; keep "
    "token auth on."
)
ANY_ADMITTED = "any pod networkPolicy.dashboardFrom lets in"
ANY_POD = "any pod in the cluster (networkPolicy.enabled is false too)"
DASHBOARD_SHUT = (
    "WARNING: networkPolicy.dashboardFrom is empty: the KubeRay operator cannot reach a run's "
    "dashboard (port 8265), so it never learns the job's status and the run ends in "
    "JobStatusCheckTimeoutExceeded; let the operator's pods in, as the chart's default rule does."
)

SHM = (
    "WARNING: sharedMemorySize {size} is not below the memory of {pods}: /dev/shm is counted in "
    "the pod's memory limit, so filling it gets the pod OOMKilled before its size limit is "
    "reached; keep sharedMemorySize well below each pod's memory."
)


SHELL_OUTSIDE_QUOTES = (
    "WARNING: {key} has a shell operator (; & | < > or a line break) outside quotes: KubeRay's "
    "submitter (K8sJobMode) pastes the entrypoint into its own bash line, so only what comes "
    "before it is the Ray job and the rest runs in the submitter pod; keep it inside one quoted "
    "argument, as the default does (bash -c '... && ...')."
)
DEADLINES = (
    "WARNING: rayJob.activeDeadlineSeconds ({active}) is not above "
    "rayJob.preRunningDeadlineSeconds ({pre}): the whole job is cut off before the time given "
    "to start it runs out, so a run that starts late has no time left to train; give the job "
    "its training time beyond the start."
)
# Quoted stretches, and what is left outside them: the same regexes in NOTES.txt (RE2).
QUOTED = re.compile("'[^']*'|\"[^\"]*\"")
SHELL_OPERATOR = re.compile("[;&|<>\n]")


def value_warnings(values: dict[str, Any]) -> list[str]:
    """NOTES.txt's WARNING lines of these values (over the chart's defaults), in its order."""
    values = coalesce(default_values(), values)
    found = []
    job = values.get("rayJob") or {}
    if not job.get("shutdownAfterJobFinishes") and not job.get("deletionStrategy"):
        found.append(KEPT_CLUSTER)
    image = values.get("image") or {}
    if str(image.get("tag")) == "latest" and not image.get("digest"):
        found.append(LATEST)
    strategy = (values.get("rayJob") or {}).get("deletionStrategy")
    # deletionRules, or KubeRay's older onSuccess / onFailure form. The block is free-form
    # (KubeRay's CRD judges it): any other shape is no rule here.
    strategy = strategy if isinstance(strategy, dict) else {}
    given = strategy.get("deletionRules")
    rules = given if isinstance(given, list) else []
    rules = [*rules, strategy.get("onSuccess"), strategy.get("onFailure")]
    if any(isinstance(r, dict) and r.get("policy") == "DeleteSelf" for r in rules):
        found.append(DELETE_SELF)
    if drawn := _drawn_and_fixed(values):
        found.append(DRAWN.format(keys=", ".join(drawn)))
    if small := _pods_within_shm(values):
        found.append(SHM.format(size=scalar(values.get("sharedMemorySize")), pods=small))
    policy = values.get("networkPolicy") or {}
    if not (values.get("rayAuth") or {}).get("enabled"):
        found.append(NO_AUTH.format(who=ANY_ADMITTED if policy.get("enabled") else ANY_POD))
    if policy.get("enabled") and not policy.get("dashboardFrom"):
        found.append(DASHBOARD_SHUT)
    active, pre = job.get("activeDeadlineSeconds"), job.get("preRunningDeadlineSeconds")
    if isinstance(active, int) and isinstance(pre, int) and active <= pre:
        found.append(DEADLINES.format(active=active, pre=pre))
    if key := _entrypoint_split_by_the_submitter(values):
        found.append(SHELL_OUTSIDE_QUOTES.format(key=key))
    return found


def _entrypoint_split_by_the_submitter(values: dict[str, Any]) -> str | None:
    """The entrypoint's key where a shell operator outside quotes would split it in KubeRay's
    submitter (K8sJobMode); None otherwise. HTTPMode hands the whole text to Ray's job API."""
    job, tune = mapping(values.get("rayJob")), mapping(values.get("tune"))
    if job.get("submissionMode") != "K8sJobMode":
        return None
    key, entrypoint = (
        ("tune.entrypoint", tune.get("entrypoint"))
        if tune.get("enabled")
        else ("rayJob.entrypoint", job.get("entrypoint"))
    )
    outside = QUOTED.sub("", str(entrypoint or ""))
    return key if SHELL_OPERATOR.search(outside) else None


def _pods_within_shm(values: dict[str, Any]) -> str:
    """The pods' memory keys (the head, each enabled pool, the data pool) whose quantity is not
    above sharedMemorySize, each with its value, in NOTES.txt's order; empty for none."""
    pods = enabled_pools(values)
    if not pods:  # nothing renders, NOTES says only that
        return ""
    memory = {"head.memory": (values.get("head") or {}).get("memory")}
    for name, pool in pods.items():
        memory[f"nodePools.{name}.memoryPerWorker"] = pool.get("memoryPerWorker")
    data = values.get("dataPool") or {}
    if data.get("enabled"):
        memory["dataPool.memoryPerWorker"] = data.get("memoryPerWorker")
    shm = amount(values.get("sharedMemorySize"))
    return ", ".join(
        f"{key} {scalar(quantity)}" for key, quantity in memory.items() if shm >= amount(quantity)
    )


def _drawn_and_fixed(values: dict[str, Any]) -> list[str]:
    """The tune.space keys that train: or an enabled pool's train: also sets, sorted (as Go
    ranges over a map). A pool's train replaces poolDefaults.train whole, like its other keys."""
    tune = mapping(values.get("tune"))
    if not tune.get("enabled"):
        return []
    fixed = set(mapping(values.get("train")))
    for pool in enabled_pools(values).values():
        fixed |= set(mapping(pool.get("train")))
    return sorted(set(mapping(tune.get("space"))) & fixed)
