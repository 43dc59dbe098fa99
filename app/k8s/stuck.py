"""Fetch what `diagnose` needs for one RayJob: its pods, their events and claims, its Workload.

Read-only and best effort: a permission or a Kueue CRD missing costs one line saying so, never
the `status` table or the `--wait` loop. Events are listed per object (fieldSelector on
involvedObject) for a few problem pods only, so a poll stays a handful of requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from app.errors import TrainctlError
from app.k8s.cluster import Cluster
from app.k8s.diagnose import claim_names, diagnose, problem_pods

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # Kueue labels a job's Workload with the job's UID


def why_stuck(
    cluster: Cluster, namespace: str, rayjob: Mapping[str, Any], now: datetime | None = None
) -> tuple[str, ...]:
    meta = rayjob.get("metadata") or {}
    name = str(meta.get("name", ""))
    ray_cluster = str((rayjob.get("status") or {}).get("rayClusterName") or "")
    notes: list[str] = []

    def attempt(what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except TrainctlError as err:
            notes.append(f"could not read {what}: {err.problems[0]}")
            return None

    pods: list[dict[str, Any]] = []
    selectors = [f"job-name={name}"] + ([f"ray.io/cluster={ray_cluster}"] if ray_cluster else [])
    for selector in selectors:
        pods += attempt("pods", cluster.list, "Pod", namespace, selector) or []
    stuck = problem_pods(pods)
    events: list[dict[str, Any]] = []
    for kind, obj_name in [("RayJob", name)] + [("Pod", p["metadata"]["name"]) for p in stuck]:
        fields = f"involvedObject.kind={kind},involvedObject.name={obj_name}"
        events += attempt("events", cluster.list, "Event", namespace, "", fields) or []
    claims = []
    for claim in claim_names(stuck):
        found = attempt("claims", cluster.get, "PersistentVolumeClaim", namespace, claim)
        if found is not None:
            claims.append(found)
            if (found.get("status") or {}).get("phase") != "Bound":
                fields = f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={claim}"
                events += attempt("events", cluster.list, "Event", namespace, "", fields) or []
    workloads: list[dict[str, Any]] = []
    if (meta.get("labels") or {}).get("kueue.x-k8s.io/queue-name") and meta.get("uid"):
        selector = f"{JOB_UID_LABEL}={meta['uid']}"
        workloads = attempt("Kueue Workloads", cluster.list, "Workload", namespace, selector) or []
    lines = diagnose(rayjob, pods=pods, events=events, claims=claims, workloads=workloads, now=now)
    # One note per kind of failure: RBAC without `events` would otherwise repeat per pod.
    return (*lines, *dict.fromkeys(notes))
