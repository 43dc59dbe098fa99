"""Rendering the chart the way Helm does, and walking what it renders.

`helm_render` uses the real `helm` binary when it is on PATH and the Helm v4 SDK embedded in
the helm-python-sdk wheel otherwise: the same Go template engine either way, no mocks.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests import kuberay_crds

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "trainctl"
VALUES_DIR = Path(__file__).resolve().parent / "values"
EXAMPLES = REPO / "examples"

# Values files the parity, schema and security tests all run over.
VALUES_FILES = [
    EXAMPLES / "values-three-pools.yaml",
    EXAMPLES / "values-cpu.yaml",
    EXAMPLES / "values-s3.yaml",
    EXAMPLES / "values-data-pool.yaml",
    EXAMPLES / "values-nightly-sweep.yaml",
    *sorted(VALUES_DIR.glob("*.yaml")),
]


class HelmFailed(Exception):
    """Helm refused to render (schema or a template `fail`); the message is Helm's."""


@cache
def crds_dir() -> Path:
    """KubeRay's pinned CRDs, wherever tests/kuberay_crds.py finds them; a test fails without."""
    import pytest

    try:
        return kuberay_crds.resolve()
    except kuberay_crds.CrdsMissing as err:
        pytest.fail(str(err), pytrace=False)


PODGROUP_CRD = Path(__file__).resolve().parent / "crds" / "scheduling.x-k8s.io_podgroups.yaml"


@cache
def podgroup_validator() -> tuple[Any, dict[str, Any]]:
    """scheduler-plugins' PodGroup CRD (vendored, tests/contract/crds/SOURCE.txt, held to the
    SHA-256 sum there): a validator for its openAPIV3Schema, and the schema."""
    from jsonschema import Draft7Validator

    data = PODGROUP_CRD.read_bytes()
    source = (PODGROUP_CRD.parent / "SOURCE.txt").read_text()
    pinned = re.search(r"^sha256 ([0-9a-f]{64})$", source, re.MULTILINE)
    assert pinned and hashlib.sha256(data).hexdigest() == pinned[1], f"{PODGROUP_CRD} changed"
    crd = yaml.safe_load(data)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = version["schema"]["openAPIV3Schema"]
    Draft7Validator.check_schema(schema)
    return Draft7Validator(schema), schema


@cache
def crd_schema(plural: str = "rayjobs") -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRD is 1.4 MB of YAML
    crd = yaml.load((crds_dir() / f"ray.io_{plural}.yaml").read_text(), Loader=loader)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return version["schema"]["openAPIV3Schema"]


@cache
def crd_validator(plural: str = "rayjobs") -> Any:
    """A compiled validator for the CRD's openAPIV3Schema (JSON Schema draft 7 compatible)."""
    from jsonschema import Draft7Validator

    schema = crd_schema(plural)
    Draft7Validator.check_schema(schema)
    return Draft7Validator(schema)


def load_yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


class _KubeLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml: Helm's output is long
    """Reads manifests as Kubernetes does: a plain `=` is the string "=" (YAML 1.2 and Go's
    yaml), not YAML 1.1's value tag, which PyYAML cannot even construct; and `1e+21` or
    `1e-07` (how Go's toYaml writes such floats) are numbers, as in Go's yaml, where YAML 1.1
    wants a dot."""


