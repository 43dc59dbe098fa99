"""TEST-ONLY hook: which samples each rank trained, for the exactness tests of a resume.

Set only by tests (tests/cluster/test_preemption.py) and bench/preemption.py, which counts the
steps an interruption really retrained with it: `TRAINCTL_TEST_SAMPLE_LOG=<folder>` makes
every rank append, per step, a fingerprint of each image it trained to
`<folder>/rank-<R>.txt`. It is not a production log: unset (always, outside tests), it costs one
dictionary lookup per step. A fingerprint is the image's pixels projected on a fixed random
vector: identical images share one, which the tests' datasets avoid.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

ENV = "TRAINCTL_TEST_SAMPLE_LOG"
_PROJECTIONS: dict[int, torch.Tensor] = {}


def log_samples(images: torch.Tensor, epoch: int, step: int, rank: int) -> None:
    folder = os.environ.get(ENV)
    if not folder:
        return
    flat = images.detach().float().reshape(len(images), -1).cpu().double()
    width = flat.shape[1]
    if width not in _PROJECTIONS:
        generator = torch.Generator().manual_seed(width)
        _PROJECTIONS[width] = torch.rand(width, generator=generator, dtype=torch.float64)
    prints = (flat @ _PROJECTIONS[width]).tolist()
    line = f"{epoch} {step} " + ",".join(f"{value:.6f}" for value in prints)
    with open(Path(folder) / f"rank-{rank}.txt", "a", encoding="utf-8") as out:
        out.write(line + "\n")
