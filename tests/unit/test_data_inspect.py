"""inspect_dataset on real Parquet files: what it infers, and one clear line per problem."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from app.data.schema import DatasetInfo, inspect_dataset
from app.errors import EXIT_INVALID, ConfigError
from tests.folder_support import png_claiming
from tests.parquet_support import GRAY, LABELS, lists
from tests.parquet_support import good_lists as good

RNG = np.random.default_rng(7)
BOMB = png_claiming(40_000, 40_000)
NULLABLE_LABELS = pd.array([1, None], "Int64")  # pandas writes this as int64 with a null


def encoded(path: Path, images: list[Image.Image], labels: np.ndarray, fmt: str = "PNG") -> None:
    blobs = []
    for image in images:
        buffer = io.BytesIO()
        image.save(buffer, format=fmt)
        blobs.append(buffer.getvalue())
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"image": blobs, "label": labels}).to_parquet(path)


def tensor(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    """Arrow's canonical fixed-shape tensor column (Ray's own is covered in the cluster tests)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    column = pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(images))
    pq.write_table(pa.table({"image": column, "label": pa.array(labels)}), path)


def test_tutorial_lists_are_inferred_with_statistics(tmp_path: Path) -> None:
    info = inspect_dataset(good(tmp_path))
    pixels = GRAY[:30] / 255.0
    assert info == DatasetInfo(
        channels=1,
        height=6,
        width=5,
        num_classes=4,
        train_rows=30,
        valid_rows=10,
        layout="list",
        mean=(round(float(pixels.mean()), 6),),
        std=(round(float(pixels.std()), 6),),
        image_shape=(6, 5),
        path=tmp_path,
        train_class_counts=(8, 8, 7, 7),  # labels 0..29 % 4
        valid_class_counts=(2, 2, 3, 3),  # labels 30..39 % 4
    )


@pytest.mark.parametrize(
    ("write", "expected"),
    [
        (lambda p, x, y: lists(p, x[:, :5, :5].reshape(-1, 25), y), ("list", 1, 5, 5)),
        (lambda p, x, y: lists(p, np.stack([x, x, x], axis=1), y), ("list", 3, 6, 5)),
        (lambda p, x, y: tensor(p, np.stack([x, x, x], -1), y), ("tensor", 3, 6, 5)),
        (lambda p, x, y: encoded(p, [Image.fromarray(i) for i in x], y), ("encoded", 1, 6, 5)),
        (
            lambda p, x, y: encoded(p, [Image.fromarray(i).convert("RGB") for i in x], y, "JPEG"),
            ("encoded", 3, 6, 5),
        ),
    ],
    ids=["flat-square-lists", "chw-lists", "fixed-shape-tensor", "png-gray", "jpeg-rgb"],
)
def test_other_layouts_and_orders_are_inferred(
    tmp_path: Path, write: Callable[..., None], expected: tuple[str, int, int, int]
) -> None:
    write(tmp_path / "train" / "a.parquet", GRAY[:30], LABELS[:30])
    write(tmp_path / "valid" / "a.parquet", GRAY[30:], LABELS[30:])
    info = inspect_dataset(tmp_path)
    assert (info.layout, info.channels, info.height, info.width) == expected
    assert (info.num_classes, info.train_rows, info.valid_rows) == (4, 30, 10)
    assert len(info.mean) == len(info.std) == expected[1]


