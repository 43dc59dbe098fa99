"""The interface every dataset kind (a TRAIN_DATASET value) implements, and its Parquet form.

A kind says where its data is, whether `train` must write it first and how, what it holds (the
DatasetInfo preflight hands on, its `path` the parsed location, never a string to parse
again), how its train and valid Ray datasets are built, how a bad image is found after a run
fails on one, and which augmentation TRAIN_AUGMENT=auto means for it. app/data/kinds/ holds one
module per kind and the registry that maps TRAIN_DATASET to it; nothing else asks which kind a
run has.

`ParquetData` implements it for data stored as train/ and valid/ folders of Parquet files:
TRAIN_DATASET=parquet, and every built-in dataset once trainctl has written it
(app/data/prepare.py). The modules it calls are imported when used: the registry is imported
by `trainctl` commands that never read data, and by Ray workers.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import ray.data

    from app.data.schema import DatasetInfo
    from app.settings import TrainSettings
    from app.storage.location import RunPath

Augment = Literal["crop", "crop_flip"]
# How long the driver looks for the bad image after a failed run, before it gives up naming it.
SEARCH_LIMIT_S = 60.0


class DatasetKind(ABC):
    """One kind of dataset, as `check`, `train` and the workers use it."""

    name: str  # its TRAIN_DATASET value
    # What TRAIN_AUGMENT=auto means for it: flips suit most images; a mirrored digit is another
    # digit, or none, so digit datasets only crop.
    augment: Augment = "crop_flip"
    # Whether its splits are class folders of image files (listed, decoded when read), as
    # `trainctl evaluate --split` lists them again; otherwise Parquet files.
    image_files: bool = False
    # Whether TRAIN_IMAGE_SIZE sets the size its images are read at; otherwise they are read
    # at the size they are stored at, and the setting does nothing.
    sized_by_setting: bool = False

    @abstractmethod
    def location(self, data_path: RunPath) -> RunPath:
        """The folder holding train/ and valid/, given TRAIN_DATA_PATH (already parsed)."""

    def to_prepare(self, location: RunPath) -> bool:
        """Whether `train` writes the data first (a built-in dataset that is not there yet);
        data users bring is only inspected, never written."""
        return False

    def prepare(self, location: RunPath, settings: TrainSettings) -> None:
        """Write the data, where to_prepare says so (`train`'s preflight); once there, nothing."""
        raise NotImplementedError(f"TRAIN_DATASET={self.name} is never written by trainctl")

    @abstractmethod
    def inspect(self, location: RunPath, settings: TrainSettings) -> tuple[DatasetInfo, str]:
        """What the data holds, checked before Ray starts (ConfigError naming each problem),
        and a note for `check`'s dataset line ('' when there is none)."""

    def ensure(self, location: RunPath, settings: TrainSettings) -> tuple[DatasetInfo, str]:
        """The data, written first where to_prepare says so, then inspected: preflight's one
        call (`check` makes it only where there is nothing to write)."""
        if self.to_prepare(location):
            self.prepare(location, settings)
        return self.inspect(location, settings)

    @abstractmethod
    def build_datasets(
        self, settings: TrainSettings, info: DatasetInfo
    ) -> dict[str, ray.data.Dataset]:
        """train and valid as Ray Datasets of {"image": uint8 (H, W, C), "label": int64} rows,
        from the data `info` describes, in an order fixed by TRAIN_SEED."""

    @abstractmethod
    def locate_bad_image(self, info: DatasetInfo, limit_s: float = SEARCH_LIMIT_S) -> str | None:
        """Where the first image that does not convert is (a file, and a row where files hold
        many), looked for by the driver after a worker failed on one; None when none is found
        within limit_s seconds."""


class ParquetData(DatasetKind):
    """Data in train/ and valid/ folders of Parquet files (app/data/schema.py says which)."""

    def inspect(self, location: RunPath, settings: TrainSettings) -> tuple[DatasetInfo, str]:
        from app.data.schema import inspect_dataset

        return inspect_dataset(location), ""

    def build_datasets(
        self, settings: TrainSettings, info: DatasetInfo
    ) -> dict[str, ray.data.Dataset]:
        from app.data.pipeline import parquet_datasets

        return parquet_datasets(info, settings.seed)

    def locate_bad_image(self, info: DatasetInfo, limit_s: float = SEARCH_LIMIT_S) -> str | None:
        from app.data.locate import first_bad_row

        return first_bad_row(info, time.monotonic() + limit_s)
