"""A chart-rendered RayJob, run the way KubeRay runs it, on a local Ray cluster.

KubeRay starts the head container with the env of its `envFrom` ConfigMaps and Secrets and its
`env` list, adds RAY_AUTH_MODE and RAY_AUTH_TOKEN (the Secret's `auth_token`) when the cluster's
`authOptions` ask for token authentication, and its submitter hands `spec.entrypoint` and
`spec.runtimeEnvYAML` to the head's job API. The functions here read exactly those fields.

The only translation KubeRay does not do: the shared volume's mount path becomes a local folder.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import yaml

from tests.contract.k8s_support import by_key, helm_render

SHARED_VOLUME = "shared"
RELOCATED = ("TRAIN_STORAGE_PATH", "TRAIN_DATA_PATH")
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def render_pool(values: dict[str, Any], pool: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the pool's RayJob, every object the chart rendered), through Helm's own engine."""
    objects = helm_render(values)
    jobs = [
        o
        for o in objects
        if o["kind"] == "RayJob" and o["metadata"]["labels"].get("trainctl.io/pool") == pool
    ]
    assert len(jobs) == 1, f"expected one RayJob for pool {pool}, got {len(jobs)}"
    return jobs[0], objects


def head_container(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]


def _secret_value(objects: list[dict[str, Any]], name: str, key: str) -> str:
    secret = by_key(objects).get(("Secret", name))
    assert secret is not None, f"Secret {name} is not among the rendered objects"
    return base64.b64decode(secret["data"][key]).decode()


def head_env(job: dict[str, Any], objects: list[dict[str, Any]]) -> dict[str, str]:
    """The head container's environment as Kubernetes would build it from the manifests."""
    container = head_container(job)
    found = by_key(objects)
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        if "configMapRef" in source:
            env.update(found[("ConfigMap", source["configMapRef"]["name"])]["data"])
        else:
            name = source["secretRef"]["name"]
            data = found[("Secret", name)]["data"]
            env.update({key: _secret_value(objects, name, key) for key in data})
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = _secret_value(objects, ref["name"], ref["key"])
    return env


def auth_env(job: dict[str, Any], objects: list[dict[str, Any]]) -> dict[str, str]:
    """What KubeRay's `authOptions` add to the head, worker and submitter containers."""
    options = job["spec"]["rayClusterSpec"].get("authOptions") or {}
    if options.get("mode") != "token":
        return {}
    return {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": _secret_value(objects, options["secretName"], "auth_token"),
    }


def mount_path(job: dict[str, Any]) -> str:
    mounts = head_container(job)["volumeMounts"]
    return next(m["mountPath"] for m in mounts if m["name"] == SHARED_VOLUME).rstrip("/")


def relocate(env: dict[str, str], mount: str, local: Path) -> dict[str, str]:
    """The storage settings with the volume's mount path replaced by a local folder."""
    moved = dict(env)
    for key in RELOCATED:
        value = env[key]
        assert value == mount or value.startswith(f"{mount}/"), f"{key}={value} is off the volume"
        moved[key] = str(local) + value[len(mount) :]
    return moved


def job_runtime_env(job: dict[str, Any], container_env: dict[str, str]) -> dict[str, Any]:
    """The RayJob's runtimeEnvYAML, with the head container's env underneath its env_vars.

    On Kubernetes the entrypoint inherits the head container's env; here the cluster's processes
    carry the test's env, so the container's arrives as env_vars (the RayJob's own win, as a
    runtime env's env_vars win over the process env in a pod).
    """
    runtime_env = yaml.safe_load(job["spec"].get("runtimeEnvYAML") or "{}") or {}
    runtime_env["env_vars"] = {**container_env, **(runtime_env.get("env_vars") or {})}
    return runtime_env


def submit_and_wait(
    client: Any, *, entrypoint: str, runtime_env: dict[str, Any], timeout: float
) -> tuple[str, str]:
    """Submit through the job API and wait for the end: (final status, the job's logs)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            job_id = client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env)
            break
        except RuntimeError as err:
            # The head's dashboard agent registers a moment after the dashboard answers.
            if "No available agent" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(1)
    while (status := str(client.get_job_status(job_id))) not in TERMINAL:
        if time.monotonic() > deadline:
            client.stop_job(job_id)
            raise AssertionError(f"job {job_id} still {status} after {timeout:.0f}s")
        time.sleep(1)
    return status, client.get_job_logs(job_id)
