"""The RayJob status decisions, across every status and reason value of KubeRay v1.7.

The CRD declares the status fields without an enum, so the full value lists live in
app/k8s/status.py (taken from KubeRay v1.7.0's rayjob_types.go). This test still reads the CRD:
it fails if a status field disappears, or if any enum the CRD does declare for
jobDeploymentStatus / jobStatus / reason (today: the deletionRules conditions) holds a value
the decision logic has never classified.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.errors import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from app.k8s.status import (
    DEPLOYMENT_STATUSES,
    FAILURE_REASONS,
    JOB_STATUSES,
    TERMINAL_DEPLOYMENT,
    WAITING_DEPLOYMENT,
    JobView,
    judge,
    progress_line,
    status_table,
)
from tests.contract.k8s_support import crds_dir

STATUS_FIELDS = {
    "jobDeploymentStatus": set(DEPLOYMENT_STATUSES),
    "jobStatus": set(JOB_STATUSES),
    "reason": set(FAILURE_REASONS),
}


def _crd_path() -> Path:
    return crds_dir() / "ray.io_rayjobs.yaml"


def _walk(node: Any, key: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield key, node
        for child_key, child in node.items():
            yield from _walk(child, child_key)
    elif isinstance(node, list):
        for child in node:
            yield from _walk(child, key)


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    # The C loader: the CRD is ~1 MB of YAML and the pure-Python loader takes ~10 s.
    return yaml.load(_crd_path().read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def test_every_served_version_has_the_status_fields_we_read(crd: dict[str, Any]) -> None:
    for version in crd["spec"]["versions"]:
        if not version.get("served") or version["name"] != "v1":
            continue
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        for field, known in STATUS_FIELDS.items():
            assert field in status, f"CRD {version['name']} lost status.{field}"
            assert set(status[field].get("enum", [])) <= known, (
                f"status.{field} enum has values trainctl does not classify: "
                f"{set(status[field]['enum']) - known}"
            )


def test_every_enum_the_crd_declares_for_a_status_field_is_classified(
    crd: dict[str, Any],
) -> None:
    found: dict[str, set[str]] = {}
    for key, node in _walk(crd):
        if key in STATUS_FIELDS and "enum" in node:
            found.setdefault(key, set()).update(node["enum"])
    # v1.7.0 declares these in spec.deletionStrategy.deletionRules[].condition: if they vanish,
    # the check below has nothing to compare and must be revisited rather than pass silently.
    assert found.get("jobStatus") and found.get("jobDeploymentStatus"), found
    for field, values in found.items():
        unknown = values - STATUS_FIELDS[field]
        assert not unknown, f"CRD enum for {field} has unclassified values {unknown}"


def _view(deployment: str, job: str, reason: str = "", **extra: Any) -> JobView:
    status = {"jobDeploymentStatus": deployment, "jobStatus": job, "reason": reason}
    status.update(extra.pop("status", {}))
    return JobView.of(
        {
            "metadata": {"name": "demo-a100-1a2b3c4d", "creationTimestamp": "2030-01-01T00:00:00Z"},
            "spec": {"activeDeadlineSeconds": 3600, "preRunningDeadlineSeconds": 600, **extra},
            "status": status,
        }
    )


ALL_COMBINATIONS = list(
    itertools.product(DEPLOYMENT_STATUSES, JOB_STATUSES, ["", *FAILURE_REASONS])
)


@pytest.mark.parametrize(("deployment", "job", "reason"), ALL_COMBINATIONS)
def test_every_status_combination_has_one_clear_decision(
    deployment: str, job: str, reason: str
) -> None:
    view = _view(deployment, job, reason, status={"message": "boom happened"})
    verdict = judge(view)

    assert verdict.terminal == (deployment in TERMINAL_DEPLOYMENT)
    if deployment == "Complete" and job == "SUCCEEDED":
        assert verdict.exit_code == EXIT_OK and verdict.result == "succeeded"
        assert verdict.problems == ()
    elif deployment == "ValidationFailed":
        assert verdict.exit_code == EXIT_INVALID and verdict.result == "invalid"
    elif deployment in TERMINAL_DEPLOYMENT:
        assert verdict.exit_code == EXIT_FAILED and verdict.result == "failed"
    else:  # not over: a word for where it waits, `running` only with a job on a Ray cluster
        expected = {"": "pending", "Initializing": "starting", "Waiting": "starting",
                    "Running": "running", "Suspending": "suspended", "Suspended": "queued",
                    "Retrying": "retrying"}  # fmt: skip
        assert verdict.exit_code == EXIT_OK and verdict.result == expected[deployment]

    if verdict.exit_code != EXIT_OK:
        text = "\n".join(verdict.problems)
        assert f"jobDeploymentStatus={deployment}" in text
        assert f"reason={reason or 'none'}" in text
        assert "message: boom happened" in text

    line = progress_line(view, 65)
    assert "\n" not in line
    assert line.startswith("[  1m05s] ")
    assert (deployment or "New") in line and f"job {job or '-'}" in line


@pytest.mark.parametrize("deployment", sorted(WAITING_DEPLOYMENT))
def test_waiting_states_each_explain_themselves(deployment: str) -> None:
    line = progress_line(_view(deployment, ""), 3)
    assert WAITING_DEPLOYMENT[deployment] in line


def test_running_shows_what_the_ray_job_is_doing() -> None:
    assert progress_line(_view("Running", "RUNNING"), 0).endswith(": training")
    assert "driver is starting" in progress_line(_view("Running", "PENDING"), 0)


def test_deadline_failures_name_the_deadline_that_was_hit() -> None:
    active = judge(_view("Failed", "RUNNING", "DeadlineExceeded"))
    assert "activeDeadlineSeconds (3600s)" in active.problems[0]
    pre = judge(_view("Failed", "", "PreRunningDeadlineExceeded"))
    assert "preRunningDeadlineSeconds (600s)" in pre.problems[0]


def test_app_failure_points_at_the_logs_command() -> None:
    verdict = judge(_view("Failed", "FAILED", "AppFailed"))
    assert "trainctl logs demo-a100-1a2b3c4d" in verdict.problems[0]


def test_retries_are_counted_in_progress_and_failure() -> None:
    view = _view("Retrying", "FAILED", backoffLimit=2, status={"failed": 1})
    assert "(attempt 2 of 3)" in progress_line(view, 0)
    final = judge(_view("Failed", "FAILED", "AppFailed", backoffLimit=2, status={"failed": 3}))
    assert "failed attempts: 3 (spec.backoffLimit=2)" in final.problems


def test_complete_without_success_is_a_failure_that_says_why() -> None:
    stopped = judge(_view("Complete", "STOPPED"))
    assert stopped.exit_code == EXIT_FAILED
    assert "stopped before it finished" in stopped.problems[0]


def test_a_status_from_a_newer_kuberay_keeps_waiting_instead_of_guessing() -> None:
    view = _view("Hibernating", "RUNNING")
    assert judge(view) == judge(view) and not judge(view).terminal
    assert judge(view).result == "unknown"
    assert "not known to this trainctl" in progress_line(view, 0)


def test_an_unknown_reason_is_reported_verbatim() -> None:
    verdict = judge(_view("Failed", "", "CosmicRays"))
    assert "reason CosmicRays (not known to this trainctl)" in verdict.problems[0]


def test_progress_key_changes_only_when_something_visible_changes() -> None:
    first = _view("Running", "RUNNING")
    again = _view("Running", "RUNNING", status={"message": "still going"})
    assert first.progress_key == again.progress_key
    assert first.progress_key != _view("Running", "SUCCEEDED").progress_key


def test_an_empty_object_is_new_and_not_terminal() -> None:
    view = JobView.of({})
    assert view.deployment == "" and not judge(view).terminal


def test_status_table_lists_newest_first_with_pool_and_result() -> None:
    def rayjob(name: str, created: str, status: dict[str, Any]) -> dict[str, Any]:
        return {
            "metadata": {
                "name": name,
                "creationTimestamp": created,
                "labels": {"example.io/pool": name.split("-")[1]},
            },
            "status": status,
        }

    table = status_table(
        [
            rayjob("r-a100-00000001", "2030-01-01T00:00:00Z", {}),
            rayjob(
                "r-l4-00000002",
                "2030-01-01T01:00:00Z",
                {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"},
            ),
        ],
        now=datetime(2030, 1, 1, 2, 0, tzinfo=UTC),
        pool_label="example.io/pool",
    )
    lines = table.splitlines()
    assert lines[0].split() == [
        "NAME",
        "POOL",
        "RESULT",
        "DEPLOYMENT",
        "JOB",
        "REASON",
        "FAILED",
        "AGE",
    ]
    assert " ".join(lines[1].split()) == "r-l4-00000002 l4 succeeded Complete SUCCEEDED - 0 1h00m"
    assert " ".join(lines[2].split()) == "r-a100-00000001 a100 pending New - - 0 2h00m"


def test_status_table_says_so_when_empty() -> None:
    assert "No RayJobs" in status_table([], now=datetime.now(UTC), pool_label="x")


def test_only_the_pools_rayjobs_still_going_are_beside_a_new_one() -> None:
    from app.k8s.status import going_beside

    pool = {"app.kubernetes.io/instance": "train", "trainctl.io/pool": "l4"}

    def rayjob(name: str, deployment: str | None, **labels: str) -> dict[str, Any]:
        status = {"jobDeploymentStatus": deployment} if deployment is not None else {}
        return {"metadata": {"name": name, "labels": {**pool, **labels}}, "status": status}

    rayjobs = [
        rayjob("train-l4-new", None),  # the one about to be created: never its own rival
        rayjob("train-l4-queued", "Suspended"),
        rayjob("train-l4-fresh", None),
        rayjob("train-l4-done", "Complete"),
        rayjob("train-l4-failed", "Failed"),
        rayjob("train-a100-run", "Running", **{"trainctl.io/pool": "a100"}),
        rayjob("other-l4-run", "Running", **{"app.kubernetes.io/instance": "other"}),
        {"metadata": {"name": "bare"}},  # no labels, no status
    ]
    assert going_beside(rayjobs, "train-l4-new", pool) == ["train-l4-fresh", "train-l4-queued"]
