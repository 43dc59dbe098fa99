"""What every Ray Train worker runs, as a story: build, restore, then epoch by epoch train,
validate and end the epoch (report, checkpoint, decide whether to stop).

Each epoch ends the same way on every rank: global validation metrics (all-reduced, so every
worker's shard counts), one `ray.train.report` per rank, a checkpoint written by rank 0 only,
and the early-stopping decision taken from those shared figures (app/training/early_stop.py), so
every rank leaves the loop after the same epoch. Inside an epoch,
app/training/checkpoint_watch.py decides (the same on every rank) when a mid-epoch checkpoint is
due: TRAIN_CHECKPOINT_EVERY, a node preemption or the driver's SIGTERM. A resume from a
mid-epoch checkpoint skips the batches already trained (app/runfolder/interruptions.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray.train
import ray.train.torch
import torch
from torch import nn

from app.data.pipeline import epoch_batches
from app.runfolder import checkpoints, interruptions, retention
from app.runfolder import folder as run_folder
from app.runfolder.epoch_record import new_record
from app.storage.location import RunPath, in_storage
from app.training import early_stop, finetune
from app.training.accel import (
    CompiledModel,
    autocast_dtype,
    make_optimizer,
    memory_format,
    private_compile_cache,
)
from app.training.augment import augment
from app.training.checkpoint_report import report_checkpoint
from app.training.checkpoint_watch import CheckpointWatch, interruption_on_start, set_rng_state
from app.training.model import build_model, uses_channels_last
from app.training.plan import WorkerPlan
from app.training.run_clock import RunClock
from app.training.sample_log import log_samples
from app.training.steps import per_worker_batch, steps_with
from app.training.validation import all_reduce, autocast, evaluate
from app.training.weights import apply_weights
from app.training.worker_hooks import EpochHook, worker_hooks


def train_loop_per_worker(config: dict[str, Any]) -> None:
    plan = WorkerPlan.of(config)
    # Logs to the run folder and the epoch gauges live in app/training/worker_hooks.py.
    with worker_hooks(plan, ray.train.get_context().get_world_rank()) as on_epoch:
        train(plan, on_epoch)


def train(plan: WorkerPlan, on_epoch: EpochHook) -> None:
    began = time.monotonic()  # the run clock counts this group's start-up too
    worker = Worker.here()
    torch.manual_seed(plan.settings.seed)
    restored = restore(plan)
    parts = build(plan, worker, restored)
    state = resume(plan, worker, restored, began)
    watch = CheckpointWatch(
        plan.settings.checkpoint_every, invocation=plan.invocation, rank=worker.rank,
        world=worker.world, device=worker.device, run_dir=plan.settings.run_dir, step=state.step,
    )  # fmt: skip
    data = Data.of(plan, worker)
    state.compile_pending = parts.forward.active
    for epoch in range(state.start_epoch, plan.settings.epochs + 1):
        sums = train_epoch(plan, worker, parts, data, state, watch, epoch)
        metrics = validate_epoch(plan, worker, parts, data, state, sums, epoch)
        if end_epoch(plan, worker, parts, state, watch, epoch, metrics, on_epoch):
            break  # every rank: the decision comes from figures they all share
    if worker.rank == 0:  # a stop asked from now on waits for no just-in-time checkpoint
        run_folder.write_progress(
            plan.settings.run_dir, plan.invocation, trained_out=plan.invocation
        )


# --- where and with what this worker trains ---------------------------------------------------
@dataclass(frozen=True)
class Worker:
    rank: int
    world: int
    device: torch.device

    @classmethod
    def here(cls) -> Worker:
        context = ray.train.get_context()
        rank, world = context.get_world_rank(), context.get_world_size()
        return cls(rank, world, ray.train.torch.get_device())


@dataclass(frozen=True)
class Restored:
    """The checkpoint this group resumes from (None: a fresh start) and what it holds."""

    checkpoint: RunPath | None = None
    model_state: dict[str, Any] = field(default_factory=dict)
    train_state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Parts:
    model: nn.Module  # as Ray prepared it (DDP on several workers): what checkpoints save
    forward: CompiledModel  # the training forward pass, compiled or not
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    batch_format: torch.memory_format
    amp_dtype: torch.dtype | None
    loss_fn: nn.Module


@dataclass(frozen=True)
class Data:
    train: Any  # this rank's Ray Data shards
    valid: Any
    batch_size: int  # per worker
    schedule: Callable[[int], float]  # the learning rate at a global step

    @classmethod
    def of(cls, plan: WorkerPlan, worker: Worker) -> Data:
        settings = plan.settings
        batch = settings.global_batch_size
        steps = steps_with(plan.info.train_rows, batch, worker.world)  # the steps this world runs
        return cls(
            train=ray.train.get_dataset_shard("train"),
            valid=ray.train.get_dataset_shard("valid"),
            batch_size=per_worker_batch(batch, worker.world),
            schedule=cosine_with_warmup(settings.lr, steps, steps * settings.epochs),
        )


@dataclass
class State:
    """What moves while training; all of it but the timings is the same on every rank."""

    start_epoch: int
    step: int
    skip_batches: int  # in the first epoch only: the batches a mid-epoch checkpoint trained
    carried: tuple[float, int]  # the resumed epoch's loss sum and rows on this rank
    progress: early_stop.Progress
    clock: RunClock
    compile_pending: bool = False

    def saved(self, clock: dict[str, float] | None = None) -> dict[str, Any]:
        """What a checkpoint carries for the next start besides weights and optimizer."""
        return {"early_stop": self.progress.record(), "clock": clock or self.clock.reading()}


# --- build and restore ------------------------------------------------------------------------
def restore(plan: WorkerPlan) -> Restored:
    """Ray's latest committed checkpoint (a worker failure inside this run), else the newest
    intact checkpoint the driver found on storage (a rerun of the same run), else nothing."""
    latest = ray.train.get_checkpoint()
    verified: dict[str, str] = {}
    reported = None
    if latest is not None:  # Ray names it by its path inside the storage filesystem
        checkpoint = in_storage(plan.settings.storage_path, latest.path)
        reported = _reported_digest(latest.path)
    else:
        checkpoint, verified = plan.resume_from, plan.resume_files
    if checkpoint is None:
        return Restored()
    # The driver's choice loads only as the bytes it verified; Ray's own, as the meta.json
    # rank 0 reported to Ray says (through Ray, so no writer of the storage can change it).
    model_state, train_state = checkpoints.load_train_state(checkpoint, verified, reported)
    return Restored(checkpoint, model_state, train_state)


def _reported_digest(path: str) -> str | None:
    """The meta.json digest rank 0 reported with the checkpoint at `path` (report_checkpoint),
    as Ray Train's controller holds it; None where it holds none."""
    found = ray.train.get_all_reported_checkpoints(
        consistency_mode=ray.train.CheckpointConsistencyMode.COMMITTED
    )
    for reported in found:
        if reported.checkpoint.path == path:
            digest = reported.metrics.get(checkpoints.WITNESSED_METRIC)
            return digest if isinstance(digest, str) else None
    return None


