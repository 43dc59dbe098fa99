"""What `trainctl evaluate` scores: an image folder, a Parquet folder, or the run's own
validation split, local or in a bucket; listed and checked against the run's classes before
Ray starts.

- An image folder holds one folder per class, `DATA/<class>/<image>`, listed by the rules an
  image-folder dataset's split is (app/data/folder_listing.py: hidden and non-image files
  skipped and counted, no link leading out of the folder or to a folder). A dataset's split
  folder (`pets/valid`) is such a folder; a dataset's root (`pets`, holding train/ and
  valid/) is refused with the split to give instead. A class folder is matched to the run's
  class of the same name; a folder naming a class the run does not have is refused (exit 2,
  naming it), and so is a run class with no folder, unless --allow-missing-classes (a test
  set that lacks a class is scored on the classes it has).
- A Parquet folder holds files with `image` and `label` columns (app/data/schema.py checks
  them as it checks a split), whose labels are the run's label numbers: the class names in
  the files' metadata, where there are any, must be the run's, in the run's order; the images
  must have the model's input size (Parquet images are not resized, in training either).
- `--split valid` is the data the run validated on, where its model card says it was: the
  image folder's valid/ (listed again, its classes checked against the run's) or the Parquet
  dataset's valid/. The card's fingerprint of the data's file list tells whether the files
  are the ones the run trained on; the evaluation records the answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from app.data.folder_listing import list_class_folder, list_folder
from app.data.images import ImageFormat
from app.data.schema import SPLITS, inspect_split, parquet_files
from app.errors import ConfigError
from app.evaluation.rows import ROWS_PER_BLOCK, folder_rows, parquet_rows
from app.formatting import shown
from app.runfolder.class_names import one_form
from app.storage.location import RunPath, parse_location, store_errors
from app.storage.reading import present, reader_source

if TYPE_CHECKING:
    import ray.data

    from app.data.kind import DatasetKind

RUN_SPLITS = ("valid", "test")  # test: the dataset's optional held-out split
MAX_LISTED = 8  # class names shown in a message before "..."


@dataclass(frozen=True)
class EvalData:
    """Rows to score, read and decoded in Ray Data's tasks: image files (ImageFiles) or
    Parquet files (ParquetFiles), each knowing how its rows are read."""

    location: RunPath  # what is scored, as messages and metrics.json show it
    rows: int
    skipped_files: int = 0  # not images by their name, hidden, outside class folders
    split: str | None = None  # the run's own split, for --split
    same_data: bool | None = None  # --split: the files are those the run trained on
    layout: ClassVar[str]  # metrics.json's name for it

    def dataset(self, card: dict[str, Any]) -> ray.data.Dataset:
        """The rows as a Ray Dataset of uint8 images, labels, `path` and `error`
        (app/evaluation/rows.py)."""
        raise NotImplementedError

    def row_prefix(self) -> tuple[str, str] | None:
        """For files holding many rows: what Ray Data's `path` of a row starts with (the
        folder in its filesystem: a bucket's key has no scheme) and the folder as shown, each
        with the separator; None where each row is a file of its own."""
        return None

    def describe(self) -> str:
        what = f"the run's {self.split} split" if self.split else "the data"
        return f"{what} at {shown(self.location)}"


@dataclass(frozen=True)
class ImageFiles(EvalData):
    """Image files, one per row: (its path as listed, the path it is read at: a link's
    target's, label), paths relative to `root`."""

    root: RunPath | None = None
    items: tuple[tuple[str, str, int], ...] = ()
    layout: ClassVar[str] = "folder"

    def dataset(self, card: dict[str, Any]) -> ray.data.Dataset:
        import ray.data

        spec = card["input"]
        items = [{"path": p, "read": read, "label": label} for p, read, label in self.items]
        blocks = max(1, math.ceil(len(items) / ROWS_PER_BLOCK))
        dataset = ray.data.from_items(items, override_num_blocks=blocks)
        size = (spec["height"], spec["width"])
        return dataset.map_batches(
            folder_rows,
            fn_kwargs={"root": self.root, "size": size, "channels": spec["channels"]},
            batch_format="pyarrow",
            batch_size=None,  # whole blocks: one read task decodes its block's files
        )


@dataclass(frozen=True)
class ParquetFiles(EvalData):
    """Parquet files with image and label columns, each file's rows numbered in order."""

    image_format: ImageFormat | None = None
    layout: ClassVar[str] = "parquet"

    def dataset(self, card: dict[str, Any]) -> ray.data.Dataset:
        import ray.data

        from app.data.pipeline import classic_parquet_reader

        source, filesystem = reader_source(self.location)
        with classic_parquet_reader():  # as training reads it (app/data/pipeline.py)
            dataset = ray.data.read_parquet(
                source,
                **filesystem,
                columns=["image", "label"],
                include_paths=True,
                override_num_blocks=max(1, len(parquet_files(self.location))),
            )
        dataset = dataset.map_batches(
            parquet_rows,
            fn_kwargs={"fmt": self.image_format},
            batch_format="pyarrow",
            batch_size=None,
            zero_copy_batch=True,
        )
        # Each file's rows in order: the driver numbers them (mistakes name file and row).
        dataset.context.execution_options.preserve_order = True
        return dataset

    def row_prefix(self) -> tuple[str, str] | None:
        source, _ = reader_source(self.location)
        return source.rstrip("/") + "/", str(self.location).rstrip("/") + "/"


def run_split(card: dict[str, Any], split: str, endpoint: str | None) -> EvalData:
    """The run's own `split`, where its model card says the data was."""
    if split not in RUN_SPLITS:
        raise ConfigError(f"--split {split}: allowed: {', '.join(RUN_SPLITS)}")
    data = card.get("data") if isinstance(card.get("data"), dict) else {}
    path = data.get("path")
    if not isinstance(path, str) or not path:
        raise ConfigError(
            "--split: the model card records no data location (`data.path`); give the data "
            "to evaluate as DATA instead"
        )
    root = _location(path, endpoint, "the model card's data.path")
    with store_errors(root, "the model card's data.path"):
        return _run_split(root, card, data, split, endpoint)


def _run_split(
    root: RunPath, card: dict[str, Any], data: dict[str, Any], split: str, endpoint: str | None
) -> EvalData:
    settings = card.get("settings") if isinstance(card.get("settings"), dict) else {}
    names = list(card["class_names"])
    if _kind(settings.get("dataset")).image_files:
        listing = list_folder(root)
        if list(listing.class_names) != names:
            raise ConfigError(
                f"{shown(root)}: the image folder's classes changed since the run trained: "
                + _difference(listing.class_names, names)
            )
        if split == "test" and not listing.has_test:
            raise ConfigError(_no_test(root))
        rows = listing.test if split == "test" else listing.valid
        items = tuple((path, path, label) for path, label in rows)  # as the run read them
        found: EvalData = ImageFiles(
            location=root / split, rows=len(items), root=root,
            items=items, skipped_files=listing.skipped_in.get(split, 0), split=split,
        )  # fmt: skip
    else:
        if split == "test" and not (root / split).is_dir():
            raise ConfigError(_no_test(root))
        found = _parquet(root / split, card, split=split)
    return _with_fingerprint(found, root, data)


def _no_test(root: RunPath) -> str:
    return (
        f"--split test: the run's dataset at {shown(root)} has no test/ split (optional: "
        "test/<class>/<image> for an image folder, test/*.parquet for Parquet)"
    )


def _kind(name: Any) -> DatasetKind:
    """The kind of the run's dataset, as its model card's settings name it."""
    from app.data.kinds import KINDS

    if not isinstance(name, str) or name not in KINDS:
        raise ConfigError(
            f"--split: the model card's settings name no dataset kind trainctl knows "
            f"({name!r}); give the data to evaluate as DATA instead"
        )
    return KINDS[name]


def data_folder(
    value: str, card: dict[str, Any], endpoint: str | None, *, allow_missing: bool = False
) -> EvalData:
    """DATA as given: a folder of class folders, or of Parquet files."""
    location = _location(value, endpoint, f"DATA {value!r}")
    with store_errors(location, "DATA"):
        return _data_folder(location, card, allow_missing)


def _data_folder(location: RunPath, card: dict[str, Any], allow_missing: bool) -> EvalData:
    if not location.is_dir():
        what = "not a folder" if present(location) else "no such folder"
        raise ConfigError(
            f"{shown(location)}: {what}; give a folder of class folders "
            "(DATA/<class>/<image>) or of Parquet files (image and label columns)"
        )
    listing = list_class_folder(location)
    names = list(card["class_names"])
    # Folders named as the run spells its classes, whatever the Unicode form they were made in.
    by_form = {one_form(n): n for n in names}
    files = {by_form.get(one_form(f), f): paths for f, paths in listing.files.items()}
    found = {name for name, paths in files.items() if paths}
    if set(SPLITS) <= set(listing.files) and not set(SPLITS) & set(names):
        raise ConfigError(
            f"{shown(location)}: holds {' and '.join(f'{s}/' for s in SPLITS)}, a dataset's "
            f"splits, not class folders: give the split to evaluate, e.g. "
            f"{shown(location / 'valid')} (or --split valid for the run's own)"
        )
    if not found:
        if parquet_files(location):
            return _parquet(location, card)
        note = f" ({listing.note()})" if listing.skipped else ""
        raise ConfigError(
            f"{shown(location)}: no images to evaluate{note}; give a folder of class folders "
            "(DATA/<class>/<image>) or of Parquet files (image and label columns)"
        )
    problem = _class_problem(sorted(files), sorted(found), names, allow_missing)
    if problem:
        raise ConfigError(f"{shown(location)}: {problem}")
    label = {name: index for index, name in enumerate(names)}
    items = tuple(
        (listed, read, label[name]) for name in sorted(files) for listed, read in files[name]
    )
    return ImageFiles(
        location=location, rows=len(items), root=location, items=items,
        skipped_files=listing.skipped,
    )  # fmt: skip


def _parquet(folder: RunPath, card: dict[str, Any], split: str | None = None) -> EvalData:
    info = inspect_split(folder)
    names, spec = list(card["class_names"]), card["input"]
    if info.class_names and list(info.class_names) != names:
        if set(info.class_names) == set(names):
            raise ConfigError(
                f"{shown(folder)}: the files name the run's classes in another order, so their "
                "label numbers mean other classes; write them with the run's class list"
            )
        raise ConfigError(
            f"{shown(folder)}: the files' classes differ from the run's: "
            + _difference(info.class_names, names)
        )
    if info.num_classes > len(names):
        raise ConfigError(
            f"{shown(folder)}: labels go up to {info.num_classes - 1}, but the run has "
            f"{len(names)} classes (labels 0..{len(names) - 1})"
        )
    given = (info.height, info.width, info.channels)
    wanted = (spec["height"], spec["width"], spec["channels"])
    if given != wanted:
        raise ConfigError(
            f"{shown(folder)}: images are {'x'.join(map(str, given))} (height x width x "
            f"channels), the model takes {'x'.join(map(str, wanted))}; Parquet images are used "
            "as stored: write them at the model's size (`trainctl prepare-data --from-folder "
            "--image-size`), or evaluate the image folder itself"
        )
    return ParquetFiles(
        location=folder, rows=info.valid_rows,
        image_format=info.image_format, split=split,
    )  # fmt: skip


def _with_fingerprint(found: EvalData, root: RunPath, recorded: dict[str, Any]) -> EvalData:
    """`found`, saying whether the dataset's file list is the one the model card fingerprinted
    (None where the card has no fingerprint)."""
    from dataclasses import replace

    from app.data.schema import DatasetInfo
    from app.export.build import data_fingerprint

    # A card written before modification times were fingerprinted has names and sizes only.
    key = "stamps_sha256" if isinstance(recorded.get("stamps_sha256"), str) else "files_sha256"
    expected = recorded.get(key)
    if not isinstance(expected, str):
        return found
    info = DatasetInfo(
        channels=0, height=0, width=0, num_classes=0, train_rows=0, valid_rows=0, layout="",
        mean=(), std=(), path=root,
    )  # fmt: skip
    return replace(found, same_data=data_fingerprint(info)[key] == expected)


def _location(value: str, endpoint: str | None, label: str) -> RunPath:
    try:
        return parse_location(value, endpoint)
    except ValueError as err:
        raise ConfigError(f"{label}: {err}") from None


def _class_problem(
    folders: Sequence[str], with_images: Sequence[str], names: Sequence[str], allow_missing: bool
) -> str | None:
    """Why the class folders cannot be scored as the run's classes; a class whose folder
    holds no image is missing too (it would vanish from the per-class figures unsaid)."""
    extra = sorted(set(folders) - set(names))
    missing = sorted(set(names) - set(with_images))
    if not extra and (allow_missing or not missing):
        return None
    if extra:
        # Circle beside circle: the likeliest slip, said (a red-team pass).
        cased = {name.casefold(): name for name in missing}
        renames = [f"{shown(e)} as {shown(cased[e.casefold()])}" for e in extra
                   if e.casefold() in cased]  # fmt: skip
        return (
            f"class folders the run does not have: {_listed(extra)} (the run's classes: "
            f"{_listed(names)}); the model can only score classes it was trained on"
            + (f"; missing: {_listed(missing)}" if missing else "")
            + (f"; class names are case-sensitive: rename {', '.join(renames)}" if renames else "")
        )
    empty = sorted(set(missing) & set(folders))
    return (
        f"no folder for the run's classes {_listed(missing)}"
        + (f" (the folders of {_listed(empty)} hold no image)" if empty else "")
        + "; pass --allow-missing-classes to evaluate on the classes the folder has"
    )


def _difference(found: Sequence[str], names: Sequence[str]) -> str:
    extra = sorted(set(found) - set(names))
    missing = sorted(set(names) - set(found))
    parts = [f"new: {_listed(extra)}"] if extra else []
    parts += [f"missing: {_listed(missing)}"] if missing else []
    return "; ".join(parts) or "same names, another order"


def _listed(names: Sequence[str]) -> str:
    shown_names = ", ".join(shown(n) for n in list(names)[:MAX_LISTED])
    return shown_names + (f" ... ({len(names)} in all)" if len(names) > MAX_LISTED else "")
