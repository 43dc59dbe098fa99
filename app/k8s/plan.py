"""What `trainctl submit` does with a pool's rendered objects: pure decisions, no API calls.

The RayJob's name is a content hash of its spec, so "is this run already there?" is just "does
a RayJob with this name exist?". When it does, submit attaches to it and touches nothing else:
re-applying could rotate a generated Secret under a running Ray cluster.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from app.errors import ConfigError

Action = Literal["apply", "create", "keep", "attach"]

# REST plural and scope of every kind the chart can render. Listing them (instead of API
# discovery) keeps submit to the few permissions its Role grants, and fails clearly on a new one.
KINDS: dict[str, tuple[str, str]] = {
    "ConfigMap": ("v1", "configmaps"),
    "Secret": ("v1", "secrets"),
    "PersistentVolumeClaim": ("v1", "persistentvolumeclaims"),
    "ServiceAccount": ("v1", "serviceaccounts"),
    "Service": ("v1", "services"),
    "Pod": ("v1", "pods"),  # read only: `trainctl logs` lists pods to find the right one
    "Event": ("v1", "events"),  # read only: why pods are stuck (status, submit --wait)
    "Workload": ("kueue.x-k8s.io/v1beta1", "workloads"),  # read only: Kueue's admission
    "NetworkPolicy": ("networking.k8s.io/v1", "networkpolicies"),
    "Role": ("rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings"),
    "CronJob": ("batch/v1", "cronjobs"),
    "PodMonitor": ("monitoring.coreos.com/v1", "podmonitors"),
    "PodGroup": ("scheduling.x-k8s.io/v1alpha1", "podgroups"),  # scheduler-plugins' gang
    "RayJob": ("ray.io/v1", "rayjobs"),
}
# Created once and never overwritten: a claim's spec is mostly immutable, and a generated
# Secret (the Ray auth token) must keep its value for clusters already using it.
CREATE_ONLY = frozenset({"Secret", "PersistentVolumeClaim"})
# The chart marks such objects explicitly too; any kind carrying it is treated the same way.
CREATE_ONLY_ANNOTATION = "trainctl.io/create-only"
# Dependencies first, the RayJob last: when the RayJob exists, everything it needs does too.
ORDER = ("ServiceAccount", "Role", "RoleBinding", "Secret", "ConfigMap", "PersistentVolumeClaim")


@dataclass(frozen=True)
class Step:
    action: Action
    kind: str
    name: str
    body: Mapping[str, Any]

    def describe(self) -> str:
        verb = {
            "apply": "applied",
            "create": "created",
            "keep": "exists, kept as is",
            "attach": "exists: attaching to it, nothing else changed",
        }[self.action]
        return f"{self.kind.lower()}/{self.name} {verb}"


def pool_objects(rendered: Mapping[str, list[dict[str, Any]]], pool: str) -> list[dict[str, Any]]:
    """The objects of one pool, or a ConfigError naming the pools there are."""
    if pool not in rendered:
        available = ", ".join(sorted(rendered)) or "none (no enabled pool in nodePools)"
        raise ConfigError(
            f"--pool {pool!r} is not an enabled pool in the values; pools: {available}"
        )
    return list(rendered[pool])


def the_rayjob(objects: list[dict[str, Any]]) -> dict[str, Any]:
    rayjobs = [o for o in objects if o.get("kind") == "RayJob"]
    if len(rayjobs) != 1:
        raise ConfigError(
            f"expected exactly one RayJob for the pool, the render produced {len(rayjobs)}"
        )
    return rayjobs[0]


def key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return str(obj.get("kind", "")), str((obj.get("metadata") or {}).get("name", ""))


def plan_submit(
    objects: list[dict[str, Any]], *, rayjob_exists: bool, existing: Collection[tuple[str, str]]
) -> list[Step]:
    """The steps submit takes, in order. `existing` holds (kind, name) of objects present."""
    for obj in objects:
        if obj.get("kind") not in KINDS:
            raise ConfigError(
                f"the render produced a {obj.get('kind')!r}, which trainctl submit cannot apply; "
                f"kinds it applies: {', '.join(sorted(KINDS))}"
            )
    rayjob = the_rayjob(objects)
    if rayjob_exists:
        return [Step("attach", "RayJob", key(rayjob)[1], rayjob)]

    def rank(obj: Mapping[str, Any]) -> int:
        kind = str(obj["kind"])
        return ORDER.index(kind) if kind in ORDER else len(ORDER)

    steps = []
    for obj in sorted((o for o in objects if o is not rayjob), key=rank):
        kind, name = key(obj)
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if kind in CREATE_ONLY or annotations.get(CREATE_ONLY_ANNOTATION) == "true":
            steps.append(Step("keep" if (kind, name) in existing else "create", kind, name, obj))
        else:
            steps.append(Step("apply", kind, name, obj))
    steps.append(Step("create", "RayJob", key(rayjob)[1], rayjob))
    return steps


def resource_path(kind: str, namespace: str, name: str | None = None) -> str:
    """The REST path of a namespaced object (or its collection when name is None)."""
    api_version, plural = KINDS[kind]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


def resolve_namespace(flag: str | None, context_namespace: str | None) -> str:
    """--namespace wins, then the kubeconfig context's (or the pod's own) namespace."""
    return flag or context_namespace or "default"


def _head_spec(rayjob: Mapping[str, Any]) -> Mapping[str, Any]:
    return rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]


def head_env(objects: list[dict[str, Any]], rayjob: Mapping[str, Any]) -> dict[str, str]:
    """The plain env the head container sees: its ConfigMaps (envFrom), then its own env."""
    configmaps = {key(o)[1]: o.get("data") or {} for o in objects if o.get("kind") == "ConfigMap"}
    env: dict[str, str] = {}
    for container in _head_spec(rayjob).get("containers", [])[:1]:
        for source in container.get("envFrom", []):
            name = (source.get("configMapRef") or {}).get("name")
            env.update({k: str(v) for k, v in configmaps.get(name, {}).items()})
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = str(item["value"])
    return env


def _head_claim_mounts(rayjob: Mapping[str, Any]) -> list[str]:
    head = _head_spec(rayjob)
    claim_volumes = {v["name"] for v in head.get("volumes", []) if "persistentVolumeClaim" in v}
    return [
        m["mountPath"]
        for c in head.get("containers", [])
        for m in c.get("volumeMounts", [])
        if m.get("name") in claim_volumes
    ]


def local_run_dir(objects: list[dict[str, Any]], storage_mount: Path) -> Path:
    """Where this RayJob's run folder appears on a machine that mounts the same volume.

    In the pods the run folder is TRAIN_STORAGE_PATH/TRAIN_RUN_NAME on the claim mounted at
    mountPath; `storage_mount` is where that same claim is mounted locally.
    """
    rayjob = the_rayjob(objects)
    env = head_env(objects, rayjob)
    run_name = env.get("TRAIN_RUN_NAME") or key(rayjob)[1]
    storage = PurePosixPath(env.get("TRAIN_STORAGE_PATH", ""))
    for mount in _head_claim_mounts(rayjob):
        if storage.is_relative_to(mount):
            return storage_mount / storage.relative_to(mount) / run_name
    raise ConfigError(
        f"TRAIN_STORAGE_PATH={str(storage)!r} is not on the shared volume the head mounts, "
        "so --storage-mount cannot locate the run folder"
    )


def bucket_run_dir(objects: list[dict[str, Any]]) -> Any | None:
    """The run folder in the bucket (an ObjectPath) when the chart keeps runs in object storage
    (storage.type s3 or gcs: TRAIN_STORAGE_PATH is a URI); None when they are on a volume.

    This machine reaches the bucket with its own credentials (AWS_*, ~/.aws, GCP's), and the
    endpoint the pods use (TRAIN_STORAGE_ENDPOINT).
    """
    from app.storage.buckets import locate, uri_scheme

    rayjob = the_rayjob(objects)
    env = head_env(objects, rayjob)
    storage = env.get("TRAIN_STORAGE_PATH", "")
    if not uri_scheme(storage):
        return None
    run_name = env.get("TRAIN_RUN_NAME") or key(rayjob)[1]
    try:
        return locate(storage, env.get("TRAIN_STORAGE_ENDPOINT") or None) / run_name
    except ValueError as err:
        raise ConfigError(f"TRAIN_STORAGE_PATH={storage!r}: {err}") from None


def config_source(env: Mapping[str, str], token_file_exists: bool) -> Literal["pod", "kubeconfig"]:
    """In a pod (service host set and a token mounted) use its service account, as kubectl does;
    elsewhere the kubeconfig: KUBECONFIG, else ~/.kube/config."""
    if env.get("KUBERNETES_SERVICE_HOST") and token_file_exists:
        return "pod"
    return "kubeconfig"
