"""Prometheus values: the metrics port opens to the named scraper only, and the PodMonitor
selects every Ray pod of the release by labels and a port those pods really carry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.errors import ConfigError
from app.k8s.render import load_values, render_objects
from tests.contract.k8s_support import (
    VALUES_DIR,
    HelmFailed,
    helm_render,
    load_yaml,
    of_kind,
    pod_templates,
)

VALUES = VALUES_DIR / "metrics-podmonitor.yaml"


def _matches(selector: dict, labels: dict) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for term in selector.get("matchExpressions") or []:
        assert term["operator"] == "In", term  # the only operator the chart uses
        if labels.get(term["key"]) not in term["values"]:
            return False
    return True


def test_podmonitor_scrapes_every_ray_pod_on_its_metrics_port() -> None:
    objects = helm_render(load_yaml(VALUES), release="demo", namespace="ml")
    (monitor,) = of_kind(objects, "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    spec = monitor["spec"]
    assert spec["podMetricsEndpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s"}
    ]
    ray_pods = [
        (where, template)
        for job in of_kind(objects, "RayJob")
        for where, template in pod_templates(job)
        if "submitter" not in where.lower()
    ]
    assert len(ray_pods) >= 2  # a head and a worker group
    for where, template in ray_pods:
        labels = template["metadata"]["labels"]
        assert _matches(spec["selector"], labels), where
        assert all(label in labels for label in spec["podTargetLabels"]), where
        ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
        assert ports["metrics"] == 8080, where
    # The submitter pods run no Ray node: not selected.
    for job in of_kind(objects, "RayJob"):
        submitter = job["spec"].get("submitterPodTemplate")
        if submitter:
            assert not _matches(spec["selector"], submitter["metadata"]["labels"])
    # The scheduled submitter may apply the PodMonitor it renders.
    (role,) = of_kind(objects, "Role")
    assert any("podmonitors" in rule["resources"] for rule in role["rules"])


def test_metrics_off_by_default_opens_nothing_and_renders_no_podmonitor() -> None:
    objects = helm_render({}, release="demo", namespace="ml")
    assert of_kind(objects, "PodMonitor") == []
    for policy in of_kind(objects, "NetworkPolicy"):
        assert all(
            port["port"] != 8080
            for rule in policy["spec"]["ingress"]
            for port in rule.get("ports", [])
        )


@pytest.mark.parametrize("empty", ["namespaceSelector", "podSelector"])
@pytest.mark.parametrize("how", ["null", "no labels"])
def test_an_empty_scraper_selector_is_refused_by_both_engines(
    empty: str, how: str, tmp_path: Path
) -> None:
    # Values coalesce over the defaults, so `{}` keeps the default selector; null drops it.
    values = load_yaml(VALUES)
    cleared = {"matchLabels": None, "matchExpressions": None}
    values["metrics"]["scraper"][empty] = None if how == "null" else cleared
    with pytest.raises(HelmFailed, match=empty):
        helm_render(values, release="demo", namespace="ml")
    path = tmp_path / "values.yaml"
    path.write_text(json.dumps(values))  # JSON: the dict's exact meaning in any YAML reader
    with pytest.raises(ConfigError, match=empty):
        render_objects(load_values([path]), release="demo", namespace="ml")


def test_tracker_settings_reach_every_ray_container_credentials_only_from_secrets() -> None:
    objects = helm_render(load_yaml(VALUES), release="demo", namespace="ml")
    (config,) = [
        c
        for c in of_kind(objects, "ConfigMap")
        if c["metadata"]["labels"]["app.kubernetes.io/component"] == "settings"
    ]
    assert config["data"]["MLFLOW_TRACKING_URI"] == "http://mlflow.mlops.svc:5000"
    assert config["data"]["TRAIN_TENSORBOARD"] == "true"
    assert not any("KEY" in k or "TOKEN" in k for k in config["data"])
    (job,) = of_kind(objects, "RayJob")
    for where, template in pod_templates(job):
        if "submitter" in where.lower():
            continue
        env = {e["name"]: e for e in template["spec"]["containers"][0].get("env", [])}
        for name, secret in (("WANDB_API_KEY", "wandb"), ("MLFLOW_TRACKING_TOKEN", "mlflow-auth")):
            assert set(env[name]) == {"name", "valueFrom"}, where  # never an inline value
            assert env[name]["valueFrom"]["secretKeyRef"]["name"] == secret
    options = job["spec"]["rayClusterSpec"]["historyServerOptions"]
    assert options["collectorOptions"]["image"] == "quay.io/kuberay/collector:v1.7.0"


def test_a_tracker_credential_in_plain_env_is_refused(tmp_path: Path) -> None:
    values = load_yaml(VALUES)
    values["env"]["WANDB_API_KEY"] = "abc123"
    with pytest.raises(HelmFailed):
        helm_render(values, release="demo", namespace="ml")
    path = tmp_path / "values.yaml"
    path.write_text(json.dumps(values))  # JSON: the dict's exact meaning in any YAML reader
    with pytest.raises(ConfigError, match="WANDB_API_KEY"):
        load_values([path])
