"""Where each named dataset comes from, as uint8 image arrays and int64 labels in memory.

digits and synthetic need no network. mnist, fashion_mnist and cifar10 use torchvision's real
download (its train split becomes train/, its test split valid/).
"""

from __future__ import annotations

import gzip
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SYNTHETIC_ROWS = 2000  # train rows by default: a few seconds per epoch on two CPU workers
SYNTHETIC_CLASSES = 10
SYNTHETIC_SHAPE = (32, 32, 3)  # CIFAR-shaped, so benchmarks and the ViT settings fit it
VALID_FRACTION = 0.2
# digits has no official split; this fixed seed keeps train/ and valid/ the same everywhere.
DIGITS_SPLIT_SEED = 20_240_601
DIGITS_FILE = "digits.csv.gz"  # in sklearn/datasets/data/, as load_digits reads it
TORCHVISION_CLASSES = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST", "cifar10": "CIFAR10"}


class DownloadFailed(Exception):
    """torchvision could not fetch or read the files; the message holds the cause."""


@dataclass(frozen=True)
class Splits:
    train_images: np.ndarray  # (N, H, W) or (N, H, W, C), uint8
    train_labels: np.ndarray  # (N,), int64
    valid_images: np.ndarray
    valid_labels: np.ndarray
    source: str  # where the data came from, for the dataset's marker file


def load_source(name: str, download_dir: Path, *, seed: int, rows: int | None) -> Splits:
    if name == "digits":
        return digits()
    if name == "synthetic":
        return synthetic(seed=seed, rows=rows or SYNTHETIC_ROWS)
    return torchvision_dataset(name, download_dir)


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


def synthetic(*, seed: int, rows: int) -> Splits:
    """Learnable 32x32 RGB images: a coarse colour pattern per class under heavy pixel noise.

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


def torchvision_dataset(name: str, download_dir: Path) -> Splits:
    """The real torchvision download; files already in download_dir are reused, not fetched."""
    from torchvision import datasets

    loader = getattr(datasets, TORCHVISION_CLASSES[name])
    try:
        train = loader(str(download_dir), train=True, download=True)
        valid = loader(str(download_dir), train=False, download=True)
    except Exception as err:  # urllib, tarfile, integrity and I/O errors all mean "no data"
        cause = " ".join(str(err).split()) or type(err).__name__
        raise DownloadFailed(f"{type(err).__name__}: {cause[:400]}") from err
    return Splits(
        np.asarray(train.data, dtype=np.uint8),
        np.asarray(train.targets, dtype=np.int64),
        np.asarray(valid.data, dtype=np.uint8),
        np.asarray(valid.targets, dtype=np.int64),
        f"torchvision.datasets.{TORCHVISION_CLASSES[name]}",
    )
