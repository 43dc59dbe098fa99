"""What a dataset folder holds, checked before any training starts.

`inspect_dataset` reads only Parquet footers, the label columns and a sample of images, so it is
quick even for large datasets. Every problem it finds becomes one line of a ConfigError naming
the file or folder, what is wrong and what is allowed.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app.data.class_meta import decode as decode_class_names
from app.data.images import ImageError, ImageFormat, describe_type, infer_format, to_images
from app.errors import ConfigError
from app.runfolder.class_names import MAX_CLASSES
from app.storage.buckets import ObjectPath
from app.storage.location import RunPath, absolute_location
from app.storage.reading import file_size, random_access, sha256_of, walk_files

SPLITS = ("train", "valid")
# Held out: never trained or selected on; where a dataset has it, the run's end scores it and
# the promotion gate is judged on it (app/promotion/evaluation.py). Checked as valid/ is.
OPTIONAL_SPLITS = ("test",)
# Why a split may not be a copy of the splits before it: what the model is trained on, then
# selected on, must not be what it is judged on.
KEPT_APART = {
    "valid": "valid/ must hold data the model is not trained on (it picks the best checkpoint and, "
    "without a test/ split, is what the promotion gate judges)",
    "test": "a held-out split must hold data the model was neither trained nor selected on",
}
SAMPLE_ROWS = 2048  # images read for format checks and the normalization statistics
SAMPLE_FILES = 8
MAX_PROBLEMS = 12
# The largest class count trainctl accepts: the output layer holds K units, and a stray label
# such as 2**31 would otherwise ask for gigabytes of weights after Ray has started.
COLUMNS_HELP = "need columns image (uint8 pixels) and label (integer class id 0..K-1)"


@dataclass(frozen=True)
class DatasetInfo:
    channels: int  # 1 or 3
    height: int
    width: int
    num_classes: int
    train_rows: int
    valid_rows: int
    layout: str  # raw | tensor | list | encoded: how images are stored on disk
    mean: tuple[float, ...]  # per channel, in [0, 1] units, from a sample of the train split
    std: tuple[float, ...]
    image_shape: tuple[int, ...] = ()  # one image as stored on disk; () for encoded images
    # The folder holding train/ and valid/, as the kind located it (a Path, or an ObjectPath
    # carrying its endpoint): used as it is, never parsed again. None where no data was read.
    path: RunPath | None = None
    class_names: tuple[str, ...] = ()  # label i is class_names[i]; () when only numbered
    # Images of label i in each split (num_classes entries; () where not counted): the
    # majority-class rate a first champion must beat (app/promotion/gate.py), and the
    # per-class counts `check` shows.
    train_class_counts: tuple[int, ...] = ()
    valid_class_counts: tuple[int, ...] = ()
    # The optional held-out test/ split: its rows (None: the dataset has no test/) and counts.
    test_rows: int | None = None
    test_class_counts: tuple[int, ...] = ()

    def trained_on(self) -> dict[str, Any]:
        """What a worker group trains on, as its start records it (attempts.jsonl): a rerun's
        data is held to it (app/run/resume.py)."""
        return {
            "classes": self.num_classes,
            "input": [self.channels, self.height, self.width],
            "train_rows": self.train_rows,
            "valid_rows": self.valid_rows,
        }

    def label_names(self) -> tuple[str, ...]:
        """Label i's name: its class name, or its number where the data names none."""
        return self.class_names or tuple(str(i) for i in range(self.num_classes))

    def describe(self) -> str:
        test = f" + {self.test_rows} test" if self.test_rows is not None else ""
        return (
            f"{self.train_rows} train + {self.valid_rows} valid{test} rows, "
            f"{self.height}x{self.width}x{self.channels} uint8 images ({self.layout}), "
            f"{self.num_classes} classes"
        )

    @property
    def image_format(self) -> ImageFormat:
        return ImageFormat(self.layout, self.image_shape, self.height, self.width, self.channels)


COMPARED = 20  # valid/ or test/ files compared with a file of the same size before them


@dataclass
class _Split:
    name: str
    folder: Path
    files: list[Path] = field(default_factory=list)
    rows: int = 0
    labels: tuple[int, int] | None = None  # (min, max)
    label_file: dict[int, Path] = field(default_factory=dict)  # where the extremes are
    fields: dict[Path, pa.Field] = field(default_factory=dict)
    file_rows: dict[Path, int] = field(default_factory=dict)
    format: ImageFormat | None = None
    sample: np.ndarray | None = None
    class_names: dict[tuple[str, ...], Path] = field(default_factory=dict)  # -> a file
    counts: dict[int, int] = field(default_factory=dict)  # label -> rows


