"""Real engines for the example checks: Lua (Argo CD health), CEL (Flux health), CRD schemas.

The expected health of a RayJob comes from app.k8s.status.judge, the decision `trainctl submit
--wait` makes, over every status value of KubeRay v1.7: the examples must agree with it.
"""

from __future__ import annotations

import itertools
import shlex
from functools import cache
from pathlib import Path
from typing import Any, Literal

from app.k8s.status import (
    DEPLOYMENT_STATUSES,
    JOB_STATUSES,
    JobView,
    judge,
)

Health = Literal["healthy", "degraded", "progressing", "suspended"]
SHELL_OPERATORS = {"&&", "||", ";", "|", "&", ";;", "\n"}


def rayjob(status: dict[str, str] | None) -> dict[str, Any]:
    """A RayJob as the API serves it: KubeRay's status fields are omitempty, so "" is absent."""
    obj: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "train-l4-0123abcd", "namespace": "ml"},
        "spec": {"entrypoint": "trainctl train"},
    }
    if status is not None:
        obj["status"] = {key: value for key, value in status.items() if value}
    return obj


def status_cases() -> list[tuple[str, dict[str, Any], Health]]:
    """(id, RayJob, expected health) for every jobDeploymentStatus x jobStatus, with a reason
    and message on the failures, plus a RayJob KubeRay has not written a status to yet."""
    cases: list[tuple[str, dict[str, Any], Health]] = [("no-status", rayjob(None), "progressing")]
    for deployment, job in itertools.product(DEPLOYMENT_STATUSES, JOB_STATUSES):
        status = {"jobDeploymentStatus": deployment, "jobStatus": job}
        verdict = judge(JobView.of(rayjob(status)))
        if verdict.terminal and verdict.exit_code != 0:
            status.update(reason="AppFailed", message="worker OOM-killed")
        cases.append((f"{deployment or 'New'}-{job or 'none'}", rayjob(status), expected(status)))
    return cases


def expected(status: dict[str, str]) -> Health:
    verdict = judge(JobView.of(rayjob(status)))
    if verdict.terminal:
        return "healthy" if verdict.exit_code == 0 else "degraded"
    if status.get("jobDeploymentStatus") in ("Suspended", "Suspending"):
        return "suspended"
    return "progressing"


# --- Argo CD: the Lua health check, run by a real Lua 5.1 (Argo CD embeds gopher-lua, 5.1) ----
def run_lua_health(script: str, obj: dict[str, Any]) -> dict[str, str]:
    from lupa import lua51

    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(script)
    return {str(k): str(v) for k, v in dict(result).items()}


# --- Flux: healthCheckExprs, evaluated by a real CEL implementation ---------------------------
@cache
def _cel_program(expression: str) -> Any:
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(expression))


def run_cel(expression: str, obj: dict[str, Any]) -> bool:
    """Flux evaluates each expression with the object's top-level fields as variables."""
    from celpy import json_to_cel

    result = _cel_program(expression).evaluate({k: json_to_cel(v) for k, v in obj.items()})
    if isinstance(result, Exception):  # celpy returns evaluation errors as values
        raise result
    return bool(result)


# --- CRD schemas ------------------------------------------------------------------------------
def unknown_fields(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    """Fields the CRD does not declare: the API server would silently prune them."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        props = schema.get("properties")
        if props is None:
            extra = schema.get("additionalProperties")
            if not isinstance(extra, dict):
                return []
            return [u for k, v in value.items() for u in unknown_fields(v, extra, f"{where}.{k}")]
        found = []
        for key, item in value.items():
            if key not in props:
                found.append(f"{where}.{key}")
            else:
                found += unknown_fields(item, props[key], f"{where}.{key}")
        return found
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [
            u
            for i, v in enumerate(value)
            for u in unknown_fields(v, schema["items"], f"{where}[{i}]")
        ]
    return []


# --- shell ------------------------------------------------------------------------------------
def shell_operators(command: str) -> list[str]:
    """Unquoted shell operators: in K8sJobMode KubeRay pastes the entrypoint into the
    submitter's `bash -c` line after `ray job submit ... --`, so anything after one of these
    runs in the submitter pod, not in the Ray job."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return [token for token in lexer if token in SHELL_OPERATORS]


def submit_flags(args: list[str]) -> list[str]:
    """The `--option` names in a `trainctl submit` argument list."""
    return [arg.split("=", 1)[0] for arg in args if arg.startswith("--")]


def repo_path(base: Path, relative: str) -> Path:
    return (base / relative).resolve()
