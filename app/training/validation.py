"""The end-of-epoch validation pass: loss and accuracy over every worker's shard.

Every rank runs the unwrapped module with rank 0's buffers (BatchNorm statistics: what rank 0's
checkpoint saves), broadcast once here. DDP's own forward would broadcast them before every
batch, a collective that ranks whose validation shards differ in length
(app/data/exact_split.py) would not all reach; evaluated this way, the recorded figures are
those of the checkpointed model over every validation row, which is what `trainctl evaluate
--split valid` reproduces.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from app.data.pipeline import epoch_batches
from app.data.schema import DatasetInfo

VALID_BATCH = 512


def evaluate(
    model: nn.Module,
    shard: Any,
    info: DatasetInfo,
    device: torch.device,
    autocast_dtype: torch.dtype | None,
) -> tuple[float, float]:
    """(validation loss, validation accuracy), the same on every rank."""
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
        shard, batch_size=VALID_BATCH, info=info, device=device, epoch=0, seed=0, shuffle=False
    ):
        with autocast(device, autocast_dtype):
            logits = model(images)
        totals[0] += loss_fn(logits.float(), labels)
        totals[1] += (logits.argmax(dim=1) == labels).sum()
        count += labels.numel()
    loss_sum, correct, count = all_reduce([totals[0], totals[1], count], device)
    return loss_sum / max(count, 1.0), correct / max(count, 1.0)


def autocast(device: torch.device, dtype: torch.dtype | None) -> torch.autocast:
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def all_reduce(values: list[float | torch.Tensor], device: torch.device) -> list[float]:
    """The sums over all ranks (a collective: every rank calls it with as many values)."""
    tensor = torch.stack(
        [torch.as_tensor(v, dtype=torch.float64, device=device).reshape(()) for v in values]
    )
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()