class Problems(list[str]):
    """Problems found while inspecting data, the first MAX_PROBLEMS of them."""

    def add(self, message: str) -> None:
        if len(self) < MAX_PROBLEMS:
            self.append(message)
        elif len(self) == MAX_PROBLEMS:
            self.append("... more problems not shown")


def inspect_dataset(dataset_dir: Path | ObjectPath) -> DatasetInfo:
    """Layout, image geometry, classes and statistics of dataset_dir/train and dataset_dir/valid."""
    import ray.data  # noqa: F401 - registers Ray's tensor extension types with pyarrow

    root = absolute_location(dataset_dir)
    if not root.is_dir():  # one line for the folder, not one per missing split
        raise ConfigError(
            f"{root}: folder not found; a dataset folder holds train/ and valid/, "
            f"each with Parquet files ({COLUMNS_HELP})"
        )
    problems = Problems()
    splits = {name: _scan(_Split(name, root / name), problems) for name in SPLITS}
    held_out = [_Split(name, root / name) for name in OPTIONAL_SPLITS if (root / name).is_dir()]
    test = _scan(held_out[0], problems) if held_out else None
    if problems:
        raise ConfigError(problems)
    train, valid = splits["train"], splits["valid"]
    _check_across_splits(train, valid, problems)
    if test is not None and not problems:
        _check_across_splits(train, test, problems)
    if not problems:
        _not_a_copy(valid, (train,), problems)
    if test is not None and not problems:
        _not_a_copy(test, (train, valid), problems)
    if problems:
        raise ConfigError(problems)
    assert train.format is not None and train.sample is not None and train.labels is not None
    pixels = train.sample.reshape(-1, train.format.channels).astype(np.float64) / 255.0
    std = pixels.std(axis=0)
    fmt = train.format
    names = _class_names(train, valid, problems)
    if test is not None and test.class_names and names and set(test.class_names) != {names}:
        problems.add(
            f"{test.folder}: its files name other classes than train/ and valid/ "
            f"({', '.join(str(p) for p in test.class_names.values())}); write them together"
        )
    if problems:
        raise ConfigError(problems)
    classes = len(names) or train.labels[1] + 1
    return DatasetInfo(
        channels=fmt.channels,
        height=fmt.height,
        width=fmt.width,
        num_classes=classes,
        train_rows=train.rows,
        valid_rows=valid.rows,
        layout=fmt.layout,
        mean=tuple(round(float(v), 6) for v in pixels.mean(axis=0)),
        # A constant channel would divide by zero; leaving it unscaled is harmless.
        std=tuple(round(float(v), 6) if v > 1e-6 else 1.0 for v in std),
        image_shape=fmt.stored_shape,
        path=root,
        class_names=names,
        train_class_counts=per_class(train.counts, classes),
        valid_class_counts=per_class(valid.counts, classes),
        test_rows=test.rows if test is not None else None,
        test_class_counts=per_class(test.counts, classes) if test is not None else (),
    )


def _not_a_copy(split: _Split, others: tuple[_Split, ...], problems: Problems) -> None:
    """valid/ and test/ are judged on as data the model did not train on (test/: nor was
    selected on): a problem where one of their files is byte for byte a file of a split before
    it (copied over). Files of the same size are compared, the first COMPARED pairs; rewritten
    or re-split data is not told apart."""
    sizes: dict[int, list[tuple[str, Path]]] = {}
    for other in others:
        for path in other.files:
            sizes.setdefault(file_size(path), []).append((other.name, path))
    pairs = [
        (path, name, twin) for path in split.files for name, twin in sizes.get(file_size(path), [])
    ][:COMPARED]
    for path, name, twin in pairs:
        try:
            same = sha256_of(path) == sha256_of(twin)
        except OSError:  # read a moment ago: a store that fails now fails the run, saying so
            continue
        if same:
            remedy = "the test/ folder" if split.name == "test" else "write valid/ from other rows"
            problems.add(
                f"{path}: byte for byte {twin} of {name}/; {KEPT_APART[split.name]}: "
                f"remove it, or {remedy}"
            )


def per_class(counts: dict[int, int], classes: int) -> tuple[int, ...]:
    """Rows of each label 0..classes-1 (0 for a label no row has)."""
    return tuple(counts.get(label, 0) for label in range(classes))


