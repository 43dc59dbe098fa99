"""Every container the chart renders meets the restricted Pod Security profile; checkov agrees."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.contract.k8s_support import (
    VALUES_FILES,
    by_key,
    containers,
    helm_render,
    load_yaml,
    of_kind,
    pod_templates,
)

ALLOWED_VOLUMES = {"persistentVolumeClaim", "emptyDir", "configMap", "secret", "projected"}

# Checks skipped for every pod template, each with why it does not apply here.
SKIPPED = {
    "CKV_K8S_8": "KubeRay adds its own Ray health probes to head and worker containers; "
    "submitter and CronJob pods run to completion",
    "CKV_K8S_9": "same as CKV_K8S_8: KubeRay owns the readiness probes of Ray containers",
    "CKV_K8S_15": "tags are immutable release tags and kind needs IfNotPresent; "
    "image.pullPolicy lets a cluster choose Always",
    "CKV_K8S_43": "digest pinning is supported (image.digest) but optional; tags are the default",
    "CKV_K8S_40": "the Ray image's ray user is UID 1000; the restricted profile asks for non-root",
    "CKV_K8S_35": "secretEnv is an opt-in for tools that read credentials only from env vars",
}
# Skipped for the Ray pods only: the scheduled submit's root filesystem is read-only.
RAY_SKIPPED = {
    "CKV_K8S_22": "Ray writes its session dir, logs and runtime envs under /tmp/ray and $HOME",
}
# Skipped for the scheduled-retraining pod only (as a checkov.io/skip annotation).
CRONJOB_SKIPPED = {
    "CKV_K8S_38": "trainctl submit calls the Kubernetes API, so this one pod mounts a token",
    "CKV2_K8S_6": "the submit pod serves nothing, and its egress goes to the API server",
}


def _effective(template: dict, container: dict, field: str) -> object:
    own = (container.get("securityContext") or {}).get(field)
    return own if own is not None else (template["spec"].get("securityContext") or {}).get(field)


def _rendered() -> list[tuple[str, list[dict]]]:
    return [(path.stem, helm_render(load_yaml(path))) for path in VALUES_FILES]


@pytest.fixture(scope="module")
def rendered() -> list[tuple[str, list[dict]]]:
    return _rendered()


def test_every_container_meets_the_restricted_profile(rendered: list) -> None:
    seen = 0
    for _, objects in rendered:
        for obj in objects:
            for where, template in pod_templates(obj):
                spec = template["spec"]
                assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), where
                for volume in spec.get("volumes") or []:
                    assert set(volume) - {"name"} <= ALLOWED_VOLUMES, (where, volume)
                for container in containers(template):
                    seen += 1
                    ctx = container.get("securityContext") or {}
                    label = f"{where} container {container['name']}"
                    assert _effective(template, container, "runAsNonRoot") is True, label
                    assert _effective(template, container, "runAsUser") != 0, label
                    seccomp = _effective(template, container, "seccompProfile") or {}
                    assert seccomp.get("type") == "RuntimeDefault", label
                    assert ctx.get("allowPrivilegeEscalation") is False, label
                    assert ctx.get("capabilities", {}).get("drop") == ["ALL"], label
                    assert not ctx.get("capabilities", {}).get("add"), label
                    assert not ctx.get("privileged"), label
                    for kind in ("requests", "limits"):
                        assert {"cpu", "memory"} <= set(container["resources"][kind]), label
    # head + worker + submitter per RayJob, plus the CronJob: the walk really found them
    assert seen >= 20


def test_the_scheduled_submit_writes_only_to_its_scratch_folder(rendered: list) -> None:
    """submit runs no Ray, so its pod (the one that holds an API token) gets a read-only root
    filesystem, and $HOME and temporary files go to a small emptyDir at /tmp."""
    seen = 0
    for _, objects in rendered:
        for obj in of_kind(objects, "CronJob"):
            spec = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
            scratch = {v["name"]: v for v in spec["volumes"]}["scratch"]
            assert scratch == {"name": "scratch", "emptyDir": {"sizeLimit": "64Mi"}}, scratch
            for container in spec["containers"]:
                seen += 1
                assert container["securityContext"]["readOnlyRootFilesystem"] is True
                mounts = {m["name"]: m for m in container["volumeMounts"]}
                assert mounts["scratch"] == {"name": "scratch", "mountPath": "/tmp"}, mounts
                assert {"name": "HOME", "value": "/tmp"} in container["env"], container["env"]
    assert seen >= 1


def test_ray_pods_mount_no_service_account_token(rendered: list) -> None:
    for _, objects in rendered:
        for job in of_kind(objects, "RayJob"):
            for where, template in pod_templates(job):
                assert template["spec"]["automountServiceAccountToken"] is False, where


def test_ray_token_auth_is_on_and_its_secret_exists(rendered: list) -> None:
    for stem, objects in rendered:
        values = load_yaml(next(p for p in VALUES_FILES if p.stem == stem))
        auth = values.get("rayAuth") or {}
        for job in of_kind(objects, "RayJob"):
            options = job["spec"]["rayClusterSpec"].get("authOptions")
            if auth.get("enabled") is False:
                assert options is None
                continue
            assert options["mode"] == "token"
            if auth.get("existingSecret"):
                assert options["secretName"] == auth["existingSecret"]
            else:
                secret = by_key(objects)[("Secret", options["secretName"])]
                assert secret["data"]["auth_token"]


def test_network_policy_admits_only_the_runs_own_pods(rendered: list) -> None:
    for _, objects in rendered:
        policies = by_key(of_kind(objects, "NetworkPolicy"))
        for job in of_kind(objects, "RayJob"):
            name = job["metadata"]["name"]
            if ("NetworkPolicy", name) not in policies:
                continue  # networkPolicy.enabled: false in this values file
            policy = policies[("NetworkPolicy", name)]["spec"]
            assert policy["podSelector"] == {"matchLabels": {"trainctl.io/run": name}}
            assert policy["policyTypes"] == ["Ingress"]
            own, *others = policy["ingress"]
            assert own == {"from": [{"podSelector": {"matchLabels": {"trainctl.io/run": name}}}]}
            for rule in others:  # anything else reaches the dashboard or the metrics port only
                if rule["ports"] == [{"protocol": "TCP", "port": 8080}]:
                    # Ray's metrics port: one named scraper, never every namespace or pod.
                    (peer,) = rule["from"]
                    assert set(peer) == {"namespaceSelector", "podSelector"}
                    assert all(selector for selector in peer.values()), peer
                else:
                    assert rule["ports"] == [{"protocol": "TCP", "port": 8265}]
            for where, template in pod_templates(job):
                assert template["metadata"]["labels"]["trainctl.io/run"] == name, where


def test_secrets_stay_out_of_configmaps(rendered: list) -> None:
    for _, objects in rendered:
        tokens = [s["data"]["auth_token"] for s in of_kind(objects, "Secret")]
        for config in of_kind(objects, "ConfigMap"):
            text = json.dumps(config)
            assert not any(token in text for token in tokens)
            for key in config["data"]:
                assert not any(w in key for w in ("TOKEN", "PASSWORD", "SECRET", "API_KEY")), key


def _pod_preview(where: str, template: dict, index: int, cronjob: bool) -> dict:
    metadata = {
        "name": f"preview-{index}",
        "namespace": "ml",
        "labels": dict(template.get("metadata", {}).get("labels") or {}),
        "annotations": {"trainctl.io/preview-of": where},
    }
    skipped = CRONJOB_SKIPPED if cronjob else RAY_SKIPPED
    for i, (check, reason) in enumerate(sorted(skipped.items()), start=1):
        metadata["annotations"][f"checkov.io/skip{i}"] = f"{check}={reason}"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


def test_checkov_passes_on_every_pod_template(rendered: list, tmp_path: Path) -> None:
    checkov = os.environ.get("CHECKOV_BIN")
    if not checkov:
        pytest.skip("CHECKOV_BIN is not set (make test sets it to .venv-checkov/bin/checkov)")
    count = 0
    for stem, objects in rendered:
        for obj in objects:
            if obj["kind"] == "NetworkPolicy":  # scanned with the pods so CKV2_K8S_6 sees them
                (tmp_path / f"{stem}-{obj['metadata']['name']}-np.yaml").write_text(
                    yaml.safe_dump(obj)
                )
            for where, template in pod_templates(obj):
                count += 1
                preview = _pod_preview(where, template, count, obj["kind"] == "CronJob")
                (tmp_path / f"{stem}-{count}.yaml").write_text(yaml.safe_dump(preview))
    cmd = [checkov, "-d", str(tmp_path), "--framework", "kubernetes", "--quiet", "--compact"]
    cmd += ["--skip-download", "-o", "json", "--skip-check", ",".join(sorted(SKIPPED))]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = [
        f"{f['check_id']} {f['check_name']}: {f['resource']} ({f['file_path']})"
        for report in reports
        for f in report["results"]["failed_checks"]
        if not _network_policy_off(f)
    ]
    assert failed == [], "\n".join(failed)
    assert sum(r["summary"]["resource_count"] for r in reports) >= count


def _network_policy_off(finding: dict) -> bool:
    # schedule-noauth.yaml turns the NetworkPolicy off on purpose; that is the user's call.
    return finding["check_id"] == "CKV2_K8S_6" and "schedule-noauth" in finding["file_path"]


def _allows(role: dict, verb: str, path: str) -> bool:
    """Whether `role` allows `verb` on the object at API path `path` (RBAC's rule matching)."""
    parts = path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    resource, name = parts[parts.index("namespaces") + 2], parts[parts.index("namespaces") + 3]
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
        and name in rule.get("resourceNames", [name])
        for rule in role["rules"]
    )  # fmt: skip


