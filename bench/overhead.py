"""Training overhead: the app's epoch under Ray Train against a bare PyTorch loop, same model.

  app:  `trainctl train`'s own driver (`app.cli.train`) with one CPU worker: Ray Train worker,
        Ray Data shard, the app's uint8 batches normalized in the loop, AMP off, validation and
        a checkpoint every epoch;
  bare: the same model, batch, optimizer and validation in this process, over tensors already
        normalized in memory; no Ray, no checkpoint.

Both augment every training batch the same way (TRAIN_AUGMENT=crop_flip: a random crop of the
4px-padded image and a random horizontal flip per image, batched): the app with
app/training/augment.py, the bare loop with the same few plain torch operations written out
here, so the ratio measures the app's overhead and not the augmentation's cost.

Both use one torch thread. Two figures per variant:

  samples_per_s (the target): training steps at steady state. The app's is what its worker
      records in metrics.jsonl (images_per_s: rows over the time from the end of the epoch's first
      step to its last step, so Ray Data feeding each step counts, its start-up does not); the
      bare loop's is rows over its training steps.
  epoch_samples_per_s: rows over the whole epoch. The app's epoch is timed from its own records
      (the attempt start, then each epoch's line in metrics.jsonl), so it includes everything
      between two epochs: the per-epoch pipeline start, validation, all-reduces, the checkpoint
      and its report; the bare epoch includes its validation.
Usage:
    python -m bench.overhead [--rows 4096] [--epochs 2] [--reps 3] [--augment none] [--smoke]
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.ray_cluster import join_or_start
from bench import common
from bench.ingest import pyarrow_numpy

THREADS = 1
MODEL, BATCH, LR, WEIGHT_DECAY = "cnn", 128, 1e-3, 0.01
AUGMENT = "crop_flip"
VALID_BATCH = 512  # the app's validation batch
TARGET = 0.95


def _load(folder: Path) -> tuple[Any, Any]:
    """Every row of a split as float tensors normalized to [-1, 1], NCHW, ready for the model.

    In channels_last memory, as the app hands batches to its model: convolutions on CPU run
    faster on it, and a bare loop without it would make the app look better than it is.
    """
    import numpy as np
    import torch

    parts = list(pyarrow_numpy(folder))
    images = torch.from_numpy(np.concatenate([p[0] for p in parts]))
    labels = torch.from_numpy(np.concatenate([p[1] for p in parts]))
    images = images.permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)
    images = images.contiguous(memory_format=torch.channels_last)  # indexing rows keeps it
    return images, labels


def crop_flip(images: Any, generator: Any) -> Any:
    """What a bare loop writes for batched crop-with-padding and flip: pad, pick each image's
    window and direction with one gather, no per-image loop."""
    import torch
    import torch.nn.functional as F

    rows, _, height, width = images.shape
    pad = max(1, min(height, width) // 8)
    padded = F.pad(images, (pad, pad, pad, pad))
    flips = torch.rand(rows, generator=generator) < 0.5
    dy = torch.randint(0, 2 * pad + 1, (rows, 1), generator=generator)
    dx = torch.randint(0, 2 * pad + 1, (rows, 1), generator=generator)
    ys = dy + torch.arange(height)
    xs = dx + torch.arange(width)
    xs = torch.where(flips[:, None], xs.flip(1), xs)
    picked = padded[torch.arange(rows)[:, None, None], :, ys[:, :, None], xs[:, None, :]]
    return picked.permute(0, 3, 1, 2)


def bare(data_dir: Path, epochs: int, augment: str) -> Callable[[], dict[str, float]]:
    import torch
    from torch import nn

    from app.training.model import build_model

    info = _info(data_dir)
    train_x, train_y = _load(data_dir / "train")
    valid_x, valid_y = _load(data_dir / "valid")

    def run() -> dict[str, float]:
        torch.manual_seed(0)
        model = build_model(MODEL, info)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
        loss_fn = nn.CrossEntropyLoss()
        times, step_times = [], []
        generator = torch.Generator().manual_seed(0)
        for _ in range(epochs):
            started = time.perf_counter()
            model.train()
            order = torch.randperm(len(train_y))
            for begin in range(0, len(order), BATCH):
                index = order[begin : begin + BATCH]
                batch = train_x[index]
                if augment == "crop_flip":
                    batch = crop_flip(batch, generator)
                loss = loss_fn(model(batch), train_y[index])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                loss.item()
            step_times.append(time.perf_counter() - started)
            model.eval()
            with torch.inference_mode():
                for begin in range(0, len(valid_y), VALID_BATCH):
                    logits = model(valid_x[begin : begin + VALID_BATCH])
                    (logits.argmax(dim=1) == valid_y[begin : begin + VALID_BATCH]).sum().item()
            times.append(time.perf_counter() - started)
        rows = len(train_y)
        return _figures(times, rows, [rows / t for t in step_times])

    return run


def app(data_dir: Path, storage: Path, epochs: int, augment: str) -> Callable[[], dict[str, float]]:
    from app.cli import train
    from app.settings import TrainSettings

    runs = iter(range(1, 1000))

    def run() -> dict[str, float]:
        settings = TrainSettings(
            dataset="parquet", data_path=data_dir, model=MODEL, epochs=epochs,
            global_batch_size=BATCH, lr=LR, weight_decay=WEIGHT_DECAY, num_workers="1",
            cpus_per_worker=THREADS, storage_path=storage, run_name=f"overhead-{next(runs)}",
            max_failures=0, amp="off", augment=augment,
        )  # fmt: skip
        train(settings)
        run_dir = settings.run_dir
        start = json.loads((run_dir / "attempts.jsonl").read_text().splitlines()[0])["time"]
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
        ends = [record["time"] for record in records]
        times = [b - a for a, b in zip([start, *ends], ends, strict=False)]
        rates = [record["images_per_s"] for record in records]
        return _figures(times, _info(data_dir).train_rows, rates)

    return run


def _figures(epoch_times: list[float], rows: int, step_rates: list[float]) -> dict[str, float]:
    # The median epoch, so one epoch hit by another process's burst does not decide the result.
    epoch_s = common.median(epoch_times)
    return {
        "samples_per_s": common.median(step_rates),
        "epoch_samples_per_s": rows / epoch_s,
        "epoch_s": epoch_s,
    }


def _info(data_dir: Path) -> Any:
    from app.data.kinds import dataset_kind
    from app.settings import TrainSettings

    settings = TrainSettings(dataset="parquet", data_path=data_dir, num_workers="1")
    kind = dataset_kind(settings.dataset)
    return kind.ensure(kind.location(settings.data_path), settings)[0]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common.ray_bench_arguments(__doc__, "tiny size, one rep", rows=4096, epochs=2, reps=3)
    parser.add_argument(
        "--augment", choices=("crop_flip", "none"), default=AUGMENT,
        help="augmentation on both sides (none: the figures before TRAIN_AUGMENT existed)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.epochs, args.reps = 512, 1, 1

    # Fixed threads on both sides: Ray's workers inherit this, the bare loop sets it below.
    os.environ["OMP_NUM_THREADS"] = str(THREADS)
    import ray
    import torch

    torch.set_num_threads(THREADS)
    data_dir = common.tutorial_dataset(args.rows, max(1, args.rows // 2048), valid_rows=VALID_BATCH)
    join_or_start(args.address)
    storage = Path(tempfile.mkdtemp(prefix="trainctl-overhead-"))

    steps = math.ceil(args.rows / BATCH)
    common.say(
        f"overhead: model {MODEL}, batch {BATCH}, {args.rows:,} rows ({steps} steps) + "
        f"{VALID_BATCH} validation rows per epoch, {args.epochs} epoch(s) per rep, "
        f"{THREADS} torch thread(s), augmentation {args.augment} on both sides"
    )
    variants = {
        "bare": bare(data_dir, args.epochs, args.augment),
        "app": app(data_dir, storage, args.epochs, args.augment),
    }
    figures = common.medians(common.interleave(variants, args.reps, say=common.say))
    ray.shutdown()
    shutil.rmtree(storage, ignore_errors=True)

    for name, values in figures.items():
        common.say(
            f"median {name:<5} training steps {values['samples_per_s']:8,.0f} samples/s, "
            f"whole epoch {values['epoch_samples_per_s']:8,.0f} samples/s "
            f"({values['epoch_s']:.2f}s)"
        )
    app_over_bare = common.ratio(figures["app"]["samples_per_s"], figures["bare"]["samples_per_s"])
    epoch_ratio = common.ratio(
        figures["app"]["epoch_samples_per_s"], figures["bare"]["epoch_samples_per_s"]
    )
    common.say(
        f"app/bare = {app_over_bare:.3f} (target >= {TARGET}); whole epoch {epoch_ratio:.3f}"
    )
    result = {
        "rows": args.rows,
        "epochs": args.epochs,
        "augment": args.augment,
        "reps": args.reps,
        "samples_per_s": {k: round(v["samples_per_s"], 1) for k, v in figures.items()},
        "epoch_samples_per_s": {k: round(v["epoch_samples_per_s"], 1) for k, v in figures.items()},
        "app_over_bare": app_over_bare,
        "epoch_app_over_bare": epoch_ratio,
        "targets_met": app_over_bare >= TARGET,
    }
    print(common.result_line("overhead", result), flush=True)
    return result


if __name__ == "__main__":
    main()