def inspect_split(folder: Path | ObjectPath) -> DatasetInfo:
    """One folder of Parquet files checked as a split of a dataset is (columns, label
    values, image layout and a sample decoded, class names in the files' metadata): data to
    evaluate, or a dataset's valid/. Its rows are counted as `valid_rows`; ConfigError with one
    line per problem."""
    import ray.data  # noqa: F401 - registers Ray's tensor extension types with pyarrow

    root = absolute_location(folder)
    if not root.is_dir():
        raise ConfigError(f"{root}: folder not found; {COLUMNS_HELP}")
    problems = Problems()
    # Rows to score that do not decode are skipped and counted by the scoring, as image files
    # are: here only the format needs one that does.
    split = _scan(_Split(root.name, root), problems, skip_bad_rows=True)
    if problems:
        raise ConfigError(problems)
    names = _class_names(split, split, problems)
    if problems:
        raise ConfigError(problems)
    assert split.format is not None and split.labels is not None and split.sample is not None
    fmt = split.format
    return DatasetInfo(
        channels=fmt.channels, height=fmt.height, width=fmt.width,
        num_classes=len(names) or split.labels[1] + 1, train_rows=0, valid_rows=split.rows,
        layout=fmt.layout, mean=(), std=(), image_shape=fmt.stored_shape, path=root,
        class_names=names,
    )  # fmt: skip


def _class_names(train: _Split, valid: _Split, problems: Problems) -> tuple[str, ...]:
    """The names every file carries (prepare-data --from-folder), or () when none do."""
    found = {**train.class_names, **valid.class_names}
    if len(found) > 1:
        files = ", ".join(str(path) for path in found.values())
        problems.add(f"files disagree on their class names ({files}); write them again together")
        return ()
    names = next(iter(found), ())
    assert train.labels is not None
    if names and train.labels[1] >= len(names):
        problems.add(
            f"{train.label_file[1]}: label {train.labels[1]} but the files name only "
            f"{len(names)} classes"
        )
    return names


def _scan(split: _Split, problems: Problems, skip_bad_rows: bool = False) -> _Split:
    if not split.folder.is_dir():
        problems.add(
            f"{split.folder}: folder not found; a dataset folder holds train/ and valid/, "
            f"each with Parquet files ({COLUMNS_HELP})"
        )
        return split
    split.files = parquet_files(split.folder)
    if not split.files:
        problems.add(f"{split.folder}: no .parquet files; {COLUMNS_HELP}")
        return split
    for path in split.files:
        _scan_file(split, path, problems)
    if problems:
        return split
    if split.rows == 0:
        problems.add(f"{split.folder}: no rows; the {split.name} split needs at least one image")
        return split
    layouts = {describe_type(f)[0]: p for p, f in split.fields.items()}
    if len(layouts) > 1:
        listed = ", ".join(f"{name} in {path.name}" for name, path in layouts.items())
        problems.add(f"{split.folder}: files store images in different layouts ({listed})")
        return split
    shapes = {describe_type(f)[1]: p for p, f in split.fields.items()}
    if len(shapes) > 1:
        listed = ", ".join(f"{shape} in {path.name}" for shape, path in shapes.items())
        problems.add(f"{split.folder}: images have mixed shapes ({listed})")
        return split
    _sample_images(split, problems, skip_bad_rows)
    return split


def open_parquet(path: Path | ObjectPath) -> pq.ParquetFile:
    """A Parquet file on disk or in a bucket (read in ranges, not downloaded whole)."""
    return pq.ParquetFile(random_access(path))


def parquet_files(folder: Path | ObjectPath) -> list[Any]:
    # Names starting with _ or . are metadata or temporaries (Spark, Ray), as readers agree.
    return sorted(
        path
        for path in walk_files(folder)
        if path.name.endswith(".parquet")
        and not any(part.startswith(("_", ".")) for part in path.relative_to(folder).parts)
    )


def _scan_file(split: _Split, path: Path, problems: Problems) -> None:
    try:
        parquet = open_parquet(path)
        schema = parquet.schema_arrow
    except (OSError, pa.ArrowException) as err:
        problems.add(f"{path}: not a readable Parquet file ({err})")
        return
    missing = [name for name in ("image", "label") if name not in schema.names]
    if missing:
        found = ", ".join(schema.names) or "none"
        problems.add(f"{path}: missing column {', '.join(missing)} (found {found}); {COLUMNS_HELP}")
        return
    image_field = schema.field("image")
    try:
        describe_type(image_field)
    except ImageError as err:
        problems.add(f"{path}: column image: {err}")
        return
    label_type = schema.field("label").type
    if not pa.types.is_integer(label_type):
        problems.add(
            f"{path}: column label is {label_type}; labels must be integers 0..K-1 (int64)"
        )
        return
    try:
        split.class_names.setdefault(decode_class_names(schema.metadata), path)
    except ValueError as err:
        problems.add(f"{path}: {err}")
        return
    split.fields[path] = image_field
    split.file_rows[path] = parquet.metadata.num_rows
    split.rows += parquet.metadata.num_rows
    labels = parquet.read(columns=["label"]).column("label")
    if labels.null_count:
        problems.add(f"{path}: column label has {labels.null_count} missing values")
        return
    if len(labels) == 0:
        return
    extremes = pc.min_max(labels)
    low, high = int(extremes["min"].as_py()), int(extremes["max"].as_py())
    for entry in pc.value_counts(labels).to_pylist():  # one pass over labels already read
        label = int(entry["values"])
        split.counts[label] = split.counts.get(label, 0) + int(entry["counts"])
    if low < 0:
        problems.add(f"{path}: label {low} is negative; labels must be 0..K-1")
    if high >= MAX_CLASSES:
        problems.add(
            f"{path}: label {high} is too large; labels must be 0..K-1 with at most "
            f"{MAX_CLASSES} classes (the model's output layer has one unit per class)"
        )
    if split.labels is None or low < split.labels[0]:
        split.label_file[0] = path
    if split.labels is None or high > split.labels[1]:
        split.label_file[1] = path
    old = split.labels or (low, high)
    split.labels = (min(old[0], low), max(old[1], high))


