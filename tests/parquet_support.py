"""Small real Parquet datasets, good and broken, for tests that run the `trainctl` CLI.

Each builder writes <root>/train and <root>/valid the way users do (Arrow's fixed-shape tensor
column, or pandas-style columns), with exactly one thing wrong where the name says so.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

RNG = np.random.default_rng(11)
ROWS = {"train": 24, "valid": 8}
CLASSES = 4


def write(path: Path, images: np.ndarray, labels: list | np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if len(images):
        column = pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(images))
    else:  # pyarrow builds no tensor column from an empty array; build it from its storage
        kind = pa.fixed_shape_tensor(pa.uint8(), images.shape[1:])
        storage = pa.array([], pa.list_(pa.uint8(), int(np.prod(images.shape[1:]))))
        column = pa.ExtensionArray.from_storage(kind, storage)
    pq.write_table(pa.table({"image": column, "label": pa.array(labels)}), path)


def images(rows: int, height: int = 8, width: int = 8, dtype: type = np.uint8) -> np.ndarray:
    return RNG.integers(0, 256, (rows, height, width)).astype(dtype)


def labels(rows: int) -> np.ndarray:
    return np.arange(rows, dtype=np.int64) % CLASSES


def good(root: Path, height: int = 8, width: int = 8) -> None:
    for split, rows in ROWS.items():
        write(root / split / "part-0.parquet", images(rows, height, width), labels(rows))


def non_square(root: Path) -> None:
    good(root, height=8, width=6)


def wrong_columns(root: Path) -> None:
    good(root)
    table = pa.table({"pixels": [b"\0" * 64] * 24, "target": labels(24)})
    pq.write_table(table, root / "train" / "part-0.parquet")


def valid_label_unseen_in_train(root: Path) -> None:
    good(root)
    write(root / "valid" / "part-0.parquet", images(8), [0, 1, 2, 3, 0, 1, 2, 9])


def negative_label(root: Path) -> None:
    good(root)
    write(root / "train" / "part-0.parquet", images(24), [-1, *labels(23)])


def string_labels(root: Path) -> None:
    good(root)
    write(root / "train" / "part-0.parquet", images(24), [str(v) for v in labels(24)])


def single_class(root: Path) -> None:
    for split, rows in ROWS.items():
        write(root / split / "part-0.parquet", images(rows), np.zeros(rows, dtype=np.int64))


def mixed_shapes(root: Path) -> None:
    good(root)
    write(root / "train" / "part-1.parquet", images(8, 6, 6), labels(8))


def float_pixels(root: Path) -> None:
    good(root)
    write(root / "train" / "part-0.parquet", images(24, dtype=np.float32), labels(24))


def empty(root: Path) -> None:
    for split in ROWS:
        write(root / split / "part-0.parquet", images(0), np.zeros(0, dtype=np.int64))


def no_parquet_files(root: Path) -> None:
    good(root)
    (root / "valid" / "part-0.parquet").rename(root / "valid" / "part-0.parquet.bak")


def not_parquet(root: Path) -> None:
    good(root)
    (root / "train" / "part-0.parquet").write_bytes(b"this is not parquet\n" * 10)


def valid_missing(root: Path) -> None:
    good(root)
    for path in (root / "valid").iterdir():
        path.unlink()
    (root / "valid").rmdir()


def bad_image_past_the_sample(root: Path, rows_per_file: int = 16) -> Path:
    """PNG-encoded images in one more train file than preflight samples
    (app.data.schema.SAMPLE_FILES), the last of them truncated: the data passes `check` and
    `train`'s preflight, and a Ray Data worker finds the bad image during the first epoch, as
    with a large dataset whose damage sits deep in it. Returns the file with the bad image."""
    import io

    from PIL import Image

    from app.data.schema import SAMPLE_FILES

    def png(pixels: np.ndarray) -> bytes:
        out = io.BytesIO()
        Image.fromarray(pixels, "L").save(out, format="PNG")
        return out.getvalue()

    def write_encoded(path: Path, count: int, truncate_last: bool = False) -> None:
        encoded = [png(image) for image in images(count)]
        if truncate_last:
            encoded[-1] = encoded[-1][:20]  # the signature and part of the header
        path.parent.mkdir(parents=True, exist_ok=True)
        table = pa.table({"image": pa.array(encoded, pa.binary()), "label": labels(count)})
        pq.write_table(table, path)

    files = SAMPLE_FILES + 1
    for index in range(files):
        last = index == files - 1
        write_encoded(root / "train" / f"part-{index}.parquet", rows_per_file, truncate_last=last)
    write_encoded(root / "valid" / "part-0.parquet", rows_per_file)
    return root / "train" / f"part-{files - 1}.parquet"


def damaged_page_past_the_sample(root: Path, rows_per_file: int = 16) -> Path:
    """Good files, one more in train/ than preflight samples (app.data.schema.SAMPLE_FILES),
    the last with its first page header overwritten: every footer reads, as preflight checks,
    and only reading that file's rows fails, as with a file damaged deep in a large dataset.
    Returns the damaged file."""
    from app.data.schema import SAMPLE_FILES

    for index in range(SAMPLE_FILES + 1):
        write(
            root / "train" / f"part-{index}.parquet", images(rows_per_file), labels(rows_per_file)
        )
    write(root / "valid" / "part-0.parquet", images(rows_per_file), labels(rows_per_file))
    damaged = root / "train" / f"part-{SAMPLE_FILES}.parquet"
    data = bytearray(damaged.read_bytes())
    data[4:60] = b"\xff" * 56  # after the leading magic: the first column chunk's page header
    damaged.write_bytes(bytes(data))
    return damaged


# The tutorial's pandas lists (int64 nested lists), as tests of inspection write them.
GRAY = np.random.default_rng(7).integers(0, 256, (40, 6, 5), dtype=np.uint8)  # non-square
LABELS = np.arange(40, dtype=np.int64) % 4


def lists(path: Path, images: np.ndarray, labels: np.ndarray | list) -> None:
    """The tutorial's way: pandas with `array.tolist()` (int64 nested lists)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"image": [x.tolist() for x in images], "label": labels}).to_parquet(path)


def good_lists(root: Path) -> Path:
    lists(root / "train" / "a.parquet", GRAY[:30], LABELS[:30])
    lists(root / "valid" / "a.parquet", GRAY[30:], LABELS[30:])
    return root
