"""`trainctl status` and `trainctl logs`: read-only views of this app's RayJobs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from app.errors import RunFailed
from app.k8s.cluster import Cluster
from app.k8s.plan import resolve_namespace
from app.k8s.podlogs import Which, log_target, pick_pod
from app.k8s.status import status_table

# The labels the chart (and `trainctl render`) put on every object of this app.
APP_SELECTOR = "app.kubernetes.io/name=trainctl"
RELEASE_LABEL = "app.kubernetes.io/instance"
POOL_LABEL = "trainctl.io/pool"


def app_selector(release: str | None) -> str:
    return f"{APP_SELECTOR},{RELEASE_LABEL}={release}" if release else APP_SELECTOR


def show_status(namespace: str | None, release: str | None, echo: Callable[[str], None]) -> None:
    cluster = Cluster.connect()
    namespace = resolve_namespace(namespace, cluster.default_namespace)
    rayjobs = cluster.list("RayJob", namespace, app_selector(release))
    echo(status_table(rayjobs, now=datetime.now(UTC), pool_label=POOL_LABEL))


def show_logs(
    name: str,
    namespace: str | None,
    which: Which | None,
    follow: bool,
    echo: Callable[[str], None],
) -> None:
    cluster = Cluster.connect()
    namespace = resolve_namespace(namespace, cluster.default_namespace)
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
