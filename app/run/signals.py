"""SIGTERM during the driver's blocking calls: a KeyboardInterrupt Ray lets out at once, and a
flag that tells it apart from Ctrl-C however Ray wraps it; then, while training, a just-in-time
checkpoint asked of the workers before the driver exits 143."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

from app.formatting import finite
from app.storage.location import RunPath

SIGTERM_SEEN = threading.Event()


class StopForSigterm(KeyboardInterrupt):
    """What the SIGTERM handler raises.

    Ray's blocking calls (the ray.get inside trainer.fit) let only a KeyboardInterrupt out of a
    signal handler at once; any other exception is held back until the call returns, which in
    fit() is when training ends, long after Kubernetes has given up and sent SIGKILL.
    """


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Inside: SIGTERM raises StopForSigterm and sets SIGTERM_SEEN (cleared on entry, so that a
    flag left by an earlier run in this process does not count); the old handler after.

    Off the main thread (a sweep's trial, which Ray Tune runs in a thread of its actor) no
    handler can be set: Ray Tune owns the trial's ending there, and this does nothing."""
    SIGTERM_SEEN.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    SIGTERM_SEEN.set()
    raise StopForSigterm("SIGTERM")


# Kubernetes sends SIGKILL after terminationGracePeriodSeconds (chart value
# preemption.gracePeriodSeconds): the wait for the workers' checkpoint stays well inside it.
JIT_WAIT_S = 60.0


def just_in_time(
    run_dir: RunPath, invocation: str, wait_s: float = JIT_WAIT_S, *, signs: bool = False
) -> str:
    """After SIGTERM: ask this invocation's workers for a just-in-time checkpoint and wait, up
    to `wait_s`, until rank 0 says it is committed (and, where the run `signs`, witnessed).
    Returns what happened, in words."""
    return just_in_time_each([(run_dir, invocation)], wait_s, signs=signs)[0]


def just_in_time_each(
    runs: Sequence[tuple[RunPath, str]],
    wait_s: float = JIT_WAIT_S,
    *,
    signs: bool = False,
    ask: Callable[[str], None] | None = None,
) -> list[str]:
    """`just_in_time` for several runs at once (a stopped sweep's training trials): every
    stop asked first, then all awaited together, within one `wait_s`. What happened to each,
    in words, in `runs`' order. `ask`: how an invocation's workers are asked (Ray's key-value
    store, which they poll: app/training/checkpoint_watch.py)."""
    from app.runfolder import folder as run_folder
    from app.training.checkpoint_watch import request_stop

    ask = ask or request_stop
    said: dict[int, str] = {}
    asked = time.time()
    for index, (run_dir, invocation) in enumerate(runs):
        if not run_folder.attempts(run_dir, invocation):
            said[index] = "no just-in-time checkpoint (no worker had started training)"
            continue
        try:
            ask(invocation)
        except Exception as err:  # Ray already gone: the last committed checkpoint is left
            said[index] = f"no just-in-time checkpoint (Ray is gone: {type(err).__name__})"
    deadline = time.monotonic() + wait_s
    while len(said) < len(runs) and time.monotonic() < deadline:
        for index, (run_dir, invocation) in enumerate(runs):
            if index in said:
                continue
            progress = run_folder.read_progress(run_dir)
            answer = stop_answer(progress, invocation, asked)
            if answer == "trained_out":
                said[index] = TRAINED_OUT + (_last_witnessed(run_dir, deadline) if signs else "")
            elif answer == "checkpoint":
                said[index] = _checkpoint_line(run_dir, progress["jit"], deadline, signs)
        time.sleep(0.2)
    missed = f"no just-in-time checkpoint within {wait_s:.0f} s; the last committed one stays"
    return [said.get(index, missed) for index in range(len(runs))]


def _checkpoint_line(run_dir: RunPath, jit: dict[str, Any], deadline: float, signs: bool) -> str:
    said = f"just-in-time checkpoint at step {jit.get('step')}"
    if (seconds := finite(jit.get("checkpoint_s"))) is not None:
        said += f" in {seconds:.1f} s"
    return said + (await_witness(run_dir, jit.get("checkpoint"), deadline) if signs else "")


def _last_witnessed(run_dir: RunPath, deadline: float) -> str:
    """After the workers' last epoch: its checkpoint's witness awaited, as a just-in-time
    one's is. A Ctrl-C as a signed run ended left the last epoch's checkpoint unwitnessed
    (the controller ended with this driver before it collected the report), and the run's end
    set it aside: the epoch was trained again (a red-team pass)."""
    from app.runfolder import checkpoints

    try:  # each meta.json read, no weights hashed: the grace period is short
        newest = checkpoints.recorded(run_dir)
    except Exception as err:  # a store that stops answering: the run is ending regardless
        return f"; its last checkpoint could not be looked for ({type(err).__name__})"
    if not newest:
        return ""
    name = newest[0].path.name
    return f", {name}" + await_witness(run_dir, name, deadline)


# Said when the stop came after the workers' last epoch (a Ctrl-C as the run ends): no step is
# left to checkpoint, and waiting the full JIT_WAIT_S for one only delayed the exit.
TRAINED_OUT = (
    "no just-in-time checkpoint needed: the workers had trained their last epoch; "
    "a rerun resumes from its checkpoint"
)


def stop_answer(progress: dict[str, Any], invocation: str, asked: float) -> str | None:
    """What this invocation's workers answered a stop asked at `asked` (epoch seconds), as
    progress.json (rank 0's, the storage's: anything may be in it) says: "checkpoint" (the
    just-in-time one is committed), "trained_out" (their loop had ended), or None (not yet)."""
    if progress.get("invocation") != invocation:
        return None
    if progress.get("trained_out") == invocation:
        return "trained_out"
    jit, written = progress.get("jit"), progress.get("time")
    # The checkpoint's own invocation: progress.json keeps an earlier driver's `jit` in every
    # later write, which answered this stop with that stop's step and time (a red-team pass).
    if (
        isinstance(jit, dict)
        and jit.get("reason") == "stopped"
        and jit.get("invocation") == invocation
        and isinstance(written, int | float)
        and written >= asked
    ):
        return "checkpoint"
    return None


def await_witness(run_dir: RunPath, name: object, deadline: float) -> str:
    """Wait, until the monotonic `deadline`, for the controller's witness of the checkpoint
    `name` (app/export/witness.py); what came of it, as the end of just_in_time's line.

    Rank 0 says a checkpoint is committed once Ray has it; the controller witnesses it when it
    next collects the workers' reports, which can be later. A driver that stopped waiting
    sooner would end the controller with it, and the run's end (driver `_finish`) set the
    unwitnessed checkpoint aside: the rerun would train the steps it saved again."""
    from app.export.witness import WITNESS_FILE
    from app.runfolder.checkpoint_names import parse_name
    from app.storage.reading import exists_within

    if not isinstance(name, str) or parse_name(name) is None:  # the progress file is storage's
        return "; its folder is not named, so its witness is not waited for"
    witness = run_dir / name / WITNESS_FILE
    while (left := deadline - time.monotonic()) > 0:
        try:
            if exists_within(witness, "TRAIN_STORAGE_PATH", max(left, 0.1)):
                return ", witnessed"
        except Exception as err:  # a store that stops answering: the run is ending regardless
            return f"; its witness could not be looked for ({type(err).__name__})"
        time.sleep(0.2)
    return "; not witnessed in time: it is set aside, and the rerun resumes from the one before"
