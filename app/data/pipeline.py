"""The ingest path: Parquet -> Ray Data (uint8 all the way) -> normalized batches on the device.

Ray Data only reads and, where the stored layout needs it, decodes images to fixed-shape uint8
arrays in one block-at-a-time `map_batches` fused into the read tasks. Everything per batch runs
in `epoch_batches` on the training device, as a few whole-tensor operations: the host moves a
quarter of the bytes float32 would need, and no CPU core is spent on per-row transforms.

Batches are pulled from Ray in chunks of several thousand rows and cut into training batches
with torch: Ray's per-batch bookkeeping is then paid per chunk, not per step.

Shuffling, for training only: Ray reads the Parquet files in an order drawn from the seed, the
train split is cut into one fixed shard per worker (app/data/exact_split.py), and each chunk of a
shard is permuted on the device with a generator seeded from (seed, epoch, rank). A worker's
batches in an epoch are therefore a function of (seed, epoch, world size, rank), which is what
lets a mid-epoch checkpoint resume with the next unseen batch (`skip_batches`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from app.data.images import to_uint8_rows
from app.data.schema import DatasetInfo, parquet_files
from app.storage.reading import reader_source

if TYPE_CHECKING:
    import ray.data

CHUNK_ROWS = 4096  # rows per pull from Ray, when they fit in CHUNK_BYTES
CHUNK_BYTES = 32 << 20


def parquet_datasets(info: DatasetInfo, seed: int) -> dict[str, ray.data.Dataset]:
    """train and valid of the Parquet data `info` describes, as Ray Datasets of
    {"image": uint8 (H, W, C), "label": int64} rows; the train files in an order drawn from seed."""
    import ray.data
    from ray.data import FileShuffleConfig

    root = info.path
    if root is None:
        raise ValueError("the dataset description names no folder: inspect the data first")
    # In a bucket Ray Data streams the files with trainctl's client (its endpoint, retries).
    datasets = {}
    for split in ("train", "valid"):
        shuffle = (
            # Not reseeded per execution: app/data/exact_split.py splits the train data once per
            # worker-group start, and a restart must get the same shards as the first start.
            FileShuffleConfig(seed=seed, reseed_after_execution=False) if split == "train" else None
        )
        with classic_parquet_reader():
            files = parquet_files(root / split)
            source, filesystem = reader_source(root / split)
            dataset = ray.data.read_parquet(
                source,
                **filesystem,
                columns=["image", "label"],
                shuffle=shuffle,
                # One read task per file with the map below fused into it. Left to itself, Ray
                # cuts each file into ~10 blocks and runs the map as that many separate tasks.
                override_num_blocks=max(1, len(files)),
            )
        dataset = dataset.map_batches(
            to_uint8_rows,
            fn_kwargs={"fmt": info.image_format},
            batch_format="pyarrow",
            batch_size=None,  # whole blocks: the conversion is vectorized per column
            zero_copy_batch=True,
        )
        # Row order then depends only on the file order, not on which read task ends first.
        dataset.context.execution_options.preserve_order = True
        datasets[split] = dataset
    return datasets


@contextlib.contextmanager
def classic_parquet_reader() -> Iterator[None]:
    """Read Parquet with Ray Data's classic datasource, not Ray 2.60's default DataSourceV2.

    V2 lists the files in a separate task every time a dataset runs, and every epoch runs it
    again: on two CPUs that took 2-15 s before the first batch of each epoch (and of each
    validation), against 0.1-0.8 s for the classic reader, which lists once, when the dataset
    is created (bench/ingest.py, BENCHMARKS.md).
    """
    import ray.data

    context = ray.data.DataContext.get_current()
    saved = context.use_datasource_v2
    context.use_datasource_v2 = False
    try:
        yield
    finally:
        context.use_datasource_v2 = saved


def epoch_batches(
    shard: Any,
    *,
    batch_size: int,
    info: DatasetInfo,
    device: torch.device,
    epoch: int,
    seed: int,
    shuffle: bool,
    drop_last: bool = False,
    chunk_rows: int | None = None,
    rank: int = 0,
    skip_batches: int = 0,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(images, labels) for one pass over a shard: float32 NCHW (channels_last), int64.

    `shard` is what `ray.train.get_dataset_shard` returns, or any Ray Dataset / DataIterator
    a dataset kind builds (app/data/kind.py). Every batch has batch_size rows except the last
    (dropped with drop_last). chunk_rows overrides how many rows are pulled from Ray at a time,
    which is also the shuffle window. skip_batches: the batches a resumed epoch already trained;
    their rows are pulled (the generator must advance the same way) but never normalized.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = torch.device(device)
    normalize = Normalizer(info, device)
    generator = _generator(seed, epoch, rank) if shuffle else None
    skip = max(0, skip_batches) * batch_size
    row_bytes = info.height * info.width * info.channels
    chunk = chunk_rows or max(batch_size, min(CHUNK_ROWS, CHUNK_BYTES // max(1, row_bytes)))
    chunks = shard.iter_torch_batches(
        batch_size=chunk,
        device=device,
        pin_memory=device.type == "cuda",
        prefetch_batches=2,
    )
    pending: list[tuple[torch.Tensor, torch.Tensor]] = []
    pending_rows = 0
    for batch in chunks:
        images, labels = batch["image"], batch["label"]
        order = _permutation(len(labels), generator, device)
        if skip >= len(labels):  # a whole chunk already trained before the interruption
            skip -= len(labels)
            continue
        if skip:
            images, labels, order = _drop_first(images, labels, order, skip)
            skip = 0
        # Rows left in this chunk: after a resume's skip, the permutation is the shorter one.
        rows = len(labels) if order is None else len(order)
        start = 0
        if pending_rows:  # finish the batch that straddles the previous chunk
            take = min(batch_size - pending_rows, rows)
            pending.append(_rows(images, labels, order, 0, take))
            pending_rows += take
            start = take
            if pending_rows == batch_size:
                yield normalize(*_concat(pending))
                pending, pending_rows = [], 0
        while start + batch_size <= rows:
            yield normalize(*_rows(images, labels, order, start, start + batch_size))
            start += batch_size
        if start < rows:
            pending.append(_rows(images, labels, order, start, rows))
            pending_rows += rows - start
    if pending_rows and not drop_last:
        yield normalize(*_concat(pending))


class Normalizer:
    """uint8 NHWC -> float32 NCHW in channels_last memory, (x/255 - mean) / std, in one pass.

    The per-channel affine map is spelled out once per pixel position (H*W*C values), so that
    one `addcmul` reads each uint8 and writes each float exactly once, with a long contiguous
    inner loop. Broadcasting a (1, C, 1, 1) mean over channels_last memory instead runs an
    inner loop of C elements and took three passes; on CPU that was several times slower.
    """

    def __init__(self, info: DatasetInfo, device: torch.device) -> None:
        std = torch.tensor(info.std, dtype=torch.float64)
        mean = torch.tensor(info.mean, dtype=torch.float64)
        positions = info.height * info.width
        self.scale = (1.0 / (255.0 * std)).repeat(positions).to(device, torch.float32)
        self.bias = (-mean / std).repeat(positions).to(device, torch.float32)
        self.shape = (info.height, info.width, info.channels)

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if images.dim() == 3:  # defensive: single-channel rows stored without a channel axis
            images = images.unsqueeze(-1)
        if tuple(images.shape[1:]) != self.shape:
            raise ValueError(f"batch images are {tuple(images.shape[1:])}, expected {self.shape}")
        rows = len(images)
        pixels = torch.addcmul(self.bias, images.reshape(rows, -1), self.scale)
        # NHWC viewed as NCHW is exactly the channels_last layout: no copy.
        return pixels.view(rows, *self.shape).permute(0, 3, 1, 2), labels.to(torch.int64)


def _drop_first(
    images: torch.Tensor, labels: torch.Tensor, order: torch.Tensor | None, rows: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    if order is None:
        return images[rows:], labels[rows:], None
    return images, labels, order[rows:]


def _generator(seed: int, epoch: int, rank: int = 0) -> torch.Generator:
    state = np.random.SeedSequence([seed, epoch, rank]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def _permutation(
    rows: int, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor | None:
    if generator is None:
        return None
    return torch.randperm(rows, generator=generator).to(device, non_blocking=True)


def _rows(
    images: torch.Tensor, labels: torch.Tensor, order: torch.Tensor | None, start: int, stop: int
) -> tuple[torch.Tensor, torch.Tensor]:
    if order is None:
        return images[start:stop], labels[start:stop]  # views, no copy
    index = order[start:stop]
    return images.index_select(0, index), labels.index_select(0, index)


def _concat(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    if len(parts) == 1:
        return parts[0]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
