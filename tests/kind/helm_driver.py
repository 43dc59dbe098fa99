"""Install, upgrade and uninstall Helm releases for the kind suite.

With the `helm` binary on PATH the suite uses it as is. Without it, the Helm v4 SDK embedded in
the helm-python-sdk wheel renders the charts (the same Go template engine) and kubectl applies
the result, doing the three things Helm itself would on top: CRDs first, objects that left the
manifest on upgrade are deleted unless annotated `helm.sh/resource-policy: keep`, and uninstall
deletes the release's objects under the same rule. Like Helm's `lookup`, an existing Secret
marked create-only is never overwritten.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from app.k8s.values import merge_maps

KEEP = ("helm.sh/resource-policy", "keep")
CREATE_ONLY = ("trainctl.io/create-only", "true")

Kubectl = Callable[..., str]


# Helm's coalescing of -f files, as `trainctl render -f a -f b` does it.
deep_merge = merge_maps


def values_of(files: list[Path]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for path in files:
        merged = deep_merge(merged, yaml.safe_load(path.read_text()) or {})
    return merged


class HelmCli:
    """The real thing."""

    name = "helm binary"

    def __init__(self, env: dict[str, str]) -> None:
        self.helm = shutil.which("helm") or "helm"
        self.env = env

    def _run(self, *args: str) -> None:
        subprocess.run([self.helm, *args], check=True, env=self.env)

    def install_remote(
        self, release: str, chart: str, repo: str, version: str, namespace: str
    ) -> None:
        self._run(
            "upgrade", "--install", release, chart, "--repo", repo, "--version", version,
            "--namespace", namespace, "--create-namespace", "--wait", "--timeout", "10m",
        )  # fmt: skip

    def upgrade_install(
        self, release: str, chart: Path, namespace: str, values: list[Path]
    ) -> None:
        files = [arg for path in values for arg in ("-f", str(path))]
        self._run("upgrade", "--install", release, str(chart), "-n", namespace, *files)

    def uninstall(self, release: str, namespace: str) -> None:
        self._run("uninstall", release, "-n", namespace, "--wait", "--timeout", "5m")


class HelmSdk:
    """Helm's rendering from the SDK wheel, applied with kubectl the way Helm would."""

    name = "helm-python-sdk + kubectl"

    def __init__(self, kubectl: Kubectl, state_dir: Path) -> None:
        self.kubectl = kubectl
        self.state_dir = state_dir  # the last manifest of each release, as Helm's release record
        state_dir.mkdir(parents=True, exist_ok=True)

    def install_remote(
        self, release: str, chart: str, repo: str, version: str, namespace: str
    ) -> None:
        import helm_python

        with tempfile.TemporaryDirectory() as tmp:
            helm_python.pull(chart, repo_url=repo, version=version, destination=tmp)
            archive = next(Path(tmp).glob(f"{chart}-*.tgz"))
            loaded = helm_python.Chart.load_archive(archive.read_bytes())
        self._create_namespace(namespace)
        for crd in loaded.crds:
            data = crd["data"]
            self._apply(data.decode() if isinstance(data, bytes) else data)
        self._install(release, loaded, {}, namespace)
        self.kubectl("rollout", "status", f"deployment/{chart}", "-n", namespace, "--timeout=10m")

    def upgrade_install(
        self, release: str, chart: Path, namespace: str, values: list[Path]
    ) -> None:
        import helm_python

        self._install(release, helm_python.Chart.load(chart), values_of(values), namespace)

    def uninstall(self, release: str, namespace: str) -> None:
        record = self._record(release, namespace)
        old = _objects(record.read_text()) if record.exists() else []
        for kind, name in helm_deletes(old, []):
            self.kubectl("delete", kind, name, "-n", namespace, "--ignore-not-found", "--wait=true")
        record.unlink(missing_ok=True)

    # --- what `helm upgrade --install` does --------------------------------------------------
    def _install(self, release: str, chart: Any, values: dict[str, Any], namespace: str) -> None:
        record = self._record(release, namespace)
        first = not record.exists()
        rendered = chart.render(
            values, name=release, namespace=namespace, is_install=first, is_upgrade=not first
        )
        manifest = "\n---\n".join(
            text for path, text in sorted(rendered.items()) if not path.endswith("NOTES.txt")
        )
        new = _objects(manifest)
        for obj in new:
            if _annotated(obj, CREATE_ONLY) and self._exists(obj, namespace):
                continue
            self._apply(yaml.safe_dump(obj), namespace)
        if not first:
            for kind, name in helm_deletes(_objects(record.read_text()), new):
                self.kubectl("delete", kind, name, "-n", namespace, "--ignore-not-found")
        record.write_text(manifest)

    def _record(self, release: str, namespace: str) -> Path:
        return self.state_dir / f"{namespace}.{release}.yaml"

    def _apply(self, text: str, namespace: str | None = None) -> None:
        args = ["apply", "--server-side", "--force-conflicts", "--field-manager=helm", "-f", "-"]
        self.kubectl(*args, *(["-n", namespace] if namespace else []), input=text)

    def _exists(self, obj: dict[str, Any], namespace: str) -> bool:
        out = self.kubectl("get", obj["kind"], obj["metadata"]["name"], "-n", namespace,
                           "--ignore-not-found", "-o", "name")  # fmt: skip
        return bool(out.strip())

    def _create_namespace(self, namespace: str) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        self._apply(yaml.safe_dump(body))


def helm_deletes(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(kind, name) of what Helm deletes going from manifest `old` to `new` (uninstall: `new`
    empty): every object that left the manifest, unless annotated `helm.sh/resource-policy:
    keep`."""
    keys = {(o["kind"], o["metadata"]["name"]) for o in new}
    return [
        (o["kind"], o["metadata"]["name"])
        for o in old
        if (o["kind"], o["metadata"]["name"]) not in keys and not _annotated(o, KEEP)
    ]


def _objects(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _annotated(obj: dict[str, Any], pair: tuple[str, str]) -> bool:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(pair[0]) == pair[1]
