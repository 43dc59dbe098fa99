"""Write a named dataset as Parquet, once, safely when many processes ask at the same time.

Every writer takes a file lock beside the output, builds the dataset in a temporary sibling
folder and renames it into place with a marker file written last, so a reader sees either no
dataset or a complete one, never half of one. Downloads (torchvision) go to `<out>.download/`,
which is kept: a second prepare, or a folder seeded by hand, then needs no network.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock

from app.data.class_meta import encode as encode_class_names
from app.data.images import SHAPE_KEY, geometry
from app.data.schema import DatasetInfo, inspect_dataset
from app.data.sources import DownloadFailed, Splits, load_source
from app.errors import ConfigError, RunFailed
from app.settings import NAMED_DATASETS, SEED_MAX, TrainSettings
from app.storage.buckets import ObjectPath
from app.storage.location import expand, written_whole

MARKER = "_trainctl_dataset.json"
LAYOUT = "raw"  # see app/data/images.py: the fastest of the layouts to read back
TARGET_FILE_BYTES = 8 << 20  # enough files to read in parallel and shuffle by file order
ROWS_PER_FILE = (1024, 65_536)


def prepare_dataset(
    name: str, out: Path, *, force: bool = False, seed: int = 0, rows: int | None = None
) -> str:
    """Write out/train/ and out/valid/ for a named dataset; returns a one-line summary."""
    if name not in NAMED_DATASETS:
        raise ConfigError(f"dataset {name!r} is not built in; choose one of {NAMED_DATASETS}")
    if rows is not None and (name != "synthetic" or rows < 1):
        raise ConfigError(f"rows={rows}: only the synthetic dataset is sized, with rows >= 1")
    if not 0 <= seed <= SEED_MAX:
        raise ConfigError(f"seed={seed}: must be 0..{SEED_MAX}")
    out = expand(out, "--out")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out={out}: exists but is not a folder")
    if not force and is_present(out):
        return _already(name, out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{out.parent}: cannot create the output folder ({err})") from None
    with FileLock(out.parent / f".{out.name}.lock"):
        if not force and is_present(out):  # another process finished it while we waited
            return _already(name, out)
        _remove_leftovers(out)
        if out.exists() and not _replaceable(out):
            raise ConfigError(
                f"{out} exists and holds more than a dataset (train/, valid/); "
                "choose an empty or new folder"
            )
        splits = _load(name, out, seed=seed, rows=rows)
        staging = out.parent / f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            meta = _write(splits, staging, name=name, seed=seed)
            _swap_in(staging, out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return _summary(name, out, meta)


def ensure_dataset(settings: TrainSettings) -> DatasetInfo:
    """The run's dataset, prepared first if it is a named one that is not there yet."""
    folder = settings.dataset_dir
    if settings.dataset == "folder":
        from app.data.folder import inspect_for

        return inspect_for(settings)[0]
    if settings.dataset != "parquet" and not is_present(folder):
        # In a bucket: written whole on this machine, then copied up.
        with written_whole(folder, "trainctl-data-") as local:
            prepare_dataset(settings.dataset, local, seed=settings.seed)
    return inspect_dataset(folder)


def is_present(out: Path | ObjectPath) -> bool:
    """A complete trainctl dataset, or train/ and valid/ that someone put there themselves.

    trainctl never writes into `out` directly (only a finished folder is renamed to it), so
    train/ and valid/ without the marker are data seeded by hand, not a half-written dataset.
    """
    return (out / MARKER).is_file() or ((out / "train").is_dir() and (out / "valid").is_dir())


def download_dir(out: Path) -> Path:
    return out.parent / f"{out.name}.download"


def _load(name: str, out: Path, *, seed: int, rows: int | None) -> Splits:
    target = download_dir(out)
    try:
        return load_source(name, target, seed=seed, rows=rows)
    except DownloadFailed as err:
        if target.is_dir() and not any(p.is_file() for p in target.rglob("*")):
            shutil.rmtree(target, ignore_errors=True)  # only the empty folders torchvision made
        raise RunFailed(
            [
                f"could not download {name} into {target}: {err}",
                f"fix: give this machine internet access, or seed {out} with train/ and valid/ "
                f"from `trainctl prepare-data --dataset {name} --out DIR` run where there is "
                f"internet, or put torchvision's own {name} files (its root folder) in {target}, "
                "or train on your own data with TRAIN_DATASET=parquet",
            ]
        ) from None


