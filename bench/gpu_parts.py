"""The reference points of bench/gpu.sh: (a) the tutorial's Ray Train + Ray Data pipeline and
(c) the bare loop on batches already in GPU memory. bench/gpu_vit.py runs them beside (b).

(a) is the tutorial's code shape: `ray.data.read_parquet(...).map(per-row torchvision
    transform)`, `iter_torch_batches` in a `TorchTrainer` with one GPU worker, fp32, plain AdamW.
    No validation pass is timed, which if anything flatters it.
(c) is the same model and optimizer settings with nothing around them: normalized float32 NCHW
    images and labels held on the GPU, a random permutation per epoch, bf16 autocast, fused
    AdamW, eager and through torch.compile: what this GPU does at most on this model.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench.ingest import tutorial_transform

LR, WEIGHT_DECAY = 1e-3, 0.01


def vit(shape: dict[str, int], device: Any) -> Any:
    import torch
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    return VisionTransformer(**shape).to(device)


def peak_gib(device: Any) -> float | None:
    import torch

    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 2)


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- (a) the tutorial's Ray Train + Ray Data pipeline ------------------------------------------
def _tutorial_worker(config: dict[str, Any]) -> None:
    import ray.train
    import ray.train.torch
    import torch
    from torch import nn

    device = ray.train.torch.get_device()
    model = ray.train.torch.prepare_model(vit(config["shape"], device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    loss_fn = nn.CrossEntropyLoss()
    shard = ray.train.get_dataset_shard("train")
    log = Path(config["log"])
    for epoch in range(1, config["epochs"] + 1):
        started, seen = time.perf_counter(), 0
        model.train()
        for batch in shard.iter_torch_batches(batch_size=config["batch"], device=device):
            loss = loss_fn(model(batch["image"]), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen += len(batch["label"])
        _sync(device)
        took = time.perf_counter() - started
        record = {"epoch": epoch, "epoch_s": took, "images": seen, "peak_gpu_gib": peak_gib(device)}
        with log.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        ray.train.report({"epoch": epoch, "epoch_s": took})


def tutorial(
    work: Path, shape: dict[str, int], *, batch: int, epochs: int, gpu: bool
) -> list[dict[str, Any]]:
    """(a): per-epoch records from the tutorial's pipeline; Ray must already be initialised."""
    import ray.data
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    log = work / "tutorial-epochs.jsonl"
    log.unlink(missing_ok=True)
    dataset = ray.data.read_parquet(str(work / "train")).map(tutorial_transform())
    trainer = TorchTrainer(
        _tutorial_worker,
        train_loop_config={"shape": shape, "batch": batch, "epochs": epochs, "log": str(log)},
        scaling_config=ScalingConfig(num_workers=1, use_gpu=gpu),
        run_config=RunConfig(name="tutorial", storage_path=str(work / "ray-results")),
        datasets={"train": dataset},
    )
    trainer.fit()
    return [json.loads(line) for line in log.read_text().splitlines()]


# --- (c) the bare loop on GPU-resident batches -----------------------------------------------
def bare_loop(
    images: Any,
    labels: Any,
    shape: dict[str, int],
    device: Any,
    *,
    batch: int,
    compiled: str,
    epochs: int = 2,
) -> dict[str, Any]:
    """(c): `compiled` is "" (eager), a torch.compile backend (whole model) or "regional" (each
    encoder block on its own, which compiles one block's code and reuses it)."""
    import torch
    from torch import nn

    model = vit(shape, device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, fused=device.type == "cuda"
    )
    forward: Any = model
    if compiled == "regional":
        for block in model.encoder.layers:
            block.compile()
    elif compiled:
        forward = torch.compile(model, backend=compiled)
    loss_fn = nn.CrossEntropyLoss()
    steps = max(1, len(labels) // batch)

    def step(index: Any) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_fn(forward(images[index]), labels[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    started = time.perf_counter()
    for _ in range(3):  # kernel selection, and compilation when compiled
        step(torch.randperm(len(labels), device=device)[:batch])
    _sync(device)
    warmup_s = time.perf_counter() - started
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rates = []
    for _ in range(epochs):
        order = torch.randperm(len(labels), device=device)
        started = time.perf_counter()
        for i in range(steps):
            step(order[i * batch : (i + 1) * batch])
        _sync(device)
        rates.append(steps * batch / (time.perf_counter() - started))
    return {
        "images_per_s": round(max(rates), 1),
        "warmup_s": round(warmup_s, 2),
        "peak_gpu_gib": peak_gib(device),
    }


def app_feed(data_dir: Path, batch: int, device: Any) -> Any:
    """(d)'s batches: the app's own pipeline (cached dataset, epoch_batches) in this process,
    made contiguous NCHW as app/training/loop.py does for the ViT; a function of the epoch."""
    from app.data.cache import cache_datasets
    from app.data.kinds import build_datasets, dataset_kind
    from app.data.pipeline import epoch_batches
    from app.settings import TrainSettings

    settings = TrainSettings(
        dataset="parquet", data_path=data_dir, num_workers="1", global_batch_size=batch
    )
    kind = dataset_kind(settings.dataset)
    info, _ = kind.ensure(kind.location(settings.data_path), settings)
    train = cache_datasets(build_datasets(settings, info), settings, info)[0]["train"]

    def batches(epoch: int) -> Any:
        for images, labels in epoch_batches(
            train.iterator(), batch_size=batch, info=info, device=device,
            epoch=epoch, seed=0, shuffle=True, drop_last=True,
        ):  # fmt: skip
            yield images.contiguous(), labels

    return batches


def fed_loop(
    feed: Any, shape: dict[str, int], device: Any, *, backend: str, epochs: int = 3
) -> dict[str, Any]:
    """(d): the bare compiled step fed by the app's pipeline: tells the feed's cost from the
    train loop's."""
    import torch
    from torch import nn

    model = vit(shape, device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, fused=device.type == "cuda"
    )
    forward = torch.compile(model, backend=backend)
    loss_fn = nn.CrossEntropyLoss()
    rates = []
    for epoch in range(epochs):
        seen, started = 0, None
        for images, labels in feed(epoch):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = loss_fn(forward(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if started is None:  # the first step (compilation, feed start) is not timed
                _sync(device)
                started = time.perf_counter()
            else:
                seen += len(labels)
        _sync(device)
        if started is not None and seen:
            rates.append(seen / (time.perf_counter() - started))
    later = rates[1:] or rates
    return {"images_per_s": round(max(later), 1), "peak_gpu_gib": peak_gib(device)}


def resident_batches(images: Any, labels: Any, device: Any) -> tuple[Any, Any]:
    """The whole train set normalized as the tutorial does ((x/255 - 0.5) / 0.5), NCHW, on the
    device."""
    import torch

    x = torch.from_numpy(images).to(device).permute(0, 3, 1, 2).contiguous().float()
    x = (x / 255.0 - 0.5) / 0.5
    return x, torch.from_numpy(labels).to(device)