def _sample_images(split: _Split, problems: Problems, skip_bad_rows: bool) -> None:
    """Decode up to SAMPLE_ROWS images spread over the first files: format, shape, pixel type.
    With `skip_bad_rows`, rows that do not decode are left out of the sample (a problem only
    where none does)."""
    files = [path for path, rows in split.file_rows.items() if rows > 0][:SAMPLE_FILES]
    per_file = max(1, SAMPLE_ROWS // len(files))
    samples, first_error, looked_at = [], "", 0
    for path in files:
        batch = next(open_parquet(path).iter_batches(batch_size=per_file, columns=["image"]))
        column = batch.column(0)
        looked_at += len(column)
        try:
            samples.append(_decoded(split, path, column))
        except ImageError as err:
            if not skip_bad_rows:
                problems.add(f"{path}: column image: {err}")
                return
            first_error = first_error or f"{path}: column image: {err}"
            if split.format is None:
                split.format = _most_common_format(split.fields[path], column)
            for row in range(len(column)):
                try:
                    samples.append(_decoded(split, path, column.slice(row, 1)))
                except ImageError:
                    continue
    if not samples:
        problems.add(f"{first_error}; none of the {looked_at:,} rows looked at decodes")
        return
    split.sample = np.concatenate(samples)


def _most_common_format(field: pa.Field, column: pa.Array) -> ImageFormat | None:
    """The format most of the column's readable rows have: one image of another size in the
    first row decided the size, and every other row was then the odd one (a red-team pass)."""
    found: Counter[ImageFormat] = Counter()
    for row in range(len(column)):
        with contextlib.suppress(ImageError):
            found[infer_format(field, column.slice(row, 1))] += 1
    return found.most_common(1)[0][0] if found else None


def _decoded(split: _Split, path: Path, column: pa.Array) -> np.ndarray:
    """The column's images, the split's format worked out from the first that reads."""
    if split.format is None:
        split.format = infer_format(split.fields[path], column)
    return to_images(column, split.format)


def _check_across_splits(train: _Split, valid: _Split, problems: Problems) -> None:
    assert train.format is not None and valid.format is not None
    fields = {**train.fields, **valid.fields}
    fixed = {path: describe_type(image)[1] for path, image in fields.items()}
    shapes = {shape: path for path, shape in fixed.items() if shape is not None}
    if len(shapes) > 1:
        listed = ", ".join(f"{shape} in {path}" for shape, path in shapes.items())
        problems.add(f"images have mixed shapes: {listed}; every image needs the same HxWxC")
    sizes = {s.name: (s.format.height, s.format.width, s.format.channels) for s in (train, valid)}
    if sizes["train"] != sizes[valid.name] and len(shapes) <= 1:
        problems.add(
            f"images have mixed shapes: {valid.name} images are {_hwc(sizes[valid.name])} but "
            f"train images are {_hwc(sizes['train'])}; both splits need the same HxWxC"
        )
    if train.format.layout != valid.format.layout:
        problems.add(
            f"{valid.folder}: images are stored as {valid.format.layout} but train uses "
            f"{train.format.layout}; store both splits the same way"
        )
    assert train.labels is not None and valid.labels is not None
    classes = train.labels[1] + 1
    if classes < 2:
        problems.add(
            f"{train.folder}: every label is {train.labels[1]}; training needs at least 2 classes"
        )
    if valid.labels[1] >= classes:
        problems.add(
            f"{valid.label_file[1]}: label {valid.labels[1]} never occurs in train "
            f"(train labels are 0..{classes - 1}); {valid.name} labels must be classes seen in "
            "train"
        )


def _hwc(size: tuple[int, int, int]) -> str:
    return "x".join(str(v) for v in size)
