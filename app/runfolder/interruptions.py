"""Interruptions of a run, as pure functions: where a resume starts, what was lost, in words.

An interruption is what ended a worker group before its run finished: a node `preemption`
(Ray's drain notice), a `failure` (a worker or node died without notice), or the driver being
`stopped` (SIGTERM: a Kueue preemption, a pod eviction). The next worker-group start records
it, from the checkpoint it resumes and the progress the last group left (app/training/
checkpoint_watch.py writes both), as
`{cause, epoch, step, resumed_step, steps_lost, checkpoint_s}` in attempts.jsonl; summary.json
lists them all under `interruptions`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from app.formatting import whole

Cause = Literal["preemption", "failure", "stopped"]
# Why a checkpoint was written, as train_state.pt records it.
Reason = Literal["epoch", "interval", "preemption", "stopped"]


@dataclass(frozen=True)
class Position:
    """Where a worker group starts: the epoch, the batches of it already trained, and what to
    say when the world size changed and the epoch restarts instead."""

    start_epoch: int
    skip_batches: int
    repeated_samples: int = 0
    note: str = ""


def resume_position(
    train_state: Mapping[str, Any], world_size: int, global_batch_size: int
) -> Position:
    """Exact when the checkpoint was written mid-epoch by as many workers as train now: every
    rank skips the batches it trained (its data order is a function of seed, epoch, world size
    and rank). With another world size the ranks' shards differ, so no per-rank position maps
    onto the new split: the epoch restarts and the samples trained in it are trained again."""
    epoch = int(train_state.get("epoch", 0))
    done = int(train_state.get("epoch_step", 0))
    saved_world = int(train_state.get("world_size", world_size))
    if done <= 0:
        return Position(epoch + 1, 0)
    if saved_world == world_size:
        return Position(epoch + 1, done)
    repeated = done * global_batch_size
    note = (
        f"world size changed from {saved_world} to {world_size} inside epoch {epoch + 1}: "
        f"the epoch restarts, {repeated} samples ({done} steps) are trained again"
    )
    return Position(epoch + 1, 0, repeated, note)


def cause_of(reason: str | None, otherwise: Cause = "failure") -> Cause:
    """A just-in-time checkpoint names its cause; any other restart followed `otherwise`: a
    failure, or a driver stopped before its workers' checkpoint was written."""
    if reason == "preemption":
        return "preemption"
    if reason == "stopped":
        return "stopped"
    return otherwise


def interruption(
    *,
    reason: str | None,
    epoch: int,
    last_step: int | None,
    resumed_step: int,
    checkpoint_s: float | None,
    without_checkpoint: Cause = "failure",
) -> dict[str, Any]:
    """The record of one interruption. `last_step`: the last step the interrupted group was
    known to reach (None when unknown: it is then taken to be the resumed step). A
    just-in-time checkpoint is written when the group stops training, so it loses nothing;
    without one (`reason` None), the cause is `without_checkpoint` and the steps past the
    resumed checkpoint are lost."""
    cause = cause_of(reason, without_checkpoint)
    step = resumed_step if last_step is None else max(last_step, resumed_step)
    lost = 0 if reason in ("preemption", "stopped") else step - resumed_step
    return {
        "cause": cause,
        "epoch": epoch,
        "step": step,
        "resumed_step": resumed_step,
        "steps_lost": lost,
        "checkpoint_s": None if checkpoint_s is None else round(checkpoint_s, 2),
    }


def in_words(record: Mapping[str, Any]) -> str:
    """e.g. `preempted at step 412 (epoch 3), checkpoint in 1.8 s, resumed, 0 steps lost`.

    The record comes from a run folder that many hands can write (`trainctl status`, `submit
    --wait`): only known words and bounded numbers are printed, anything else as `?`, so a
    damaged field can neither raise nor put a huge string or control characters on a terminal.
    """
    verb = {"preemption": "preempted", "stopped": "stopped", "failure": "failed"}
    cause = record.get("cause")
    said = verb.get(cause, "interrupted") if isinstance(cause, str) else "interrupted"
    said += f" at step {_count(record.get('step'))} (epoch {_count(record.get('epoch'))})"
    seconds = record.get("checkpoint_s")
    if _seconds(seconds):
        said += f", checkpoint in {seconds:.1f} s"
    lost = record.get("steps_lost", 0)
    return f"{said}, resumed, {_count(lost)} step{'' if lost == 1 else 's'} lost"


MAX_SHOWN_COUNT = 10**15  # past any real step count: a bigger number is damage, shown as `?`


def _count(value: Any) -> str:
    count = whole(value, 0, MAX_SHOWN_COUNT - 1)
    return "?" if count is None else str(count)


def _seconds(value: Any) -> bool:
    """A finite, non-negative number of seconds within a year: what a checkpoint can take."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return 0 <= value <= 365 * 86400


MAX_SHOWN = 5  # per run, in words: the newest; the rest are counted


def recorded(
    summary: Mapping[str, Any] | None, attempts: Sequence[Any], *, finished: bool
) -> tuple[list[Mapping[str, Any]], int]:
    """(the run's interruption records, oldest first; how many were not records). A finished
    run's are summary.json's list (its driver's final word); a running one's are
    attempts.jsonl's, since its summary.json may still be an earlier driver's."""
    found = summary.get("interruptions") if finished and summary else None
    if not isinstance(found, list):
        found = from_attempts([a for a in attempts if isinstance(a, Mapping)])
    records = [r for r in found if isinstance(r, Mapping)]
    return records, len(found) - len(records)


def lines_of(
    summary: Mapping[str, Any] | None, attempts: Sequence[Any], *, finished: bool
) -> list[str]:
    """The run's interruptions in words, oldest first, the newest MAX_SHOWN of them, then how
    many more there were and how many records could not be read."""
    records, unreadable = recorded(summary, attempts, finished=finished)
    lines = [in_words(r) for r in records[-MAX_SHOWN:]]
    earlier = len(records) - len(lines)
    if earlier:
        where = "summary.json" if finished else "attempts.jsonl"
        lines.append(f"and {earlier} more before these ({where} lists them all)")
    if unreadable:
        lines.append(f"{unreadable} unreadable interruption record(s) skipped")
    return lines


def from_attempts(starts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every interruption the run's attempts recorded, oldest first."""
    return [
        dict(a["interruption"])
        for a in starts
        if isinstance(a, Mapping) and isinstance(a.get("interruption"), dict)
    ]
