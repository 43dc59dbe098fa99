"""`trainctl submit --wait`: follow a RayJob until KubeRay calls it finished.

`advance` is the whole decision per poll, a pure function of the previous state, the RayJob as
the API server returned it and the run folder's records; `follow` only loops, sleeps and prints.
Tests drive `follow` with a scripted API (the one thing allowed to be faked) and real files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from app.errors import EXIT_FAILED, EXIT_OK
from app.formatting import counted, finite, one_line
from app.k8s.diagnose import needs_look
from app.k8s.status import JobView, Verdict, judge, progress_line
from app.runfolder import folder as run_folder
from app.runfolder.epoch_record import epoch_line
from app.runfolder.interruptions import in_words
from app.storage.deadline import DeadlineExceeded

if TYPE_CHECKING:
    from app.storage.location import RunPath


@dataclass(frozen=True)
class FollowState:
    last_key: tuple[str, str, str, int] | None = None
    last_view: JobView | None = None
    # (epoch, time written) of every metrics record already printed: a resumed run rewrites
    # the file and repeats epochs, and a repeated epoch is worth a line of its own.
    printed: frozenset[tuple[int, float]] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Tick:
    state: FollowState
    lines: tuple[str, ...]
    verdict: Verdict | None  # set once the wait is over


def advance(
    state: FollowState,
    rayjob: Mapping[str, Any] | None,
    *,
    name: str,
    elapsed_s: float,
    records: Sequence[Mapping[str, Any]] = (),
    total_epochs: int = 0,
) -> Tick:
    """One poll: new epoch lines, a progress line if the status changed, and the verdict."""
    lines: list[str] = []
    printed = set(state.printed)
    for record in sorted(records, key=lambda r: (_written(r), int(r["epoch"]))):
        mark = (int(record["epoch"]), _written(record))
        if mark not in printed:
            printed.add(mark)
            lines.append(epoch_line(record, total_epochs or int(record["epoch"])))

    if rayjob is None:
        last = state.last_view
        was = f"; last seen as {last.deployment or 'New'} / job {last.job or '-'}" if last else ""
        verdict = Verdict(
            True,
            EXIT_FAILED,
            "failed",
            (
                f"RayJob {name} disappeared before it finished{was}. Something deleted it "
                "(kubectl delete, a deletionStrategy DeleteSelf rule, or a GitOps prune)",
            ),
        )
        return Tick(FollowState(state.last_key, last, frozenset(printed)), tuple(lines), verdict)

    view = JobView.of(rayjob)
    if view.progress_key != state.last_key:
        lines.append(progress_line(view, elapsed_s))
    verdict = judge(view)
    new_state = FollowState(view.progress_key, view, frozenset(printed))
    return Tick(new_state, tuple(lines), verdict if verdict.terminal else None)


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict | None  # None: --timeout ran out first
    elapsed_s: float
    last_view: JobView | None


def follow(
    fetch: Callable[[], Mapping[str, Any] | None],
    *,
    name: str,
    echo: Callable[[str], None],
    run_dir: RunPath | None = None,
    total_epochs: int = 0,
    timeout_s: float | None = None,
    poll_s: float = 3.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    look: Callable[[Mapping[str, Any]], tuple[str, ...]] | None = None,
    look_every_s: float = 15.0,
) -> Outcome:
    """Poll until the RayJob is terminal (or gone), or until timeout_s has passed.

    `look` explains a RayJob that is not training yet (pods Pending, image pulls, Kueue); it
    costs a few API calls, so it runs every look_every_s, and prints only what changed.
    `fetch` and `look` may raise DeadlineExceeded (the caller bounds each request by the time
    --timeout leaves): the wait then ends as a timeout. The time is read after each answer, so
    a slow API server is neither polled again past the timeout nor reported as faster.
    """
    started = clock()
    state = FollowState()
    why: tuple[str, ...] = ()
    looked_at: float | None = None
    while True:
        records = run_folder.epochs(run_dir) if run_dir is not None else []
        try:
            rayjob = fetch()
        except DeadlineExceeded:
            return Outcome(None, clock() - started, state.last_view)
        elapsed = clock() - started
        tick = advance(
            state,
            rayjob,
            name=name,
            elapsed_s=elapsed,
            records=records,
            total_epochs=total_epochs,
        )
        for line in tick.lines:
            echo(line)
        state = tick.state
        if tick.verdict is not None:
            verdict = tick.verdict
            if verdict.exit_code != EXIT_OK and why:
                # A pre-running deadline fails the job with a generic reason; what held the
                # pods back is the useful part, and the pods are gone once the cluster is.
                verdict = replace(verdict, problems=(*verdict.problems, *_why(why, "last seen")))
            return Outcome(verdict, elapsed, state.last_view)
        if look is not None and rayjob is not None and needs_look(rayjob):
            if looked_at is None or elapsed - looked_at >= look_every_s:
                looked_at = elapsed
                try:
                    found = look(rayjob)
                except DeadlineExceeded:
                    return Outcome(None, clock() - started, state.last_view)
                if found != why:
                    for line in _why(found, "why"):
                        echo(line)
                why = found
        elif rayjob is not None:
            why = ()
        if timeout_s is not None and elapsed >= timeout_s:
            return Outcome(None, elapsed, state.last_view)
        sleep(poll_s if timeout_s is None else max(0.0, min(poll_s, timeout_s - elapsed)))


def _why(lines: tuple[str, ...], label: str) -> list[str]:
    return [f"  {label}: {line}" for line in lines]


def _written(record: Mapping[str, Any]) -> float:
    """When an epoch record was written; 0 where its `time` is no number a float holds."""
    return finite(record.get("time")) or 0.0


def sweep_line(record: Mapping[str, Any], run_dir: RunPath) -> str:
    """What a sweep's folder says about the finished sweep, in one line: a sweep writes
    sweep.json, not summary.json, and `submit --wait` said "no summary yet" of every one.
    Another writer's text: every field escaped and bounded."""
    listed = record.get("trials")
    trials = [t for t in listed if isinstance(t, Mapping)] if isinstance(listed, list) else []
    counts: dict[str, int] = {}
    for trial in trials:
        status = one_line(str(trial.get("status")), 20)
        counts[status] = counts.get(status, 0) + 1
    found = record.get("best")
    best: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    value = finite(best.get("best"))
    figure = f" ({value:.4f})" if value is not None else ""
    statuses = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return (
        f"sweep {one_line(str(record.get('sweep', run_dir.name)), 100)} "
        f"{one_line(str(record.get('status', 'unknown')), 30)}: {counted(len(trials), 'trial')}"
        f"{f' ({statuses})' if statuses else ''}, best "
        f"{one_line(str(best.get('trial', '-')), 40)}{figure}; "
        f"record {run_dir / run_folder.SWEEP_FILE}"
    )


def summary_line(summary: Mapping[str, Any] | None, run_dir: RunPath) -> str:
    """What the run folder says about the finished run, in one line."""
    path = run_dir / run_folder.SUMMARY_FILE
    if not summary:
        return f"run folder {run_dir}: no summary yet ({path})"
    best = summary.get("best") or {}
    metric = best.get("metric", "val_accuracy")
    value = finite(best.get(metric))
    best_text = (
        f", best {metric} {value:.4f} at epoch {best.get('epoch')}" if value is not None else ""
    )
    said = [in_words(r) for r in summary.get("interruptions") or [] if isinstance(r, dict)]
    return (
        f"run {summary.get('run_name', run_dir.name)} {summary.get('status', 'unknown')}: "
        f"{summary.get('epochs_completed', 0)}/{summary.get('epochs_target', '?')} epochs"
        f"{best_text}, {summary.get('failures', 0)} failure(s) recovered; "
        + "".join(f"{line}; " for line in said)
        + f"checkpoint {summary.get('checkpoint') or 'none'}; summary {path}"
    )
