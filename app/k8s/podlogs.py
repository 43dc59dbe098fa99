"""Which pod and container hold the logs `trainctl logs` prints: pure choices."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.errors import ConfigError, RunFailed
from app.runfolder.folder import METRICS_FILE, SUMMARY_FILE

Which = Literal["submitter", "head"]
SUBMITTER_CONTAINER = "ray-job-submitter"  # KubeRay's name, in the Job and in SidecarMode


@dataclass(frozen=True)
class LogTarget:
    label_selector: str
    container: str | None  # None: the pod's first container
    what: str  # for messages: "submitter of RayJob x"
    rayjob: str = ""  # its name, which is the run's (TRAIN_RUN_NAME)


def log_target(rayjob: Mapping[str, Any], which: Which | None) -> LogTarget:
    """Where the submitter's or the head's logs are for this RayJob.

    Without a choice, the submitter: its `ray job submit` output follows the driver's logs,
    so it shows the training output, unless KubeRay submits over HTTP and there is none.
    """
    name = rayjob["metadata"]["name"]
    spec = rayjob.get("spec") or {}
    mode = spec.get("submissionMode") or "K8sJobMode"
    cluster = (rayjob.get("status") or {}).get("rayClusterName") or ""
    which = which or ("head" if mode in ("HTTPMode", "InteractiveMode") else "submitter")
    if which == "submitter":
        if mode == "K8sJobMode":
            # The submitter is a Kubernetes Job named after the RayJob; `job-name` is the label
            # the Job controller puts on its pods on every Kubernetes version.
            return LogTarget(f"job-name={name}", None, f"submitter of RayJob {name}", name)
        if mode == "SidecarMode":
            return LogTarget(
                _head_selector(name, cluster),
                SUBMITTER_CONTAINER,
                f"submitter of RayJob {name}",
                name,
            )
        raise ConfigError(
            f"RayJob {name} uses submissionMode {mode}: there is no submitter pod; "
            "use --head for the head's logs (the driver runs there)"
        )
    return LogTarget(_head_selector(name, cluster), None, f"Ray head of RayJob {name}", name)


def _head_selector(name: str, cluster: str) -> str:
    if not cluster:
        raise RunFailed(f"RayJob {name} has no Ray cluster yet (status.rayClusterName is empty)")
    return f"ray.io/cluster={cluster},ray.io/node-type=head"


def pick_pod(pods: list[Mapping[str, Any]], target: LogTarget) -> Mapping[str, Any]:
    """The newest pod: retries (backoffLimit, a failed submitter) leave older ones behind."""
    if not pods:
        raise RunFailed(
            f"no pod found for the {target.what} ({target.label_selector}); it may not have "
            "started yet, or was removed with the Ray cluster (shutdownAfterJobFinishes). "
            "The run's logs stay in its run folder, with its "
            f"{METRICS_FILE} and {SUMMARY_FILE}: `trainctl logs {target.rayjob or '<run>'} "
            "--storage <the volume's mount, or the bucket> --driver` (or --worker N)"
        )
    return max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", "")))
