"""Accuracy with and without TRAIN_AUGMENT on digits: the same epochs, seeds and schedule.

The app's own `cnn` and `app/training/augment.py` (crop: 1px padding on the 8x8 digits; auto
never flips digits), trained in a plain single-process loop on the 1,437/360 split of
scikit-learn's digits with the app's recipe (AdamW, lr 3e-3, weight decay 0.01, one warm-up
epoch then cosine decay, batch 64). No Ray: this measures what augmentation does to learning,
not throughput, so it runs in about 15 CPU-seconds and is not part of `make bench`.

Usage:
    python -m bench.augment_digits [--epochs 6] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import torch
import torch.nn.functional as F

from app.data.schema import DatasetInfo
from app.training.augment import augment
from app.training.model import build_model

BATCH, LR, WEIGHT_DECAY = 64, 3e-3, 0.01


def _data() -> tuple[torch.Tensor, ...]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    pixels = (digits.images * 255 / 16).astype(np.uint8)
    train_x, valid_x, train_y, valid_y = train_test_split(
        pixels, digits.target, test_size=0.2, random_state=0
    )
    mean, std = train_x.mean() / 255, train_x.std() / 255

    def normalized(images: np.ndarray) -> torch.Tensor:
        return ((torch.tensor(images).float() / 255 - mean) / std)[:, None]

    return (
        normalized(train_x),
        torch.tensor(train_y),
        normalized(valid_x),
        torch.tensor(valid_y),
    )


def accuracy(mode: str, seed: int, epochs: int, data: tuple[torch.Tensor, ...]) -> float:
    train_x, train_y, valid_x, valid_y = data
    info = DatasetInfo(1, 8, 8, 10, len(train_y), len(valid_y), "raw", (0.0,), (1.0,))
    torch.manual_seed(seed)
    model = build_model("cnn", info)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    warmup = math.ceil(len(train_y) / BATCH)
    total, step = warmup * epochs, 0
    for epoch in range(1, epochs + 1):
        model.train()
        order = torch.randperm(len(train_y), generator=torch.Generator().manual_seed(epoch))
        for begin in range(0, len(order), BATCH):
            index = order[begin : begin + BATCH]
            images = augment(train_x[index], mode, seed=seed, epoch=epoch, rank=0, step=step)
            progress = (step - warmup) / max(1, total - warmup)
            lr = (
                LR * (step + 1) / warmup
                if step < warmup
                else LR * 0.5 * (1 + math.cos(math.pi * progress))
            )
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = F.cross_entropy(model(images), train_y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
    model.eval()
    with torch.no_grad():
        return float((model(valid_x).argmax(1) == valid_y).float().mean())


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = _data()
    result = {
        mode: [round(accuracy(mode, seed, args.epochs, data), 4) for seed in range(args.seeds)]
        for mode in ("none", "crop")
    }
    print(json.dumps({"bench": "augment_digits", "epochs": args.epochs, **result}), flush=True)
    return result


if __name__ == "__main__":
    main()