def build(plan: WorkerPlan, worker: Worker, restored: Restored) -> Parts:
    settings = plan.settings
    model = build_model(settings.model, plan.info, settings.vit_patch)
    initial_weights(model, plan, restored)
    if uses_channels_last(settings.model):
        model = model.to(memory_format=torch.channels_last)
    trainable = finetune.param_groups(model, settings)  # before DDP: it syncs what trains
    # Weights are loaded into the plain module before it is wrapped (DDP) and compiled, so
    # checkpoints never see compile's `_orig_mod.` names and resume works either way.
    model = ray.train.torch.prepare_model(model)
    if settings.compile == "on":  # never on the shared storage: its files would run here
        private_compile_cache()
    optimizer = make_optimizer(trainable, settings, worker.device)
    scaler = torch.amp.GradScaler(worker.device.type, enabled=settings.amp == "fp16")
    if restored.train_state:
        optimizer.load_state_dict(restored.train_state["optimizer"])
        scaler.load_state_dict(restored.train_state["scaler"])
    return Parts(
        model=model,
        forward=CompiledModel(model, enabled=settings.compile == "on"),
        optimizer=optimizer,
        scaler=scaler,
        batch_format=memory_format(settings.model),
        amp_dtype=autocast_dtype(settings.amp, worker.device),
        loss_fn=nn.CrossEntropyLoss(),
    )


