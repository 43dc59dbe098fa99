"""`trainctl submit`: render one pool, create what is missing, then optionally wait.

Orchestration only: the plan (plan.py), the verdicts (status.py, follow.py) and the messages
(api_errors.py) are pure and tested on their own; this module wires them to the API.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from app.errors import EXIT_INVALID, EXIT_OK, ConfigError, RunFailed, WaitTimedOut
from app.formatting import format_duration
from app.k8s import deprecated
from app.k8s.api_errors import Forbidden
from app.k8s.cluster import AlreadyExists, Cluster
from app.k8s.follow import follow, summary_line, sweep_line
from app.k8s.outcome import promotion_line
from app.k8s.plan import (
    CREATE_ONLY,
    bucket_run_dir,
    head_env,
    key,
    local_run_dir,
    plan_submit,
    pool_objects,
    resolve_namespace,
    the_rayjob,
)
from app.k8s.secret_refs import secret_keys, secret_problems, secret_refs
from app.k8s.status import going_beside
from app.k8s.stuck import why_stuck
from app.k8s.value_warnings import value_warnings
from app.runfolder.folder import read_summary, read_sweep
from app.storage.deadline import DeadlineExceeded, call_with_deadline

if TYPE_CHECKING:
    from app.storage.location import RunPath

T = TypeVar("T")


@dataclass(frozen=True)
class SubmitRequest:
    pool: str
    release: str
    values_files: tuple[Path, ...] = ()
    namespace: str | None = None
    run_tag: str | None = None
    wait: bool = False
    timeout_s: float | None = None
    storage_mount: Path | None = None
    poll_s: float = 3.0
    set_values: tuple[str, ...] = ()
    set_string: tuple[str, ...] = ()
    set_json: tuple[str, ...] = ()
    set_file: tuple[str, ...] = ()


def submit(request: SubmitRequest, echo: Callable[[str], None]) -> None:
    """Create (or find) the pool's RayJob; with wait, return only if it succeeded."""
    from app.k8s.render import render_objects

    values = _checked_values(request, echo)
    # Whatever the cluster or the pods would refuse is refused before the API is reached. The
    # namespace only places the objects: a render in the flag's (or any) namespace checks the
    # same values, pools and TRAIN_* settings as the one below.
    pool_objects(
        render_objects(values, release=request.release, namespace=request.namespace or "default"),
        request.pool,
    )
    cluster = Cluster.connect()
    namespace = resolve_namespace(request.namespace, cluster.default_namespace)
    objects = pool_objects(
        render_objects(values, release=request.release, namespace=namespace), request.pool
    )
    job = _Job(cluster, objects, namespace, key(the_rayjob(objects))[1])
    _create_or_attach(job, echo)
    if not request.wait:
        echo(
            f"follow it: trainctl status -n {namespace}  |  trainctl logs {job.name} -n {namespace}"
        )
        return
    _wait(request, job, echo)


def _checked_values(request: SubmitRequest, echo: Callable[[str], None]) -> dict[str, Any]:
    """The values the request gives, after the checks of its options."""
    from app.k8s.render import load_values

    if not request.wait and (request.timeout_s is not None or request.storage_mount):
        raise ConfigError("--timeout and --storage-mount only apply together with --wait")
    if request.run_tag is not None and not request.run_tag.strip():
        # Silently dropping it would attach to the untagged run (Helm's), and a schedule would
        # then never train again: say so instead.
        raise ConfigError(
            "--run-tag is empty: give a tag (letters, digits, '-', '_', '.'; at most 63) or leave "
            "the option out. A scheduled CronJob passes its Job's name, from the pod label "
            "batch.kubernetes.io/job-name (Kubernetes 1.27 and later)"
        )
    read_notes: list[str] = []  # a leading-zero number, a key read as a boolean
    values = load_values(
        request.values_files,
        notes=read_notes,
        set_json=request.set_json,
        set_values=request.set_values,
        set_string=request.set_string,
        set_file=request.set_file,
    )
    for note in [*read_notes, *deprecated.notes(values), *value_warnings(values)]:
        echo(note)
    if request.run_tag:
        values["runTag"] = request.run_tag
    return values


@dataclass(frozen=True)
class _Job:
    """The pool's rendered objects, where they go, and its RayJob's name."""

    cluster: Cluster
    objects: list[dict[str, Any]]
    namespace: str
    name: str


def _create_or_attach(job: _Job, echo: Callable[[str], None]) -> None:
    """Each object applied, created or kept as plan_submit says; an existing RayJob attached."""
    cluster, objects, namespace, name = job.cluster, job.objects, job.namespace, job.name
    exists = cluster.get("RayJob", namespace, name) is not None
    existing = set()
    if not exists:
        _check_secrets(job, echo)
        _say_what_runs_beside(job, echo)
        for obj in objects:
            if obj["kind"] in CREATE_ONLY and cluster.get(*_where(obj, namespace)) is not None:
                existing.add(key(obj))
    for step in plan_submit(objects, rayjob_exists=exists, existing=existing):
        if step.action == "apply":
            cluster.apply(step.kind, namespace, step.body)
        elif step.action == "create":
            try:
                cluster.create(step.kind, namespace, step.body)
            except AlreadyExists:
                # Someone (a parallel submit, Helm, Argo CD) created it since we looked.
                step = replace(step, action="attach" if step.kind == "RayJob" else "keep")
        echo(f"{step.describe()} (namespace {namespace})")


