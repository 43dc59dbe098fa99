"""Datasets: preparing named ones, inspecting any, and the Ray Data ingest path.

Names are resolved lazily so that `from app.data import DatasetInfo` stays cheap (no Ray or
torch import) for commands that only look at settings.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.data.cache import cache_datasets
    from app.data.pipeline import build_datasets, epoch_batches
    from app.data.prepare import ensure_dataset, prepare_dataset
    from app.data.schema import DatasetInfo, inspect_dataset

_HOMES = {
    "DatasetInfo": "app.data.schema",
    "inspect_dataset": "app.data.schema",
    "prepare_dataset": "app.data.prepare",
    "ensure_dataset": "app.data.prepare",
    "build_datasets": "app.data.pipeline",
    "cache_datasets": "app.data.cache",
    "epoch_batches": "app.data.pipeline",
}
__all__ = [
    "DatasetInfo",
    "build_datasets",
    "cache_datasets",
    "ensure_dataset",
    "epoch_batches",
    "inspect_dataset",
    "prepare_dataset",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'app.data' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)
