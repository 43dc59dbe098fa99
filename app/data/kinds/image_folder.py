"""TRAIN_DATASET=folder: an image-folder dataset inspected in preflight and read by Ray Data.

The folder is TRAIN_DATA_PATH itself, never written by trainctl; its images are resized to
TRAIN_IMAGE_SIZE (app/data/image_size.py's rule when 0).

Inspection lists the folder (app/data/folder_listing.py) and decodes a sample of train images
spread over the classes, for the normalization statistics and to find an unreadable file before
Ray starts. Training rows are (path, label) pairs that Ray Data's tasks turn into uint8 images
(app/data/folder_images.py), so the decoding is spread over the cluster's CPUs.

The train list is put in a fixed, seeded order once (files are listed class by class, and the
device-side shuffle of app/data/pipeline.py permutes within chunks only); each epoch then
shuffles within chunks as for Parquet data.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from app.data.folder_images import load_images, read_file
from app.data.folder_listing import FolderListing, list_folder
from app.data.image_decode import decode_image
from app.data.image_size import image_size_for
from app.data.images import ImageError
from app.data.kind import SEARCH_LIMIT_S, DatasetKind
from app.data.schema import DatasetInfo, per_class
from app.errors import ConfigError
from app.storage.buckets import ObjectPath
from app.storage.location import RunPath, absolute_location

if TYPE_CHECKING:
    import ray.data

    from app.settings import TrainSettings

LAYOUT = "folder"
SAMPLE_FILES = 64  # decoded in preflight: statistics, and a first look for unreadable files
ROWS_PER_BLOCK = 256  # rows per Ray read task: a few MiB of decoded pixels at 64x64
# The listing inspect made, reused by build_datasets in the same process (the driver).
_listed: dict[str, FolderListing] = {}


def inspect_folder(root: Path | ObjectPath, size: int) -> tuple[DatasetInfo, str]:
    """The dataset's DatasetInfo (size x size x 3 images) and a note on skipped files."""
    root = absolute_location(root)
    listing = list_folder(root)
    _listed[str(root)] = listing
    # Spread over both splits and every class; a small dataset is decoded whole, a larger one
    # can still hold a bad file, which a Ray worker then names (app/data/folder_images.py).
    files = listing.train + listing.valid
    step = max(1, len(files) // SAMPLE_FILES)
    sample = [path for path, _ in files[::step][:SAMPLE_FILES]]
    try:
        images = load_images(root, sample, size)
    except ImageError as err:
        raise ConfigError(str(err)) from None
    pixels = images.reshape(-1, 3).astype(np.float64) / 255.0
    std = pixels.std(axis=0)
    info = DatasetInfo(
        channels=3,
        height=size,
        width=size,
        num_classes=len(listing.class_names),
        train_rows=len(listing.train),
        valid_rows=len(listing.valid),
        layout=LAYOUT,
        mean=tuple(round(float(v), 6) for v in pixels.mean(axis=0)),
        # A constant channel would divide by zero; leaving it unscaled is harmless.
        std=tuple(round(float(v), 6) if v > 1e-6 else 1.0 for v in std),
        path=root,
        class_names=listing.class_names,
        train_class_counts=_counts(listing.train, len(listing.class_names)),
        valid_class_counts=_counts(listing.valid, len(listing.class_names)),
        test_rows=len(listing.test) if listing.has_test else None,
        test_class_counts=_counts(listing.test, len(listing.class_names)),
    )
    return info, listing.note()


def _counts(files: tuple[tuple[str, int], ...], classes: int) -> tuple[int, ...]:
    found: dict[int, int] = {}
    for _, label in files:
        found[label] = found.get(label, 0) + 1
    return per_class(found, classes)


class ImageFolder(DatasetKind):
    name = "folder"
    image_files = True
    sized_by_setting = True

    def location(self, data_path: RunPath) -> RunPath:
        return data_path

    def inspect(self, location: RunPath, settings: TrainSettings) -> tuple[DatasetInfo, str]:
        size = image_size_for(settings.model, settings.image_size, settings.weights)
        return inspect_folder(location, size)

    def build_datasets(
        self, settings: TrainSettings, info: DatasetInfo
    ) -> dict[str, ray.data.Dataset]:
        import ray.data

        from app.data.folder_images import to_folder_rows

        root = info.path
        if root is None:
            raise ValueError("the dataset description names no folder: inspect the data first")
        listing = _listed.get(str(root)) or list_folder(root)
        if listing.class_names != info.class_names:
            raise ConfigError(
                f"{root}: the class folders changed since the checks ran; rerun to check them again"
            )
        order = np.random.default_rng([settings.seed, 26]).permutation(len(listing.train))
        rows = {"train": [listing.train[i] for i in order], "valid": list(listing.valid)}
        datasets = {}
        for split, pairs in rows.items():
            items = [{"path": path, "label": label} for path, label in pairs]
            dataset = ray.data.from_items(
                items, override_num_blocks=max(1, math.ceil(len(items) / ROWS_PER_BLOCK))
            )
            dataset = dataset.map_batches(
                to_folder_rows,
                fn_kwargs={"root": root, "size": info.height},
                batch_format="pyarrow",
                batch_size=None,  # whole blocks: one read task decodes its block's files
            )
            dataset.context.execution_options.preserve_order = True
            datasets[split] = dataset
        return datasets

    def locate_bad_image(self, info: DatasetInfo, limit_s: float = SEARCH_LIMIT_S) -> str | None:
        if info.path is None:
            return None
        return first_bad_file(info.path, info.height, time.monotonic() + limit_s)


def first_bad_file(root: Path | ObjectPath, size: int, deadline: float) -> str | None:
    """'<file>: <cause>' for the first file (train, then valid) that does not decode, or None
    when none does before `deadline` (time.monotonic()). Ray's error for a failed read task
    ends with its own advice, so the driver looks again itself."""
    listing = list_folder(root, max(1.0, deadline - time.monotonic()))
    for path, _ in listing.train + listing.valid:
        if time.monotonic() > deadline:
            return None
        try:
            decode_image(read_file(root, path), size, root / path)
        except ImageError as err:
            return str(err)
    return None
