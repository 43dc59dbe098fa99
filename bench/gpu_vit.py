"""One epoch of the tutorial's CIFAR-10 ViT on one GPU, the tutorial's way against the app's way.

  tutorial: a torch DataLoader that turns each image into a PIL image, then ToTensor + Normalize
            on the CPU, one sample at a time; float32 batches copied to the GPU; fp32 training.
  app:      the app's own pipeline (`build_datasets` + `cache_datasets` + `epoch_batches`: uint8
            rows from Parquet, read once, normalized on the GPU into channels_last batches) and
            bf16 autocast, as `trainctl train` with TRAIN_AMP=bf16 runs its first epoch;
  app-nchw: the same with each batch made contiguous NCHW, to show whether channels_last helps
            this model (a ViT has one convolution, the patch embedding).

Model and optimizer are the tutorial's for both: ViT image 32, patch 4, 12 layers, 8 heads,
hidden 384, MLP 768; global batch 512; AdamW lr 1e-3, weight decay 0.01. Data is synthetic and
CIFAR-shaped (50,000 train images), generated locally: nothing is downloaded. Each variant first
takes three untimed steps so CUDA start-up and kernel selection are not billed to either.
Usage (bench/gpu.sh wraps it): python -m bench.gpu_vit [--images 50000] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import cifar_arrays, ratio, result_line, say, write_tensor_parquet

VIT = {"image_size": 32, "patch_size": 4, "num_layers": 12, "num_heads": 8, "hidden_dim": 384}
VIT |= {"mlp_dim": 768, "num_classes": 10}
# --smoke: a one-layer, narrow ViT that checks the script (on CPU), not the GPU.
TINY_VIT = VIT | {"num_layers": 1, "num_heads": 2, "hidden_dim": 64, "mlp_dim": 128}
BATCH, LR, WEIGHT_DECAY, WARMUP_STEPS = 512, 1e-3, 0.01, 3


def _model(shape: dict[str, int], device: Any) -> Any:
    import torch
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    return VisionTransformer(**shape).to(device)


def _train(
    model: Any,
    batches: Iterable[tuple[Any, Any]],
    device: Any,
    *,
    bf16: bool,
    nchw: bool,
    limit: int | None = None,
) -> int:
    import torch
    from torch import nn

    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    loss_fn = nn.CrossEntropyLoss()
    seen = 0
    model.train()
    for step, (images, labels) in enumerate(batches):
        if limit is not None and step >= limit:
            break
        images, labels = images.to(device, non_blocking=True), labels.to(device)
        if nchw:
            images = images.contiguous()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        seen += int(labels.shape[0])
    _sync(device)
    return seen


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


class TutorialImages:
    """What torchvision's CIFAR10 dataset does per item: PIL image, then the transform."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        from torchvision import transforms

        self.images, self.labels = images, labels
        self.transform = transforms.Compose(
            [transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))]
        )

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        return self.transform(Image.fromarray(self.images[index])), int(self.labels[index])


def tutorial_batches(images: np.ndarray, labels: np.ndarray, batch: int) -> Iterable[Any]:
    from torch.utils.data import DataLoader

    return DataLoader(TutorialImages(images, labels), batch_size=batch, shuffle=True)


def app_batches(data_dir: Path, batch: int, device: Any) -> Iterable[Any]:
    from app.data import build_datasets, cache_datasets, ensure_dataset, epoch_batches
    from app.settings import TrainSettings

    settings = TrainSettings(
        dataset="parquet", data_path=data_dir, num_workers="1", global_batch_size=batch
    )
    info = ensure_dataset(settings)
    # One epoch, timed from here: with the cache, the read before the first batch counts.
    train = cache_datasets(build_datasets(settings, info), settings, info)[0]["train"]
    return epoch_batches(
        train.iterator(), batch_size=batch, info=info, device=device, epoch=1, seed=0, shuffle=True
    )


def run_variant(name: str, args: argparse.Namespace, device: Any, data: dict[str, Any]) -> dict:
    import torch

    app_way, nchw = name.startswith("app"), name == "app-nchw"
    shape = TINY_VIT if args.smoke else VIT

    def batches() -> Iterable[Any]:
        if app_way:
            return app_batches(data["dir"], args.batch, device)
        return tutorial_batches(data["images"], data["labels"], args.batch)

    model = _model(shape, device)
    _train(model, batches(), device, bf16=app_way, nchw=nchw, limit=WARMUP_STEPS)
    model = _model(shape, device)  # fresh weights for the timed epoch
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    seen = _train(model, batches(), device, bf16=app_way, nchw=nchw)
    epoch_s = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    figures = {"epoch_s": round(epoch_s, 2), "images_per_s": round(seen / epoch_s, 1)}
    figures["peak_gpu_gib"] = round(peak, 2) if peak is not None else None
    say(
        f"  {name:<9} epoch {epoch_s:8.2f}s  {seen / epoch_s:10,.0f} images/s  peak GPU memory "
        + (f"{peak:.2f} GiB" if peak is not None else "n/a (no GPU)")
    )
    return figures


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--variants", default="tutorial,app,app-nchw")
    parser.add_argument("--smoke", action="store_true", help="tiny ViT and data; runs on CPU")
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS"))
    args = parser.parse_args(argv)
    if args.smoke:
        args.images, args.batch = 256, 64

    import ray
    import ray.data
    import torch

    if torch.cuda.is_available():
        device = torch.device("cuda")
        name = torch.cuda.get_device_name(device)
    elif args.smoke:
        device, name = torch.device("cpu"), "CPU (smoke run: figures mean nothing)"
    else:
        raise SystemExit("bench/gpu.sh needs an NVIDIA GPU (or --smoke to check it on CPU)")

    images, labels = cifar_arrays(args.images, seed=1)
    work = Path(tempfile.mkdtemp(prefix="trainctl-gpu-"))
    write_tensor_parquet(work / "train", images, labels, files=max(1, args.images // 5000))
    valid_images, valid_labels = cifar_arrays(args.batch, seed=2)
    write_tensor_parquet(work / "valid", valid_images, valid_labels, files=1)
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": "WARNING"}
    if args.address:
        ray.init(address=args.address, **quiet)
    else:
        ray.init(address="local", include_dashboard=False, **quiet)
    ray.data.DataContext.get_current().enable_progress_bars = False

    say(f"gpu: ViT on {args.images:,} synthetic CIFAR-shaped images, batch {args.batch}, {name}")
    data = {"images": images, "labels": labels, "dir": work}
    figures = {v: run_variant(v, args, device, data) for v in args.variants.split(",")}
    ray.shutdown()

    result: dict[str, Any] = {"device": name, "images": args.images, "variants": figures}
    if "tutorial" in figures:
        for other in (v for v in figures if v != "tutorial"):
            speedup = ratio(figures["tutorial"]["epoch_s"], figures[other]["epoch_s"])
            result[f"{other}_speedup"] = speedup
            say(f"{other} is {speedup:.2f}x the tutorial's speed")
    print(result_line("gpu", result), flush=True)
    return result


if __name__ == "__main__":
    main()
