"""Built-in datasets (prepare-data and the kinds' preparation on first use) on real files:
content, idempotence, concurrency, offline."""

from __future__ import annotations

import json
import multiprocessing
import socket
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.data.kinds import dataset_kind, prepare_dataset
from app.data.prepare import MARKER, download_dir
from app.data.schema import DatasetInfo
from app.errors import ConfigError, RunFailed
from app.settings import TrainSettings
from tests.support import explain, run_trainctl, trainctl_env, trainctl_on_a_full_disk


def _read(split_dir: Path) -> tuple[np.ndarray, np.ndarray, pa.Schema]:
    table = pq.read_table(sorted(split_dir.glob("*.parquet")))
    schema = pq.read_schema(sorted(split_dir.glob("*.parquet"))[0])
    shape = tuple(
        int(v) for v in schema.field("image").metadata[b"trainctl.image_shape"].split(b",")
    )
    column = table.column("image").combine_chunks()
    images = np.frombuffer(column.buffers()[1], np.uint8).reshape(len(column), *shape)
    return images, table.column("label").to_numpy(), schema


def _files(folder: Path) -> dict[str, int]:
    """Every file under folder with its inode: a rewrite gives new inodes."""
    return {str(p.relative_to(folder)): p.stat().st_ino for p in folder.rglob("*") if p.is_file()}


def test_digits_are_the_real_sklearn_digits_scaled_to_uint8(tmp_path: Path) -> None:
    from sklearn.datasets import load_digits

    out = tmp_path / "digits"
    summary = prepare_dataset("digits", out)
    assert "1438 train + 359 valid rows" in summary and "8x8x1" in summary and str(out) in summary

    train_x, train_y, schema = _read(out / "train")
    valid_x, valid_y, _ = _read(out / "valid")
    assert schema.field("image").type == pa.binary(64)
    assert schema.field("label").type == pa.int64()
    assert train_x.shape == (1438, 8, 8) and valid_x.shape == (359, 8, 8)
    assert train_x.dtype == np.uint8 and train_x.max() == 255 and train_x.min() == 0
    assert set(np.unique(train_y)) == set(range(10)) and set(np.unique(valid_y)) <= set(range(10))

    # Same images as scikit-learn's (0..16 scaled to 0..255), every one exactly once.
    bunch = load_digits()
    expected = np.rint(bunch.images * 255 / 16).astype(np.uint8).reshape(1797, -1)
    got = np.concatenate([train_x, valid_x]).reshape(1797, -1)
    got_labels = np.concatenate([train_y, valid_y])
    order_expected = np.lexsort((bunch.target, *expected.T))
    order_got = np.lexsort((got_labels, *got.T))
    np.testing.assert_array_equal(got[order_got], expected[order_expected])
    np.testing.assert_array_equal(got_labels[order_got], bunch.target[order_expected])

    meta = json.loads((out / MARKER).read_text())
    assert meta["layout"] == "raw" and meta["num_classes"] == 10


