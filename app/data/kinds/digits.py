"""TRAIN_DATASET=digits: scikit-learn's bundled 8x8 digits, which need no network."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

from app.data.prepare import VALID_FRACTION, BuiltIn, Splits

# digits has no official split; this fixed seed keeps train/ and valid/ the same everywhere.
DIGITS_SPLIT_SEED = 20_240_601
DIGITS_FILE = "digits.csv.gz"  # in sklearn/datasets/data/, as load_digits reads it


class Digits(BuiltIn):
    name = "digits"
    augment = "crop"  # a mirrored digit is another digit, or none

    def load(self, download_dir: Path, *, seed: int, rows: int | None) -> Splits:
        return digits()


def digits() -> Splits:
    """scikit-learn's bundled 8x8 digits; its 0..16 pixel values are scaled to 0..255."""
    pixels, target = _digits_arrays()
    images = np.rint(pixels * (255.0 / 16.0)).astype(np.uint8)
    labels = target.astype(np.int64)
    order = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(labels))
    cut = len(labels) - round(len(labels) * VALID_FRACTION)
    train, valid = order[:cut], order[cut:]
    return Splits(
        images[train], labels[train], images[valid], labels[valid], "scikit-learn load_digits"
    )


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8), labels) as `load_digits` gives them: its bundled CSV, read the way
    it reads it (np.loadtxt, no code loaded), without importing scikit-learn, whose import
    (SciPy and all) costs each run seconds before anything else happens: 1-2 s on an idle
    CPU, 7-10 s on a busy one. Where the file is not found, `load_digits` itself."""
    spec = importlib.util.find_spec("sklearn")  # finds the package folder, runs none of it
    folders = list(spec.submodule_search_locations or []) if spec else []
    file = Path(folders[0], "datasets", "data", DIGITS_FILE) if folders else None
    if file is None or not file.is_file():
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.images, bunch.target
    with gzip.open(file, "rt") as text:
        data = np.loadtxt(text, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