def initial_weights(model: nn.Module, plan: WorkerPlan, restored: Restored) -> None:
    """The checkpoint's weights, else TRAIN_WARM_START's (verified in preflight), else
    TRAIN_WEIGHTS' if set."""
    if restored.checkpoint is not None:
        model.load_state_dict(restored.model_state)
    elif plan.warm_start is not None:
        model.load_state_dict(plan.warm_start.load_weights())
    else:
        apply_weights(model, plan.settings)


def resume(plan: WorkerPlan, worker: Worker, restored: Restored, began: float) -> State:
    """Where training continues (epoch, step, each rank's random streams), recorded by rank 0
    as this worker group's start."""
    settings, train_state = plan.settings, restored.train_state
    position = interruptions.resume_position(train_state, worker.world, settings.global_batch_size)
    step = int(train_state.get("step", 0))
    saved_rng = train_state.get("rng") or []
    carried = (0.0, 0)
    if len(saved_rng) == worker.world:  # the same ranks: each continues its own random streams
        set_rng_state(saved_rng[worker.rank])
        if position.skip_batches:
            carried = tuple(saved_rng[worker.rank].get("epoch_sums", carried))  # type: ignore[assignment]
    if position.note:
        print(f"trainctl: {position.note}", flush=True)
    if worker.rank == 0:
        checkpoint = restored.checkpoint
        run_folder.start_attempt(
            settings.run_dir,
            invocation=plan.invocation,
            start_epoch=position.start_epoch,
            world_size=worker.world,
            restored_from=str(checkpoint) if checkpoint else None,
            resumed_step=step if checkpoint else None,
            interruption=interruption_on_start(plan, checkpoint, train_state, step),
            resume_note=position.note or None,
            data=plan.info.trained_on(),
        )
    return State(
        start_epoch=position.start_epoch,
        step=step,
        skip_batches=position.skip_batches,
        carried=carried,
        progress=early_stop.Progress.of(train_state.get("early_stop")),
        clock=RunClock.resumed(train_state.get("clock"), worker.world, since=began),
    )


# --- one epoch --------------------------------------------------------------------------------
@dataclass
class EpochSums:
    """This rank's running figures for one epoch (the loss sum stays on the device)."""

    started: float
    loss_sum: torch.Tensor
    carried_rows: int
    epoch_step: int  # steps of this epoch done, those before a mid-epoch resume included
    seen: int = 0
    first_rows: int = 0
    first_batch_at: float | None = None
    first_step_done: float | None = None

    @property
    def trained(self) -> int:
        return self.seen + self.carried_rows  # this epoch's rows, before a resume included


