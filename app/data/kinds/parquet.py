"""TRAIN_DATASET=parquet: your own train/ and valid/ folders of Parquet files.

They are TRAIN_DATA_PATH itself, never written by trainctl: only inspected (app/data/schema.py
lists the image layouts it reads) and read.
"""

from __future__ import annotations

from app.data.kind import ParquetData
from app.storage.location import RunPath


class Parquet(ParquetData):
    name = "parquet"

    def location(self, data_path: RunPath) -> RunPath:
        return data_path
