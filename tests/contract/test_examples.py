"""Every file under examples/ is checked by a real engine: nothing there is only read by people.

YAML parses; values files go through the chart's schema and the renderer, and what they render
through the KubeRay CRD schema or kubernetes-validate; Kubernetes objects through the same
schemas; the Argo CD health check runs in Lua and the Flux health expressions in CEL, against a
RayJob in every status KubeRay v1.7 has, and must agree with `trainctl submit --wait`.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from app.cli import cli
from app.k8s.render import load_values, render_objects, render_schedule_objects
from app.k8s.status import DEPLOYMENT_STATUSES
from tests.contract.examples_support import (
    rayjob,
    run_cel,
    run_lua_health,
    shell_operators,
    status_cases,
    submit_flags,
    unknown_fields,
)
from tests.contract.k8s_support import EXAMPLES, REPO, crd_schema, crd_validator
from tests.kind.helm_driver import deep_merge

K8S_VERSION = "1.31"
FILES = sorted(p for p in EXAMPLES.rglob("*") if p.is_file())
# Values files meant to be layered over another one with a second `-f`.
OVERLAYS = {"scheduled/values-schedule.yaml": "values-three-pools.yaml"}
OPERATOR_VALUES = {"scheduled/kuberay-operator-values.yaml"}
CASES = status_cases()


def rel(path: Path) -> str:
    return str(path.relative_to(EXAMPLES))


def documents(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs, f"{rel(path)} holds no YAML document"
    assert all(isinstance(d, dict) for d in docs), f"{rel(path)}: every document must be a map"
    return docs


def test_the_examples_the_docs_promise_are_there() -> None:
    names = {rel(p) for p in FILES}
    for wanted in (
        "argocd/application.yaml",
        "argocd/rayjob-health.lua",
        "flux/kustomization.yaml",
        "scheduled/raycronjob.yaml",
        "scheduled/cronjob-submit.yaml",
        "values-s3.yaml",
        "values-data-pool.yaml",
        "data-pool-manifests/l4/rayjob.yaml",
    ):
        assert wanted in names


@pytest.mark.parametrize("path", FILES, ids=rel)
def test_every_example_file(path: Path) -> None:
    if path.suffix == ".lua":
        return check_lua(path.read_text(), rel(path))
    assert path.suffix in (".yaml", ".yml"), f"{rel(path)}: no check for this kind of file; add one"
    docs = documents(path)
    if rel(path) in OPERATOR_VALUES:
        return check_operator_values(docs[0])
    if "apiVersion" not in docs[0]:
        assert len(docs) == 1, f"{rel(path)}: a values file is one document"
        return check_values(path, docs[0])
    for doc in docs:
        check_object(doc, path)
    return None


# --- values -------------------------------------------------------------------------------
def values_of(path: Path, doc: dict[str, Any]) -> dict[str, Any]:
    base = OVERLAYS.get(rel(path))
    return deep_merge(yaml.safe_load((EXAMPLES / base).read_text()), doc) if base else doc


def render_example(path: Path, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Through the chart's schema (load_values) and the renderer, as `trainctl render` would."""
    merged = values_of(path, doc)
    tmp = path.with_name(f".{path.name}.merged")
    try:
        tmp.write_text(json.dumps(merged))  # JSON: the dict's exact meaning in any YAML reader
        values = load_values([tmp])
    finally:
        tmp.unlink(missing_ok=True)
    objects = [
        o for objs in render_objects(values, release="train", namespace="ml").values() for o in objs
    ]
    return objects + render_schedule_objects(values, release="train", namespace="ml")


def check_values(path: Path, doc: dict[str, Any]) -> None:
    objects = render_example(path, doc)
    assert any(o["kind"] == "RayJob" for o in objects), f"{rel(path)} renders no RayJob"
    for obj in objects:
        check_object(obj, path)


def check_operator_values(doc: dict[str, Any]) -> None:
    """No schema ships for the operator chart's values: check the list Helm replaces whole."""
    gates = doc["featureGates"]
    names = [gate["name"] for gate in gates]
    assert len(names) == len(set(names)), names
    assert all(isinstance(gate["enabled"], bool) for gate in gates)
    assert {"name": "RayCronJob", "enabled": True} in gates
    # Dropping a gate from the list would switch it off: keep the ones trainctl relies on.
    assert {"RayJobDeletionPolicy", "RayClusterStatusConditions"} <= set(names)


