"""Which batch memory format each model trains fastest on: channels_last or contiguous NCHW.

The app's own models (app.training.model.build_model) on CIFAR-shaped batches already on the device,
bf16 autocast, fused AdamW on CUDA, eager; for channels_last the weights are converted too, as
app/training/loop.py does for CNNs. Each variant: 5 untimed steps, then `--steps` timed ones.
Usage: python -m bench.memory_format [--models resnet18,vit] [--steps 40] [--batch 512]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import result_line, say


def one(name: str, fmt: str, batch: int, steps: int, device: Any) -> float:
    import torch
    from torch import nn

    from app.data.schema import DatasetInfo
    from app.training.model import build_model

    info = DatasetInfo(3, 32, 32, 10, 50_000, 10_000, "tensor", (0.5,) * 3, (0.5,) * 3)
    torch.manual_seed(0)
    model = build_model(name, info).to(device)
    memory = torch.channels_last if fmt == "channels_last" else torch.contiguous_format
    if fmt == "channels_last":
        model = model.to(memory_format=memory)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device.type == "cuda")
    images = torch.randn(batch, 3, 32, 32, device=device).contiguous(memory_format=memory)
    labels = torch.randint(0, 10, (batch,), device=device)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(5):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return steps * batch / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,vit")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=512)
    args = parser.parse_args(argv)

    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rates: dict[str, dict[str, float]] = {}
    for name in args.models.split(","):
        rates[name] = {}
        for fmt in ("channels_last", "nchw", "channels_last", "nchw"):  # interleaved, best kept
            rate = one(name, fmt, args.batch, args.steps, device)
            rates[name][fmt] = round(max(rate, rates[name].get(fmt, 0.0)), 1)
        say(f"  {name:<9} " + "  ".join(f"{k} {v:,.0f} images/s" for k, v in rates[name].items()))
    print(result_line("memory_format", {"device": str(device), "images_per_s": rates}), flush=True)
    return rates


if __name__ == "__main__":
    main()