_KubeLoader.add_constructor("tag:yaml.org,2002:value", _KubeLoader.construct_yaml_str)
_KubeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9]+[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def _parse(texts: list[str]) -> list[dict[str, Any]]:
    return [doc for text in texts for doc in yaml.load_all(text, Loader=_KubeLoader) if doc]


def helm_render(
    values: dict[str, Any], *, release: str = "demo", namespace: str = "ml"
) -> list[dict[str, Any]]:
    """Every object the chart renders for these user values."""
    helm = shutil.which("helm")
    if helm:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
            yaml.safe_dump(values, handle)
            handle.flush()
            cmd = [helm, "template", release, str(CHART), "-n", namespace, "-f", handle.name]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise HelmFailed(proc.stderr)
        return _parse([proc.stdout])
    import helm_python
    from helm_python.errors import HelmError

    try:
        with helm_python.Chart.load(CHART) as chart:
            out = chart.render(values, name=release, namespace=namespace)
    except HelmError as err:
        raise HelmFailed(str(err)) from err
    return _parse([text for name, text in sorted(out.items()) if name.endswith(".yaml")])


def refusals(values: dict[str, Any], folder: Path) -> tuple[str, list[str]]:
    """What each engine says refusing `values` (Helm's error, `trainctl render`'s problems);
    AssertionError where either renders them. The values file is written into `folder`."""
    from app.errors import ConfigError
    from app.k8s.render import load_values, render_objects

    try:
        helm_render(values)
    except HelmFailed as err:
        helm = str(err)
    else:
        raise AssertionError(f"Helm rendered {values}")
    path = folder / "values.json"
    path.write_text(json.dumps(values))
    try:
        render_objects(load_values([path]), release="demo", namespace="ml")
    except ConfigError as err:
        return helm, list(err.problems)
    raise AssertionError(f"trainctl render rendered {values}")


def helm_notes(values: dict[str, Any], *, release: str = "demo", namespace: str = "ml") -> str:
    """NOTES.txt as `helm install` prints it for these values (the SDK: `helm template` does
    not print notes)."""
    import helm_python

    with helm_python.Chart.load(CHART) as chart:
        out = chart.render(values, name=release, namespace=namespace)
    return out["trainctl/templates/NOTES.txt"]


def helm_merge_maps(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's pkg/cli/values mergeMaps, line for line (the SDK does not expose MergeValues)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = helm_merge_maps(out[key], value)
            continue
        out[key] = value
    return out


def helm_user_values(
    files: list[Path],
    *,
    set_values: tuple[str, ...] = (),
    set_string: tuple[str, ...] = (),
    set_json: tuple[str, ...] = (),
    set_file: tuple[str, ...] = (),
) -> dict[str, Any]:
    """What `helm template -f F... --set-json --set --set-string --set-file` hands the chart:
    each file through Helm's own values reader, each expression through Helm's own strvals
    parser.

    Helm parses an expression into the values so far; here each is parsed alone and merged,
    which is the same except when an index writes into a list a file already holds.
    """
    import helm_python
    from helm_python.errors import HelmError

    user: dict[str, Any] = {}
    parsers = (
        (set_json, helm_python.parse_set_json),
        (set_values, helm_python.parse_set_string),
        (set_string, helm_python.parse_set_string_values),
        (set_file, helm_python.parse_set_file),
    )
    try:
        for path in files:
            user = helm_merge_maps(user, helm_python.values_from_yaml(path.read_text()))
        for expressions, parse in parsers:
            for expression in expressions:
                user = helm_merge_maps(user, parse(expression))
    except HelmError as err:
        raise HelmFailed(str(err)) from err
    return user


def helm_template(
    files: list[Path], *, release: str = "demo", namespace: str = "ml", **sets: Any
) -> list[dict[str, Any]]:
    """`helm template RELEASE chart -n NS -f FILE... --set...`: the same file bytes as trainctl."""
    return helm_render(helm_user_values(files, **sets), release=release, namespace=namespace)


def helm_lint(values: dict[str, Any] | None = None) -> list[str]:
    """`helm lint --strict`: the findings that make it fail (warnings and errors)."""
    helm = shutil.which("helm")
    if helm:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
            yaml.safe_dump(values or {}, handle)
            handle.flush()
            cmd = [helm, "lint", "--strict", str(CHART), "-f", handle.name]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        return [] if proc.returncode == 0 else [proc.stdout + proc.stderr]
    import helm_python

    report = helm_python.lint(CHART, values, strict=True)
    # Severity 1 is INFO (e.g. "icon is recommended"), which --strict lets pass.
    findings = [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] > 1]
    return findings + [str(e) for e in report["errors"]]


def by_key(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def pod_templates(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, pod template) for every pod template an object carries, nested ones included."""
    name = f"{obj['kind']}/{obj['metadata']['name']}"
    spec = obj.get("spec") or {}
    if obj["kind"] == "RayJob":
        cluster = spec.get("rayClusterSpec") or {}
        if "headGroupSpec" in cluster:
            yield f"{name} head", cluster["headGroupSpec"]["template"]
        for group in cluster.get("workerGroupSpecs") or []:
            yield f"{name} worker group {group['groupName']}", group["template"]
        if "submitterPodTemplate" in spec:
            yield f"{name} submitter", spec["submitterPodTemplate"]
    elif obj["kind"] == "CronJob":
        yield name, spec["jobTemplate"]["spec"]["template"]
    elif obj["kind"] in ("Job", "Deployment", "StatefulSet", "DaemonSet"):
        yield name, spec["template"]
    elif obj["kind"] == "Pod":
        yield name, obj


def containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    spec = template["spec"]
    return list(spec.get("initContainers") or []) + list(spec["containers"])


def rayjob_groups(job: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    cluster = job["spec"]["rayClusterSpec"]
    return cluster["headGroupSpec"], cluster["workerGroupSpecs"]


def config_data(objects: list[dict[str, Any]], name: str) -> dict[str, str]:
    return by_key(objects)[("ConfigMap", name)]["data"]


MANAGED_BY = "app.kubernetes.io/managed-by"
# What keeps Argo CD and Flux from pruning or deleting an object every pool folder shares.
KEPT_BY_GITOPS = {
    "argocd.argoproj.io/sync-options": "Delete=false,Prune=false",
    "kustomize.toolkit.fluxcd.io/prune": "disabled",
}


def normalized(obj: dict) -> dict:
    """A rendered object as both engines must agree on it: Helm's managed-by label dropped,
    the Secret's random token (checked long enough) replaced by a placeholder."""
    obj = json.loads(json.dumps(obj))  # a deep copy, and ints vs floats compare equal anyway
    obj["metadata"].get("labels", {}).pop(MANAGED_BY, None)
    if obj["kind"] == "Secret":
        token = obj["data"]["auth_token"]
        assert len(base64.b64decode(token)) >= 32, "auth token too short"
        obj["data"]["auth_token"] = "<random>"
    return obj
