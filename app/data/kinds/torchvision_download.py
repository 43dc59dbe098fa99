"""TRAIN_DATASET=mnist, fashion_mnist, cifar10: torchvision's real downloads.

Its train split becomes train/, its test split valid/. Files already in the download folder
are reused, not fetched again, so a machine without internet can be seeded by hand.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.data.kind import Augment
from app.data.prepare import BuiltIn, DownloadFailed, Splits


class TorchvisionDownload(BuiltIn):
    def __init__(self, name: str, dataset_class: str, augment: Augment = "crop_flip") -> None:
        self.name = name
        self.dataset_class = dataset_class  # in torchvision.datasets
        self.augment = augment

    def load(self, download_dir: Path, *, seed: int, rows: int | None) -> Splits:
        from torchvision import datasets

        loader = getattr(datasets, self.dataset_class)
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
            f"torchvision.datasets.{self.dataset_class}",
        )
