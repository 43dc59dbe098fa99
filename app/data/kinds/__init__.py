"""The dataset kinds, by TRAIN_DATASET value: the one place that maps a dataset's name to what
it is (app/data/kind.py, the interface each kind implements).

The names themselves are settings (app/settings/data.py `DatasetName`, and `NAMED_DATASETS` for
the built-in ones), which import nothing from here: the docs and the chart schema are generated
from the settings alone. tests/unit/test_dataset_kinds.py holds the two lists equal.
CONTRIBUTING.md ("Add a dataset kind") says how a kind is added.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app.data.kind import DatasetKind
from app.data.kinds.digits import Digits
from app.data.kinds.image_folder import ImageFolder
from app.data.kinds.parquet import Parquet
from app.data.kinds.synthetic import Synthetic
from app.data.kinds.torchvision_download import TorchvisionDownload
from app.data.prepare import BuiltIn
from app.errors import ConfigError
from app.settings import NAMED_DATASETS, SEED_MAX

if TYPE_CHECKING:
    import ray.data

    from app.data.schema import DatasetInfo
    from app.settings import TrainSettings

KINDS: dict[str, DatasetKind] = {
    kind.name: kind
    for kind in (
        Digits(),
        Synthetic(),
        TorchvisionDownload("mnist", "MNIST", augment="crop"),  # a flip changes a digit
        TorchvisionDownload("fashion_mnist", "FashionMNIST"),
        TorchvisionDownload("cifar10", "CIFAR10"),
        Parquet(),
        ImageFolder(),
    )
}


def dataset_kind(name: str) -> DatasetKind:
    """The kind of a TRAIN_DATASET value (the settings allow only names listed here)."""
    return KINDS[name]


def build_datasets(settings: TrainSettings, info: DatasetInfo) -> dict[str, ray.data.Dataset]:
    """The run's train and valid Ray Datasets, of the data preflight described (`info`)."""
    return dataset_kind(settings.dataset).build_datasets(settings, info)


def prepare_dataset(
    name: str, out: Path, *, force: bool = False, seed: int = 0, rows: int | None = None
) -> str:
    """`trainctl prepare-data --dataset`: write a built-in dataset's out/train/ and out/valid/;
    returns a one-line summary."""
    kind = KINDS.get(name)
    if not isinstance(kind, BuiltIn):
        raise ConfigError(f"dataset {name!r} is not built in; choose one of {NAMED_DATASETS}")
    if rows is not None and (not kind.generated or rows < 1):
        sized = " and ".join(
            k.name for k in KINDS.values() if isinstance(k, BuiltIn) and k.generated
        )
        raise ConfigError(f"rows={rows}: only the {sized} dataset is sized, with rows >= 1")
    if not 0 <= seed <= SEED_MAX:
        raise ConfigError(f"seed={seed}: must be 0..{SEED_MAX}")
    return kind.write(out, force=force, seed=seed, rows=rows)