def test_hugging_face_image_struct_is_read_as_encoded(tmp_path: Path) -> None:
    def write(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
        buffers = []
        for image in images:
            buffer = io.BytesIO()
            Image.fromarray(image).save(buffer, format="PNG")
            buffers.append({"bytes": buffer.getvalue(), "path": None})
        path.parent.mkdir(parents=True)
        pq.write_table(pa.table({"image": buffers, "label": labels}), path)

    write(tmp_path / "train" / "a.parquet", GRAY[:30], LABELS[:30])
    write(tmp_path / "valid" / "a.parquet", GRAY[30:], LABELS[30:])
    info = inspect_dataset(tmp_path)
    assert (info.layout, info.channels, info.height, info.width) == ("encoded", 1, 6, 5)


def _png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _frame(path: Path, **columns: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(columns).to_parquet(path)


BROKEN: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    "missing-folder": (
        lambda r: lists(r / "train" / "a.parquet", GRAY, LABELS),
        ["valid: folder not found", "train/ and valid/"],
    ),
    "no-parquet-files": (
        lambda r: (good(r), [p.unlink() for p in (r / "train").glob("*")]),
        ["train: no .parquet files"],
    ),
    "missing-column": (
        lambda r: (good(r), _frame(r / "valid" / "a.parquet", image=[[1]] * 3, y=[0, 1, 2])),
        ["a.parquet: missing column label (found image, y)"],
    ),
    "wrong-image-type": (
        lambda r: (good(r), _frame(r / "valid" / "a.parquet", image=["a", "b"], label=[0, 1])),
        ["valid/a.parquet: column image: type large_string; allowed: Ray tensor column"],
    ),
    "float-labels": (
        lambda r: (good(r), _frame(r / "valid" / "a.parquet", image=[[[1]]], label=[0.5])),
        ["column label is double; labels must be integers"],
    ),
    "null-labels": (
        lambda r: (
            good(r),
            _frame(r / "valid" / "a.parquet", image=[[[1]]] * 2, label=NULLABLE_LABELS),
        ),
        ["column label has 1 missing values"],
    ),
    "negative-labels": (
        lambda r: (good(r), lists(r / "train" / "b.parquet", GRAY[:2], [-1, 2])),
        ["b.parquet: label -1 is negative"],
    ),
    "valid-label-unseen-in-train": (
        lambda r: (good(r), lists(r / "valid" / "b.parquet", GRAY[:2], [7, 0])),
        ["b.parquet: label 7 never occurs in train (train labels are 0..3)"],
    ),
    "single-class": (
        lambda r: (
            lists(r / "train" / "a.parquet", GRAY[:4], [0] * 4),
            lists(r / "valid" / "a.parquet", GRAY[:4], [0] * 4),
        ),
        ["every label is 0; training needs at least 2 classes"],
    ),
    "mixed-shapes-in-a-file": (
        lambda r: (
            good(r),
            _frame(r / "valid" / "a.parquet", image=[GRAY[0].tolist(), [[1, 2]]], label=[0, 1]),
        ),
        ["valid/a.parquet: column image: images have mixed shapes"],
    ),
    "mixed-shapes-across-splits": (
        lambda r: (good(r), lists(r / "valid" / "a.parquet", GRAY[:3, :5, :5], [0, 1, 2])),
        ["images have mixed shapes: valid images are 5x5x1 but train images are 6x5x1"],
    ),
    "mixed-tensor-shapes-across-files": (
        lambda r: (
            good(r),
            tensor(r / "valid" / "a.parquet", GRAY[:3], np.array([0, 1, 2])),
            tensor(r / "valid" / "b.parquet", GRAY[:3, :5, :5], np.array([0, 1, 2])),
        ),
        ["valid: images have mixed shapes ((6, 5) in a.parquet, (5, 5) in b.parquet)"],
    ),
    "float-pixels": (
        lambda r: (good(r), lists(r / "valid" / "a.parquet", GRAY[:2] / 255.0, [0, 1])),
        ["pixels are double; images must be uint8"],
    ),
    "float-tensor": (
        lambda r: (good(r), tensor(r / "valid" / "a.parquet", GRAY[:2] / 1.0, np.array([0, 1]))),
        ["pixels are double; images must be uint8"],
    ),
    "pixels-over-255": (
        lambda r: (good(r), lists(r / "valid" / "a.parquet", GRAY[:2] * np.int64(2), [0, 1])),
        ["pixel values span 2..500; uint8 images need 0..255"],
    ),
    "four-channels": (
        lambda r: (
            lists(r / "train" / "a.parquet", np.stack([GRAY] * 4, -1), LABELS),
            lists(r / "valid" / "a.parquet", np.stack([GRAY] * 4, -1), LABELS),
        ),
        ["image shape (6, 5, 4): need HxW, HxWxC or CxHxW with 1 (grayscale) or 3 (RGB)"],
    ),
    "not-an-image": (
        lambda r: (good(r), _frame(r / "valid" / "a.parquet", image=[b"hello"], label=[0])),
        ["row 0: not PNG or JPEG bytes"],
    ),
    "truncated-png": (
        lambda r: (
            good(r),
            _frame(r / "valid" / "a.parquet", image=[_png(GRAY[0])[:60]], label=[0]),
        ),
        ["row 0: not a decodable PNG/JPEG image"],
    ),
    "decompression-bomb-png": (  # image folders' and predict's limit; was an internal error
        lambda r: (good(r), _frame(r / "valid" / "a.parquet", image=[BOMB], label=[0])),
        ["row 0: ", "pixels: over the 89,478,485 pixels allowed"],
    ),
    "sixteen-bit-png": (
        lambda r: (
            good(r),
            _frame(
                r / "valid" / "a.parquet",
                image=[_png(GRAY[0].astype(np.uint16) * 200)],
                label=[0],
            ),
        ),
        ["images are not 8-bit"],
    ),
    "empty-split": (
        lambda r: (good(r), [p.unlink() for p in (r / "valid").glob("*")], _empty(r)),
        ["valid: no rows"],
    ),
    "not-parquet": (
        lambda r: (good(r), (r / "valid" / "b.parquet").write_bytes(b"not parquet at all")),
        ["b.parquet: not a readable Parquet file"],
    ),
}


def _empty(root: Path) -> None:
    nested = pa.list_(pa.list_(pa.int64()))
    table = pa.table({"image": pa.array([], nested), "label": pa.array([], pa.int64())})
    pq.write_table(table, root / "valid" / "a.parquet")


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_problem_is_a_config_error_naming_it(tmp_path: Path, case: str) -> None:
    build, expected = BROKEN[case]
    build(tmp_path)
    with pytest.raises(ConfigError) as caught:
        inspect_dataset(tmp_path)
    message = str(caught.value)
    assert caught.value.exit_code == EXIT_INVALID
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    assert "Traceback" not in message


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    _frame(tmp_path / "train" / "a.parquet", image=[[[1]]], y=[0])
    with pytest.raises(ConfigError) as caught:
        inspect_dataset(tmp_path)
    problems = caught.value.problems
    assert len(problems) == 2
    assert "missing column label" in problems[0] and "valid: folder not found" in problems[1]


def test_data_to_evaluate_is_inspected_past_rows_that_do_not_decode(tmp_path: Path) -> None:
    """Evaluation skips and counts rows it cannot use (the scoring names each), so a bad row
    among the first, the sample the format is read from, did not refuse the whole folder; a
    training split keeps refusing it, and a folder where no row decodes is refused either way."""
    from app.data.schema import inspect_split

    images = [Image.fromarray(GRAY[i]) for i in range(4)]
    encoded(tmp_path / "eval" / "a.parquet", images, np.arange(4) % 2)
    table = pq.read_table(tmp_path / "eval" / "a.parquet")
    blobs = table.column("image").to_pylist()
    blobs[0] = blobs[0][:60]  # truncated: the first row, the one the format was read from
    bad = table.set_column(0, "image", pa.array(blobs, pa.binary()))
    pq.write_table(bad, tmp_path / "eval" / "a.parquet")

    info = inspect_split(tmp_path / "eval")
    assert (info.height, info.width, info.channels, info.valid_rows) == (6, 5, 1, 4)

    (tmp_path / "ds" / "train").mkdir(parents=True)
    pq.write_table(bad, tmp_path / "ds" / "train" / "a.parquet")
    encoded(tmp_path / "ds" / "valid" / "a.parquet", images, np.arange(4) % 2)
    with pytest.raises(ConfigError, match="row 0: not a decodable PNG/JPEG image"):
        inspect_dataset(tmp_path / "ds")

    none = bad.set_column(0, "image", pa.array([b[:60] for b in blobs], pa.binary()))
    pq.write_table(none, tmp_path / "eval" / "a.parquet")
    with pytest.raises(ConfigError) as refused:
        inspect_split(tmp_path / "eval")
    assert "row 0: not a decodable PNG/JPEG image" in str(refused.value)
    assert "none of the 4 rows looked at decodes" in str(refused.value)


def test_data_to_evaluate_takes_the_size_most_rows_have(tmp_path: Path) -> None:
    """One image of another size in the first row decided the size: the folder was refused as
    "images are 8x8 ..., the model takes 6x5" while only that row was odd (a red-team pass)."""
    from app.data.schema import inspect_split

    images = [Image.fromarray(GRAY[i]) for i in range(4)]
    images[0] = Image.fromarray(np.zeros((8, 8), np.uint8))
    encoded(tmp_path / "eval" / "a.parquet", images, np.arange(4) % 2)
    info = inspect_split(tmp_path / "eval")
    assert (info.height, info.width, info.channels, info.valid_rows) == (6, 5, 1, 4)