def test_digits_are_read_as_load_digits_gives_them_without_importing_sklearn() -> None:
    """The bundled file is read directly (scikit-learn's import costs each run seconds): the
    same arrays, in the same order, as load_digits, and sklearn stays unimported."""
    from sklearn.datasets import load_digits

    from app.data.kinds.digits import _digits_arrays

    images, target = _digits_arrays()
    bunch = load_digits()
    np.testing.assert_array_equal(images, bunch.images)
    np.testing.assert_array_equal(target, bunch.target)
    probe = (
        "import sys; from app.data.kinds.digits import digits; splits = digits(); "
        "assert len(splits.train_labels) == 1438, len(splits.train_labels); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]", result.stdout


def test_digits_split_is_the_same_every_time(tmp_path: Path) -> None:
    prepare_dataset("digits", tmp_path / "a")
    prepare_dataset("digits", tmp_path / "b")
    for split in ("train", "valid"):
        a, b = _read(tmp_path / "a" / split), _read(tmp_path / "b" / split)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_synthetic_is_sized_seeded_and_learnable(tmp_path: Path) -> None:
    prepare_dataset("synthetic", tmp_path / "s0", rows=600, seed=0)
    prepare_dataset("synthetic", tmp_path / "s0again", rows=600, seed=0)
    prepare_dataset("synthetic", tmp_path / "s1", rows=600, seed=1)
    train_x, train_y, _ = _read(tmp_path / "s0" / "train")
    valid_x, valid_y, _ = _read(tmp_path / "s0" / "valid")
    assert train_x.shape == (600, 32, 32, 3) and valid_x.shape == (120, 32, 32, 3)
    assert set(np.unique(train_y)) == set(range(10))
    np.testing.assert_array_equal(train_x, _read(tmp_path / "s0again" / "train")[0])
    assert not np.array_equal(train_x, _read(tmp_path / "s1" / "train")[0])

    # Learnable: even nearest class mean, with no training at all, gets most of valid right.
    flat = train_x.reshape(600, -1).astype(np.float32)
    centroids = np.stack([flat[train_y == k].mean(axis=0) for k in range(10)])
    queries = valid_x.reshape(120, -1).astype(np.float32)
    distances = ((queries[:, None, :] - centroids[None]) ** 2).sum(-1)
    assert (distances.argmin(1) == valid_y).mean() > 0.9


def test_a_folder_of_another_dataset_or_seed_is_not_called_already_prepared(
    tmp_path: Path,
) -> None:
    """`prepare-data --dataset digits --out syn`, where syn held synthetic data, said `digits:
    ... (already prepared)` with the synthetic set's figures; so did another --seed (a
    red-team pass)."""
    from app.errors import ConfigError

    out = tmp_path / "syn"
    prepare_dataset("synthetic", out, rows=50, seed=3)
    before = _files(out)
    with pytest.raises(ConfigError, match=f"--out={out} holds synthetic of seed 3, not digits"):
        prepare_dataset("digits", out)
    with pytest.raises(ConfigError, match="holds synthetic of seed 3, not synthetic of seed 4"):
        prepare_dataset("synthetic", out, rows=50, seed=4)
    assert "already prepared" in prepare_dataset("synthetic", out, rows=50, seed=3)
    assert _files(out) == before
    # `train` prepares without a seed to hold to: whatever another driver finished is used.
    from app.data.kinds import KINDS

    assert "already prepared" in KINDS["synthetic"].write(out, seed=4, held_to_seed=False)
    (out / "_trainctl_dataset.json").write_text("[1]")  # a marker that is no object
    with pytest.raises(ConfigError, match="holds None, not digits"):
        prepare_dataset("digits", out)


def test_a_complete_dataset_is_not_rewritten_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "synthetic"
    prepare_dataset("synthetic", out, rows=50)
    before = _files(out)
    again = prepare_dataset("synthetic", out, rows=50)
    assert "already prepared" in again
    assert _files(out) == before

    prepare_dataset("synthetic", out, rows=80, force=True)
    after = _files(out)
    assert set(after) == set(before) and all(after[name] != before[name] for name in before)
    assert _read(out / "train")[0].shape[0] == 80


def _prepare_in_child(out: str, force: bool) -> str:
    return prepare_dataset("synthetic", Path(out), rows=3000, force=force)


def test_concurrent_prepares_leave_one_complete_dataset_and_no_temporaries(
    tmp_path: Path,
) -> None:
    out = tmp_path / "shared" / "synthetic"
    # Separate processes, as on a cluster; half force a rewrite so renames race with readers.
    # forkserver: fresh processes (no Ray threads inherited) that import the code only once.
    # A process pool that says so when a child dies (BrokenProcessPool), with a deadline on the
    # results: multiprocessing.Pool waited forever for the task of a child that had gone.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["app.data.kinds"])
    with ProcessPoolExecutor(4, mp_context=context) as pool:
        futures = [pool.submit(_prepare_in_child, str(out), i % 2 == 1) for i in range(4)]
        results = [future.result(timeout=600) for future in futures]
    assert all("3000 train + 600 valid rows" in line for line in results)
    assert sum("already prepared" in line for line in results) <= 2
    images, labels, _ = _read(out / "train")
    assert images.shape == (3000, 32, 32, 3) and labels.shape == (3000,)
    assert (out / MARKER).is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == [".synthetic.lock", "synthetic"]
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "train", "valid"]


