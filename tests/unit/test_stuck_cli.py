"""`trainctl submit --wait` and `trainctl status` say why a RayJob is stuck, end to end through
the official client against the fake API server, with recorded pods, events and a Workload."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from app.errors import EXIT_FAILED, EXIT_OK
from tests.unit.fake_kube_api import FakeKubeApi
from tests.unit.kube_cli_support import api, rayjob_name, submit, trainctl, values_file

__all__ = ["api", "rayjob_name", "values_file"]  # fixtures used by name below

RECORDED = Path(__file__).parent / "recorded"
CLUSTER = "demo-a100-1a2b3c4d-raycluster-x7k2p"


def _recorded(name: str) -> Any:
    return json.loads((RECORDED / name).read_text())


def _add_stuck_cluster(api: FakeKubeApi, cluster: str) -> None:
    for pod in copy.deepcopy(_recorded("stuck_pods.json")["items"]):
        pod["metadata"]["labels"]["ray.io/cluster"] = cluster
        api.add("pods", "ml", pod)
    for event in _recorded("stuck_events.json")["items"]:
        api.add("events", "ml", event)


def test_wait_prints_why_and_keeps_it_in_the_failure(
    api: FakeKubeApi, values_file: Path, rayjob_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    initializing = {"jobDeploymentStatus": "Initializing", "rayClusterName": CLUSTER}
    failed = {
        "jobDeploymentStatus": "Failed",
        "reason": "PreRunningDeadlineExceeded",
        "rayClusterName": CLUSTER,
    }
    api.rayjob_statuses = [initializing, initializing, failed]
    _add_stuck_cluster(api, CLUSTER)
    code, out, err = submit(capsys, values_file, "--wait")
    assert code == EXIT_FAILED
    why = [line for line in out.splitlines() if line.startswith("  why: ")]
    assert why[0].startswith("  why: head pod demo-a100-1a2b3c4d-raycluster-x7k2p-head-9wqzc: ")
    assert "ImagePullBackOff" in why[0]
    assert why[1].startswith("  why: 2 worker pods: Pending, Unschedulable:")
    assert any("warning FailedScheduling on Pod" in line for line in why)
    # Printed once, not once per poll: the second Initializing poll found the same.
    assert len(why) == len(set(why))
    assert "PreRunningDeadlineExceeded" in err
    assert "last seen: 2 worker pods: Pending" in err and "Insufficient nvidia.com/gpu" in err
    # Events were asked for per object, by involvedObject, not the namespace's whole list.
    event_queries = [q for m, p, q, _ in api.requests if p.endswith("/events")]
    assert event_queries and all(
        "involvedObject.name=" in q["fieldSelector"][0] for q in event_queries
    )


def test_status_shows_kueue_and_pods_below_the_table(
    api: FakeKubeApi, values_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values_file.write_text(values_file.read_text() + "scheduler:\n  name: kueue\n  queue: team-a\n")
    api.rayjob_statuses = [{"jobDeploymentStatus": "Suspended"}]
    submit(capsys, values_file)
    rayjob = next(o for (p, _, _), o in api.objects.items() if p == "rayjobs")
    workload = _recorded("kueue_workloads.json")["pending"]
    workload["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] = rayjob["metadata"]["uid"]
    api.add("workloads", "ml", workload)
    api.add("workloads", "ml", {"metadata": {"name": "another-jobs", "labels": {}}})
    code, out, _ = trainctl(capsys, "status")
    assert code == EXIT_OK
    assert (
        f"\n{rayjob['metadata']['name']}:\n  Kueue: not admitted (Pending) in queue team-a: " in out
    )
    assert "insufficient unused quota for nvidia.com/gpu in flavor a100, 6 more needed" in out


def test_status_reports_what_it_may_not_read_and_still_shows_the_table(
    api: FakeKubeApi, values_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.rayjob_statuses = [{"jobDeploymentStatus": "Initializing", "rayClusterName": CLUSTER}]
    submit(capsys, values_file)
    _add_stuck_cluster(api, CLUSTER)
    api.forbidden.add(("GET", "events"))
    code, out, _ = trainctl(capsys, "status")
    assert code == EXIT_OK and out.startswith("NAME")
    assert "2 worker pods: Pending, Unschedulable" in out
    assert out.count("could not read events:") == 1 and "forbidden" in out.lower()


def test_status_names_an_unbound_claim_and_its_provisioning_error(
    api: FakeKubeApi, values_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.rayjob_statuses = [{"jobDeploymentStatus": "Initializing", "rayClusterName": CLUSTER}]
    submit(capsys, values_file)
    recorded = _recorded("unbound_claim.json")
    pod = recorded["pod"]
    pod["metadata"]["labels"]["ray.io/cluster"] = CLUSTER
    api.add("pods", "ml", pod)
    api.add("persistentvolumeclaims", "ml", recorded["claim"])  # replaces the one submit made
    api.add("events", "ml", recorded["event"])
    code, out, _ = trainctl(capsys, "status")
    assert code == EXIT_OK
    assert "pod has unbound immediate PersistentVolumeClaims" in out
    assert (
        "PersistentVolumeClaim trainctl-runs is Pending, not bound (storageClassName nfs-client)"
        in out
    )
    assert "warning ProvisioningFailed on PersistentVolumeClaim trainctl-runs" in out
    assert 'storageclass.storage.k8s.io "nfs-client" not found' in out
