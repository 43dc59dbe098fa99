"""`trainctl status` and `trainctl logs`: read-only views of this app's RayJobs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.errors import RunFailed
from app.k8s.cluster import Cluster
from app.k8s.diagnose import needs_look
from app.k8s.names import check_dns_label
from app.k8s.outcome import run_lines
from app.k8s.plan import resolve_namespace
from app.k8s.podlogs import Which, log_target, pick_pod
from app.k8s.status import status_table
from app.k8s.stuck import why_stuck

# The labels the chart (and `trainctl render`) put on every object of this app.
APP_SELECTOR = "app.kubernetes.io/name=trainctl"
RELEASE_LABEL = "app.kubernetes.io/instance"
POOL_LABEL = "trainctl.io/pool"


def app_selector(release: str | None) -> str:
    return f"{APP_SELECTOR},{RELEASE_LABEL}={release}" if release else APP_SELECTOR


def _checked_namespace(flag: str | None, cluster: Cluster) -> str:
    namespace = resolve_namespace(flag, cluster.default_namespace)
    if flag is None:  # the kubeconfig's: still never pasted into a URL unchecked
        check_dns_label(namespace, "the kubeconfig context's namespace")
    return namespace


def show_status(
    namespace: str | None,
    release: str | None,
    echo: Callable[[str], None],
    storage_mount: Path | None = None,
    name: str | None = None,
) -> None:
    """The table of this app's RayJobs (only `name`'s when given), then what their run
    folders say and why any is held back."""
    # Names go into request URLs and selectors: check them before any connection is made.
    if name is not None:
        check_dns_label(name, "RayJob name")
    if namespace is not None:
        check_dns_label(namespace, "--namespace")
    if release is not None:
        check_dns_label(release, "--release")
    cluster = Cluster.connect()
    namespace = _checked_namespace(namespace, cluster)
    rayjobs = cluster.list("RayJob", namespace, app_selector(release))
    if name is not None:
        rayjobs = [r for r in rayjobs if r["metadata"].get("name") == name]
        if not rayjobs:
            raise RunFailed(
                f"RayJob {name} not found among this app's RayJobs in namespace {namespace}; "
                f"`trainctl status -n {namespace}` lists them"
            )
    now = datetime.now(UTC)
    echo(status_table(rayjobs, now=now, pool_label=POOL_LABEL))
    _show_outcomes(cluster, namespace, release, rayjobs, storage_mount, echo)
    # Below the table: why each RayJob that is not training yet is held back.
    for rayjob in sorted(rayjobs, key=lambda r: r["metadata"].get("creationTimestamp", "")):
        if needs_look(rayjob):
            lines = why_stuck(cluster, namespace, rayjob, now)
            if lines:
                echo(f"\n{rayjob['metadata']['name']}:")
                for line in lines:
                    echo(f"  {line}")


def _show_outcomes(
    cluster: Cluster,
    namespace: str,
    release: str | None,
    rayjobs: list[dict[str, Any]],
    storage_mount: Path | None,
    echo: Callable[[str], None],
) -> None:
    """Below the table, from each RayJob's run folder where it can be read from here: its
    interruptions in words, running or finished, and a finished run's promotion outcome."""
    if not rayjobs:
        return
    configmaps = cluster.list("ConfigMap", namespace, app_selector(release))
    for rayjob in sorted(rayjobs, key=lambda r: r["metadata"].get("creationTimestamp", "")):
        for line in run_lines(rayjob, configmaps, storage_mount):
            echo(f"{rayjob['metadata']['name']}: {line}")


def show_logs(
    name: str,
    namespace: str | None,
    which: Which | None,
    follow: bool,
    echo: Callable[[str], None],
) -> None:
    check_dns_label(name, "RayJob name")
    if namespace is not None:
        check_dns_label(namespace, "--namespace")
    cluster = Cluster.connect()
    namespace = _checked_namespace(namespace, cluster)
    rayjob = cluster.get("RayJob", namespace, name)
    if rayjob is None:
        raise RunFailed(
            f"RayJob {name} not found in namespace {namespace}; "
            f"`trainctl status -n {namespace}` lists them"
        )
    target = log_target(rayjob, which)
    pod = pick_pod(cluster.list("Pod", namespace, target.label_selector), target)
    pod_name = pod["metadata"]["name"]
    echo(f"==> {target.what}: pod {pod_name} <==")
    for line in cluster.pod_logs(namespace, pod_name, target.container, follow=follow):
        echo(line)
