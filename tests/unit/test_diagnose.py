"""Why a RayJob is stuck: the decision, on pod, event, claim and Workload objects recorded as
the API server returns them (tests/unit/recorded/)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.k8s.diagnose import diagnose, event_lines, kueue_line, needs_look, problem_pods

RECORDED = Path(__file__).parent / "recorded"
NOW = datetime(2030, 1, 1, 10, 5, 0, tzinfo=UTC)


def _load(name: str) -> Any:
    return json.loads((RECORDED / name).read_text())


def _rayjob(queue: str = "", **status: Any) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "metadata": {"name": "demo-a100-1a2b3c4d", "uid": "uid-rayjob-1", "labels": labels},
        "status": status,
    }


def test_unschedulable_gpu_workers_and_image_pull_with_last_warnings() -> None:
    pods = _load("stuck_pods.json")["items"]
    events = _load("stuck_events.json")["items"]
    lines = diagnose(_rayjob(jobDeploymentStatus="Initializing"), pods=pods, events=events, now=NOW)
    head, workers, *warnings = lines
    assert head.startswith(
        "head pod demo-a100-1a2b3c4d-raycluster-x7k2p-head-9wqzc: Pending, container ray-head "
        'ImagePullBackOff: Back-off pulling image "ghcr.io/example/trainctl:0.4.0"'
    )
    assert "check image.repository/tag and imagePullSecrets" in head
    # Two identical Pending workers: one line, counted; the running worker is not mentioned.
    assert workers.startswith("2 worker pods: Pending, Unschedulable: 0/3 nodes are available:")
    assert "2 Insufficient nvidia.com/gpu" in workers
    assert "no node has a free nvidia.com/gpu" in workers
    assert not any("h2j4k" in line for line in lines)
    # Newest Warning first (series.lastObservedTime of an events.k8s.io event counts), Normal
    # events left out, at most three, the oldest pushed out.
    assert [line.split(" on ")[0] for line in warnings] == [
        "warning FailedScheduling",
        "warning BackOff",
        "warning Failed",
    ]
    assert warnings[0].startswith(
        "warning FailedScheduling on Pod demo-a100-1a2b3c4d-raycluster-x7k2p-gpu-workers-worker-"
        "4b8sd, 55s ago, 4x: 0/3 nodes"
    )
    assert ", 59s ago, 14x: Back-off pulling image" in warnings[1]
    assert "not found" in warnings[2] and ", 5x:" in warnings[2]
    assert not any("Pulling image" in line or "old warning" in line for line in lines)


def test_unbound_claim() -> None:
    recorded = _load("unbound_claim.json")
    lines = diagnose(
        _rayjob(jobDeploymentStatus="Initializing"),
        pods=[recorded["pod"]],
        claims=[recorded["claim"]],
        events=[recorded["event"]],
        now=NOW,
    )
    assert lines[0].startswith(
        "head pod demo-cpu-a-99aa00bb-raycluster-p2k8d-head-xx9kq: Pending, Unschedulable: 0/2 "
        "nodes are available: pod has unbound immediate PersistentVolumeClaims."
    )
    assert "a volume claim is not bound" in lines[0]
    assert lines[1] == (
        "PersistentVolumeClaim trainctl-runs is Pending, not bound (storageClassName nfs-client): "
        "no volume provisioned for it yet"
    )
    assert lines[2] == (
        "warning ProvisioningFailed on PersistentVolumeClaim trainctl-runs, 2m00s ago, 21x: "
        'storageclass.storage.k8s.io "nfs-client" not found'
    )


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (
            "pending",
            "Kueue: not admitted (Pending) in queue team-a: couldn't assign flavors to pod set "
            "gpu-workers: insufficient unused quota for nvidia.com/gpu in flavor a100, "
            "6 more needed",
        ),
        ("admitted", "Kueue: admitted by ClusterQueue gpu-cluster-queue"),
        (
            "preempted",
            "Kueue: Workload rayjob-demo-a100-1a2b3c4d-5e0b1 evicted (Preempted): Preempted to "
            "accommodate a workload (UID: 9f1d) due to prioritization in the ClusterQueue",
        ),
        (
            "no_local_queue",
            "Kueue: not admitted (Inadmissible) in queue team-a: LocalQueue team-a doesn't exist",
        ),
    ],
)
def test_kueue_admission_state(state: str, expected: str) -> None:
    workload = _load("kueue_workloads.json")[state]
    rayjob = _rayjob("team-a", jobDeploymentStatus="Suspended")
    assert kueue_line(rayjob, [workload]) == expected
    assert diagnose(rayjob, workloads=[workload])[0] == expected


def test_kueue_without_a_workload_and_without_kueue() -> None:
    line = kueue_line(_rayjob("team-a"), [])
    assert line is not None and "no Workload for this RayJob yet (queue team-a)" in line
    assert kueue_line(_rayjob(), []) is None
    assert diagnose(_rayjob(jobDeploymentStatus="Initializing")) == ()


def test_running_and_finished_jobs_are_not_looked_at() -> None:
    assert needs_look(_rayjob(jobDeploymentStatus="Initializing"))
    assert needs_look(_rayjob(jobDeploymentStatus="Running", jobStatus="PENDING"))
    assert needs_look(_rayjob(jobDeploymentStatus="Suspended"))
    assert not needs_look(_rayjob(jobDeploymentStatus="Running", jobStatus="RUNNING"))
    for final in ("Complete", "Failed", "ValidationFailed"):
        assert not needs_look(_rayjob(jobDeploymentStatus=final))


def test_problem_pods_are_the_stuck_ones_and_few() -> None:
    pods = _load("stuck_pods.json")["items"]
    names = [p["metadata"]["name"] for p in problem_pods(pods)]
    assert len(names) == 3 and not any(name.endswith("h2j4k") for name in names)
    assert problem_pods(pods * 5)[:3] == problem_pods(pods)[:3]
    assert len(problem_pods(pods * 5)) == 3


def test_events_without_times_and_counts_still_read() -> None:
    event = {
        "type": "Warning",
        "reason": "FailedCreate",
        "message": "quota exceeded",
        "involvedObject": {"kind": "RayJob", "name": "x"},
    }
    assert event_lines([event], NOW) == ["warning FailedCreate on RayJob x: quota exceeded"]