# --- objects ------------------------------------------------------------------------------
def check_object(obj: dict[str, Any], path: Path) -> None:
    group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
    where = f"{rel(path)}: {obj['kind']}/{obj.get('metadata', {}).get('name')}"
    if group == "ray.io":
        return check_ray_object(obj, where)
    if group == "argoproj.io" and obj["kind"] == "Application":
        return check_argo_application(obj, where)
    if group == "kustomize.toolkit.fluxcd.io" and obj["kind"] == "Kustomization":
        return check_flux_kustomization(obj, where)
    if group == "kustomize.config.k8s.io" and obj["kind"] == "Kustomization":
        # A rendered pool folder (data-pool-manifests/<pool>): `kubectl apply -k` reads it.
        listed = sorted(obj["resources"])
        beside = sorted(p.name for p in path.parent.glob("*.yaml") if p != path)
        assert listed == beside, f"{where}: lists {listed}, the folder holds {beside}"
        return None
    assert group in ("", "apps", "batch", "networking.k8s.io", "rbac.authorization.k8s.io"), (
        f"{where}: no schema or check for {obj['apiVersion']}; add one"
    )
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "argocd-cm":
        script = obj["data"]["resource.customizations.health.ray.io_RayJob"]
        assert script == (EXAMPLES / "argocd" / "rayjob-health.lua").read_text(), (
            f"{where}: the health check differs from argocd/rayjob-health.lua"
        )
    if obj["kind"] == "CronJob":
        check_submit_cronjob(obj, where)
    return None


def check_ray_object(obj: dict[str, Any], where: str) -> None:
    if obj["kind"] == "RayCronJob":
        # No RayCronJob CRD ships with the pinned KubeRay CRDs: its jobTemplate is a RayJob spec.
        assert re.fullmatch(r"\S+( \S+){4}", obj["spec"]["schedule"]), f"{where}: cron schedule"
        job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": obj["metadata"]}
        obj = {**job, "spec": obj["spec"]["jobTemplate"]}
    plural = {"RayJob": "rayjobs", "RayCluster": "rayclusters"}[obj["kind"]]
    errors = [
        f"{'.'.join(map(str, e.path))}: {e.message}" for e in crd_validator(plural).iter_errors(obj)
    ]
    assert not errors, f"{where}: not valid against the {plural} CRD:\n" + "\n".join(errors)
    extra = unknown_fields(obj, crd_schema(plural), "")
    assert not extra, f"{where}: fields the CRD does not know (pruned silently): {extra}"
    if obj["kind"] == "RayJob":
        check_entrypoint(obj["spec"], where)


def check_entrypoint(spec: dict[str, Any], where: str) -> None:
    if spec.get("submissionMode", "K8sJobMode") not in ("K8sJobMode", "SidecarMode"):
        return
    operators = shell_operators(spec.get("entrypoint", ""))
    assert not operators, (
        f"{where}: entrypoint {spec['entrypoint']!r} has unquoted shell operators {operators}; "
        "KubeRay pastes it into the submitter's bash line, so everything after the first one "
        "runs in the submitter pod. Wrap it: bash -c '...'"
    )


def check_submit_cronjob(obj: dict[str, Any], where: str) -> None:
    """The command must be a `trainctl submit --wait` the real CLI accepts."""
    (container,) = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    words = [*container.get("command", []), *container.get("args", [])]
    if words[:2] == ["/bin/sh", "-c"] or words[:2] == ["sh", "-c"]:
        script = words[2]
        words = shlex.split(script[script.index("trainctl submit") :])
    start = words.index("submit")
    assert words[start - 1] == "trainctl", f"{where}: runs {words[: start + 1]}"
    args = words[start + 1 :]
    known = {opt for param in cli.commands["submit"].params for opt in param.opts}
    unknown = set(submit_flags(args)) - known
    assert not unknown, f"{where}: trainctl submit has no option {unknown}"
    assert "--wait" in args and "--pool" in submit_flags(args), f"{where}: {args}"
    check_run_tag_is_the_job_name(obj, container, args, where)