def train_epoch(
    plan: WorkerPlan,
    worker: Worker,
    parts: Parts,
    data: Data,
    state: State,
    watch: CheckpointWatch,
    epoch: int,
) -> EpochSums:
    parts.model.train()
    loss, rows = state.carried if epoch == state.start_epoch else (0.0, 0)
    # Summed on the device: a per-step .item() would make the CPU wait for every step.
    sums = EpochSums(
        started=time.monotonic(),
        loss_sum=torch.full((), float(loss), dtype=torch.float64, device=worker.device),
        carried_rows=int(rows),
        epoch_step=state.skip_batches,
    )
    skip, state.skip_batches = state.skip_batches, 0  # only the resumed epoch skips
    for images, labels in epoch_batches(
        data.train, batch_size=data.batch_size, info=plan.info, device=worker.device,
        epoch=epoch, seed=plan.settings.seed, shuffle=True, rank=worker.rank, skip_batches=skip,
    ):  # fmt: skip
        sums.first_batch_at = sums.first_batch_at or time.monotonic()
        loss_value = train_step(plan, worker, parts, data, state, images, labels, epoch)
        sums.epoch_step += 1
        sums.seen += labels.numel()
        sums.loss_sum += loss_value.detach().double() * labels.numel()
        # test-only, on the images as read: the sample log identifies them by their pixels
        log_samples(images, epoch, state.step, worker.rank)
        if sums.first_step_done is None:  # one wait per epoch: the first step ends here
            sync(worker.device)
            sums.first_step_done, sums.first_rows = time.monotonic(), sums.seen
        reason = watch.after_step(state.step, epoch)
        if reason is not None:
            mid_epoch_checkpoint(plan, worker, parts, state, sums, watch, epoch, reason)
    return sums


def train_step(
    plan: WorkerPlan,
    worker: Worker,
    parts: Parts,
    data: Data,
    state: State,
    images: torch.Tensor,
    labels: torch.Tensor,
    epoch: int,
) -> torch.Tensor:
    """One optimizer step on one batch; returns its loss."""
    settings = plan.settings
    images = augment(
        images, settings.augment, seed=settings.seed, epoch=epoch, rank=worker.rank,
        step=state.step,
    )  # fmt: skip
    images = images.contiguous(memory_format=parts.batch_format)
    for group in parts.optimizer.param_groups:
        group["lr"] = finetune.scaled_lr(group, data.schedule(state.step))
    with autocast(worker.device, parts.amp_dtype):
        loss = parts.loss_fn(parts.forward(images), labels)
    parts.optimizer.zero_grad(set_to_none=True)
    parts.scaler.scale(loss).backward()
    parts.scaler.step(parts.optimizer)
    parts.scaler.update()
    state.step += 1
    return loss


def mid_epoch_checkpoint(
    plan: WorkerPlan,
    worker: Worker,
    parts: Parts,
    state: State,
    sums: EpochSums,
    watch: CheckpointWatch,
    epoch: int,
    reason: str,
) -> None:
    """A step checkpoint (TRAIN_CHECKPOINT_EVERY) or a just-in-time one (preemption, SIGTERM),
    after which a just-in-time group stops training and waits to be torn down."""
    metric = plan.settings.checkpoint_metric
    reported = report_checkpoint(
        rank=worker.rank, world=worker.world, metrics={}, model=parts.model,
        optimizer=parts.optimizer, scaler=parts.scaler, epochs_done=epoch - 1, step=state.step,
        epoch_step=sums.epoch_step, reason=reason, unranked={metric: worst(metric)},
        class_names=plan.info.class_names, epoch_sums=[float(sums.loss_sum), sums.trained],
        carried=state.saved(),
    )  # fmt: skip
    watch.saved(state.step)
    jit = reason != "interval"
    if worker.rank == 0:  # what the next start counts lost steps from
        # Its folder: where a signing driver waits for the controller's witness before it
        # exits (app/run/signals.py).
        # Its invocation: progress.json carries it into the next driver's writes, where it
        # must not answer that driver's own stop (app/run/signals.py stop_answer).
        extra = {"jit": {"reason": reason, "step": state.step, "checkpoint_s": reported.seconds,
                         "checkpoint": reported.folder, "invocation": plan.invocation}}  # fmt: skip
        run_folder.write_progress(
            plan.settings.run_dir, plan.invocation, epoch=epoch, step=state.step,
            checkpoint_step=state.step, **(extra if jit else {}),
        )  # fmt: skip
    if jit:
        watch.hold_after(reason)


