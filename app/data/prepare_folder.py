"""`trainctl prepare-data --from-folder SRC --out DST`: an image folder as the raw Parquet layout.

For data that is trained often: decoding JPEG/PNG files every epoch costs far more than reading
raw pixels (bench/ingest.py). The folder is listed and checked by the same rules as
TRAIN_DATASET=folder (app/data/folder_listing.py), each image decoded and resized once
(app/data/folder_images.py), and written with app/data/prepare.py's writer, lock and
staging-then-rename, so a reader sees no dataset or a complete one. The class names go into
every file's schema metadata and the marker file; `inspect_dataset` reads them back.

The train rows are written in a seeded random order: files hold a mix of classes, since
training shuffles whole files and then rows within a few thousand.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from filelock import FileLock

from app.data.folder_images import load_images
from app.data.folder_listing import FolderListing, list_folder
from app.data.images import ImageError
from app.data.prepare import (
    LAYOUT,
    MARKER,
    _remove_leftovers,
    _replaceable,
    _summary,
    is_present,
    rows_per_file,
    write_part,
    write_staged,
)
from app.errors import ConfigError
from app.redact import redact_uri
from app.storage.location import RunPath, expand, parse_location, resolved

ORDER_SEED = 20_261_126


def prepare_from_folder(
    source: str, out: Path, *, size: int, force: bool = False, endpoint: str | None = None
) -> str:
    """Write out/train/, out/valid/ and (where the folder has one) the held-out out/test/ from
    the image folder `source`; a one-line summary."""
    try:
        root = parse_location(source, endpoint)
    except ValueError as err:
        raise ConfigError(f"--from-folder={redact_uri(source)}: {err}") from None
    out = expand(out, "--out")
    _refuse_out_in_source(root, out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out={out}: exists but is not a folder")
    if not force and is_present(out):
        return _already_there(out, redact_uri(str(root)), size)
    listing = list_folder(root)
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(out.parent / f".{out.name}.lock"):
        _remove_leftovers(out)
        if out.exists() and not _replaceable(out):
            raise ConfigError(
                f"{out} exists and holds more than a dataset (train/, valid/, test/); "
                "choose an empty or new folder"
            )
        meta = write_staged(out, lambda staging: _write(root, listing, staging, size))
    return _summary(f"folder {redact_uri(str(root))}", out, meta)


def _already_there(out: Path, source: str, size: int) -> str:
    """The line for an --out already prepared from this folder at this size; ConfigError where
    its marker records another folder or size: `prepare-data ... --image-size 48 && train`
    said the dataset was there, exit 0, and trained on the 32-pixel one (a red-team pass)."""
    try:
        meta = json.loads((out / MARKER).read_text(encoding="utf-8"))
        held = (str(meta["source"]), int(meta["image_shape"][0]))
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        raise ConfigError(
            f"--out={out}: already holds a dataset that does not say what it was prepared from "
            f"({MARKER} is missing or unreadable); use --force to replace it"
        ) from None
    if held != (source, size):
        raise ConfigError(
            f"--out={out}: already holds {held[1]}x{held[1]} images from {held[0]}, not the "
            f"{size}x{size} from {source} asked for; give another --out, or --force to replace it"
        )
    return f"{out} already holds this dataset ({size}x{size} from {source}); --force rewrites it"


def _refuse_out_in_source(root: RunPath, out: Path) -> None:
    """An --out inside train/ or valid/ would become a class folder of the very data it was
    made from (without images: the next `train` on the folder stops); refused. (A bucket
    never holds --out, a local folder: it compares unequal to every local one.)"""
    target = out.resolve()
    for split in (root, root / "train", root / "valid", root / "test"):
        inside = resolved(split)
        if target == inside or (split != root and inside in target.parents):
            raise ConfigError(
                f"--out={out}: inside the image folder --from-folder={root}, where it would "
                "become a class of the data; choose a folder outside its train/, valid/ and test/"
            )


def _write(root: RunPath, listing: FolderListing, staging: Path, size: int) -> dict:
    staging.mkdir(parents=True)
    order = np.random.default_rng(ORDER_SEED).permutation(len(listing.train))
    splits = {"train": [listing.train[i] for i in order], "valid": list(listing.valid)}
    if listing.has_test:  # the gate's held-out data: without it, judged on what selected
        splits["test"] = list(listing.test)
    per_file = rows_per_file((size, size, 3))
    files = {}
    for split, pairs in splits.items():
        (staging / split).mkdir()
        files[split] = max(1, -(-len(pairs) // per_file))
        for index in range(files[split]):
            chunk = pairs[index * per_file : (index + 1) * per_file]
            try:
                images = load_images(root, [path for path, _ in chunk], size)
            except ImageError as err:
                raise ConfigError(str(err)) from None
            labels = np.array([label for _, label in chunk], np.int64)
            path = staging / split / f"part-{index:05d}.parquet"
            write_part(path, images, labels, listing.class_names)
    meta: dict[str, object] = {
        "dataset": "folder",
        "source": redact_uri(str(root)),
        "train_rows": len(listing.train),
        "valid_rows": len(listing.valid),
        **({"test_rows": len(listing.test)} if listing.has_test else {}),
        "image_shape": [size, size, 3],
        "hwc": [size, size, 3],
        "num_classes": len(listing.class_names),
        "class_names": list(listing.class_names),
        "skipped_files": listing.skipped,
        "layout": LAYOUT,
        "files": files,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    # Written last: its presence is what says the folder is complete.
    (staging / MARKER).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def prepare_from_folder_cli(source: str, out: Path, *, image_size: int, force: bool) -> str:
    """The command's defaults from the settings, as `train` reads them (./.env, then the
    environment): the size the folder would be read at for TRAIN_MODEL, TRAIN_IMAGE_SIZE and
    TRAIN_WEIGHTS, and the bucket endpoint of TRAIN_STORAGE_ENDPOINT. The environment alone was
    read: a .env's TRAIN_MODEL=resnet50 prepared 32-pixel images (a red-team pass)."""
    from app.data.image_size import image_size_for
    from app.settings.env import load_settings
    from app.settings.image_size import IMAGE_SIZE_MIN

    if image_size and image_size < IMAGE_SIZE_MIN:
        raise ConfigError(f"--image-size={image_size}: must be 0 or at least {IMAGE_SIZE_MIN}")
    settings = load_settings()
    size = image_size_for(settings.model, image_size or settings.image_size, settings.weights)
    endpoint = settings.storage_endpoint
    return prepare_from_folder(source, out, size=size, force=force, endpoint=endpoint)
