"""Gang schedulers (scheduler.*): what each renders, as KubeRay v1.7 documents it, in both engines.

KubeRay copies a RayJob's labels to its RayCluster, and the operator's batch-scheduler plugin
(--batch-scheduler=<name>) reads them there and stamps the pods; Kueue works on the RayJob
itself. So the chart's part is the RayJob's labels, `suspend` for Kueue, and the pods' own
priorityClassName for the schedulers that read it from the pod (YuniKorn, scheduler-plugins).
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from app.errors import ConfigError
from app.k8s import rules
from app.k8s.render import load_values, render_objects
from tests.contract.examples_support import unknown_fields
from tests.contract.k8s_support import (
    HelmFailed,
    crd_schema,
    crd_validator,
    helm_render,
    of_kind,
    pod_templates,
)

BASE: dict[str, Any] = {
    "nodePools": {"a100": {"gpusPerWorker": 8, "acceleratorType": "A100"}},
    "dataPool": {"enabled": True, "replicas": 2},
}
# The labels every RayJob carries whatever its scheduler.
OWN_LABELS = {
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/component",
    "trainctl.io/pool",
}


def _values(scheduler: dict[str, str], **more: Any) -> dict[str, Any]:
    values = copy.deepcopy(BASE)
    values["scheduler"] = scheduler
    values.update(more)
    return values


def _job(values: dict[str, Any], namespace: str = "ml") -> dict[str, Any]:
    (job,) = of_kind(helm_render(values, namespace=namespace), "RayJob")
    return job


def _python_job(values: dict[str, Any], tmp_path: Path, namespace: str = "ml") -> dict:
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    (objects,) = render_objects(load_values([path]), release="demo", namespace=namespace).values()
    (job,) = [o for o in objects if o["kind"] == "RayJob"]
    return job


def _scheduler_labels(job: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in job["metadata"]["labels"].items() if k not in OWN_LABELS}


def _priority_classes(job: dict[str, Any]) -> set[str | None]:
    return {t["spec"].get("priorityClassName") for _, t in pod_templates(job)}


def _app_id(job: dict[str, Any], namespace: str) -> str:
    return f"{job['metadata']['name']}-{hashlib.sha256(namespace.encode()).hexdigest()[:8]}"


CASES = {
    # name: (scheduler values, other values, RayJob labels (a callable of the job), pods' class)
    "default": ({"name": ""}, {}, lambda job: {}, None),
    "kueue": (
        {"name": "kueue", "queue": "team-a", "priorityClass": "prod"},
        {},
        lambda job: {
            "kueue.x-k8s.io/queue-name": "team-a",
            "kueue.x-k8s.io/priority-class": "prod",
        },
        None,
    ),
    "volcano": (
        {"name": "volcano", "queue": "ml-queue", "priorityClass": "high"},
        {},
        lambda job: {
            "ray.io/scheduler-name": "volcano",
            "volcano.sh/queue-name": "ml-queue",
            "ray.io/priority-class-name": "high",
        },
        None,  # KubeRay's Volcano plugin sets the pods' class from ray.io/priority-class-name
    ),
    "volcano-default-queue": (
        {"name": "volcano"},
        {},
        lambda job: {"ray.io/scheduler-name": "volcano"},
        None,
    ),
    "yunikorn": (
        {"name": "yunikorn", "queue": "root.ml.team_a", "priorityClass": "batch-high"},
        {},
        lambda job: {
            "ray.io/gang-scheduling-enabled": "true",
            "yunikorn.apache.org/app-id": _app_id(job, "ml"),
            "yunikorn.apache.org/queue": "root.ml.team_a",
        },
        "batch-high",
    ),
    "kai-scheduler": (
        {"name": "kai-scheduler", "queue": "team-a", "priorityClass": "train"},
        {"rayJob": {"submissionMode": "HTTPMode"}},
        lambda job: {"kai.scheduler/queue": "team-a", "priorityClassName": "train"},
        None,
    ),
    "scheduler-plugins": (
        {"name": "scheduler-plugins", "priorityClass": "batch-high"},
        {},
        lambda job: {"ray.io/gang-scheduling-enabled": "true"},
        "batch-high",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_each_scheduler_renders_what_kuberay_documents(case: str, tmp_path: Path) -> None:
    scheduler, more, labels, pod_class = CASES[case]
    values = _values(scheduler, **more)
    job = _job(values)
    assert _scheduler_labels(job) == labels(job)
    assert job["spec"].get("suspend", False) is (scheduler["name"] == "kueue")
    assert _priority_classes(job) == {pod_class}
    assert list(crd_validator("rayjobs").iter_errors(job)) == []
    assert unknown_fields(job, crd_schema("rayjobs"), "") == []
    assert rules.rayjob_problems(job) == []
    python = _python_job(values, tmp_path)
    python["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "Helm"
    assert python == job


def test_a_scheduler_changes_labels_and_pods_but_not_the_run_for_label_only_ones() -> None:
    """The content hash covers the RayJob spec: a queue label alone keeps the run's name (a
    re-queued run resumes), a pod priority class makes a new one."""
    plain = _job(_values({"name": ""}))["metadata"]["name"]
    volcano = _job(_values({"name": "volcano", "queue": "q"}))["metadata"]["name"]
    yunikorn = _job(_values({"name": "yunikorn", "priorityClass": "p"}))["metadata"]["name"]
    assert volcano == plain
    assert yunikorn != plain


def test_yunikorn_app_ids_differ_between_namespaces_and_fit_a_label() -> None:
    values = _values({"name": "yunikorn"})
    ids = {
        ns: _job(values, ns)["metadata"]["labels"]["yunikorn.apache.org/app-id"]
        for ns in ("a", "b")
    }
    assert ids["a"] != ids["b"]
    long = _values({"name": "yunikorn"}, nodePools={"p" * 24: {}})
    job = of_kind(helm_render(long, release="r" * 13, namespace="n" * 63), "RayJob")[0]
    assert len(job["metadata"]["labels"]["yunikorn.apache.org/app-id"]) <= 63


REFUSED = [
    # (scheduler, other values, words both engines use)
    ({"name": "kueue"}, {}, "queue"),
    ({"name": "kai-scheduler"}, {"rayJob": {"submissionMode": "HTTPMode"}}, "queue"),
    ({"name": "kai-scheduler", "queue": "q"}, {}, "scheduler.name=kai-scheduler needs rayJob"),
    ({"name": "scheduler-plugins", "queue": "q"}, {}, "scheduler-plugins has none"),
    ({"name": "", "queue": "q"}, {}, "scheduler.queue"),
    ({"name": "", "priorityClass": "p"}, {}, "a priority class needs a scheduler.name"),
    ({"name": "volcano", "queue": "Team_A"}, {}, "scheduler.queue"),  # not an object name
    ({"name": "slurm"}, {}, "scheduler.name"),
    (
        {"name": "kueue", "queue": "q"},
        {"rayJob": {"shutdownAfterJobFinishes": False, "ttlSecondsAfterFinished": 0}},
        "scheduler.name=kueue needs rayJob.shutdownAfterJobFinishes=true",
    ),
]


@pytest.mark.parametrize(("scheduler", "more", "says"), REFUSED, ids=[s for *_, s in REFUSED])
def test_what_cannot_work_is_refused_by_both_engines(
    scheduler: dict, more: dict, says: str, tmp_path: Path
) -> None:
    values = _values(scheduler, **more)
    with pytest.raises(HelmFailed) as helm:
        helm_render(values)
    with pytest.raises(ConfigError) as ours:
        _python_job(values, tmp_path)
    assert any(says in problem for problem in ours.value.problems), ours.value.problems
    if says.startswith("scheduler.name="):  # a chart rule: Helm fails with the same words
        (problem,) = ours.value.problems
        assert problem in str(helm.value)


def test_a_yunikorn_queue_is_a_label_value_not_an_object_name() -> None:
    job = _job(_values({"name": "yunikorn", "queue": "root.Team_A"}))
    assert job["metadata"]["labels"]["yunikorn.apache.org/queue"] == "root.Team_A"


def test_the_old_kueue_block_is_refused_with_where_it_went(tmp_path: Path) -> None:
    values = {**BASE, "kueue": {"enabled": True, "queueName": "q"}}
    with pytest.raises(HelmFailed):
        helm_render(values)
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError) as err:
        load_values([path])
    (problem,) = err.value.problems
    assert problem.startswith("kueue: ") and "scheduler: {name: kueue, queue:" in problem
