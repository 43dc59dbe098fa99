"""Built-in datasets: written as raw Parquet, once, safely when many processes ask at once.

`BuiltIn` is the dataset kind of every dataset trainctl makes itself (app/data/kinds/: digits,
synthetic, the torchvision downloads): each says how to load its images into memory, and this
module writes them under TRAIN_DATA_PATH/<name>/ on first use, or where `trainctl prepare-data`
says. Once written it is Parquet data like any other (app/data/kind.py ParquetData).

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
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock

from app.data.class_meta import encode as encode_class_names
from app.data.images import SHAPE_KEY, geometry
from app.data.kind import ParquetData
from app.errors import ConfigError, RunFailed, refused_writes_fail
from app.storage.buckets import ObjectPath
from app.storage.location import RunPath, expand, written_whole

if TYPE_CHECKING:
    from app.settings import TrainSettings

MARKER = "_trainctl_dataset.json"
LAYOUT = "raw"  # see app/data/images.py: the fastest of the layouts to read back
TARGET_FILE_BYTES = 8 << 20  # enough files to read in parallel and shuffle by file order
ROWS_PER_FILE = (1024, 65_536)
VALID_FRACTION = 0.2  # the valid split of a dataset that comes without one


class DownloadFailed(Exception):
    """A download could not fetch or read the files; the message holds the cause."""


@dataclass(frozen=True)
class Splits:
    train_images: np.ndarray  # (N, H, W) or (N, H, W, C), uint8
    train_labels: np.ndarray  # (N,), int64
    valid_images: np.ndarray
    valid_labels: np.ndarray
    source: str  # where the data came from, for the dataset's marker file


class BuiltIn(ParquetData):
    """A dataset trainctl writes itself, kept in TRAIN_DATA_PATH/<name>/."""

    # Generated from a seed, to any size: the seed is recorded, and `rows` sizes it.
    generated = False

    @abstractmethod
    def load(self, download_dir: Path, *, seed: int, rows: int | None) -> Splits:
        """Its images and labels in memory; a download goes to (and is kept in) download_dir.
        DownloadFailed when the files cannot be fetched."""

    def location(self, data_path: RunPath) -> RunPath:
        return data_path / self.name

    def to_prepare(self, location: RunPath) -> bool:
        return not is_present(location)

    def prepare(self, location: RunPath, settings: TrainSettings) -> None:
        if self.to_prepare(location):
            # In a bucket: written whole on this machine, then copied up.
            with written_whole(location, "trainctl-data-") as local:
                # Whatever another driver finished there first is used, of any seed: `train`
                # has no --out or --force to answer a refusal with.
                self.write(local, seed=settings.seed, held_to_seed=False)

    def write(
        self,
        out: Path,
        *,
        force: bool = False,
        seed: int = 0,
        rows: int | None = None,
        held_to_seed: bool = True,
    ) -> str:
        """Write out/train/ and out/valid/; returns a one-line summary. `held_to_seed`: a
        generated dataset already there of another seed is refused (`prepare-data`)."""
        out = expand(out, "--out")
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out={out}: exists but is not a folder")
        asked = seed if self.generated and held_to_seed else None
        if not force and is_present(out):
            return _already(self.name, out, asked)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError(f"{out.parent}: cannot create the output folder ({err})") from None
        with FileLock(out.parent / f".{out.name}.lock"):
            if not force and is_present(out):  # another process finished it while we waited
                return _already(self.name, out, asked)
            _remove_leftovers(out)
            if out.exists() and not _replaceable(out):
                raise ConfigError(
                    f"{out} exists and holds more than a dataset (train/, valid/); "
                    "choose an empty or new folder"
                )
            splits = self._load(out, seed=seed, rows=rows)
            generated_by = seed if self.generated else None
            meta = write_staged(
                out, lambda staging: _write(splits, staging, name=self.name, seed=generated_by)
            )
        return _summary(self.name, out, meta)

    def _load(self, out: Path, *, seed: int, rows: int | None) -> Splits:
        target = download_dir(out)
        try:
            return self.load(target, seed=seed, rows=rows)
        except DownloadFailed as err:
            if target.is_dir() and not any(p.is_file() for p in target.rglob("*")):
                shutil.rmtree(target, ignore_errors=True)  # only the empty folders torchvision made
            name = self.name
            raise RunFailed(
                [
                    f"could not download {name} into {target}: {err}",
                    f"fix: give this machine internet access, or seed {out} with train/ and "
                    f"valid/ from `trainctl prepare-data --dataset {name} --out DIR` run where "
                    f"there is internet, or put torchvision's own {name} files (its root folder) "
                    f"in {target}, or train on your own data with TRAIN_DATASET=parquet",
                ]
            ) from None


def is_present(out: Path | ObjectPath) -> bool:
    """A complete trainctl dataset, or train/ and valid/ that someone put there themselves.

    trainctl never writes into `out` directly (only a finished folder is renamed to it), so
    train/ and valid/ without the marker are data seeded by hand, not a half-written dataset.
    """
    return (out / MARKER).is_file() or ((out / "train").is_dir() and (out / "valid").is_dir())


def download_dir(out: Path) -> Path:
    return out.parent / f"{out.name}.download"


def _write(splits: Splits, staging: Path, *, name: str, seed: int | None) -> dict[str, object]:
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
        "seed": seed,
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


def write_staged(out: Path, write: Callable[[Path], dict[str, object]]) -> dict[str, object]:
    """`write` (which returns the marker's record) into a temporary sibling of `out`, renamed
    to `out` when whole: a reader sees no dataset or a complete one. A write the machine
    refuses (a full disk) ends the command naming `out`, with nothing of it left behind; it
    was "internal error ... please report it" (a red-team pass)."""
    staging = out.parent / f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with refused_writes_fail(
            str(out), "nothing of it was kept: make room there, then run it again"
        ):
            meta = write(staging)
            _swap_in(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return meta


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
    return out.is_dir() and {p.name for p in out.iterdir()} <= {"train", "valid", "test", MARKER}


def _already(name: str, out: Path, seed: int | None) -> str:
    """The line for a dataset already at `out`; ConfigError where it is another one than asked
    for (another dataset, or a generated one of another seed): `digits` into a folder of
    synthetic data said `already prepared` with digits' name on the other's figures (a
    red-team pass)."""
    try:
        meta = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return (
            f"{name}: {out} already holds train/ and valid/ (not written by trainctl); "
            "use --force to replace them"
        )
    meta = meta if isinstance(meta, dict) else {}
    held = meta.get("dataset")
    if held != name or (seed is not None and meta.get("seed") != seed):
        what = f"{held}" + (f" of seed {meta.get('seed')}" if meta.get("seed") is not None else "")
        asked = name + (f" of seed {seed}" if seed is not None else "")
        raise ConfigError(
            f"--out={out} holds {what}, not {asked}: give another --out, or --force to replace it"
        )
    return _summary(name, out, meta, note="already prepared, use --force to rewrite")


def _summary(name: str, out: Path, meta: dict[str, object], note: str = "") -> str:
    hwc = "x".join(str(v) for v in meta["hwc"])  # type: ignore[attr-defined]
    tail = f" ({note})" if note else ""
    test = f" + {meta['test_rows']} test" if meta.get("test_rows") is not None else ""
    return (
        f"{name}: {meta['train_rows']} train + {meta['valid_rows']} valid{test} rows, {hwc} uint8 "
        f"images, {meta['num_classes']} classes, layout {meta['layout']} -> {out}{tail}"
    )
