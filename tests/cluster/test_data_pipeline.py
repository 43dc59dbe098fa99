"""epoch_batches over real Ray Data: normalization, layout, batch sizes and shuffling."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from app.data.kinds import build_datasets, dataset_kind
from app.data.pipeline import epoch_batches
from app.data.schema import DatasetInfo
from app.settings import TrainSettings

pytestmark = [pytest.mark.cluster]
CPU = torch.device("cpu")
ROWS = 3000  # two train files (the second small): file order matters for the shuffle


@pytest.fixture(scope="module")
def synthetic(
    ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> tuple[TrainSettings, DatasetInfo]:
    from app.data.kinds import prepare_dataset

    data = tmp_path_factory.mktemp("pipeline-data")
    prepare_dataset("synthetic", data / "synthetic", rows=ROWS)
    settings = TrainSettings(dataset="synthetic", data_path=data, seed=5)
    kind = dataset_kind(settings.dataset)
    return settings, kind.ensure(kind.location(settings.data_path), settings)[0]


def _epoch(shard: object, info: DatasetInfo, **options: object) -> list[tuple]:
    defaults: dict[str, object] = {"epoch": 1, "seed": 5, "shuffle": True, "batch_size": 256}
    return list(epoch_batches(shard, info=info, device=CPU, **{**defaults, **options}))


def _labels(batches: list[tuple]) -> list[int]:
    return torch.cat([b[1] for b in batches]).tolist()


def _file_rows(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    table = pq.read_table(sorted(folder.glob("*.parquet")))
    column = table.column("image").combine_chunks()
    images = np.frombuffer(column.buffers()[1], np.uint8).reshape(len(column), -1)
    return images, table.column("label").to_numpy()


def _as_uint8(x: torch.Tensor, info: DatasetInfo) -> np.ndarray:
    std = torch.tensor(info.std).view(1, -1, 1, 1) * 255
    mean = torch.tensor(info.mean).view(1, -1, 1, 1) * 255
    pixels = (x * std + mean).round().to(torch.uint8).permute(0, 2, 3, 1)
    return pixels.reshape(len(x), -1).numpy()


def test_batches_are_normalized_float32_nchw_channels_last(synthetic) -> None:
    settings, info = synthetic
    train = build_datasets(settings, info)["train"]
    batches = _epoch(train, info)
    assert [len(b[1]) for b in batches] == [256] * (ROWS // 256) + [ROWS % 256]
    for images, labels in batches:
        assert images.dtype == torch.float32 and labels.dtype == torch.int64
        assert images.shape[1:] == (3, 32, 32)
        assert images.is_contiguous(memory_format=torch.channels_last)
    x = torch.cat([b[0] for b in batches])
    per_channel_mean = x.mean(dim=(0, 2, 3))
    per_channel_std = x.std(dim=(0, 2, 3))
    assert torch.all(per_channel_mean.abs() < 0.05), per_channel_mean
    assert torch.all((per_channel_std - 1).abs() < 0.05), per_channel_std


def test_each_epoch_is_a_new_order_of_exactly_the_same_rows(synthetic) -> None:
    settings, info = synthetic
    train = build_datasets(settings, info)["train"]
    # Chunks of 700 rows and batches of 256: batches straddle chunk boundaries.
    first = _epoch(train, info, epoch=1, chunk_rows=700)
    second = _epoch(train, info, epoch=2, chunk_rows=700)
    assert _labels(first) != _labels(second)
    images, labels = _file_rows(Path(info.path) / "train")
    expected = sorted(zip(map(bytes, images), labels.tolist(), strict=True))
    for batches in (first, second):
        got = _as_uint8(torch.cat([b[0] for b in batches]), info)
        pairs = zip(map(bytes, got), _labels(batches), strict=True)
        assert sorted(pairs) == expected


def test_same_seed_and_epoch_give_the_same_order(synthetic) -> None:
    settings, info = synthetic

    def order(seed: int, epoch: int) -> torch.Tensor:
        train = build_datasets(settings, info)["train"]  # a fresh dataset, as in a new run
        return torch.cat([b[0][:, 0, 0, 0] for b in _epoch(train, info, seed=seed, epoch=epoch)])

    reference = order(5, 3)
    assert torch.equal(order(5, 3), reference)
    assert not torch.equal(order(6, 3), reference)


def test_validation_is_not_shuffled_and_drop_last_keeps_full_batches(synthetic) -> None:
    settings, info = synthetic
    valid = build_datasets(settings, info)["valid"]
    once = _epoch(valid, info, shuffle=False, batch_size=64, seed=1, epoch=1)
    again = _epoch(valid, info, shuffle=False, batch_size=256, seed=2, epoch=9, drop_last=True)
    images, labels = _file_rows(Path(info.path) / "valid")
    assert _labels(once) == labels.tolist()
    np.testing.assert_array_equal(_as_uint8(torch.cat([b[0] for b in once]), info), images)
    assert [len(b[1]) for b in again] == [256] * (info.valid_rows // 256)
    assert _labels(again) == labels.tolist()[: 256 * (info.valid_rows // 256)]


def test_streaming_split_shards_as_ray_train_hands_them_out(synthetic) -> None:
    settings, info = synthetic
    shards = build_datasets(settings, info)["train"].streaming_split(2, equal=True)
    results: dict[int, list[tuple]] = {}

    def consume(rank: int) -> None:  # the shards of one split must be read at the same time
        results[rank] = _epoch(shards[rank], info, batch_size=100)

    threads = [threading.Thread(target=consume, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    counts = [sum(len(b[1]) for b in results[rank]) for rank in range(2)]
    assert counts == [ROWS // 2, ROWS // 2]


def test_single_channel_rows_stored_as_hxw(ray_session: None, tmp_path: Path) -> None:
    settings = TrainSettings(dataset="digits", data_path=tmp_path)
    kind = dataset_kind(settings.dataset)
    info, _ = kind.ensure(kind.location(settings.data_path), settings)
    valid = build_datasets(settings, info)["valid"]
    batches = _epoch(valid, info, shuffle=False, batch_size=100)
    assert all(b[0].shape[1:] == (1, 8, 8) for b in batches)
    images, labels = _file_rows(tmp_path / "digits" / "valid")
    np.testing.assert_array_equal(_as_uint8(torch.cat([b[0] for b in batches]), info), images)
    assert _labels(batches) == labels.tolist()


def test_cached_datasets_hold_the_same_rows_in_a_new_reproducible_order_per_epoch(
    synthetic,
) -> None:
    from app.data.cache import cache_datasets

    settings, info = synthetic
    datasets, decision = cache_datasets(build_datasets(settings, info), settings, info)
    assert decision.cache  # 3,000 small rows: auto keeps them
    train = datasets["train"]
    first, second = _epoch(train, info, epoch=1), _epoch(train, info, epoch=2)
    assert _labels(first) != _labels(second)
    images, labels = _file_rows(Path(info.path) / "train")
    expected = sorted(zip(map(bytes, images), labels.tolist(), strict=True))
    for batches in (first, second):
        got = _as_uint8(torch.cat([b[0] for b in batches]), info)
        assert sorted(zip(map(bytes, got), _labels(batches), strict=True)) == expected
    # A new run with the same seed sees the same order, epoch for epoch.
    again = cache_datasets(build_datasets(settings, info), settings, info)[0]["train"]
    assert _labels(_epoch(again, info, epoch=1)) == _labels(first)
    assert _labels(_epoch(again, info, epoch=2)) == _labels(second)


def test_cache_off_streams_the_files_every_epoch(synthetic) -> None:
    from app.data.cache import cache_datasets

    settings, info = synthetic
    streamed = build_datasets(settings, info)
    kept, decision = cache_datasets(
        streamed, settings.model_copy(update={"cache_dataset": "off"}), info
    )
    assert not decision.cache and kept is streamed


def test_exact_split_replays_each_ranks_epoch_and_a_resume_skips_what_was_trained(
    synthetic,
) -> None:
    """The train split of app/data/exact_split.py: rank r gets the same rows at every start
    (here two starts, as after a restart), its epoch order is a function of (seed, epoch,
    rank), and skip_batches yields exactly the rest of that epoch, straddling chunks included."""
    from app.data.exact_split import ExactSplit

    settings, info = synthetic

    def start() -> list[object]:
        config = ExactSplit().configure(build_datasets(settings, info), 2, None, None)
        return [shards["train"] for shards in config]

    first, again = start(), start()
    rows = []
    for rank in (0, 1):
        full = _epoch(first[rank], info, epoch=3, rank=rank, chunk_rows=700)
        replay = _epoch(again[rank], info, epoch=3, rank=rank, chunk_rows=700)
        assert len(full) == len(replay)
        assert all(torch.equal(a[0], b[0]) for a, b in zip(full, replay, strict=True))
        resumed = _epoch(again[rank], info, epoch=3, rank=rank, chunk_rows=700, skip_batches=3)
        assert len(resumed) == len(full) - 3
        assert all(torch.equal(a[0], b[0]) for a, b in zip(full[3:], resumed, strict=True))
        assert _labels(resumed) == _labels(full[3:])
        rows += list(map(bytes, _as_uint8(torch.cat([b[0] for b in full]), info)))
    # The two ranks' shards are disjoint and hold every row (3,000 split evenly in two).
    images, _ = _file_rows(Path(info.path) / "train")
    assert sorted(rows) == sorted(map(bytes, images))


def test_a_ray_task_decodes_as_many_files_at_once_as_it_has_cpus(ray_session: None) -> None:
    """Image-folder read tasks run app/data/folder_images.py on Ray workers: each decodes on
    the CPUs Ray gave it, not on every CPU of the node."""
    import ray

    from app.data.folder_images import decode_slots

    slots = ray.remote(decode_slots)
    assert ray.get(slots.options(num_cpus=1).remote(), timeout=120) == 1
    assert ray.get(slots.options(num_cpus=2).remote(), timeout=120) == 2
    assert ray.get(slots.options(num_cpus=0.5).remote(), timeout=120) == 1


def test_ray_datas_errors_stay_off_the_terminal_and_in_the_drivers_log(
    ray_session: None, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Ray Data logs a failed task at ERROR (a file its reader refused: with a traceback of its
    internals), which a run printed before its own one-line reason for the same failure: the
    driver keeps those records in driver.log instead."""
    import ray.data

    from app.ray_cluster import quiet_ray_data
    from app.runfolder import log_capture

    quiet_ray_data()
    log = log_capture.attempt_dir(tmp_path, 1) / "driver.log"
    with log_capture.capture(log, 1.0, "driver"), pytest.raises(Exception, match="refuses"):
        # A lambda travels by value: the workers cannot import this test module.
        ray.data.range(8).map_batches(lambda _: int("a block this reader refuses")).materialize()
    terminal = capfd.readouterr()
    shown = terminal.out + terminal.err
    assert "An exception was raised from a task" not in shown and "Traceback" not in shown, shown
    kept = log.read_text()
    assert 'An exception was raised from a task of operator "MapBatches(<lambda>)"' in kept, kept
    assert "ValueError: invalid literal for int() with base 10: 'a block this" in kept, kept
