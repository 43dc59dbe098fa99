"""Settings for what to train on: the dataset, where it lives, how it is cached and sized."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, Field, field_validator

from app.settings.image_size import IMAGE_SIZE_MAX, IMAGE_SIZE_MIN, IMAGE_SIZE_RULE
from app.storage.buckets import ObjectPath

# TRAIN_DATASET's values: the built-in datasets (trainctl writes them on first use), then the
# kinds of data users bring. Each is a dataset kind in app/data/kinds/ (the registry there and
# this list are held equal by tests/unit/test_dataset_kinds.py; settings import nothing of it).
BuiltInName = Literal["digits", "synthetic", "mnist", "fashion_mnist", "cifar10"]
DatasetName = Literal[BuiltInName, "parquet", "folder"]
NAMED_DATASETS: tuple[str, ...] = get_args(BuiltInName)
CacheMode = Literal["auto", "on", "off"]


class DataSettings(BaseModel):
    dataset: DatasetName = Field(
        "digits",
        description=f"What to train on: a built-in dataset ({', '.join(NAMED_DATASETS)}), "
        "`parquet` for your own train/ and valid/ folders of Parquet files, or `folder` for "
        "train/<class>/* and valid/<class>/* image files.",
    )
    data_path: Path | ObjectPath = Field(
        Path("data"),
        description="Where the data lives: a folder, or s3://bucket/prefix or gs://bucket/prefix. "
        "A built-in dataset is kept in <data_path>/<dataset>/ and prepared there on first use; "
        "for `parquet` and `folder` this folder holds train/ and valid/.",
    )

    cache_dataset: CacheMode = Field(
        "auto",
        description="Keep the decoded dataset in Ray's object store after the first epoch "
        "reads it, so later epochs skip Parquet: auto when train + valid take at most half "
        "of the object-store memory, on always, off to stream from the files every epoch.",
    )

    image_size: int = Field(
        0,
        ge=0,
        le=IMAGE_SIZE_MAX,
        json_schema_extra={"not": {"minimum": 1, "maximum": IMAGE_SIZE_MIN - 1}},  # the chart's
        description="Side in pixels that TRAIN_DATASET=folder images are resized (shorter side) "
        f"and center-cropped to; 0 picks it from the model: {IMAGE_SIZE_RULE}. "
        f"Otherwise {IMAGE_SIZE_MIN}..{IMAGE_SIZE_MAX}.",
    )

    @field_validator("image_size")
    @classmethod
    def _image_size_bounded(cls, value: int) -> int:
        if value and value < IMAGE_SIZE_MIN:
            raise ValueError(f"must be 0 (from the model) or {IMAGE_SIZE_MIN}..{IMAGE_SIZE_MAX}")
        return value
