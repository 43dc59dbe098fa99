"""Kubernetes API failures turned into one clear line and the right exit code.

Pure functions of the HTTP status and the Status body the API server sends, so each message is
unit-tested without a cluster. A 404 means three different things (no such object, no such
resource type, no such namespace) and only the body tells them apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from app.errors import ClusterError, ConfigError, TrainctlError, connection_cause
from app.redact import redact_text

KUBERAY_INSTALL = (
    "install the KubeRay operator first: helm repo add kuberay "
    "https://ray-project.github.io/kuberay-helm/ && helm install kuberay-operator "
    "kuberay/kuberay-operator --version 1.7.0"
)

GO_NOT_FOUND = "404 page not found"


class Forbidden(ClusterError):
    """403: RBAC does not let this identity make the call (a caller may go on without it)."""


@dataclass(frozen=True)
class ApiFailure:
    """The parts of an API error response that decide the message."""

    status: int
    message: str = ""
    reason: str = ""
    details: dict[str, Any] | None = None
    kubernetes: bool = True  # a Status body, or the API server's own text for an unknown path

    @classmethod
    def parse(cls, status: int, body: str | bytes | None) -> ApiFailure:
        text = body.decode(errors="replace") if isinstance(body, bytes) else (body or "")
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            # An API server's mux answers an unknown path with Go's "404 page not found"
            # (older servers, for a group it does not serve); anything else came from another
            # kind of server: a wrong port, an ingress or a proxy in front.
            said = text.strip()[:300]
            return cls(status, message=said, kubernetes=said == GO_NOT_FOUND or status != 404)
        return cls(
            status,
            message=str(data.get("message") or ""),
            reason=str(data.get("reason") or ""),
            details=data.get("details") or {},
        )

    def not_found(self) -> Literal["object", "namespace", "type", "server"] | None:
        """What a 404 is about: the named object, its namespace, the whole resource type, or
        the server itself (not a Kubernetes API's answer)."""
        if self.status != 404:
            return None
        if not self.kubernetes:
            return "server"
        details = self.details or {}
        if details.get("kind") == "namespaces":
            return "namespace"
        return "object" if details.get("name") else "type"


def explain(
    failure: ApiFailure, *, verb: str, kind: str, name: str, namespace: str
) -> TrainctlError:
    """The error to raise for an API failure that the caller did not expect."""
    target = f"{kind.lower()}/{name}" if name else f"{kind.lower()} objects"
    where = f"in namespace {namespace}"
    detail = f": {failure.message}" if failure.message else ""
    if failure.status == 401:
        return ClusterError(
            "the Kubernetes API rejected the credentials (401 Unauthorized): the token or "
            "certificate in the kubeconfig is missing, expired or wrong"
        )
    if failure.status == 403:
        # The chart's Role is the scheduled submit's: it says nothing to a user's `logs`.
        role = (
            " (the chart's schedule ServiceAccount and Role cover submit)"
            if verb in ("create", "patch")
            else ""
        )
        return Forbidden(
            f"forbidden by RBAC: cannot {verb} {target} {where}{detail}. Grant the identity "
            f"`{verb}` on {kind}{role}"
        )
    not_found = failure.not_found()
    if not_found == "server":
        said = f" ({failure.message[:100]})" if failure.message else ""
        return ClusterError(
            f"the server answered 404 to {verb} {target} without a Kubernetes Status{said}: it "
            "does not look like a Kubernetes API server. Check the kubeconfig's server address "
            "(a wrong port, or an ingress or proxy in front of the API)"
        )
    if not_found == "namespace":
        return ClusterError(
            f"namespace {namespace} does not exist: create it (kubectl create namespace "
            f"{namespace}) or pass --namespace"
        )
    if not_found == "type":
        if kind in ("RayJob", "RayCluster"):
            return ClusterError(
                f"the {kind} custom resource (ray.io/v1) is not installed in this cluster: "
                f"{KUBERAY_INSTALL}"
            )
        return ClusterError(f"the API server does not serve {kind} objects{detail}")
    if not_found == "object":
        return ClusterError(f"{target} not found {where}")
    if failure.status in (400, 422):
        # The server's validation (CRD schema, admission) refused the object: bad values.
        return ConfigError(f"the API server refused {target} {where}{detail}")
    return ClusterError(
        f"the Kubernetes API failed to {verb} {target} {where} "
        f"({failure.status} {failure.reason or 'error'}){detail}"
    )


def not_json(host: str, status: int, body: bytes) -> ClusterError:
    """A success whose body is no JSON: something other than the API server answered."""
    start = body[:60].decode("utf-8", "replace")
    shown = " ".join(redact_text(start).split())
    return ClusterError(
        f"the server at {host or 'the configured address'} answered {status} with a body that "
        f"is not JSON ({shown!r}...): it does not look like a Kubernetes API server. Check the "
        "kubeconfig's server address (a wrong port, or a proxy, load balancer or sign-in page "
        "in front of the API)"
    )


def unreachable(host: str, error: BaseException) -> ClusterError:
    """The API server could not be reached at all (DNS, refused, TLS, timeout)."""
    return ClusterError(
        f"cannot reach the Kubernetes API server at {host or 'the configured address'}: "
        f"{connection_cause(error)}. Is the cluster up, and is the kubeconfig context the right "
        "one?"
    )


def no_config(in_pod: bool, kubeconfig: str, error: BaseException) -> ClusterError:
    """Neither in-cluster credentials nor a usable kubeconfig were found."""
    if in_pod:
        return ClusterError(
            "running in a pod but its service account credentials could not be loaded: "
            f"{connection_cause(error)}"
        )
    return ClusterError(
        f"no usable Kubernetes configuration: not in a pod, and the kubeconfig {kubeconfig} "
        f"could not be loaded ({connection_cause(error)}). Set KUBECONFIG or create ~/.kube/config"
    )
