"""The Secrets a pool's rendered objects read, and what is wrong with the ones the namespace has.

Pure: `trainctl submit` fetches each Secret these name (app/k8s/submit.py) and hands what it
found to `secret_problems`. A missing Secret or key otherwise surfaces only after the pods are
scheduled: each Ray pod waits in CreateContainerConfigError (or ContainerCreating, for a
volume) on GPUs it holds, and the RayJob never says why.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# The key KubeRay's token authentication reads from rayClusterSpec.authOptions.secretName.
RAY_AUTH_KEY = "auth_token"


@dataclass(frozen=True, order=True)
class SecretRef:
    """One read of a Secret by the pods: `key` None reads all of it (envFrom, a whole volume)."""

    name: str
    key: str | None
    reader: str  # what reads it, in the pod's words: "env HF_TOKEN", "envFrom", "volume creds"
    pull: bool = False  # imagePullSecrets: the kubelet pulls without it (a warning, not a stop)


def secret_refs(objects: list[dict[str, Any]]) -> list[SecretRef]:
    """Every Secret read the objects' pod templates and Ray clusters make, except the optional
    ones and the Secrets the objects create themselves; one entry per distinct read."""
    created = {o["metadata"]["name"] for o in objects if o.get("kind") == "Secret"}
    refs: set[SecretRef] = set()
    for obj in objects:
        for spec in _pod_specs(obj):
            refs.update(_pod_refs(spec))
        auth = _cluster_spec(obj).get("authOptions") or {}
        if auth.get("secretName"):
            refs.add(SecretRef(auth["secretName"], RAY_AUTH_KEY, "Ray token authentication"))
    return sorted(r for r in refs if r.name not in created)


def secret_keys(secret: Mapping[str, Any] | None) -> frozenset[str] | None:
    """A fetched Secret's key names (None: it does not exist). Its values are not kept."""
    if secret is None:
        return None
    return frozenset({**(secret.get("data") or {}), **(secret.get("stringData") or {})})


def secret_problems(
    refs: list[SecretRef], found: Mapping[str, frozenset[str] | None], namespace: str
) -> tuple[list[str], list[str]]:
    """(problems, warnings): a Secret the pods need that is missing (found[name] is None) or
    lacks a key they read; a pull Secret that is missing. Secrets absent from `found` were not
    readable (RBAC) and are not judged."""
    problems: list[str] = []
    warnings: list[str] = []
    for ref in refs:
        if ref.name not in found:
            continue
        keys = found[ref.name]
        if keys is None and ref.pull:
            warnings.append(
                f"imagePullSecrets names Secret {ref.name}, which does not exist in namespace "
                f"{namespace}: the image is pulled without it, and a private registry refuses "
                "that (ErrImagePull)"
            )
        elif keys is None:
            problems.append(_missing(ref, namespace))
        elif ref.key is not None and ref.key not in keys:
            has = ", ".join(sorted(keys)) or "no keys"
            problems.append(
                f"Secret {ref.name} in namespace {namespace} has no key {ref.key!r} (it has: "
                f"{has}), which {ref.reader} reads"
            )
    return problems, warnings


def _missing(ref: SecretRef, namespace: str) -> str:
    literal = f"{ref.key}=..." if ref.key else "KEY=..."
    return (
        f"Secret {ref.name} does not exist in namespace {namespace}, and {ref.reader} reads it"
        f"{f' (key {ref.key!r})' if ref.key else ''}: create it (kubectl -n {namespace} create "
        f"secret generic {ref.name} --from-literal={literal}) or change the value that names it"
    )


def _cluster_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A RayJob's or RayCluster's Ray cluster spec ({} for any other object)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "RayJob":
        return spec.get("rayClusterSpec") or {}
    return spec if obj.get("kind") == "RayCluster" else {}


def _pod_specs(node: Any) -> Iterator[Mapping[str, Any]]:
    """Every pod spec inside an object, wherever its kind nests it (a dict with containers)."""
    if isinstance(node, Mapping):
        if isinstance(node.get("containers"), list):
            yield node
            return
        for value in node.values():
            yield from _pod_specs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _pod_specs(value)


def _pod_refs(spec: Mapping[str, Any]) -> Iterator[SecretRef]:
    for pull in spec.get("imagePullSecrets") or []:
        name = pull.get("name") if isinstance(pull, Mapping) else None
        if name:
            yield SecretRef(name, None, "imagePullSecrets", pull=True)
    for container in [*(spec.get("initContainers") or []), *spec["containers"]]:
        for env in container.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref and not ref.get("optional"):
                yield SecretRef(ref["name"], ref["key"], f"env {env['name']}")
        for source in container.get("envFrom") or []:
            ref = source.get("secretRef")
            if ref and not ref.get("optional"):
                yield SecretRef(ref["name"], None, "envFrom")
    for volume in spec.get("volumes") or []:
        sources = [volume, *((volume.get("projected") or {}).get("sources") or [])]
        for source in sources:
            secret = source.get("secret")
            if not secret or secret.get("optional"):
                continue
            name = secret.get("secretName") or secret.get("name")  # projected: name
            reader = f"volume {volume['name']}"
            items = [item["key"] for item in secret.get("items") or []]
            for key in items or [None]:
                yield SecretRef(name, key, reader)