JOB_NAME_LABEL = "metadata.labels['batch.kubernetes.io/job-name']"


def check_run_tag_is_the_job_name(
    obj: dict[str, Any], container: dict[str, Any], args: list[str], where: str
) -> None:
    """One tag per scheduled Job, the same for every pod of it: a retry attaches to its run."""
    tags = [arg for arg in args if arg.split("=", 1)[0] == "--run-tag"]
    assert tags == ["--run-tag=$(RUN_TAG)"], (
        f"{where}: the run tag must be the Job's name (not a time: a retried pod would start a "
        f"second run), got {tags}"
    )
    env = {e["name"]: e for e in container.get("env", [])}
    field = env.get("RUN_TAG", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    assert field == JOB_NAME_LABEL, f"{where}: RUN_TAG comes from {field}"
    job = obj["spec"]["jobTemplate"]["spec"]
    assert job.get("backoffLimit", 6) > 0, f"{where}: retries are safe, so allow them"
    fail_codes = {
        code
        for rule in job.get("podFailurePolicy", {}).get("rules", [])
        if rule["action"] == "FailJob" and "onExitCodes" in rule
        for code in rule["onExitCodes"]["values"]
    }
    assert {1, 2} <= fail_codes, f"{where}: a failed run (1) or bad values (2) must not retry"


# --- Argo CD ------------------------------------------------------------------------------
def check_argo_application(app: dict[str, Any], where: str) -> None:
    source = app["spec"]["source"]
    chart_dir = REPO / source["path"]
    assert (chart_dir / "Chart.yaml").is_file(), f"{where}: source.path is not the chart"
    for values_file in source.get("helm", {}).get("valueFiles", []):
        path = (chart_dir / values_file).resolve()
        assert path.is_file(), f"{where}: valueFiles entry {values_file} does not exist"
        rendered = render_example(path, yaml.safe_load(path.read_text()))
        for job in (o for o in rendered if o["kind"] == "RayJob"):
            policies = yaml.safe_dump(job["spec"].get("deletionStrategy", {}))
            assert "DeleteSelf" not in policies, f"{where}: DeleteSelf fights self-heal"
    options = set(app["spec"]["syncPolicy"].get("syncOptions", []))
    assert {"ServerSideApply=true", "PruneLast=true"} <= options, f"{where}: {options}"
    ignored = [
        expr
        for rule in app["spec"].get("ignoreDifferences", [])
        if rule.get("group") == "ray.io" and rule.get("kind") == "RayJob"
        for expr in rule.get("jqPathExpressions", []) + rule.get("jsonPointers", [])
    ]
    assert any("suspend" in expr for expr in ignored), f"{where}: Kueue's spec.suspend"
    assert "RespectIgnoreDifferences=true" in options, (
        f"{where}: without RespectIgnoreDifferences a sync writes spec.suspend back"
    )


def check_lua(script: str, where: str) -> None:
    for case_id, obj, health in CASES:
        result = run_lua_health(script, obj)
        assert result["status"].lower() == health, f"{where} [{case_id}]: {result}"
        reason = obj.get("status", {}).get("reason")
        if health == "degraded" and reason:
            assert reason in result["message"], f"{where} [{case_id}]: {result}"


def test_the_lua_cases_cover_every_deployment_status() -> None:
    covered = {obj.get("status", {}).get("jobDeploymentStatus", "") for _, obj, _ in CASES}
    assert covered == set(DEPLOYMENT_STATUSES)


# --- Flux ---------------------------------------------------------------------------------
def check_flux_kustomization(ks: dict[str, Any], where: str) -> None:
    path = (REPO / ks["spec"]["path"]).resolve()
    assert (path / "kustomization.yaml").is_file(), (
        f"{where}: spec.path {path} has no kustomization"
    )
    (exprs,) = [
        e
        for e in ks["spec"]["healthCheckExprs"]
        if (e["apiVersion"], e["kind"]) == ("ray.io/v1", "RayJob")
    ]
    for case_id, obj, health in CASES:
        if "status" not in obj:
            continue  # has() cannot guard a missing top-level field; Flux waits until one exists
        try:
            results = {key: run_cel(exprs[key], obj) for key in ("current", "failed", "inProgress")}
        except Exception as err:  # Flux keeps waiting on an expression that errors
            pytest.fail(f"{where} [{case_id}]: a health expression fails on {obj['status']}: {err}")
        wanted = {
            "healthy": "current",
            "degraded": "failed",
            "progressing": "inProgress",
            "suspended": "inProgress",
        }[health]
        assert [k for k, v in results.items() if v] == [wanted], f"{where} [{case_id}]: {results}"


def test_cel_and_lua_engines_really_evaluate() -> None:
    """Guard against an engine that returns the same answer whatever it is given."""
    assert run_cel("status.jobStatus == 'SUCCEEDED'", rayjob({"jobStatus": "SUCCEEDED"}))
    assert not run_cel("status.jobStatus == 'SUCCEEDED'", rayjob({"jobStatus": "FAILED"}))
    lua = "local hs = {}; hs.status = obj.status.jobStatus; hs.message = ''; return hs"
    assert run_lua_health(lua, copy.deepcopy(rayjob({"jobStatus": "FAILED"})))["status"] == "FAILED"


def _data_loaders() -> list[dict[str, Any]]:
    """The helper Pod (a heredoc) and the sync Job (a yaml block) of docs/kubernetes.md's
    "Getting an image folder onto the shared volume"."""
    text = (REPO / "docs" / "kubernetes.md").read_text()
    section = text.split("### Getting an image folder onto the shared volume", 1)[1]
    section = section.split("\n## ", 1)[0]
    pod = re.search(r"<<'YAML'\n(.*?)\nYAML\n", section, re.S)
    job = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert pod and job, "the section's Pod and Job are not where this test looks"
    return [yaml.safe_load(pod.group(1)), yaml.safe_load(job.group(1))]


def test_the_documented_data_loaders_are_valid_and_mount_the_charts_claim_as_the_ray_pods() -> None:
    values = load_values()
    values["nodePools"] = {"cpu": {"gpusPerWorker": 0}}
    rendered = render_objects(values, release="train", namespace="ml")["cpu"]
    (claim,) = [o for o in rendered if o["kind"] == "PersistentVolumeClaim"]
    (job,) = [o for o in rendered if o["kind"] == "RayJob"]
    ray_pod = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    (ray_mount,) = [m for m in ray_pod["containers"][0]["volumeMounts"] if m["name"] == "shared"]
    for obj in _data_loaders():
        kubernetes_validate.validate({"metadata": {}, **obj}, K8S_VERSION, strict=True)
        spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
        (volume,) = spec["volumes"]
        assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
        (container,) = spec["containers"]
        assert container["volumeMounts"][0]["mountPath"] == ray_mount["mountPath"]
        for key in ("runAsUser", "runAsGroup", "fsGroup", "runAsNonRoot", "seccompProfile"):
            assert spec["securityContext"][key] == ray_pod["securityContext"][key], key
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }


