"""When the decoded dataset is kept in Ray's object store: a pure decision, tested without Ray."""

from __future__ import annotations

from app.data.cache import AUTO_SHARE, decide, decoded_bytes
from app.data.schema import DatasetInfo

GIB = 1 << 30


def _info(train_rows: int, valid_rows: int) -> DatasetInfo:
    return DatasetInfo(
        channels=3, height=32, width=32, num_classes=10, train_rows=train_rows,
        valid_rows=valid_rows, layout="raw", mean=(0.5,) * 3, std=(0.25,) * 3,
    )  # fmt: skip


def test_decoded_size_is_uint8_pixels_plus_an_int64_label_per_row() -> None:
    assert decoded_bytes(_info(50_000, 10_000)) == 60_000 * (32 * 32 * 3 + 8)


def test_auto_caches_up_to_its_share_of_the_object_store_and_not_beyond() -> None:
    store = 4 * GIB
    fits = decide("auto", int(AUTO_SHARE * store), store)
    too_big = decide("auto", int(AUTO_SHARE * store) + 1, store)
    assert fits.cache and "only the first epoch reads" in fits.reason
    assert not too_big.cache
    assert "exceeds 50% of the object store (4.0 GiB)" in too_big.reason
    assert "TRAIN_CACHE_DATASET=on" in too_big.reason  # says how to force it


def test_on_and_off_override_the_size_check() -> None:
    assert decide("on", 100 * GIB, 1 * GIB).cache
    off = decide("off", 1, 100 * GIB)
    assert not off.cache and "TRAIN_CACHE_DATASET=off" in off.reason


def test_a_cluster_without_object_store_memory_streams() -> None:
    assert not decide("auto", 1, 0.0).cache