def _write(splits: Splits, staging: Path, *, name: str, seed: int) -> dict[str, object]:
    staging.mkdir(parents=True)
    files = {}
    for split, images, labels in (
        ("train", splits.train_images, splits.train_labels),
        ("valid", splits.valid_images, splits.valid_labels),
    ):
        files[split] = _write_split(staging / split, images, labels)
    shape = splits.train_images.shape[1:]
    height, width, channels = geometry(shape)
    meta: dict[str, object] = {
        "dataset": name,
        "source": splits.source,
        "seed": seed if name == "synthetic" else None,
        "train_rows": len(splits.train_labels),
        "valid_rows": len(splits.valid_labels),
        "image_shape": list(shape),
        "hwc": [height, width, channels],
        "num_classes": int(splits.train_labels.max()) + 1,
        "layout": LAYOUT,
        "files": files,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    # Written last: its presence is what says the folder is complete.
    (staging / MARKER).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _write_split(folder: Path, images: np.ndarray, labels: np.ndarray) -> int:
    folder.mkdir()
    per_file = rows_per_file(images.shape[1:])
    count = max(1, math.ceil(len(images) / per_file))
    for index in range(count):
        rows = slice(index * per_file, (index + 1) * per_file)
        write_part(folder / f"part-{index:05d}.parquet", images[rows], labels[rows])
    return count


def rows_per_file(shape: tuple[int, ...]) -> int:
    low, high = ROWS_PER_FILE
    return min(high, max(low, TARGET_FILE_BYTES // math.prod(shape)))


def write_part(
    path: Path, images: np.ndarray, labels: np.ndarray, class_names: tuple[str, ...] = ()
) -> None:
    """One Parquet file of the raw layout; class_names go into its schema metadata."""
    shape = images.shape[1:]
    per_image = math.prod(shape)
    image_field = pa.field(
        "image",
        pa.binary(per_image),
        nullable=False,
        metadata={SHAPE_KEY: ",".join(map(str, shape)).encode()},
    )
    schema = pa.schema(
        [image_field, pa.field("label", pa.int64(), nullable=False)],
        metadata=encode_class_names(class_names),
    )
    pixels = np.ascontiguousarray(images, dtype=np.uint8).reshape(len(images), per_image)
    column = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(per_image), len(pixels), [None, pa.py_buffer(pixels)]
    )
    table = pa.table([column, pa.array(labels, pa.int64())], schema=schema)
    # Pixels are near-random bytes to a dictionary and their min/max mean nothing.
    pq.write_table(
        table, path, compression="snappy", use_dictionary=["label"], write_statistics=["label"]
    )


def _swap_in(staging: Path, out: Path) -> None:
    if out.exists():
        retired = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        out.rename(retired)
        staging.rename(out)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        staging.rename(out)


def _remove_leftovers(out: Path) -> None:
    """Temporaries of writers that died mid-way; safe to delete, since we hold the lock."""
    for pattern in (f".{out.name}.tmp-*", f".{out.name}.old-*"):
        for path in out.parent.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)


def _replaceable(out: Path) -> bool:
    return out.is_dir() and {p.name for p in out.iterdir()} <= {"train", "valid", MARKER}


def _already(name: str, out: Path) -> str:
    try:
        meta = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return (
            f"{name}: {out} already holds train/ and valid/ (not written by trainctl); "
            "use --force to replace them"
        )
    return _summary(name, out, meta, note="already prepared, use --force to rewrite")


def _summary(name: str, out: Path, meta: dict[str, object], note: str = "") -> str:
    hwc = "x".join(str(v) for v in meta["hwc"])  # type: ignore[attr-defined]
    tail = f" ({note})" if note else ""
    return (
        f"{name}: {meta['train_rows']} train + {meta['valid_rows']} valid rows, {hwc} uint8 "
        f"images, {meta['num_classes']} classes, layout {meta['layout']} -> {out}{tail}"
    )