def _check_secrets(job: _Job, echo: Callable[[str], None]) -> None:
    """Exit 2, creating nothing, where a Secret the pods read is missing or lacks its key.
    A Secret this identity may not read (the chart's scheduled submit reads none but the Ray
    token's) is not judged: the pods' own CreateContainerConfigError still says it."""
    refs = secret_refs(job.objects)
    found: dict[str, frozenset[str] | None] = {}
    for name in sorted({ref.name for ref in refs}):
        try:
            secret = job.cluster.get("Secret", job.namespace, name)
        except Forbidden:
            continue
        found[name] = secret_keys(secret)
    problems, warnings = secret_problems(refs, found, job.namespace)
    for warning in warnings:
        echo(f"warning: {warning}")
    if problems:
        raise ConfigError([*problems, "nothing was created"])


# The labels that make two RayJobs runs of one release's pool.
RUN_OF_POOL = ("app.kubernetes.io/instance", "trainctl.io/pool")


def _say_what_runs_beside(job: _Job, echo: Callable[[str], None]) -> None:
    """A warning where the RayJob about to be created is not the pool's only one going: values
    other than the ones the release was installed with (a --set left out) name another RayJob,
    and it would not attach to the run going but start a second (a red-team pass)."""
    labels = the_rayjob(job.objects)["metadata"].get("labels") or {}
    mine = {k: labels[k] for k in RUN_OF_POOL if k in labels}
    if len(mine) < len(RUN_OF_POOL):
        return
    selector = ",".join(f"{k}={v}" for k, v in mine.items())
    others = going_beside(job.cluster.list("RayJob", job.namespace, selector), job.name, mine)
    if others:
        echo(
            f"warning: RayJob {', '.join(others)} of this release's pool "
            f"{mine['trainctl.io/pool']} is still going: {job.name} will train beside it, on "
            "the same GPUs and for the same champion. To attach to it instead, give submit the "
            "same values (files and --set flags) that created it"
        )


def _wait(request: SubmitRequest, job: _Job, echo: Callable[[str], None]) -> None:
    """Follow the RayJob to its end; return only if it succeeded."""
    cluster, objects, namespace, name = job.cluster, job.objects, job.namespace, job.name
    run_dir = _run_dir(objects, request.storage_mount)
    if run_dir is not None:
        echo(f"reading epoch lines from {run_dir}")
    total_epochs = _total_epochs(head_env(objects, the_rayjob(objects)))
    bounded = _within(request.timeout_s, f"the Kubernetes API (RayJob {name})")
    try:
        outcome = follow(
            lambda: bounded(lambda: cluster.get("RayJob", namespace, name)),
            name=name,
            echo=echo,
            run_dir=run_dir,
            total_epochs=total_epochs,
            timeout_s=request.timeout_s,
            poll_s=request.poll_s,
            look=lambda seen: bounded(lambda: why_stuck(cluster, namespace, seen)),
        )
    except KeyboardInterrupt:
        echo(f"stopped waiting; RayJob {name} keeps running (trainctl status -n {namespace})")
        raise
    summary = read_summary(run_dir) if run_dir is not None else None
    # A sweep's folder holds sweep.json, whose promotion line is the sweep's (one per sweep).
    sweep = read_sweep(run_dir) if run_dir is not None and summary is None else None
    if run_dir is not None:
        echo(sweep_line(sweep, run_dir) if sweep else summary_line(summary, run_dir))
    outcome_line = promotion_line(summary or sweep)
    if outcome.verdict is None:
        raise WaitTimedOut(
            f"--timeout {request.timeout_s:g}s ran out after {format_duration(outcome.elapsed_s)}; "
            f"RayJob {name} is still running in namespace {namespace} (run the same submit "
            "command again to attach to it)"
        )
    if outcome.verdict.exit_code == EXIT_OK:
        echo(f"RayJob {name} succeeded in {format_duration(outcome.elapsed_s)}")
        if outcome_line:
            echo(outcome_line)  # the last line, as in the job's own log
        return
    if outcome_line:  # a run kept by the gate with TRAIN_NOT_PROMOTED_EXIT set fails the job
        echo(outcome_line)
    if outcome.verdict.exit_code == EXIT_INVALID:
        raise ConfigError(outcome.verdict.problems)
    raise RunFailed(outcome.verdict.problems)


def _within(timeout_s: float | None, what: str) -> Callable[[Callable[[], T]], T]:
    """A call bounded by the time --timeout leaves from now: each API request has its own
    TRAINCTL_API_TIMEOUT and retries, which alone let `--timeout 8` run for a minute against a
    slow server. None: no --timeout, each request's own bound."""
    if timeout_s is None:
        return lambda call: call()
    end = time.monotonic() + timeout_s

    def bounded(call: Callable[[], T]) -> T:
        left = end - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(what, timeout_s)
        return call_with_deadline(call, left, what)

    return bounded


def _run_dir(objects: list[dict[str, Any]], storage_mount: Path | None) -> RunPath | None:
    """The run folder: in the bucket with object storage, else through --storage-mount."""
    in_bucket = bucket_run_dir(objects)
    if in_bucket is not None and storage_mount:
        raise ConfigError(
            f"--storage-mount: this release keeps its runs in {in_bucket.parent}, not on a "
            "volume; leave the option out (submit --wait reads the bucket itself)"
        )
    if in_bucket is not None:
        return in_bucket
    return local_run_dir(objects, storage_mount) if storage_mount else None


def _where(obj: dict[str, Any], namespace: str) -> tuple[str, str, str]:
    return obj["kind"], namespace, obj["metadata"]["name"]


def _total_epochs(env: dict[str, str]) -> int:
    from app.settings import TrainSettings

    try:
        return int(env["TRAIN_EPOCHS"])
    except (KeyError, ValueError):
        return int(TrainSettings.model_fields["epochs"].default)
