"""A train split that is the same on every run: one fixed shard per worker rank.

Ray Train's default DataConfig hands each worker a `streaming_split`, which gives blocks to
whichever worker asks first: the rows a rank sees in an epoch then depend on timing, and an
epoch interrupted mid-way cannot be replayed. `ExactSplit` cuts the train dataset with
`Dataset.split(world_size, equal=True)` instead: the blocks (in the order the seeded file
shuffle or the seeded block order of the cache gave them, both fixed for a dataset's first
execution) are divided by position, so rank r gets the same rows every epoch and after every
restart with the same world size. The per-epoch order inside a shard comes from the device
permutation in app/data/pipeline.py, seeded by (seed, epoch, rank).

The cost: `split` materializes the train split in the object store (spilled to disk beyond
it), as the cache of app/data/cache.py does for data that fits.

Validation is streamed (its order does not matter) but not cut equal: Ray Train's default
`streaming_split(equal=True)` drops up to world_size - 1 rows to even the shards out, so the
recorded val_accuracy would not be over the whole valid split, and `trainctl evaluate
--split valid` could not reproduce it. Shards of unequal length are safe because validation
runs no collective per batch (app/training/validation.py, `evaluate`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ray.train import DataConfig

if TYPE_CHECKING:
    from app.data.pool import DataPool


class ExactSplit(DataConfig):
    def __init__(self, exact: tuple[str, ...] = ("train",), pool: DataPool | None = None) -> None:
        super().__init__()
        self._exact = exact
        # Ray Train builds the options below afresh from the controller's DataContext, which
        # knows nothing of the driver's data pool (app/data/pool.py): it is carried here.
        self._pool = pool

    def _resolve_execution_options(self, dataset_name: str) -> Any:
        options = super()._resolve_execution_options(dataset_name)
        return options if self._pool is None else self._pool.place(options)

    def configure(
        self,
        datasets: dict[str, Any],
        world_size: int,
        worker_handles: Any,
        worker_node_ids: Any,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        output: list[dict[str, Any]] = [{} for _ in range(world_size)]
        hints = worker_node_ids if self._enable_shard_locality else None
        for name, given in datasets.items():
            if given.name is None:
                given.set_name(name)
            dataset = given.copy(given)
            options = self._resolve_execution_options(name)
            if name not in self._exact:
                dataset.context.execution_options = options
                # Every row once, in shards that may differ by a few rows (see above).
                shards = dataset.streaming_split(world_size, equal=False, locality_hints=hints)
                for rank, streamed in enumerate(shards):
                    output[rank][name] = streamed
                continue
            # Blocks in file order, not in the order read tasks finish: the split is by position.
            options.preserve_order = True
            dataset.context.execution_options = options
            for rank, shard in enumerate(dataset.split(world_size, equal=True)):
                output[rank][name] = shard.iterator()
        return output
