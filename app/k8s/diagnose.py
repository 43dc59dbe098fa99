"""Why a RayJob is not running yet: the lines `status` and `submit --wait` print.

A pure function of the objects the API server returned (the RayJob, its pods, their events,
the claims they mount and Kueue's Workload), so each decision is unit-tested on recorded JSON.
It answers the questions a user otherwise needs several `kubectl describe` calls for: which
pods are Pending and why (no node with a free nvidia.com/gpu, an image that cannot be pulled, a
volume that is not bound), the last warning events, and whether Kueue admitted the job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from app.formatting import format_duration

MAX_EVENTS = 3
MAX_MESSAGE = 240
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

# Container waiting reasons that mean "this will not start by itself"; ContainerCreating and
# PodInitializing are normal steps and are not worth a line.
STUCK_WAITING = {
    "ErrImagePull": "the image cannot be pulled: check image.repository/tag and imagePullSecrets",
    "ImagePullBackOff": "the image cannot be pulled: check image.repository/tag and "
    "imagePullSecrets",
    "InvalidImageName": "the image name is not valid",
    "CreateContainerConfigError": "a Secret or ConfigMap the container needs is missing",
    "CreateContainerError": "the container runtime could not create the container",
    "CrashLoopBackOff": "the container keeps exiting; `trainctl logs --head` or the pod's logs",
    "RunContainerError": "the container runtime could not start the container",
}
# Hints for the scheduler's message (the PodScheduled condition and FailedScheduling events).
SCHEDULING_HINTS = (
    (
        "nvidia.com/gpu",
        "no node has a free nvidia.com/gpu: check the pool's nodeSelector and tolerations, the "
        "NVIDIA device plugin, and whether the autoscaler can add a GPU node",
    ),
    (
        "unbound immediate PersistentVolumeClaims",
        "a volume claim is not bound: `kubectl get pvc` and its storageClassName",
    ),
    ("persistentvolumeclaim", "a volume claim the pod mounts is missing or not bound"),
    ("Insufficient cpu", "no node has enough free CPU for the requested cpusPerWorker"),
    ("Insufficient memory", "no node has enough free memory for the requested memoryPerWorker"),
    ("untolerated taint", "every fitting node has a taint the pod does not tolerate"),
    ("didn't match Pod's node affinity/selector", "no node matches the pool's nodeSelector"),
)


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _hint(message: str) -> str:
    for needle, hint in SCHEDULING_HINTS:
        if needle.lower() in message.lower():
            return hint
    return ""


def pod_role(pod: Mapping[str, Any]) -> str:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if "job-name" in labels:
        return "submitter"
    return str(labels.get("ray.io/node-type") or "pod")


def _pod_problem(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(what, hint) for a pod that will not get going by itself, or None."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase == "Failed":
        reason = status.get("reason") or "Failed"
        return f"Failed: {reason}: {_short(status.get('message') or '')}".rstrip(": "), ""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = _short(condition.get("message") or "")
            reason = condition.get("reason") or "Unschedulable"
            return f"Pending, {reason}: {message}", _hint(message)
    statuses = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    for container in statuses:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason") or ""
        if reason in STUCK_WAITING:
            message = _short(waiting.get("message") or "")
            what = f"{phase}, container {container.get('name')} {reason}"
            return (f"{what}: {message}" if message else what), STUCK_WAITING[reason]
    return None


def pod_lines(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per distinct problem; 16 identical Pending workers make one line, not 16."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for pod in pods:
        problem = _pod_problem(pod)
        if problem is not None:
            name = str((pod.get("metadata") or {}).get("name", "?"))
            groups.setdefault((pod_role(pod), *problem), []).append(name)
    lines = []
    # The head first: workers cannot join a cluster whose head is not up.
    order = {"head": 0, "worker": 1, "submitter": 2}
    for (role, what, hint), names in sorted(groups.items(), key=lambda g: order.get(g[0][0], 3)):
        who = f"{role} pod {names[0]}" if len(names) == 1 else f"{len(names)} {role} pods"
        lines.append(f"{who}: {what}" + (f" ({hint})" if hint else ""))
    return lines


def claim_lines(claims: Iterable[Mapping[str, Any]]) -> list[str]:
    lines = []
    for claim in claims:
        phase = (claim.get("status") or {}).get("phase") or "Pending"
        if phase != "Bound":
            name = (claim.get("metadata") or {}).get("name", "?")
            storage_class = (claim.get("spec") or {}).get("storageClassName") or "(default)"
            lines.append(
                f"PersistentVolumeClaim {name} is {phase}, not bound (storageClassName "
                f"{storage_class}): no volume provisioned for it yet"
            )
    return lines


def event_time(event: Mapping[str, Any]) -> str:
    """Newest time an event was seen; events from events.k8s.io leave lastTimestamp null."""
    series = event.get("series") or {}
    candidates = (
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    )
    return max((str(c) for c in candidates if c), default="")


def _ago(stamp: str, now: datetime | None) -> str:
    if not stamp or now is None:
        return ""
    try:
        seen = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return ""
    return f", {format_duration((now - seen).total_seconds())} ago"


def event_lines(events: Iterable[Mapping[str, Any]], now: datetime | None) -> list[str]:
    """The last few distinct Warning events, newest first."""
    warnings = [e for e in events if e.get("type") == "Warning"]
    warnings.sort(key=event_time, reverse=True)
    seen: set[tuple[str, str]] = set()
    lines = []
    for event in warnings:
        reason = str(event.get("reason") or "")
        message = _short(event.get("message") or "")
        if (reason, message) in seen:
            continue
        seen.add((reason, message))
        obj = event.get("involvedObject") or {}
        count = int(event.get("count") or (event.get("series") or {}).get("count") or 1)
        times = f", {count}x" if count > 1 else ""
        where = f"{obj.get('kind', '?')} {obj.get('name', '?')}"
        lines.append(f"warning {reason} on {where}{_ago(event_time(event), now)}{times}: {message}")
        if len(lines) == MAX_EVENTS:
            break
    return lines


def _condition(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (workload.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


def _true(condition: Mapping[str, Any] | None) -> bool:
    return condition is not None and condition.get("status") == "True"


def kueue_line(rayjob: Mapping[str, Any], workloads: Sequence[Mapping[str, Any]]) -> str | None:
    """Kueue's admission state of the RayJob, or None when it is not queued through Kueue."""
    labels = (rayjob.get("metadata") or {}).get("labels") or {}
    queue = labels.get(QUEUE_LABEL)
    if not queue:
        return None
    if not workloads:
        return (
            f"Kueue: no Workload for this RayJob yet (queue {queue}); if it stays so, Kueue is not "
            "installed or does not manage RayJobs (integrations.frameworks: ray.io/rayjob)"
        )
    workload = max(
        workloads, key=lambda w: str((w.get("metadata") or {}).get("creationTimestamp", ""))
    )
    name = (workload.get("metadata") or {}).get("name", "?")
    evicted = _condition(workload, "Evicted")
    if _true(evicted):
        return (
            f"Kueue: Workload {name} evicted ({evicted.get('reason')}): "
            f"{_short(evicted.get('message') or '')}"
        )
    if _true(_condition(workload, "Finished")):
        return f"Kueue: Workload {name} finished"
    admission = (workload.get("status") or {}).get("admission") or {}
    if _true(_condition(workload, "Admitted")):
        return f"Kueue: admitted by ClusterQueue {admission.get('clusterQueue', '?')}"
    reserved = _condition(workload, "QuotaReserved")
    if _true(reserved):
        return (
            f"Kueue: quota reserved in ClusterQueue {admission.get('clusterQueue', '?')}; "
            "waiting for admission checks"
        )
    if reserved is not None:
        reason = reserved.get("reason") or "Pending"
        return (
            f"Kueue: not admitted ({reason}) in queue {queue}: "
            f"{_short(reserved.get('message') or 'no message')}"
        )
    return f"Kueue: Workload {name} queued in {queue}, not evaluated yet"


