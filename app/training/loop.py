"""What every Ray Train worker runs: build, maybe resume, then train and validate epoch by epoch.

Each epoch ends the same way on every rank: global validation metrics (all-reduced, so every
worker's shard counts), one `ray.train.report` per rank, and a checkpoint written by rank 0 only.
Inside an epoch, app/training/checkpoint_watch.py decides (the same on every rank) when a
mid-epoch checkpoint is due: TRAIN_CHECKPOINT_EVERY, a node preemption or the driver's SIGTERM.
A resume from a mid-epoch checkpoint skips the batches already trained (app/run/interruptions).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from torch import nn

from app.data.pipeline import epoch_batches
from app.data.schema import DatasetInfo
from app.runfolder import checkpoints, interruptions, retention
from app.runfolder import folder as run_folder
from app.runfolder.epoch_record import new_record
from app.settings import TrainSettings
from app.storage.location import RunPath, in_storage
from app.training import finetune
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
from app.training.sample_log import log_samples
from app.training.steps import steps_per_epoch as epoch_steps
from app.training.weights import apply_weights
from app.training.worker_hooks import EpochHook, worker_hooks


def train_loop_per_worker(config: dict[str, Any]) -> None:
    # Logs to the run folder and the epoch gauges live in app/training/worker_hooks.py.
    with worker_hooks(config, ray.train.get_context().get_world_rank()) as on_epoch:
        _train_loop(config, on_epoch)


def _train_loop(config: dict[str, Any], on_epoch: EpochHook) -> None:
    settings: TrainSettings = config["settings"]
    info: DatasetInfo = config["info"]
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()
    run_dir = settings.run_dir
    torch.manual_seed(settings.seed)

    # Resume from Ray's latest committed checkpoint (a worker failure inside this run) or else
    # from the newest intact checkpoint the driver found on storage (a rerun of the same run).
    resume = _resume_point(config.get("resume_from"), settings)
    model = build_model(settings.model, info, settings.vit_patch)
    if resume is None and config.get("warm_start") is not None:
        model.load_state_dict(config["warm_start"].load_weights())  # verified in preflight
    elif resume is None:
        apply_weights(model, settings)  # TRAIN_WEIGHTS, if set
    train_state: dict[str, Any] = {}
    if resume is not None:
        model_state, train_state = checkpoints.load_train_state(resume)
        model.load_state_dict(model_state)
    batch_format = memory_format(settings.model)
    if uses_channels_last(settings.model):
        model = model.to(memory_format=torch.channels_last)

    trainable = finetune.param_groups(model, settings)  # before DDP: it syncs what trains
    # Weights are loaded into the plain module before it is wrapped (DDP) and compiled, so
    # checkpoints never see compile's `_orig_mod.` names and resume works either way.
    model = ray.train.torch.prepare_model(model)
    if settings.compile == "on":  # never on the shared storage: its files would run here
        private_compile_cache()
    forward = CompiledModel(model, enabled=settings.compile == "on")
    optimizer = make_optimizer(trainable, settings, device)
    scaler = torch.amp.GradScaler(device.type, enabled=settings.amp == "fp16")
    if train_state:
        optimizer.load_state_dict(train_state["optimizer"])
        scaler.load_state_dict(train_state["scaler"])
    position = interruptions.resume_position(train_state, world, settings.global_batch_size)
    start_epoch, skip_batches = position.start_epoch, position.skip_batches
    step = int(train_state.get("step", 0))
    saved_rng = train_state.get("rng") or []
    carried = (0.0, 0)  # the resumed epoch's loss sum and rows on this rank before the stop
    if len(saved_rng) == world:  # the same ranks: each continues its own random streams
        set_rng_state(saved_rng[rank])
        if skip_batches:
            carried = tuple(saved_rng[rank].get("epoch_sums", carried))  # type: ignore[assignment]
    if position.note:
        print(f"trainctl: {position.note}", flush=True)

    if rank == 0:
        run_folder.start_attempt(
            run_dir,
            invocation=config["invocation"],
            start_epoch=start_epoch,
            world_size=world,
            restored_from=str(resume) if resume else None,
            resumed_step=step if resume else None,
            interruption=interruption_on_start(config, resume, train_state, step),
            resume_note=position.note or None,
        )
    watch = CheckpointWatch(
        settings.checkpoint_every, invocation=config["invocation"], rank=rank, world=world,
        device=device, run_dir=run_dir, step=step,
    )  # fmt: skip
    unranked = {settings.checkpoint_metric: _worst(settings.checkpoint_metric)}

    batch_size = max(1, settings.global_batch_size // world)
    steps_per_epoch = epoch_steps(info.train_rows, settings.global_batch_size)
    schedule = _cosine_with_warmup(settings.lr, steps_per_epoch, steps_per_epoch * settings.epochs)
    train_shard = ray.train.get_dataset_shard("train")
    valid_shard = ray.train.get_dataset_shard("valid")
    loss_fn = nn.CrossEntropyLoss()
    amp_dtype = autocast_dtype(settings.amp, device)
    compile_pending = forward.active

    for epoch in range(start_epoch, settings.epochs + 1):
        started = time.monotonic()

        model.train()
        seen, first_rows = 0, 0
        carried_loss, carried_rows = carried if epoch == start_epoch else (0.0, 0)
        # Summed on the device: a per-step .item() would make the CPU wait for every step.
        loss_sum = torch.full((), float(carried_loss), dtype=torch.float64, device=device)
        first_batch_at = first_step_done = None
        epoch_step, skip_batches = skip_batches, 0  # only the resumed epoch skips
        for images, labels in epoch_batches(
            train_shard, batch_size=batch_size, info=info, device=device,
            epoch=epoch, seed=settings.seed, shuffle=True, rank=rank, skip_batches=epoch_step,
        ):  # fmt: skip
            first_batch_at = first_batch_at or time.monotonic()
            samples = images  # as read: the test-only sample log identifies them by their pixels
            images = augment(
                images, settings.augment, seed=settings.seed, epoch=epoch, rank=rank, step=step
            )
            images = images.contiguous(memory_format=batch_format)
            for group in optimizer.param_groups:
                group["lr"] = finetune.scaled_lr(group, schedule(step))
            with _autocast(device, amp_dtype):
                loss = loss_fn(forward(images), labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            step += 1
            epoch_step += 1
            seen += labels.numel()
            loss_sum += loss.detach().double() * labels.numel()
            log_samples(samples, epoch, step, rank)  # test-only; nothing unless a test sets it
            if first_step_done is None:  # one wait per epoch: the first step ends here
                _sync(device)
                first_step_done, first_rows = time.monotonic(), seen
            reason = watch.after_step(step, epoch)
            if reason is not None:
                took = report_checkpoint(
                    rank=rank, world=world, metrics={}, model=model, optimizer=optimizer,
                    scaler=scaler, epochs_done=epoch - 1, step=step, epoch_step=epoch_step,
                    reason=reason, unranked=unranked, class_names=info.class_names,
                    epoch_sums=[float(loss_sum), seen + int(carried_rows)],
                )  # fmt: skip
                watch.saved(step)
                jit = reason != "interval"
                if rank == 0:  # what the next start counts lost steps from
                    extra = {"jit": {"reason": reason, "step": step, "checkpoint_s": took}}
                    run_folder.write_progress(
                        run_dir, config["invocation"], epoch=epoch, step=step,
                        checkpoint_step=step, **(extra if jit else {}),
                    )  # fmt: skip
                if jit:
                    watch.hold_after(reason)

        # Steady-state throughput: after the epoch's first step (which compiles the model in
        # the first epoch), so that compilation and the wait for the data pipeline to start are
        # reported on their own (compile_s, first_batch_s). Workers' rates add up.
        _sync(device)
        first_batch_at = first_batch_at or started  # an empty shard: no batch ever came
        first_step_done = first_step_done or first_batch_at
        ended = time.monotonic()
        if seen > first_rows and ended > first_step_done:
            steady = (seen - first_rows) / (ended - first_step_done)
        else:  # a one-step epoch: its only step is all there is to time
            steady = seen / (ended - first_batch_at) if ended > first_batch_at else 0.0
        trained = seen + int(carried_rows)  # this epoch's rows, before a resume included
        loss_sum, seen_all, rate, empty_ranks = _all_reduce(
            [loss_sum, float(trained), steady, float(trained == 0)], device
        )
        if empty_ranks:  # never report an epoch that some worker trained on nothing
            raise RuntimeError(
                f"{int(empty_ranks)} of {world} workers got no training rows in epoch {epoch} "
                f"(train has {info.train_rows} rows); use fewer workers or more data"
            )
        train_loss = loss_sum / max(seen_all, 1.0)
        val_loss, val_accuracy = _evaluate(model, valid_shard, info, device, amp_dtype)
        metrics = new_record(
            epoch=epoch,
            train_loss=train_loss,
            val_loss=val_loss,
            val_accuracy=val_accuracy,
            lr=schedule(step),
            epoch_time_s=round(time.monotonic() - started, 3),
            images_per_s=round(rate, 1),
            first_batch_s=round(first_batch_at - started, 3),
            first_step_s=round(first_step_done - first_batch_at, 3),
            compile_s=round(first_step_done - first_batch_at, 3) if compile_pending else 0.0,
            compiled=1.0 if forward.active else 0.0,
        )
        if device.type == "cuda":
            metrics["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        compile_pending = False
        report_checkpoint(
            rank=rank, world=world, metrics=metrics, model=model, optimizer=optimizer,
            scaler=scaler, epochs_done=epoch, step=step, class_names=info.class_names,
        )  # fmt: skip
        watch.saved(step)
        if rank == 0:
            run_folder.record_epoch(run_dir, metrics)
            on_epoch(metrics)


def _resume_point(driver_choice: RunPath | None, settings: TrainSettings) -> RunPath | None:
    latest = ray.train.get_checkpoint()
    if latest is not None:  # Ray names it by its path inside the storage filesystem
        return in_storage(settings.storage_path, latest.path)
    return driver_choice


def _worst(metric: str) -> float:
    return float("-inf") if retention.higher_is_better(metric) else float("inf")


def _cosine_with_warmup(peak: float, warmup: int, total: int) -> Callable[[int], float]:
    def lr_at(step: int) -> float:
        if step < warmup:
            return peak * (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return peak * 0.5 * (1.0 + math.cos(math.pi * progress))

    return lr_at


def _autocast(device: torch.device, dtype: torch.dtype | None) -> torch.autocast:
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _all_reduce(values: list[float | torch.Tensor], device: torch.device) -> list[float]:
    tensor = torch.stack(
        [torch.as_tensor(v, dtype=torch.float64, device=device).reshape(()) for v in values]
    )
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def _evaluate(
    model: nn.Module,
    shard: Any,
    info: DatasetInfo,
    device: torch.device,
    autocast_dtype: torch.dtype | None,
) -> tuple[float, float]:
    """Validation loss and accuracy over every worker's shard, not just this one's.

    Every rank runs the unwrapped module with rank 0's buffers (BatchNorm statistics: what
    rank 0's checkpoint saves), broadcast once here. DDP's own forward would broadcast them
    before every batch, a collective that ranks whose validation shards differ in length
    (app/data/exact_split.py) would not all reach; evaluated this way, the recorded figures
    are those of the checkpointed model over every validation row, which is what `trainctl
    evaluate --split valid` reproduces.
    """
    module = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        with torch.no_grad():
            for buffer in module.buffers():
                dist.broadcast(buffer, src=0)
    return _validate(module, shard, info, device, autocast_dtype)


@torch.inference_mode()
def _validate(
    model: nn.Module,
    shard: Any,
    info: DatasetInfo,
    device: torch.device,
    autocast_dtype: torch.dtype | None,
) -> tuple[float, float]:
    model.eval()
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    # Sums stay on the device until the end: one wait for the whole pass, not three per batch.
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    count = 0.0
    for images, labels in epoch_batches(
        shard, batch_size=512, info=info, device=device, epoch=0, seed=0, shuffle=False
    ):
        with _autocast(device, autocast_dtype):
            logits = model(images)
        totals[0] += loss_fn(logits.float(), labels)
        totals[1] += (logits.argmax(dim=1) == labels).sum()
        count += labels.numel()
    loss_sum, correct, count = _all_reduce([totals[0], totals[1], count], device)
    return loss_sum / max(count, 1.0), correct / max(count, 1.0)
