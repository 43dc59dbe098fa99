"""What every Ray Train worker runs: build, maybe resume, then train and validate epoch by epoch.

Each epoch ends the same way on every rank: global validation metrics (all-reduced, so every
worker's shard counts), one `ray.train.report` per rank, and a checkpoint written by rank 0 only.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from torch import nn

from app import checkpoints, history
from app.data import DatasetInfo, epoch_batches
from app.model import build_model
from app.settings import TrainSettings


def train_loop_per_worker(config: dict[str, Any]) -> None:
    settings: TrainSettings = config["settings"]
    info: DatasetInfo = config["info"]
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()
    run_dir = settings.run_dir
    torch.manual_seed(settings.seed)

    # Resume from Ray's latest committed checkpoint (a worker failure inside this run) or else
    # from the newest intact checkpoint the driver found on storage (a rerun of the same run).
    resume = _resume_point(config.get("resume_from"))
    model = build_model(settings.model, info)
    if resume is None and settings.warm_start is not None:
        model.load_state_dict(checkpoints.load_weights(settings.warm_start))
    train_state: dict[str, Any] = {}
    if resume is not None:
        model_state, train_state = checkpoints.load_train_state(resume)
        model.load_state_dict(model_state)

    model = ray.train.torch.prepare_model(model)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay
    )
    scaler = torch.amp.GradScaler(device.type, enabled=settings.amp == "fp16")
    if train_state:
        optimizer.load_state_dict(train_state["optimizer"])
        scaler.load_state_dict(train_state["scaler"])
    start_epoch = int(train_state.get("epoch", 0)) + 1
    step = int(train_state.get("step", 0))

    if rank == 0:
        history.start_attempt(
            run_dir,
            invocation=config["invocation"],
            start_epoch=start_epoch,
            world_size=world,
            restored_from=str(resume) if resume else None,
        )

    batch_size = max(1, settings.global_batch_size // world)
    steps_per_epoch = max(1, math.ceil(info.train_rows / settings.global_batch_size))
    schedule = _cosine_with_warmup(settings.lr, steps_per_epoch, steps_per_epoch * settings.epochs)
    train_shard = ray.train.get_dataset_shard("train")
    valid_shard = ray.train.get_dataset_shard("valid")
    loss_fn = nn.CrossEntropyLoss()
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(settings.amp)

    for epoch in range(start_epoch, settings.epochs + 1):
        started = time.monotonic()

        model.train()
        seen, loss_sum = 0, 0.0
        first_batch_at = None
        for images, labels in epoch_batches(
            train_shard, batch_size=batch_size, info=info, device=device,
            epoch=epoch, seed=settings.seed, shuffle=True,
        ):  # fmt: skip
            first_batch_at = first_batch_at or time.monotonic()
            for group in optimizer.param_groups:
                group["lr"] = schedule(step)
            with _autocast(device, autocast_dtype):
                loss = loss_fn(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            step += 1
            seen += labels.numel()
            loss_sum += loss.detach().float().item() * labels.numel()

        # Steady-state throughput: from the first batch in hand to the last step, so that the
        # wait for the epoch's data pipeline to start is reported on its own (first_batch_s).
        # Workers train side by side, so their rates add up.
        first_batch_at = first_batch_at or started  # an empty shard: no batch ever came
        step_s = time.monotonic() - first_batch_at
        loss_sum, seen_all, rate = _all_reduce(
            [loss_sum, float(seen), seen / step_s if step_s > 0 else 0.0], device
        )
        train_loss = loss_sum / max(seen_all, 1.0)
        val_loss, val_accuracy = _evaluate(model, valid_shard, info, device, autocast_dtype)
        metrics = {
            "epoch": epoch,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
            "lr": schedule(step),
            "epoch_time_s": round(time.monotonic() - started, 3),
            "images_per_s": round(rate, 1),
            "first_batch_s": round(first_batch_at - started, 3),
        }
        _report(rank, metrics, model, optimizer, scaler, step)
        if rank == 0:
            history.record_epoch(run_dir, metrics)


def _resume_point(driver_choice: str | None) -> Path | None:
    latest = ray.train.get_checkpoint()
    if latest is not None:
        return Path(latest.path)
    return Path(driver_choice) if driver_choice else None


def _cosine_with_warmup(peak: float, warmup: int, total: int) -> Callable[[int], float]:
    def lr_at(step: int) -> float:
        if step < warmup:
            return peak * (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return peak * 0.5 * (1.0 + math.cos(math.pi * progress))

    return lr_at


def _autocast(device: torch.device, dtype: torch.dtype | None) -> torch.autocast:
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def _all_reduce(values: list[float], device: torch.device) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


@torch.inference_mode()
def _evaluate(
    model: nn.Module,
    shard: Any,
    info: DatasetInfo,
    device: torch.device,
    autocast_dtype: torch.dtype | None,
) -> tuple[float, float]:
    """Validation loss and accuracy over every worker's shard, not just this one's."""
    model.eval()
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    loss_sum, correct, count = 0.0, 0.0, 0.0
    for images, labels in epoch_batches(
        shard, batch_size=512, info=info, device=device, epoch=0, seed=0, shuffle=False
    ):
        with _autocast(device, autocast_dtype):
            logits = model(images)
        loss_sum += loss_fn(logits.float(), labels).item()
        correct += (logits.argmax(dim=1) == labels).sum().item()
        count += labels.numel()
    loss_sum, correct, count = _all_reduce([loss_sum, correct, count], device)
    return loss_sum / max(count, 1.0), correct / max(count, 1.0)


def _report(
    rank: int,
    metrics: dict[str, float],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    step: int,
) -> None:
    """Every rank reports; only rank 0 attaches the checkpoint (all ranks hold the same weights)."""
    if rank != 0:
        ray.train.report(metrics)
        return
    epoch = int(metrics["epoch"])
    unwrapped = model.module if hasattr(model, "module") else model
    # The files are complete here, so the copy to shared storage can run in the background
    # (ASYNC) while the next epoch trains: nothing writes to this folder again, Ray deletes it
    # once copied, commits the checkpoint only after the copy, keeps reports in order, and
    # waits for the last copy before the run ends. A copy cut short by a crash lacks files or
    # fails its checksums, and the next run sets it aside (app/checkpoints.py). BENCHMARKS.md
    # has the time this saves.
    folder = Path(tempfile.mkdtemp(prefix="trainctl-ckpt-"))
    checkpoints.write_checkpoint(
        folder,
        model_state=unwrapped.state_dict(),
        train_state={
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(),
            "epoch": epoch,
            "step": step,
        },
        epoch=epoch,
        metrics={k: float(v) for k, v in metrics.items()},
    )
    ray.train.report(
        metrics,
        checkpoint=ray.train.Checkpoint.from_directory(str(folder)),
        checkpoint_dir_name=checkpoints.dir_name(epoch),
        checkpoint_upload_mode=ray.train.CheckpointUploadMode.ASYNC,
        delete_local_checkpoint_after_upload=True,
    )