def diagnose(
    rayjob: Mapping[str, Any],
    *,
    pods: Sequence[Mapping[str, Any]] = (),
    events: Iterable[Mapping[str, Any]] = (),
    claims: Iterable[Mapping[str, Any]] = (),
    workloads: Sequence[Mapping[str, Any]] = (),
    now: datetime | None = None,
) -> tuple[str, ...]:
    """Every line worth showing about why this RayJob's pods are not (all) running; () if none."""
    lines: list[str] = []
    queue = kueue_line(rayjob, workloads)
    if queue is not None:
        lines.append(queue)
    lines.extend(pod_lines(pods))
    lines.extend(claim_lines(claims))
    lines.extend(event_lines(events, now))
    return tuple(lines)


def needs_look(rayjob: Mapping[str, Any]) -> bool:
    """Whether the RayJob is in a state where pods or Kueue can hold it back."""
    status = rayjob.get("status") or {}
    deployment = status.get("jobDeploymentStatus") or ""
    if deployment in ("Complete", "Failed", "ValidationFailed"):
        return False
    # Running with the job RUNNING: training; anything earlier can be stuck.
    return not (deployment == "Running" and status.get("jobStatus") == "RUNNING")


def problem_pods(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods worth fetching events and claims for (a few: each costs a request)."""
    stuck = [p for p in pods if _pod_problem(p) is not None or _phase(p) == "Pending"]
    return stuck[:3]


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def claim_names(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    names: list[str] = []
    for pod in pods:
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and claim not in names:
                names.append(claim)
    return names