def validate_epoch(
    plan: WorkerPlan,
    worker: Worker,
    parts: Parts,
    data: Data,
    state: State,
    sums: EpochSums,
    epoch: int,
) -> dict[str, float]:
    """The epoch's record: training figures summed over ranks, then validation's."""
    # Steady-state throughput: after the epoch's first step (which compiles the model in
    # the first epoch), so that compilation and the wait for the data pipeline to start are
    # reported on their own (compile_s, first_batch_s). Workers' rates add up.
    sync(worker.device)
    first_batch_at = sums.first_batch_at or sums.started  # an empty shard: no batch ever came
    first_step_done = sums.first_step_done or first_batch_at
    loss_sum, seen_all, rate, empty_ranks = all_reduce(
        [sums.loss_sum, float(sums.trained), steady_rate(sums, first_batch_at, first_step_done),
         float(sums.trained == 0)],
        worker.device,
    )  # fmt: skip
    if empty_ranks:  # never report an epoch that some worker trained on nothing
        raise RuntimeError(
            f"{int(empty_ranks)} of {worker.world} workers got no training rows in epoch "
            f"{epoch} (train has {plan.info.train_rows} rows); use fewer workers or more data"
        )
    val_loss, val_accuracy = evaluate(
        parts.model, data.valid, plan.info, worker.device, parts.amp_dtype
    )
    first_step_s = round(first_step_done - first_batch_at, 3)
    metrics = new_record(
        epoch=epoch,
        train_loss=loss_sum / max(seen_all, 1.0),
        val_loss=val_loss,
        val_accuracy=val_accuracy,
        lr=data.schedule(state.step),
        epoch_time_s=round(time.monotonic() - sums.started, 3),
        images_per_s=round(rate, 1),
        first_batch_s=round(first_batch_at - sums.started, 3),
        first_step_s=first_step_s,
        compile_s=first_step_s if state.compile_pending else 0.0,
        compiled=1.0 if parts.forward.active else 0.0,
        **state.clock.reading(),
    )
    if worker.device.type == "cuda":
        metrics["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated(worker.device) / 2**30, 2)
    return metrics


def steady_rate(sums: EpochSums, first_batch_at: float, first_step_done: float) -> float:
    ended = time.monotonic()
    if sums.seen > sums.first_rows and ended > first_step_done:
        return (sums.seen - sums.first_rows) / (ended - first_step_done)
    # a one-step epoch: its only step is all there is to time
    return sums.seen / (ended - first_batch_at) if ended > first_batch_at else 0.0


def end_epoch(
    plan: WorkerPlan,
    worker: Worker,
    parts: Parts,
    state: State,
    watch: CheckpointWatch,
    epoch: int,
    metrics: dict[str, float],
    on_epoch: EpochHook,
) -> bool:
    """Report and checkpoint the epoch; True when training stops early after it."""
    state.progress, stop = early_stop.after_epoch(
        plan.stop_rule, state.progress, epoch, plan.settings.epochs, metrics
    )
    state.compile_pending = False
    clock = {key: metrics[key] for key in ("run_time_s", "worker_time_s")}
    report_checkpoint(
        rank=worker.rank, world=worker.world, metrics=metrics, model=parts.model,
        optimizer=parts.optimizer, scaler=parts.scaler, epochs_done=epoch, step=state.step,
        class_names=plan.info.class_names, carried=state.saved(clock),
        stopped=stop.record() if stop else None,
        final=stop is not None or epoch == plan.settings.epochs,
    )  # fmt: skip
    watch.saved(state.step)
    if worker.rank == 0:
        run_folder.record_epoch(plan.settings.run_dir, metrics)
        on_epoch(metrics)
        if stop is not None:
            print(f"trainctl: {stop}", flush=True)
    return stop is not None


# --- small helpers ----------------------------------------------------------------------------
def worst(metric: str) -> float:
    return float("-inf") if retention.higher_is_better(metric) else float("inf")


def cosine_with_warmup(peak: float, warmup: int, total: int) -> Callable[[int], float]:
    def lr_at(step: int) -> float:
        if step < warmup:
            return peak * (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return peak * 0.5 * (1.0 + math.cos(math.pi * progress))

    return lr_at


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
