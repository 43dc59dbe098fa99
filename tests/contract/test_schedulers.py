"""Gang schedulers (scheduler.*): what each renders, as KubeRay v1.7 documents it, in both engines.

KubeRay copies a RayJob's labels to its RayCluster, and the operator's batch-scheduler plugin
(--batch-scheduler=<name>) reads them there and stamps the pods; Kueue works on the RayJob
itself. So the chart's part is the RayJob's labels, `suspend` for Kueue, and the pods' own
priorityClassName for the schedulers that read it from the pod (YuniKorn, scheduler-plugins).
scheduler-plugins is the exception: KubeRay v1.7's plugin takes RayClusters only, so the chart
renders the RayJob's PodGroup and points the gang's pods at it itself.
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.errors import ConfigError
from app.k8s import deprecated, rules
from app.k8s.plan import plan_submit, resource_path
from app.k8s.render import load_values, render_objects, render_schedule_objects
from tests.contract.examples_support import unknown_fields
from tests.contract.k8s_support import (
    HelmFailed,
    crd_schema,
    crd_validator,
    helm_notes,
    helm_render,
    of_kind,
    pod_templates,
    podgroup_validator,
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
    "helm.sh/chart",
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
    # Kubernetes' own scheduler reads the pod's class: a low one for spot pools, which it was
    # refused without a gang scheduler (found by a red-team pass).
    "default-with-a-priority-class": (
        {"name": "", "priorityClass": "spot-low"},
        {},
        lambda job: {},
        "spot-low",
    ),
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
    "scheduler-plugins": (  # no label: the chart renders the PodGroup (tests below)
        {"name": "scheduler-plugins", "priorityClass": "batch-high"},
        {},
        lambda job: {},
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
    # Created suspended for Kueue, which admits it by flipping spec.suspend: Flux's drift
    # correction wrote true back at each interval (a red-team pass). Created once, never
    # updated by Flux (a changed config is another name).
    flux = job["metadata"]["annotations"].get("kustomize.toolkit.fluxcd.io/ssa")
    assert flux == ("IfNotPresent" if scheduler["name"] == "kueue" else None)
    assert _priority_classes(job) == {pod_class}
    assert list(crd_validator("rayjobs").iter_errors(job)) == []
    assert unknown_fields(job, crd_schema("rayjobs"), "") == []
    assert rules.rayjob_problems(job) == []
    python = _python_job(values, tmp_path)
    python["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "Helm"
    assert python == job


def test_a_scheduler_changes_labels_and_pods_but_not_the_run_for_label_only_ones(
    tmp_path: Path,
) -> None:
    """The content hash covers the RayJob spec: a queue label alone keeps the run's name (a
    re-queued run resumes), a pod priority class makes a new one. Kueue's queue and priority
    class make a new one too: Kueue refuses a changed queue label on a RayJob that is not
    suspended, so every sync after a queue change failed (a red-team pass)."""
    plain = _job(_values({"name": ""}))["metadata"]["name"]
    volcano = _job(_values({"name": "volcano", "queue": "q"}))["metadata"]["name"]
    yunikorn = _job(_values({"name": "yunikorn", "priorityClass": "p"}))["metadata"]["name"]
    assert volcano == plain
    assert yunikorn != plain
    names = set()
    for queue, priority in (("a", ""), ("b", ""), ("a", "high")):
        values = _values({"name": "kueue", "queue": queue, "priorityClass": priority})
        name = _job(values)["metadata"]["name"]
        assert _python_job(values, tmp_path)["metadata"]["name"] == name  # the engines agree
        names.add(name)
    assert len(names) == 3 and plain not in names, names


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
    ({"name": "volcano", "queue": "Team_A"}, {}, "scheduler.queue"),  # not an object name
    ({"name": "slurm"}, {}, "scheduler.name"),
    (
        {"name": "kueue", "queue": "q"},
        {"rayJob": {"shutdownAfterJobFinishes": False, "ttlSecondsAfterFinished": 0}},
        "scheduler.name=kueue needs rayJob.shutdownAfterJobFinishes=true",
    ),
    # A scheduler's label given in `labels:` bypassed the checks above (Kueue with a RayJob
    # kept after it finishes), and beside the chart's own Helm wrote the key twice in one
    # mapping (found by a red-team pass).
    (
        {"name": ""},
        {
            "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
            "rayJob": {"shutdownAfterJobFinishes": False, "ttlSecondsAfterFinished": 0},
        },
        "a label a scheduler reads",
    ),
    ({"name": "kueue", "queue": "q"}, {"labels": {"kueue.x-k8s.io/queue-name": "o"}}, "labels"),
    ({"name": ""}, {"labels": {"ray.io/scheduler-name": "volcano"}}, "a label a scheduler reads"),
    ({"name": ""}, {"labels": {"volcano.sh/queue-name": "q"}}, "a label a scheduler reads"),
    ({"name": ""}, {"labels": {"yunikorn.apache.org/queue": "q"}}, "a label a scheduler reads"),
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


def _python_objects(values: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    (objects,) = render_objects(load_values([path]), release="demo", namespace="ml").values()
    for obj in objects:
        obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "Helm"
    return objects


GANG_POOL = {"a100": {"gpusPerWorker": 8, "replicas": 3, "acceleratorType": "A100"}}


def test_scheduler_plugins_gets_its_podgroup_from_the_chart(tmp_path: Path) -> None:
    """KubeRay v1.7's scheduler-plugins plugin answers a RayJob with "currently only RayCluster
    is supported" (the RayJob stays Initializing), so the chart renders the gang itself: one
    PodGroup per run, named as the run, and the head and every worker labelled with it and
    scheduled by the coscheduling scheduler. The submitter pod is not in the gang."""
    values = _values({"name": "scheduler-plugins", "priorityClass": "p"}, nodePools=GANG_POOL)
    objects = helm_render(values)
    (job,) = of_kind(objects, "RayJob")
    (group,) = of_kind(objects, "PodGroup")
    name = job["metadata"]["name"]
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["metadata"]["name"] == name
    # The head, 3 GPU workers, BASE's 2 data workers; the GPUs the whole gang asks for.
    assert group["spec"] == {
        "minMember": 6,
        "minResources": {"nvidia.com/gpu": "24"},
        "scheduleTimeoutSeconds": 600,
    }
    # Kept with its run: a pod of the run recreated after an upgrade still finds its gang.
    assert group["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    validator, schema = podgroup_validator()
    assert list(validator.iter_errors(group)) == []
    assert unknown_fields(group, schema, "") == []
    templates = dict(pod_templates(job))
    submitter = templates.pop(f"RayJob/{name} submitter")
    assert sorted(templates) == sorted(
        f"RayJob/{name} {g}" for g in ("head", "worker group a100", "worker group data")
    )
    for where, template in templates.items():
        assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == name, where
        assert template["spec"]["schedulerName"] == "scheduler-plugins-scheduler", where
    assert "scheduling.x-k8s.io/pod-group" not in submitter["metadata"]["labels"]
    assert "schedulerName" not in submitter["spec"]
    assert sum(g["replicas"] for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]) + 1 == 6
    assert list(crd_validator("rayjobs").iter_errors(job)) == []
    python = {o["kind"]: o for o in _python_objects(values, tmp_path)}
    assert python["PodGroup"] == group
    assert python["RayJob"] == job


def test_the_podgroup_checks_can_fail() -> None:
    validator, schema = podgroup_validator()
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {}}
    assert list(validator.iter_errors({**group, "spec": {"minMember": 0}}))
    assert list(validator.iter_errors({**group, "spec": {"minResources": {"cpu": "lots"}}}))
    assert unknown_fields({**group, "spec": {"minAvailable": 2}}, schema, "") == [
        ".spec.minAvailable"
    ]


def test_a_cpu_gang_has_no_min_resources_and_takes_the_schedulers_name(tmp_path: Path) -> None:
    """Single-scheduler installs name theirs default-scheduler; without GPUs the gang has no
    total the chart can add up exactly (CPU and memory quantities come in any unit)."""
    plugins = {"schedulerName": "default-scheduler", "scheduleTimeoutSeconds": 30}
    values = {
        "nodePools": {"cpu": {"gpusPerWorker": 0, "tolerations": [], "replicas": 2}},
        "scheduler": {"name": "scheduler-plugins", "schedulerPlugins": plugins},
    }
    objects = helm_render(values)
    (job,) = of_kind(objects, "RayJob")
    (group,) = of_kind(objects, "PodGroup")
    assert group["spec"] == {"minMember": 3, "scheduleTimeoutSeconds": 30}
    names = {t["spec"].get("schedulerName") for w, t in pod_templates(job) if "submitter" not in w}
    assert names == {"default-scheduler"}
    assert list(podgroup_validator()[0].iter_errors(group)) == []
    python = {o["kind"]: o for o in _python_objects(values, tmp_path)}
    assert python["PodGroup"] == group


def test_submit_and_the_schedule_create_the_podgroup_before_the_rayjob(tmp_path: Path) -> None:
    values = _values({"name": "scheduler-plugins"}, nodePools=GANG_POOL, schedule={"enabled": True})
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    loaded = load_values([path])
    (objects,) = render_objects(loaded, release="demo", namespace="ml").values()
    steps = [
        (step.action, step.kind) for step in plan_submit(objects, rayjob_exists=False, existing=())
    ]
    assert steps.index(("apply", "PodGroup")) < steps.index(("create", "RayJob"))
    name = of_kind(objects, "RayJob")[0]["metadata"]["name"]
    assert resource_path("PodGroup", "ml", name) == (
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ml/podgroups/{name}"
    )
    # The scheduled retrain runs that submit under its Role, which must allow the PodGroup.
    for schedule_objects in (
        render_schedule_objects(loaded, release="demo", namespace="ml"),
        helm_render(values),
    ):
        (role,) = of_kind(schedule_objects, "Role")
        rule = {"apiGroups": ["scheduling.x-k8s.io"], "resources": ["podgroups"]}
        assert any(rule.items() <= r.items() and "create" in r["verbs"] for r in role["rules"])
    (role,) = of_kind(helm_render({**values, "scheduler": {"name": "volcano"}}), "Role")
    assert not any("podgroups" in r["resources"] for r in role["rules"])


OLD_KUEUE = {"enabled": True, "queueName": "team-a", "priorityClass": "prod"}
NEW_KUEUE = {"name": "kueue", "queue": "team-a", "priorityClass": "prod"}


def _trainctl_render(values: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    cmd = [sys.executable, "-m", "app", "render", "-f", str(path), "--release", "demo", "-n", "ml"]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def test_the_old_kueue_block_renders_the_same_rayjobs_and_says_where_it_moved(
    tmp_path: Path,
) -> None:
    """Values files written for the chart before scheduler.* keep working for one release:
    the same RayJob (labels, suspend, so the same name: an upgrade restarts no run), and a
    DEPRECATION line, the same in Helm's NOTES and on trainctl render's stderr."""
    old = {**BASE, "kueue": OLD_KUEUE}
    expected = _job(_values(NEW_KUEUE))
    assert _job(old) == expected
    python = _python_job(old, tmp_path)
    python["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "Helm"
    assert python == expected
    (note,) = deprecated.notes(old)
    assert "reads kueue.enabled=true as scheduler.name=kueue" in note
    assert deprecated.MOVED in note
    assert note in helm_notes(old)
    assert "Gang scheduler: Kueue, queue team-a" in helm_notes(old)
    proc = _trainctl_render(old, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"trainctl: {note}" in proc.stderr.splitlines()
    assert "kueue.x-k8s.io/queue-name: team-a" in proc.stdout
    # Without the block, no note at all.
    assert deprecated.notes(BASE) == []
    assert "DEPRECATION" not in helm_notes(BASE)
    assert "DEPRECATION" not in _trainctl_render(BASE, tmp_path).stderr


def test_an_old_disabled_kueue_block_is_ignored_with_the_note(tmp_path: Path) -> None:
    """The old chart's own defaults, copied into many values files."""
    old = {**BASE, "kueue": {"enabled": False, "queueName": "", "priorityClass": ""}}
    assert _job(old) == _job(BASE)
    (note,) = deprecated.notes(old)
    assert "ignores the block (kueue.enabled is not true)" in note
    assert note in helm_notes(old)
    assert f"trainctl: {note}" in _trainctl_render(old, tmp_path).stderr.splitlines()


def test_the_old_kueue_block_and_a_scheduler_together_are_refused_alike(tmp_path: Path) -> None:
    values = {**BASE, "kueue": OLD_KUEUE, "scheduler": {"name": "volcano"}}
    with pytest.raises(HelmFailed) as helm:
        helm_render(values)
    with pytest.raises(ConfigError) as ours:
        _python_job(values, tmp_path)
    (problem,) = ours.value.problems
    assert problem.startswith("kueue.enabled=true and scheduler.name=volcano both choose")
    assert deprecated.MOVED in problem
    assert problem in str(helm.value)


def test_an_old_kueue_block_without_a_queue_is_refused_naming_it(tmp_path: Path) -> None:
    values = {**BASE, "kueue": {"enabled": True}}
    with pytest.raises(HelmFailed, match=r"/kueue.*queueName"):
        helm_render(values)
    with pytest.raises(ConfigError) as ours:
        _python_job(values, tmp_path)
    assert any(p.startswith("kueue: ") and "queueName" in p for p in ours.value.problems)
