"""Inside an epoch: when to write a checkpoint, agreed by every rank at the same step.

Ray requires every rank to call `ray.train.report` the same number of times, so a mid-epoch
checkpoint must be decided identically everywhere:
- a step count (TRAIN_CHECKPOINT_EVERY=500) is the same on every rank by construction, checked
  after every step;
- everything else is agreed every AGREE_EVERY steps, at the same steps on every rank: a duration
  and the driver's stop request (a SIGTERM it got, left in Ray's internal key-value store) are
  decided by rank 0 alone and travel in one two-number all-reduce; a node preemption comes from
  `ray.train.get_preemption_info()`, which Ray agrees across ranks itself (a broadcast from rank
  0 through Ray's actors). Not every step: on two CPU workers a per-step poll made a 9 ms step
  about 2 ms slower, and on a GPU the all-reduced flag must be read back, a wait for the device
  that stalls the queue of launched steps. Every AGREE_EVERY steps the cost is a tenth of that,
  and a notice waits at most that many steps (well inside a drain deadline of tens of seconds).

Also here: each rank's RNG states (gathered into rank 0's checkpoint, restored on resume) and
the small progress record rank 0 leaves in the run folder, from which the next worker-group
start counts the steps an interruption lost.
"""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np
import ray.train
import torch
import torch.distributed as dist

from app.formatting import finite
from app.runfolder import folder as run_folder
from app.runfolder import interruptions
from app.settings.cadence import CheckpointEvery
from app.storage.location import RunPath
from app.training.plan import WorkerPlan

STOP_KEY = "trainctl-stop-{invocation}"
AGREE_EVERY = 10
PROGRESS_EVERY_S = 2.0  # the resolution of a failure's steps_lost (one small write per period)
# After a just-in-time checkpoint the group stops training (what it trained next would be lost)
# and waits to be torn down. After a drain notice, if that never comes (a drain that was
# cancelled), it trains on. After the driver's stop it never trains on: a rerun may already be
# training in the same run folder; the driver exits once the checkpoint is committed and Ray
# then ends its workers, so the wait is a bound, not the way out.
PAST_DEADLINE_S = 10.0
STOPPED_WAIT_S = 600.0


def stop_key(invocation: str) -> bytes:
    return STOP_KEY.format(invocation=invocation).encode()


class CheckpointWatch:
    def __init__(
        self,
        every: CheckpointEvery,
        *,
        invocation: str,
        rank: int,
        world: int,
        device: torch.device,
        run_dir: RunPath,
        step: int,
    ) -> None:
        self.every, self.rank, self.world, self.device = every, rank, world, device
        self.invocation, self.run_dir = invocation, run_dir
        self.last_step, self.last_at = step, time.monotonic()
        self._progress_at = 0.0
        self.deadline_ms: int | None = None
        self._preempted_seen = False

    def after_step(self, step: int, epoch: int) -> str | None:
        """`interval`, `preemption`, `stopped` or None: the same answer on every rank."""
        if self.every.due(step - self.last_step, 0.0):
            return "interval"
        if step % AGREE_EVERY:
            return None
        now = time.monotonic()
        flags = torch.zeros(2, dtype=torch.float64)
        if self.rank == 0:
            if self.every.kind == "seconds":
                flags[0] = float(self.every.due(0, now - self.last_at))
            flags[1] = float(_stop_requested(self.invocation))
            if now - self._progress_at >= PROGRESS_EVERY_S:
                self._progress_at = now
                run_folder.write_progress(self.run_dir, self.invocation, epoch=epoch, step=step)
        if self.world > 1 and dist.is_available() and dist.is_initialized():
            on_device = flags.to(self.device)
            dist.all_reduce(on_device, op=dist.ReduceOp.SUM)
            flags = on_device.cpu()
        preemption = ray.train.get_preemption_info()
        if preemption is not None and not self._preempted_seen:
            self._preempted_seen = True  # one just-in-time checkpoint per notice
            self.deadline_ms = preemption.deadline_ms
            return "preemption"
        if flags[1] > 0:
            return "stopped"
        return "interval" if flags[0] > 0 else None

    def saved(self, step: int) -> None:
        self.last_step, self.last_at = step, time.monotonic()

    def hold_after(self, reason: str) -> None:
        """After a just-in-time checkpoint: wait to be torn down rather than train steps that
        would be lost; after a drain notice, train on if the teardown never comes."""
        if reason != "preemption":
            time.sleep(STOPPED_WAIT_S)
            raise RuntimeError(f"asked to stop, and still alive {STOPPED_WAIT_S:.0f} s later")
        until = (self.deadline_ms or 0) / 1000 + PAST_DEADLINE_S
        time.sleep(max(0.0, min(until - time.time(), 600.0)) if self.deadline_ms else 30.0)


def _stop_requested(invocation: str) -> bool:
    from ray.experimental import internal_kv

    try:
        return internal_kv._internal_kv_get(stop_key(invocation)) is not None
    except Exception:  # the store is Ray's own; a failed read is "no request yet"
        return False


def request_stop(invocation: str) -> None:
    """The driver's side: ask the workers of this invocation for a just-in-time checkpoint."""
    from ray.experimental import internal_kv

    internal_kv._internal_kv_put(stop_key(invocation), b"1", overwrite=True)


def rng_state() -> dict[str, Any]:
    """This rank's RNG states as tensors, lists and numbers: loadable with weights_only=True."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, py_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [str(kind), torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "python": [version, list(internal), py_gauss],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, py_gauss = state["python"]
    random.setstate((version, tuple(internal), py_gauss))


def gathered_rng(world: int, extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every rank's RNG states (and `extra`, this rank's own numbers), in rank order (a
    collective: every rank calls it)."""
    mine = {**rng_state(), **(extra or {})}
    if world == 1 or not (dist.is_available() and dist.is_initialized()):
        return [mine]
    states: list[Any] = [None] * world
    # Pickled between this run's own ranks over the process group, never read from storage.
    dist.all_gather_object(states, mine)
    return states


def interruption_on_start(
    plan: WorkerPlan, resume: RunPath | None, train_state: dict[str, Any], step: int
) -> dict[str, Any] | None:
    """What interrupted the group this one takes over from: a Ray restart inside this driver,
    or a rerun after a driver that did not finish (the driver says which, `interrupted`)."""
    if resume is None or not (plan.interrupted or ray.train.get_checkpoint()):
        return None
    progress = run_folder.read_progress(plan.settings.run_dir)
    jit = progress.get("jit") if isinstance(progress.get("jit"), dict) else {}
    matched = jit.get("step") == step  # the checkpoint resumed is that just-in-time one
    reason = train_state.get("reason") or (jit.get("reason") if matched else None)
    last = progress.get("step")
    # This driver's first group (Ray has no checkpoint of its own yet) takes over from the last
    # driver, stopped before its workers' checkpoint (a second Ctrl-C) or failed; a later group
    # from a failure inside this driver.
    after = plan.interrupted if ray.train.get_checkpoint() is None else None
    return interruptions.interruption(
        reason=str(reason) if reason else None,
        epoch=int(train_state.get("epoch", 0)) + 1,
        last_step=int(last) if isinstance(last, int) else None,
        resumed_step=step,
        checkpoint_s=finite(jit.get("checkpoint_s")) if matched else None,
        without_checkpoint=after or "failure",
    )
