"""A small in-process Kubernetes API server: the one thing the tests may fake.

It speaks the REST paths, Status bodies and status codes the real API server uses for what
trainctl does (get, create, server-side apply, list with a label or field selector, pod
logs), stores objects in memory, and plays a scripted sequence of RayJob statuses the way the
KubeRay operator would write them, so `trainctl submit/status/logs` run end to end through the
official client without a cluster.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class FakeKubeApi:
    namespaces: set[str] = field(default_factory=lambda: {"default", "ml"})
    crd_installed: bool = True
    forbidden: set[tuple[str, str]] = field(default_factory=set)  # (method, plural)
    rayjob_statuses: list[dict[str, Any]] = field(default_factory=list)
    pod_logs: dict[str, str] = field(default_factory=dict)
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, list[str]], str]] = field(default_factory=list)
    _gets: dict[str, int] = field(default_factory=dict)

    def add(self, plural: str, namespace: str, obj: dict[str, Any]) -> None:
        self.objects[(plural, namespace, obj["metadata"]["name"])] = obj

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p, _, _ in self.requests if m in ("POST", "PATCH", "PUT", "DELETE")]

    # --- request handling ---------------------------------------------------------------------
    def handle(
        self, method: str, url: str, body: bytes, content_type: str
    ) -> tuple[int, str, bytes]:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        self.requests.append((method, parts.path, query, content_type))
        segments = parts.path.strip("/").split("/")
        if segments[0] == "apis" and segments[1] == "ray.io" and not self.crd_installed:
            return 404, "text/plain", b"404 page not found"
        # /api/v1/namespaces/NS/PLURAL[/NAME[/log]] or /apis/G/V/namespaces/NS/PLURAL[/NAME]
        rest = segments[2:] if segments[0] == "api" else segments[3:]
        if len(rest) < 3 or rest[0] != "namespaces":
            return self._status(404, "the server could not find the requested resource", {})
        namespace, plural, tail = rest[1], rest[2], rest[3:]
        if (method, plural) in self.forbidden:
            verb = {"GET": "get", "POST": "create", "PATCH": "patch"}[method]
            return self._status(
                403,
                f'{plural} is forbidden: User "system:serviceaccount:ml:tester" cannot {verb} '
                f'resource "{plural}" in the namespace "{namespace}"',
                {"kind": plural},
                reason="Forbidden",
            )
        if tail and tail[-1] == "log":
            text = self.pod_logs.get(tail[0])
            if text is None:
                return self._status(404, f'pods "{tail[0]}" not found', {"name": tail[0]})
            return 200, "text/plain", text.encode()
        if not tail:
            if method == "POST":
                return self._create(plural, namespace, json.loads(body))
            labels, fields = (
                query.get("labelSelector", [""])[0],
                query.get("fieldSelector", [""])[0],
            )
            return self._list(plural, namespace, labels, fields)
        name = tail[0]
        if method == "GET":
            return self._get(plural, namespace, name)
        if method == "PATCH":
            if content_type != "application/apply-patch+yaml" or "fieldManager" not in query:
                return self._status(415, "only server-side apply is served here", {})
            return self._apply(plural, namespace, name, json.loads(body))
        return self._status(405, f"{method} not served", {})

    def _status(
        self, code: int, message: str, details: dict[str, Any], reason: str = "NotFound"
    ) -> tuple[int, str, bytes]:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message}
        body.update(reason=reason, details=details, code=code)
        return code, "application/json", json.dumps(body).encode()

    def _json(self, code: int, obj: dict[str, Any]) -> tuple[int, str, bytes]:
        return code, "application/json", json.dumps(obj).encode()

    def _get(self, plural: str, namespace: str, name: str) -> tuple[int, str, bytes]:
        obj = self.objects.get((plural, namespace, name))
        if obj is None:
            return self._status(404, f'{plural} "{name}" not found', {"name": name, "kind": plural})
        if plural == "rayjobs" and self.rayjob_statuses:
            # The operator moves the RayJob along one scripted status per observation.
            seen = self._gets.get(name, 0)
            obj["status"] = self.rayjob_statuses[min(seen, len(self.rayjob_statuses) - 1)]
            self._gets[name] = seen + 1
        return self._json(200, obj)

    def _create(self, plural: str, namespace: str, obj: dict[str, Any]) -> tuple[int, str, bytes]:
        if namespace not in self.namespaces:
            details = {"name": namespace, "kind": "namespaces"}
            return self._status(404, f'namespaces "{namespace}" not found', details)
        name = obj["metadata"]["name"]
        if (plural, namespace, name) in self.objects:
            details = {"name": name, "kind": plural}
            return self._status(409, f'{plural} "{name}" already exists', details, "AlreadyExists")
        obj["metadata"].setdefault("creationTimestamp", "2030-01-01T00:00:00Z")
        obj["metadata"].setdefault("uid", f"uid-{len(self.objects):04d}")
        self.objects[(plural, namespace, name)] = obj
        return self._json(201, obj)

    def _apply(
        self, plural: str, namespace: str, name: str, obj: dict[str, Any]
    ) -> tuple[int, str, bytes]:
        if namespace not in self.namespaces:
            details = {"name": namespace, "kind": "namespaces"}
            return self._status(404, f'namespaces "{namespace}" not found', details)
        created = (plural, namespace, name) not in self.objects
        self.objects[(plural, namespace, name)] = obj
        return self._json(201 if created else 200, obj)

    def _list(
        self, plural: str, namespace: str, selector: str, fields: str = ""
    ) -> tuple[int, str, bytes]:
        wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
        # fieldSelector as the API server serves it for events: dotted paths, equality only.
        wanted_fields = dict(term.split("=", 1) for term in fields.split(",") if term)
        if plural == "rayjobs" and self.rayjob_statuses:
            for (p, ns, name), obj in self.objects.items():
                if p == plural and ns == namespace:
                    seen = self._gets.get(name, 0)
                    obj["status"] = self.rayjob_statuses[min(seen, len(self.rayjob_statuses) - 1)]
        items = [
            obj
            for (p, ns, _), obj in sorted(self.objects.items())
            if p == plural
            and ns == namespace
            and all(obj["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
            and all(_field(obj, k) == v for k, v in wanted_fields.items())
        ]
        return self._json(200, {"kind": "List", "apiVersion": "v1", "items": items})


def _field(obj: dict[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


@contextmanager
def serve(api: FakeKubeApi, kubeconfig: Path) -> Iterator[FakeKubeApi]:
    """Run the fake API on a free local port and write a kubeconfig (namespace ml) for it."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            content_type = (self.headers.get("Content-Type") or "").split(";")[0]
            code, kind, payload = api.handle(self.command, self.path, body, content_type)
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PATCH = _answer

        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": f"http://{host}:{port}"}}],
                "users": [{"name": "tester", "user": {"token": "test-token"}}],
                "contexts": [
                    {
                        "name": "fake",
                        "context": {"cluster": "fake", "user": "tester", "namespace": "ml"},
                    }
                ],
                "current-context": "fake",
            }
        )
    )
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