def test_the_generated_ray_token_is_written_once_under_gitops() -> None:
    """Argo CD and Flux render the chart without the cluster, so the chart's Ray token is new
    on each render: every sync wrote a new token under running Ray clusters, whose restarted
    workers could then not join (a red-team pass). Flux creates it once (ssa: IfNotPresent);
    the Argo CD example ignores its data, for the Secret of the release it installs."""
    values = load_values([EXAMPLES / "values-cpu.yaml"])  # leaves rayAuth.existingSecret empty
    (app,) = documents(EXAMPLES / "argocd" / "application.yaml")
    release = app["spec"]["source"]["helm"]["releaseName"]
    for objects in render_objects(values, release=release, namespace="ml").values():
        (secret,) = [o for o in objects if o["kind"] == "Secret"]
        assert (
            secret["metadata"]["annotations"]["kustomize.toolkit.fluxcd.io/ssa"] == "IfNotPresent"
        )
        ignored = [
            rule for rule in app["spec"]["ignoreDifferences"]
            if rule["kind"] == "Secret" and rule.get("name") == secret["metadata"]["name"]
        ]  # fmt: skip
        assert [rule["jsonPointers"] for rule in ignored] == [["/data"]], ignored
    assert "RespectIgnoreDifferences=true" in app["spec"]["syncPolicy"]["syncOptions"]
