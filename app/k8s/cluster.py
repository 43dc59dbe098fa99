"""The Kubernetes API calls behind submit, status and logs; every decision lives elsewhere.

Requests go through the official client's ApiClient (its auth, TLS and kubeconfig handling) as
plain REST calls on paths from `plan.resource_path`, so one small class serves every kind the
chart renders without API discovery. Failures become TrainctlErrors via `api_errors`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from app.errors import ClusterError, TrainctlError
from app.k8s import api_errors, deadlines
from app.k8s.api_errors import ApiFailure
from app.k8s.plan import config_source, resource_path

FIELD_MANAGER = "trainctl"
POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
POD_TOKEN_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class AlreadyExists(Exception):
    """A create lost a race: someone created the same name in between (409)."""


class Cluster:
    def __init__(self, api: Any, host: str, namespace: str | None) -> None:
        self.api = api
        self.host = host
        self.default_namespace = namespace

    # --- connection -----------------------------------------------------------------------
    @classmethod
    def connect(cls) -> Cluster:
        import yaml
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        deadlines.bound_exec_plugins()
        deadlines.PLUGIN_FAILURES.clear()
        cfg = client.Configuration()
        # One attempt per request here; with_retries() repeats them, aloud.
        cfg.retries = False
        source = config_source(os.environ, POD_TOKEN_FILE.is_file())
        kubeconfig = os.environ.get("KUBECONFIG") or "~/.kube/config"
        try:
            if source == "pod":
                config.load_incluster_config(client_configuration=cfg)
                namespace = POD_NAMESPACE_FILE.read_text().strip() or None
            else:
                config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
                _, active = config.list_kube_config_contexts(config_file=kubeconfig)
                namespace = (active or {}).get("context", {}).get("namespace")
        except (ConfigException, OSError, ValueError, TypeError, yaml.YAMLError) as err:
            raise api_errors.no_config(source == "pod", kubeconfig, err) from None
        if deadlines.PLUGIN_FAILURES:
            raise ClusterError(deadlines.PLUGIN_FAILURES.pop())
        if not cfg.verify_ssl:
            _said_once_insecure(cfg.host)
        credentials = bool(cfg.api_key or cfg.username or cfg.cert_file)
        if (said := plain_http_warning(cfg.host, credentials)) is not None:
            import click

            click.echo(f"trainctl: warning: {said}", err=True)
        return cls(client.ApiClient(cfg), cfg.host, namespace)

    # --- one request ----------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        stream: bool = False,
    ) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        headers = {"Accept": "application/json", "Content-Type": content_type}
        method, url, headers, body, post = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        timeout = deadlines.api_timeout()
        try:
            response = deadlines.with_retries(
                lambda: self.api.rest_client.request(
                    method,
                    url,
                    headers=headers,
                    body=body,
                    post_params=post,
                    # Streams (logs --follow) wait for new lines indefinitely: connect timeout only.
                    _request_timeout=(timeout, None) if stream else timeout,
                ),
                (HTTPError, OSError),
            )
        except (ApiException, HTTPError, OSError) as err:  # TLS failures arrive as ApiException
            raise api_errors.unreachable(self.host, err) from None
        raw = response.response
        if not 200 <= response.status <= 299:
            data = response.read()
            raise _Failed(ApiFailure.parse(response.status, data))
        if stream:
            return raw
        data = response.read()
        try:
            return json.loads(data) if data else None
        except ValueError:  # a sign-in page or a proxy's answer, sent as 200
            raise api_errors.not_json(self.host, response.status, data) from None

    def _call(self, verb: str, kind: str, name: str, namespace: str, **request: Any) -> Any:
        try:
            return self._request(**request)
        except _Failed as failed:
            raise api_errors.explain(
                failed.failure, verb=verb, kind=kind, name=name, namespace=namespace
            ) from None

    # --- objects ----------------------------------------------------------------------------
    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist (a missing type or namespace raises)."""
        path = resource_path(kind, namespace, name)
        try:
            return self._request(method="GET", path=path)
        except _Failed as failed:
            if failed.failure.not_found() == "object":
                return None
            raise api_errors.explain(
                failed.failure, verb="get", kind=kind, name=name, namespace=namespace
            ) from None

    def create(self, kind: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        try:
            return self._request(method="POST", path=resource_path(kind, namespace), body=body)
        except _Failed as failed:
            if failed.failure.status == 409:
                raise AlreadyExists(name) from None
            raise api_errors.explain(
                failed.failure, verb="create", kind=kind, name=name, namespace=namespace
            ) from None

    def apply(self, kind: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply as field manager `trainctl`, taking over fields Helm once set."""
        name = body["metadata"]["name"]
        return self._call(
            "patch",
            kind,
            name,
            namespace,
            method="PATCH",
            path=resource_path(kind, namespace, name),
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            body=body,
            content_type="application/apply-patch+yaml",
        )

    def list(
        self, kind: str, namespace: str, selector: str = "", fields: str = ""
    ) -> list[dict[str, Any]]:
        query = [("labelSelector", selector)] if selector else []
        if fields:
            query.append(("fieldSelector", fields))
        result = self._call(
            "list",
            kind,
            "",
            namespace,
            method="GET",
            path=resource_path(kind, namespace),
            query=query,
        )
        return list((result or {}).get("items", []))

    def pod_logs(
        self, namespace: str, pod: str, container: str | None, *, follow: bool = False
    ) -> Iterator[str]:
        query: list[tuple[str, Any]] = [("follow", "true" if follow else "false")]
        if container:
            query.append(("container", container))
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
        if not follow:
            text = self._call_text("get", "Pod", pod, namespace, path, query)
            yield from text.splitlines()
            return
        raw = self._call(
            "get", "Pod", pod, namespace, method="GET", path=path, query=query, stream=True
        )
        try:
            pending = b""
            for chunk in raw.stream(4096, decode_content=True):
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    yield line.decode(errors="replace")
            if pending:
                yield pending.decode(errors="replace")
        finally:
            raw.release_conn()

    def _call_text(
        self, verb: str, kind: str, name: str, namespace: str, path: str, query: list[Any]
    ) -> str:
        raw = self._call(
            verb, kind, name, namespace, method="GET", path=path, query=query, stream=True
        )
        try:
            return raw.read().decode(errors="replace")
        finally:
            raw.release_conn()


class _Failed(TrainctlError):
    """An API error response, before it is explained in the caller's terms."""

    def __init__(self, failure: ApiFailure) -> None:
        super().__init__(f"API error {failure.status}: {failure.message}")
        self.failure = failure


def plain_http_warning(host: str, credentials: bool) -> str | None:
    """What to say where the kubeconfig sends credentials to an API server over plain HTTP,
    which TLS verification's own warning does not cover; None for HTTPS, for no credentials,
    or for this machine (`kubectl proxy`, a tunnel), where nothing leaves it."""
    from urllib.parse import urlsplit

    parts = urlsplit(host)
    if parts.scheme != "http" or not credentials:
        return None
    if (parts.hostname or "") in ("localhost", "127.0.0.1", "::1"):
        return None
    return (
        f"the kubeconfig sends its credentials to {host} over plain HTTP: anyone on the path "
        "can read the token and these requests; use the server's https:// address"
    )


def _said_once_insecure(host: str) -> None:
    """One line for a kubeconfig that turns TLS verification off, instead of urllib3's
    InsecureRequestWarning with its source line and path on every request."""
    import warnings

    import click
    from urllib3.exceptions import InsecureRequestWarning

    warnings.simplefilter("ignore", InsecureRequestWarning)
    click.echo(
        f"trainctl: warning: the kubeconfig turns TLS verification off for {host} "
        "(insecure-skip-tls-verify): anyone on the path can read and change these requests",
        err=True,
    )
