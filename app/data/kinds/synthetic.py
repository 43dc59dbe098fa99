"""TRAIN_DATASET=synthetic: learnable 32x32 RGB images generated from TRAIN_SEED, offline.

CIFAR-shaped, so that benchmarks and the ViT settings fit it; `prepare-data --rows` sizes it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.data.prepare import VALID_FRACTION, BuiltIn, Splits

SYNTHETIC_ROWS = 2000  # train rows by default: a few seconds per epoch on two CPU workers
SYNTHETIC_CLASSES = 10
SYNTHETIC_SHAPE = (32, 32, 3)


class Synthetic(BuiltIn):
    name = "synthetic"
    generated = True

    def load(self, download_dir: Path, *, seed: int, rows: int | None) -> Splits:
        return synthetic(seed=seed, rows=rows or SYNTHETIC_ROWS)


def synthetic(*, seed: int, rows: int) -> Splits:
    """A coarse colour pattern per class under heavy pixel noise.

    The same seed gives the same bytes. `rows` is the train split's size; valid gets a fifth
    of that (at least 10 rows) from an independent random stream.
    """
    patterns = np.random.default_rng([seed, 0]).uniform(40, 215, (SYNTHETIC_CLASSES, 4, 4, 3))
    # 4x4 colour blocks blown up to 32x32: smooth structure that convolutions pick up quickly.
    templates = patterns.repeat(8, axis=1).repeat(8, axis=2).astype(np.float32)
    train_x, train_y = _synthetic_split(templates, np.random.default_rng([seed, 1]), rows)
    valid_rows = max(10, round(rows * VALID_FRACTION))
    valid_x, valid_y = _synthetic_split(templates, np.random.default_rng([seed, 2]), valid_rows)
    return Splits(train_x, train_y, valid_x, valid_y, f"generated (seed {seed})")


def _synthetic_split(
    templates: np.ndarray, rng: np.random.Generator, rows: int
) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, SYNTHETIC_CLASSES, rows, dtype=np.int64)
    images = np.empty((rows, *SYNTHETIC_SHAPE), np.uint8)
    step = 8192  # bounded float32 scratch space however many rows are asked for
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        noise = rng.standard_normal((stop - start, *SYNTHETIC_SHAPE), dtype=np.float32)
        brightness = rng.uniform(-30, 30, (stop - start, 1, 1, 1)).astype(np.float32)
        pixels = templates[labels[start:stop]] + noise * 45.0 + brightness
        np.clip(pixels, 0, 255, out=pixels)
        images[start:stop] = pixels
    return images, labels
