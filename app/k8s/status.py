"""What a RayJob's status means: a progress line, whether it is over, and the exit code.

Pure functions over the RayJob object as the API server returns it (a plain dict), so every
decision `trainctl submit --wait` and `trainctl status` make is unit-tested without a cluster.

KubeRay v1.7.0's CRD declares `status.jobDeploymentStatus`, `status.jobStatus` and
`status.reason` as plain strings without an enum, so the values below come from KubeRay's
source at that tag (ray-operator/apis/ray/v1/rayjob_types.go: JobDeploymentStatus, JobStatus
and JobFailedReason). The tests also collect every enum the CRD does declare for these fields
(the deletionRules conditions) so a value added there fails a test instead of being ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.errors import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from app.formatting import format_duration

# jobDeploymentStatus -> what is happening, for the progress line. "" is KubeRay's "New".
WAITING_DEPLOYMENT = {
    "": "accepted; waiting for the KubeRay operator to pick it up",
    "Initializing": "starting the Ray cluster (pods scheduling, images pulling)",
    "Waiting": "Ray cluster ready; waiting for a job submission (InteractiveMode)",
    "Running": "Ray cluster up; job submitted",
    "Suspending": "suspending: deleting the Ray cluster (spec.suspend or Kueue preemption)",
    "Suspended": "suspended: not admitted yet (Kueue queue) or spec.suspend is true",
    "Retrying": "the attempt failed; retrying on a new Ray cluster (spec.backoffLimit)",
}
# The status table's one word for each: `running` only once there is a Ray cluster with the
# job on it (a RayJob queued in Kueue read as running: a red-team pass).
WAITING_RESULT = {
    "": "pending",
    "Initializing": "starting",
    "Waiting": "starting",
    "Running": "running",
    "Suspending": "suspended",
    "Suspended": "queued",
    "Retrying": "retrying",
}
TERMINAL_DEPLOYMENT = ("Complete", "Failed", "ValidationFailed")
DEPLOYMENT_STATUSES = (*WAITING_DEPLOYMENT, *TERMINAL_DEPLOYMENT)

# jobStatus: the Ray job inside the cluster (Ray's own JobStatus); "" = not submitted yet.
JOB_STATUSES = {
    "": "not submitted yet",
    "PENDING": "submitted; the driver is starting",
    "RUNNING": "training",
    "STOPPED": "stopped before it finished",
    "SUCCEEDED": "finished successfully",
    "FAILED": "the training job failed",
}

# status.reason (JobFailedReason): why the deployment ended in Failed or ValidationFailed.
FAILURE_REASONS = {
    "AppFailed": "the training job itself failed; see `trainctl logs {name}`",
    "SubmissionFailed": "the submitter could not submit the job; see "
    "`trainctl logs {name} --submitter`",
    "DeadlineExceeded": "it ran past spec.activeDeadlineSeconds ({active_deadline}); "
    "KubeRay stopped it",
    "PreRunningDeadlineExceeded": "it did not reach Running within "
    "spec.preRunningDeadlineSeconds ({pre_running_deadline}); pods unschedulable or an "
    "image that cannot be pulled?",
    "JobDeploymentStatusTransitionGracePeriodExceeded": "the submitter finished but the Ray "
    "job never reached a final state within KubeRay's grace period",
    "JobStatusCheckTimeoutExceeded": "the operator could not read the job's status from the "
    "Ray dashboard (port 8265) for too long: head pod down, or a NetworkPolicy blocking it?",
    "ValidationFailed": "KubeRay rejected the RayJob spec before starting anything",
}


@dataclass(frozen=True)
class JobView:
    """The parts of a RayJob that decide what `--wait` prints and returns."""

    name: str
    deployment: str = ""
    job: str = ""
    reason: str = ""
    message: str = ""
    failed: int = 0
    succeeded: int = 0
    ray_cluster: str = ""
    created: str = ""
    labels: Mapping[str, str] | None = None
    active_deadline: int | None = None
    pre_running_deadline: int | None = None
    backoff_limit: int = 0

    @classmethod
    def of(cls, rayjob: Mapping[str, Any]) -> JobView:
        meta = rayjob.get("metadata") or {}
        spec = rayjob.get("spec") or {}
        status = rayjob.get("status") or {}
        return cls(
            name=str(meta.get("name", "")),
            deployment=str(status.get("jobDeploymentStatus") or ""),
            job=str(status.get("jobStatus") or ""),
            reason=str(status.get("reason") or ""),
            message=str(status.get("message") or "").strip(),
            failed=int(status.get("failed") or 0),
            succeeded=int(status.get("succeeded") or 0),
            ray_cluster=str(status.get("rayClusterName") or ""),
            created=str(meta.get("creationTimestamp") or ""),
            labels=dict(meta.get("labels") or {}),
            active_deadline=spec.get("activeDeadlineSeconds"),
            pre_running_deadline=spec.get("preRunningDeadlineSeconds"),
            backoff_limit=int(spec.get("backoffLimit") or 0),
        )

    @property
    def progress_key(self) -> tuple[str, str, str, int]:
        """What must change for `--wait` to print a new line (polls repeat the same state)."""
        return (self.deployment, self.job, self.reason, self.failed)


@dataclass(frozen=True)
class Verdict:
    """Where the RayJob stands: still going, or over with this exit code."""

    terminal: bool
    exit_code: int
    result: str  # one word for tables: WAITING_RESULT's, succeeded, failed, invalid, unknown
    problems: tuple[str, ...] = ()  # lines explaining a failure, printed on stderr


def going_beside(
    rayjobs: list[Mapping[str, Any]], name: str, labels: Mapping[str, str]
) -> list[str]:
    """The RayJobs carrying all of `labels` (a release's pool) that are not over, other than
    `name`: a RayJob created as `name` trains beside them, on the same pool and for the same
    champion (values that differ from the ones Helm was given name another RayJob)."""
    found = []
    for rayjob in rayjobs:
        meta = rayjob.get("metadata") or {}
        mine = all((meta.get("labels") or {}).get(k) == v for k, v in labels.items())
        deployment = (rayjob.get("status") or {}).get("jobDeploymentStatus") or ""
        if mine and meta.get("name") != name and deployment not in TERMINAL_DEPLOYMENT:
            found.append(str(meta.get("name")))
    return sorted(found)


def judge(view: JobView) -> Verdict:
    """Decide from jobDeploymentStatus first: it is KubeRay's verdict on the whole RayJob.

    jobStatus alone can say FAILED while KubeRay is about to retry (backoffLimit), and can stay
    RUNNING after a deadline failed the deployment, so it only refines a terminal deployment.
    """
    if view.deployment == "Complete":
        if view.job == "SUCCEEDED":
            return Verdict(True, EXIT_OK, "succeeded")
        what = JOB_STATUSES.get(view.job) or f"job status {view.job!r}"
        return Verdict(True, EXIT_FAILED, "failed", _failure_lines(view, what))
    if view.deployment == "Failed":
        return Verdict(True, EXIT_FAILED, "failed", _failure_lines(view, _reason_text(view)))
    if view.deployment == "ValidationFailed":
        return Verdict(True, EXIT_INVALID, "invalid", _failure_lines(view, _reason_text(view)))
    if view.deployment in WAITING_DEPLOYMENT:
        return Verdict(False, EXIT_OK, WAITING_RESULT[view.deployment])
    # A status this trainctl does not know (a newer KubeRay): keep waiting, never guess.
    return Verdict(False, EXIT_OK, "unknown")


def _reason_text(view: JobView) -> str:
    if not view.reason:
        return "KubeRay gave no reason"
    template = FAILURE_REASONS.get(view.reason)
    if template is None:
        return f"reason {view.reason} (not known to this trainctl)"
    return template.format(
        name=view.name,
        active_deadline=_seconds(view.active_deadline),
        pre_running_deadline=_seconds(view.pre_running_deadline),
    )


def _failure_lines(view: JobView, what: str) -> tuple[str, ...]:
    reason = view.reason or "none"
    lines = [
        f"RayJob {view.name}: jobDeploymentStatus={view.deployment}, "
        f"jobStatus={view.job or '-'}, reason={reason}: {what}"
    ]
    if view.message:
        lines.append(f"message: {view.message}")
    if view.failed:
        lines.append(f"failed attempts: {view.failed} (spec.backoffLimit={view.backoff_limit})")
    return tuple(lines)


def _seconds(value: int | None) -> str:
    return "not set" if value is None else f"{value}s"


def progress_line(view: JobView, elapsed_s: float) -> str:
    """One line per state change, e.g. `[  1m05s] Running / job RUNNING: training`."""
    deployment = view.deployment or "New"
    job = view.job or "-"
    if view.deployment in TERMINAL_DEPLOYMENT:
        meaning = judge(view).result + (f" ({view.reason})" if view.reason else "")
    elif view.deployment in WAITING_DEPLOYMENT:
        meaning = WAITING_DEPLOYMENT[view.deployment]
        if view.deployment == "Running" and view.job and view.job in JOB_STATUSES:
            meaning = JOB_STATUSES[view.job]
    else:
        meaning = "status not known to this trainctl; still waiting"
    if view.failed and view.deployment not in TERMINAL_DEPLOYMENT:
        meaning += f" (attempt {view.failed + 1} of {view.backoff_limit + 1})"
    return f"[{format_duration(elapsed_s):>7}] {deployment} / job {job}: {meaning}"


def age(created: str, now: datetime) -> str:
    """Age of an object from its RFC 3339 creationTimestamp, like kubectl's AGE column."""
    if not created:
        return "-"
    try:
        born = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    return format_duration((now - born).total_seconds())


def status_table(rayjobs: list[Mapping[str, Any]], *, now: datetime, pool_label: str) -> str:
    """The `trainctl status` table, newest first, or a sentence when there is nothing."""
    if not rayjobs:
        return "No RayJobs of this app in this namespace."
    views = sorted((JobView.of(r) for r in rayjobs), key=lambda v: v.created, reverse=True)
    header = ("NAME", "POOL", "RESULT", "DEPLOYMENT", "JOB", "REASON", "FAILED", "AGE")
    rows = [header]
    for view in views:
        rows.append(
            (
                view.name,
                (view.labels or {}).get(pool_label, "-"),
                judge(view).result,
                view.deployment or "New",
                view.job or "-",
                view.reason or "-",
                str(view.failed),
                age(view.created, now),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