@pytest.mark.parametrize("existing_secret", ["", "team-ray-token"])
def test_the_scheduled_submit_may_do_what_submit_does_and_read_no_other_secret(
    existing_secret: str, tmp_path: Path
) -> None:
    """The CronJob's pod holds an API token. Its Role allows each call `trainctl submit` makes
    for a pool's objects (the chart created the token Secret and the volume claim with the
    schedule: submit finds and keeps them), and on Secrets only a `get` of the chart's token
    Secret by name: it could list, read, or create (a token Secret for another ServiceAccount
    hands over that account's token) every Secret of the namespace."""
    from app.k8s.plan import CREATE_ONLY, key, plan_submit, resource_path
    from app.k8s.render import load_values, render_objects, render_schedule_objects

    values = {
        "nodePools": {"l4": {"gpusPerWorker": 1}},
        "schedule": {"enabled": True},
        "rayAuth": {"enabled": True, "existingSecret": existing_secret},
    }
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    loaded = load_values([path])
    (objects,) = render_objects(loaded, release="demo", namespace="ml").values()
    created_by_the_chart = {key(o) for o in objects if o["kind"] in CREATE_ONLY}
    for schedule_objects in (
        render_schedule_objects(loaded, release="demo", namespace="ml"),
        helm_render(values, release="demo", namespace="ml"),
    ):
        (role,) = of_kind(schedule_objects, "Role")
        rayjob = of_kind(objects, "RayJob")[0]["metadata"]["name"]
        assert _allows(role, "get", resource_path("RayJob", "ml", rayjob))
        for step in plan_submit(objects, rayjob_exists=False, existing=created_by_the_chart):
            where = resource_path(step.kind, "ml", step.name)
            needed = {"apply": ("patch", "create"), "create": ("create",), "keep": ()}
            for verb in ("get", *needed[step.action]):
                assert _allows(role, verb, where), (verb, step)
        secrets = [r for r in role["rules"] if "secrets" in r["resources"]]
        if existing_secret:
            assert secrets == []  # no Secret is rendered: nothing to check or keep
        else:
            assert secrets == [{"apiGroups": [""], "resources": ["secrets"],
                                "resourceNames": ["demo-ray-auth"], "verbs": ["get"]}]  # fmt: skip
        other = "/api/v1/namespaces/ml/secrets/someone-elses"
        assert not any(_allows(role, verb, other) for verb in ("get", "list", "create", "patch"))
        # Patch only on the chart's own ServiceAccount, none on claims (created, then kept):
        # it could annotate any account of the namespace with a cloud identity (a red-team pass).
        assert _allows(role, "patch", "/api/v1/namespaces/ml/serviceaccounts/demo-ray")
        for elsewhere in ("serviceaccounts/someone-elses", "persistentvolumeclaims/demo-shared"):
            assert not _allows(role, "patch", f"/api/v1/namespaces/ml/{elsewhere}"), elsewhere
