"""Keep the decoded dataset in Ray's object store, so that only the first epoch reads Parquet.

Without it every epoch runs the read pipeline again: Ray Data starts read tasks, decodes every
file and converts it to uint8 rows, and on a small cluster spends its first second or so running
one task at a time (its resource limits arrive from Ray's autoscaling coordinator only after the
execution starts). Ray's guidance for data that fits in the object store is to materialize it
once; later epochs then stream the same blocks from memory, several times faster than Parquet can
be decoded (BENCHMARKS.md, bench/ingest.py).

The decision is a pure function of the setting, the decoded size and the object-store memory, so
it is tested without Ray. The cache lives as long as the driver: a rerun reads the files again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.settings import CacheMode
from app.storage.location import human_bytes

if TYPE_CHECKING:
    import ray.data

    from app.data.schema import DatasetInfo
    from app.settings import TrainSettings

# auto caches when train + valid take at most this share of the cluster's object-store memory:
# the rest stays free for Ray Train's own objects and for prefetching, so nothing spills to disk.
AUTO_SHARE = 0.5
LABEL_BYTES = 8  # int64


@dataclass(frozen=True)
class CacheDecision:
    cache: bool
    reason: str


def decoded_bytes(info: DatasetInfo) -> int:
    """Bytes that train + valid take as uint8 rows in the object store."""
    row = info.height * info.width * info.channels + LABEL_BYTES
    return (info.train_rows + info.valid_rows) * row


def decide(mode: CacheMode, needed: int, object_store: float) -> CacheDecision:
    size, store = human_bytes(needed), human_bytes(object_store)
    if mode == "off":
        return CacheDecision(False, "TRAIN_CACHE_DATASET=off: every epoch reads the Parquet files")
    if mode == "on":
        return CacheDecision(True, f"TRAIN_CACHE_DATASET=on: {size} decoded, kept in memory")
    budget = AUTO_SHARE * object_store
    if needed <= budget:
        return CacheDecision(
            True,
            f"{size} decoded fits in {AUTO_SHARE:.0%} of the object store ({store}):"
            " only the first epoch reads the files",
        )
    return CacheDecision(
        False,
        f"{size} decoded exceeds {AUTO_SHARE:.0%} of the object store ({store}): "
        "every epoch streams from the files (TRAIN_CACHE_DATASET=on forces the cache)",
    )


def cache_datasets(
    datasets: dict[str, ray.data.Dataset], settings: TrainSettings, info: DatasetInfo
) -> tuple[dict[str, ray.data.Dataset], CacheDecision]:
    """The datasets to train on: materialized when the decision says so, else as given.

    A cached train split gets a block order drawn from the seed, the same at every execution:
    app/data/exact_split.py cuts it into the same shards at every worker-group start, which is
    what makes a mid-epoch resume exact; epoch_batches permutes rows per epoch within chunks.
    """
    import ray
    from ray.data import RandomSeedConfig

    store = ray.cluster_resources().get("object_store_memory", 0.0)
    decision = decide(settings.cache_dataset, decoded_bytes(info), store)
    if not decision.cache:
        return datasets, decision
    cached = {}
    for split, dataset in datasets.items():
        dataset = dataset.materialize()
        if split == "train":
            seed = RandomSeedConfig(seed=settings.seed, reseed_after_execution=False)
            dataset = dataset.randomize_block_order(seed=seed)
        cached[split] = dataset  # derived datasets keep build_datasets' preserve_order
    return cached, decision