def test_temporaries_of_a_killed_writer_are_cleaned_up(tmp_path: Path) -> None:
    out = tmp_path / "digits"
    (tmp_path / ".digits.tmp-999-deadbeef" / "train").mkdir(parents=True)
    (tmp_path / ".digits.old-cafe0000").mkdir()
    prepare_dataset("digits", out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".digits.lock", "digits"]


def test_a_folder_with_other_content_is_never_replaced(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    with pytest.raises(ConfigError, match="holds more than a dataset"):
        prepare_dataset("digits", out, force=True)
    assert (out / "notes.txt").read_text() == "precious"


def test_hand_seeded_train_and_valid_count_as_present(tmp_path: Path) -> None:
    out = tmp_path / "digits"
    (out / "train").mkdir(parents=True)
    (out / "valid").mkdir()
    assert "not written by trainctl" in prepare_dataset("digits", out)
    assert not (out / MARKER).exists()


@pytest.mark.parametrize(
    ("name", "rows", "message"),
    [
        ("imagenet", None, "not built in"),
        ("digits", 10, "only the synthetic"),
        ("synthetic", 0, "rows=0"),
    ],
)
def test_bad_requests_are_config_errors(tmp_path: Path, name: str, rows: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        prepare_dataset(name, tmp_path / "x", rows=rows)
    assert not (tmp_path / "x").exists()


def _ensure(settings: TrainSettings) -> DatasetInfo:
    kind = dataset_kind(settings.dataset)
    return kind.ensure(kind.location(settings.data_path), settings)[0]


def test_ensure_prepares_a_missing_named_dataset_once(tmp_path: Path) -> None:
    settings = TrainSettings(dataset="digits", data_path=tmp_path)
    info = _ensure(settings)
    assert (info.channels, info.height, info.width, info.num_classes) == (1, 8, 8, 10)
    assert (info.train_rows, info.valid_rows, info.layout) == (1438, 359, "raw")
    before = _files(tmp_path / "digits")
    assert _ensure(settings) == info
    assert _files(tmp_path / "digits") == before


def test_ensure_never_prepares_parquet(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mine: folder not found"):
        _ensure(TrainSettings(dataset="parquet", data_path=tmp_path / "mine"))
    assert not (tmp_path / "mine").exists()


def _network_reachable() -> bool:
    try:
        socket.create_connection(("ossci-datasets.s3.amazonaws.com", 443), timeout=3).close()
    except OSError:
        return False
    return True


def test_mnist_download_without_network_fails_cleanly(tmp_path: Path) -> None:
    if _network_reachable():
        pytest.skip("the MNIST mirror is reachable: this test checks the offline failure")
    out = tmp_path / "mnist"
    with pytest.raises(RunFailed) as caught:
        prepare_dataset("mnist", out)  # the real torchvision download, no mock
    message = str(caught.value)
    assert "could not download mnist" in message
    assert "TRAIN_DATASET=parquet" in message and str(download_dir(out)) in message
    assert sorted(p.name for p in tmp_path.iterdir()) == [".mnist.lock"]  # nothing half-made


def test_cli_prepares_digits(tmp_path: Path) -> None:
    result = run_trainctl(
        "prepare-data", "--dataset", "digits", "--out", "d", env=trainctl_env(), cwd=tmp_path
    )
    assert result.returncode == 0, explain(result)
    assert "digits: 1438 train + 359 valid rows" in result.stdout
    assert (tmp_path / "d" / MARKER).is_file()


def test_a_full_disk_under_prepare_data_is_a_failure_naming_out_that_leaves_nothing(
    tmp_path: Path,
) -> None:
    """It was "internal error: OSError ... please report it" (a red-team pass)."""
    out = tmp_path / "digits"
    result = trainctl_on_a_full_disk(2000, "prepare-data", "--dataset", "digits", "--out", str(out))
    assert result.returncode == 1, explain(result)
    assert result.stderr.splitlines() == [
        "trainctl: failed:",
        f"  - {out}: could not be written (File too large); nothing of it was kept: make room "
        "there, then run it again",
    ]
    assert [p.name for p in tmp_path.iterdir()] == [".digits.lock"]  # no staging folder left
