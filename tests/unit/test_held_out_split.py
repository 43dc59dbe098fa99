"""The optional held-out test/ split: listed and checked with valid/'s rules, counted, never
trained on (Parquet and image folders), and offered to `evaluate --split test`."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from app.data.folder_listing import list_folder
from app.data.schema import inspect_dataset
from app.errors import ConfigError
from app.evaluation.data import run_split
from tests.folder_support import image_bytes, image_folder
from tests.parquet_support import GRAY, LABELS, lists
from tests.parquet_support import good_lists as good


def test_a_parquet_dataset_without_test_has_none(tmp_path: Path) -> None:
    info = inspect_dataset(good(tmp_path))
    assert info.test_rows is None and info.test_class_counts == ()
    assert "test" not in info.describe()


def test_a_parquet_test_split_is_counted_per_class(tmp_path: Path) -> None:
    good(tmp_path)
    lists(tmp_path / "test" / "a.parquet", GRAY[:12], LABELS[:12])
    info = inspect_dataset(tmp_path)
    assert (info.train_rows, info.valid_rows, info.test_rows) == (30, 10, 12)
    assert info.test_class_counts == (3, 3, 3, 3)
    assert "+ 12 test rows" in info.describe()


def test_a_parquet_test_split_copied_from_valid_is_refused(tmp_path: Path) -> None:
    import shutil

    good(tmp_path)
    shutil.copytree(tmp_path / "valid", tmp_path / "test")
    with pytest.raises(ConfigError) as err:
        inspect_dataset(tmp_path)
    assert "byte for byte" in str(err.value) and "of valid/" in str(err.value)
    assert "neither trained nor selected on" in str(err.value)


@pytest.mark.parametrize(
    ("write", "says"),
    [
        (lambda t: (t / "test").mkdir(), "test: no .parquet files"),
        (lambda t: lists(t / "test" / "a.parquet", GRAY[:4], [0, 1, 2, 9]),
         "label 9 never occurs in train (train labels are 0..3); test labels must be classes"),
        (lambda t: lists(t / "test" / "a.parquet", np.zeros((2, 7, 5), np.uint8), [0, 1]),
         "test images are 7x5x1 but train images are 6x5x1"),
        (lambda t: (t / "test" / "a.parquet").parent.mkdir() or
         (t / "test" / "a.parquet").write_bytes(b"not parquet"), "not a readable Parquet file"),
    ],
)  # fmt: skip
def test_a_bad_parquet_test_split_is_refused_like_valid(
    tmp_path: Path, write: object, says: str
) -> None:
    good(tmp_path)
    write(tmp_path)  # type: ignore[operator]
    with pytest.raises(ConfigError) as err:
        inspect_dataset(tmp_path)
    assert says in str(err.value)


def test_an_image_folder_test_split_is_listed_apart_from_training(tmp_path: Path) -> None:
    image_folder(tmp_path, per_class=(2, 1), classes=("cat", "dog"))
    assert not list_folder(tmp_path).has_test
    (tmp_path / "test" / "dog").mkdir(parents=True)
    (tmp_path / "test" / "dog" / "a.png").write_bytes(image_bytes(1, 1, "PNG"))
    (tmp_path / "test" / "README.txt").write_text("held out")
    listing = list_folder(tmp_path)
    assert listing.has_test and listing.test == (("test/dog/a.png", 1),)
    assert all(not path.startswith("test/") for path, _ in listing.train + listing.valid)
    assert listing.skipped == 1


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda t: (t / "test" / "eel").mkdir(parents=True) or
         (t / "test" / "eel" / "a.png").write_bytes(image_bytes(1, 1, "PNG")),
         "test: 1 class(es) not in train/: eel; test/ may only hold classes that train/ has"),
        (lambda t: (t / "test" / "cat").mkdir(parents=True),
         "test: no image files; the optional test split needs at least one"),
        (lambda t: os.symlink("/etc", t / "test"), "is a symbolic link to"),
    ],
)  # fmt: skip
def test_a_bad_image_folder_test_split_is_refused_like_valid(
    tmp_path: Path, make: object, says: str
) -> None:
    image_folder(tmp_path, per_class=(2, 1), classes=("cat", "dog"))
    make(tmp_path)  # type: ignore[operator]
    with pytest.raises(ConfigError) as err:
        list_folder(tmp_path)
    assert says in str(err.value)


def test_evaluate_split_test_needs_a_test_split(tmp_path: Path) -> None:
    good(tmp_path)
    card = {
        "class_names": ["0", "1", "2", "3"], "input": {"height": 6, "width": 5, "channels": 1},
        "data": {"path": str(tmp_path)}, "settings": {"dataset": "parquet"},
    }  # fmt: skip
    with pytest.raises(ConfigError) as err:
        run_split(card, "test", None)
    assert "has no test/ split" in str(err.value)
    lists(tmp_path / "test" / "a.parquet", GRAY[:8], LABELS[:8])
    found = run_split(card, "test", None)
    assert (found.split, found.rows, found.location) == ("test", 8, tmp_path / "test")


@pytest.mark.parametrize("source", ["valid", "train"])
def test_a_test_split_copied_from_another_is_refused(tmp_path: Path, source: str) -> None:
    """`cp -r valid test`: the gate would be judged on the rows the best checkpoint was
    selected on (or trained on), and called held-out."""
    import shutil

    image_folder(tmp_path, per_class=(6, 4), classes=("cat", "dog"))
    shutil.copytree(tmp_path / source, tmp_path / "test")
    with pytest.raises(ConfigError) as err:
        list_folder(tmp_path)
    count = 12 if source == "train" else 8
    (problem,) = [p for p in err.value.problems if f"byte for byte {source}/'s" in p]
    assert problem.startswith(f"{tmp_path / 'test'}: {count} of its files are byte for byte ")
    assert "held-out split must hold data the model was neither trained nor selected on" in problem


def test_test_files_that_only_share_a_name_are_held_out(tmp_path: Path) -> None:
    image_folder(tmp_path, per_class=(2, 2), classes=("cat", "dog"))
    for label, name in enumerate(("cat", "dog")):  # 000.jpg as in valid/, other pixels
        (tmp_path / "test" / name).mkdir(parents=True)
        (tmp_path / "test" / name / "000.jpg").write_bytes(image_bytes(1000 + label, label, "JPEG"))
    assert list_folder(tmp_path).test == (("test/cat/000.jpg", 0), ("test/dog/000.jpg", 1))


def test_a_parquet_valid_split_copied_from_train_is_refused(tmp_path: Path) -> None:
    """valid/ picks the best checkpoint and, without test/, is what the gate judges: a copy of
    a train/ file there would crown the model on the rows it learned."""
    import shutil

    good(tmp_path)
    shutil.copy(tmp_path / "train" / "a.parquet", tmp_path / "valid" / "copied.parquet")
    with pytest.raises(ConfigError) as err:
        inspect_dataset(tmp_path)
    (problem,) = err.value.problems
    assert problem.startswith(f"{tmp_path / 'valid' / 'copied.parquet'}: byte for byte ")
    assert "of train/; valid/ must hold data the model is not trained on" in problem
    assert problem.endswith("remove it, or write valid/ from other rows")


def test_an_image_folder_valid_split_copied_from_train_is_refused(tmp_path: Path) -> None:
    import shutil

    image_folder(tmp_path, per_class=(6, 4), classes=("cat", "dog"))
    shutil.copy(tmp_path / "train" / "dog" / "005.png", tmp_path / "valid" / "dog" / "005.png")
    with pytest.raises(ConfigError) as err:
        list_folder(tmp_path)
    (problem,) = err.value.problems
    assert problem == (
        f"{tmp_path / 'valid'}: 1 of its files is byte for byte train/'s (dog/005.png); valid/ "
        "must hold data the model is not trained on (it picks the best checkpoint and, without "
        "a test/ split, is what the promotion gate judges): remove them, or put other images "
        "in valid/"
    )
    # The helper's own valid/ images are drawn apart from train/'s: accepted as they are.
    (tmp_path / "valid" / "dog" / "005.png").unlink()
    assert len(list_folder(tmp_path).valid) == 8


def test_a_splits_evaluation_counts_the_files_skipped_in_that_split_only(tmp_path: Path) -> None:
    """The run-end evaluation of valid/ said `3 other file(s) not read` for a hidden file, a
    note and a loose image in train/ (a red-team pass)."""
    image_folder(tmp_path, per_class=(2, 1), classes=("cat", "dog"))
    (tmp_path / "train" / "cat" / ".hidden.png").write_bytes(b"x")
    (tmp_path / "train" / "cat" / "notes.txt").write_text("x")
    (tmp_path / "valid" / "dog" / "notes.txt").write_text("x")
    card = {
        "class_names": ["cat", "dog"], "input": {"height": 8, "width": 8, "channels": 3},
        "data": {"path": str(tmp_path)}, "settings": {"dataset": "folder"},
    }  # fmt: skip
    assert run_split(card, "valid", None).skipped_files == 1
    assert list_folder(tmp_path).skipped == 3
