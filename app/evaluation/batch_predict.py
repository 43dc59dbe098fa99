"""`trainctl predict` over folders and bucket prefixes: the top-k classes of every image, with
Ray Data batch inference (app/evaluation/scoring.py), written to a Parquet or CSV file.

A few files named one by one (fewer than FEW, no --out; local or objects' URIs) stay on the
single-process path of app/export/predict.py, which answers in about a second; anything else
takes this one: each folder or prefix is listed (every image file below it, at any depth, by
the listing rules of image-folder datasets: hidden and non-image files skipped and counted, no
link leading out of it), the files are decoded in Ray Data's tasks by the training pipeline's
code, and an actor pool scores them. A file that cannot be used gets its reason in the
output's `error` column and is counted on stderr (--strict: exit 2 at the first, nothing
written).

The output, one row per image, sorted by image: `image` (its path or URI), then the top-k
classes and probabilities, most probable first (Parquet: `classes` and `probabilities`
lists; CSV: class_1, probability_1, ... class_k, probability_k), and `error`. A Parquet
file's schema metadata names the model that scored it (`trainctl.model_card_sha256`, its model
and run names). It is written whole (a rename on a volume, one PUT in a bucket): a reader never
sees half of it.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from app.data.folder_listing import IMAGE_EXTENSIONS, NOT_UTF8, is_utf8, list_images
from app.errors import ConfigError, RunFailed, refused_write
from app.evaluation.rows import ROWS_PER_BLOCK, folder_rows
from app.evaluation.scoring import (
    ScoringOptions,
    check_resources,
    connect,
    scored_batches,
    with_progress,
)
from app.export.card import CARD_FILE, Verified, verified
from app.export.predict import Prediction, check_loads, export_folder, image_key, named_twice
from app.formatting import csv_text, shown
from app.storage.entries import Kind, kind_within, refuse_link
from app.storage.location import (
    RunPath,
    check_writable,
    parse_location,
    store_errors,
    write_atomic,
)
from app.storage.probe import DEFAULT_TIMEOUT_S
from app.storage.reading import present

if TYPE_CHECKING:
    import ray.data

FEW = 64  # at most this many files named one by one, without --out: the single-process path
FORMATS = (".parquet", ".csv")
SHOWN_SKIPPED = 3


@dataclass(frozen=True)
class BatchResult:
    predictions: list[Prediction]  # sorted by image; those that could not be read excluded
    skipped: list[tuple[str, str]]  # (image, reason)
    out: RunPath | None
    not_images: int = 0  # files the listing passed over: not images by name, hidden, FIFOs
    twice: int = 0  # files named by two arguments (a folder and a file in it): scored once

    def line(self) -> str:
        where = f" -> {shown(self.out)}" if self.out is not None else ""
        skipped = f", {len(self.skipped):,} skipped" if self.skipped else ""
        count = len(self.predictions)
        images = "image" if count == 1 else "images"
        passed = f" ({self.passed_over()})" if self.not_images else ""
        twice = f" ({named_twice(self.twice)})" if self.twice else ""
        return f"trainctl: predicted {count:,} {images}{skipped}{where}{passed}{twice}"

    def passed_over(self) -> str:
        return (
            f"{self.not_images:,} other file(s) not read: not images by name, hidden, or not "
            "regular files (a FIFO, socket or device)"
        )


def takes_batch_path(images: Sequence[str], out: str | None, pool: bool = False) -> bool:
    """Whether `trainctl predict` runs on Ray: with --out or an actor-pool option (`pool`:
    --gpus, --actors), more than FEW files, or any folder or bucket prefix among them (a
    bucket URI counts unless it names an image file: a prefix is listed)."""
    if out is not None or pool or len(images) > FEW:
        return True
    return any(_folder_or_prefix(image) for image in images)


def _folder_or_prefix(image: str) -> bool:
    if "://" in image:
        return not image.lower().endswith(IMAGE_EXTENSIONS)
    return os.path.isdir(image)


def output_location(out: str, endpoint: str | None, overwrite: bool = False) -> RunPath:
    """--out checked before any work: a .parquet or .csv file, local or in a bucket, that is
    not there yet unless `overwrite` (a mistyped --out would replace a dataset's file)."""
    if not out.lower().endswith(FORMATS):
        raise ConfigError(f"--out {out!r}: must end in .parquet or .csv")
    try:
        where = parse_location(out, endpoint)
    except ValueError as err:
        raise ConfigError(f"--out {out!r}: {err}") from None
    if where.name.lower() in FORMATS:
        raise ConfigError(f"--out {out!r}: no file name before {where.name}")
    try:
        found = kind_within(where, "--out")  # a bucket answers within its probe's deadline
    except NotADirectoryError:  # a file on the way: named as such below
        found = None
    if found is Kind.DIR:
        raise ConfigError(
            f"--out {out!r}: is a folder; give a file name ending in .parquet or .csv"
        )
    if found is not None and not overwrite:
        raise ConfigError(
            f"--out {out!r}: already exists; give a new file name, or --overwrite to replace it"
        )
    # An export (a run's export/, a champion's copy) is what promotion and serving verify
    # against its card: nothing else is written into one.
    if present(where.parent / CARD_FILE):
        raise ConfigError(
            f"--out {out!r}: inside an export folder, which holds only what its {CARD_FILE} "
            "lists; write predictions elsewhere"
        )
    # Proved writable now, not found unwritable after the scoring; a local folder is created
    # only when the predictions are written: a refused input leaves nothing behind.
    check_writable(where.parent, "--out", out)
    return where


def batch_predict(
    target: RunPath,
    images: Sequence[str],
    top_k: int,
    *,
    out: str | None,
    options: ScoringOptions,
    strict: bool,
    endpoint: str | None = None,
    card_sha256: str | None = None,
    overwrite: bool = False,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> BatchResult:
    """`endpoint`: TRAIN_STORAGE_ENDPOINT, for a target, images or `out` in an S3-compatible
    store; `card_sha256`: what the export's card must hash to (a champion pointer's);
    `timeout`: TRAIN_STORAGE_TIMEOUT_S, for the target's first answer."""
    destination = output_location(out, endpoint, overwrite) if out is not None else None
    folder, root = export_folder(target, timeout)
    with store_errors(folder, "RUN_OR_EXPORT"):
        export = verified(folder, root, card_sha256)
    groups, not_images, seen, twice = [], 0, set(), 0
    for image in images:
        with store_errors(_location(image, endpoint), "IMAGE_OR_FOLDER"):
            where, paths, passed = _listed(_location(image, endpoint))
        # One row per image: a file named again (a folder and its files, `inbox/ inbox/*.png`)
        # is scored once (it was scored and counted twice: a red-team pass).
        kept = []
        for listed, read in paths:
            key = image_key(f"{str(where).rstrip('/')}/{listed}")
            if key in seen:
                twice += 1
            else:
                seen.add(key)
                kept.append((listed, read))
        groups.append((where, kept))
        not_images += passed
    total = sum(len(paths) for _, paths in groups)
    if total == 0:
        raise ConfigError(
            f"no image files in {', '.join(shown(i) for i in images)} (images: .jpg, .png, "
            ".bmp, .tif, .webp ...; `trainctl evaluate` scores a Parquet dataset's rows)"
        )
    check_loads(export)
    connect()
    check_resources(options)
    dataset = rows_dataset(groups, export.card)
    batches = scored_batches(dataset, export, _with_top_k(options, top_k))
    # Closed however _gather ends: its progress thread stops with it, not with the frame.
    with contextlib.closing(with_progress(batches, total, "images")) as said:
        found = _gather(said, export, strict)
    if destination is not None:
        k = min(top_k, len(export.card["class_names"]))  # columns a row, whatever was skipped
        _write_out(destination, encode(found, destination, k, provenance(export)))
    return BatchResult(
        [p for p, error in found if not error],
        [(p.image, error) for p, error in found if error],
        destination,
        not_images,
        twice,
    )


def _write_out(destination: RunPath, data: bytes) -> None:
    try:
        with store_errors(destination, "--out"):
            destination.parent.mkdir(parents=True, exist_ok=True)  # a bucket has none
            write_atomic(destination, data)
    except OSError as err:  # a volume's, since the probe: full, gone, read-only now
        # After the scoring: a failure of the run (exit 1) where the machine refused it.
        failure = RunFailed if refused_write(err) else ConfigError
        why = err.strerror or str(err)
        raise failure(f"--out {shown(destination)}: cannot be written ({why})") from None


def _with_top_k(options: ScoringOptions, top_k: int) -> ScoringOptions:
    from dataclasses import replace

    return replace(options, top_k=top_k)


def _location(image: str, endpoint: str | None) -> RunPath:
    try:
        return parse_location(image, endpoint)
    except ValueError as err:
        raise ConfigError(f"{shown(image)}: {err}") from None


def _listed(where: RunPath) -> tuple[RunPath, list[tuple[str, str]], int]:
    """(the folder files are read below, their paths relative to it as listed and as read,
    the files passed over) for one argument: a file, or every image file below a folder or
    prefix."""
    # A link named as the argument is refused here, before Ray starts, as links below a
    # folder are (list_images): read later, it failed as an unreadable image, exit 1.
    found = refuse_link(where)
    if found is Kind.DIR:
        return where, *list_images(where)
    if found is None:
        raise ConfigError(f"{shown(where)}: no such file, folder or prefix")
    if not is_utf8(where.name):
        raise ConfigError(f"{shown(where)}: its name is not UTF-8; {NOT_UTF8}")
    return where.parent, [(where.name, where.name)], 0


def rows_dataset(
    groups: list[tuple[RunPath, list[tuple[str, str]]]], card: dict[str, Any]
) -> ray.data.Dataset:
    """Rows to score (app/evaluation/rows.py) for (folder, files relative to it as listed and
    as read) groups, each row's `path` its whole path or URI as listed."""
    import ray.data

    spec = card["input"]
    parts = []
    for root, paths in groups:
        if not paths:
            continue
        items = [{"path": listed, "read": read, "label": -1} for listed, read in paths]
        blocks = max(1, math.ceil(len(items) / ROWS_PER_BLOCK))
        part = ray.data.from_items(items, override_num_blocks=blocks).map_batches(
            folder_rows,
            fn_kwargs={
                "root": root,
                "size": (spec["height"], spec["width"]),
                "channels": spec["channels"],
            },
            batch_format="pyarrow",
            batch_size=None,
        )
        parts.append(part.map_batches(_named, fn_kwargs={"root": str(root)}, batch_format="numpy"))
    return parts[0].union(*parts[1:]) if len(parts) > 1 else parts[0]


def _named(batch: dict[str, np.ndarray], root: str) -> dict[str, np.ndarray]:
    """`path` as the image's whole path or URI (rows of several folders are scored together)."""
    base = root.rstrip("/")
    batch["path"] = np.asarray([f"{base}/{p}" for p in batch["path"]], dtype=object)
    return batch


def _gather(
    batches: Iterator[dict[str, np.ndarray]], export: Verified, strict: bool
) -> list[tuple[Prediction, str]]:
    names = export.card["class_names"]
    found: list[tuple[Prediction, str]] = []
    for batch in batches:
        for path, error, top, probabilities in zip(
            batch["path"], batch["error"], batch["top_index"], batch["top_probability"],
            strict=True,
        ):  # fmt: skip
            if error and strict:
                raise ConfigError(
                    f"{error} (--strict stops at the first file that cannot be used; without "
                    "it such files are skipped and counted)"
                )
            picks = [] if error else list(zip(top.tolist(), probabilities.tolist(), strict=True))
            found.append(
                (
                    Prediction(str(path), [(names[i], int(i), float(p)) for i, p in picks]),
                    str(error),
                )
            )
    found.sort(key=lambda item: item[0].image)
    skipped = [(p.image, e) for p, e in found if e]
    if skipped:
        import click

        first = "; ".join(e for _, e in skipped[:SHOWN_SKIPPED])
        more = " ..." if len(skipped) > SHOWN_SKIPPED else ""
        click.echo(
            f"trainctl: skipped {len(skipped):,} file(s) that cannot be used (their rows "
            f"carry the reason in `error`; --strict stops at the first): {first}{more}",
            err=True,
        )
    return found


def provenance(export: Verified) -> dict[str, str]:
    """Which model scored the rows, for a Parquet file's schema metadata: the card's sha256
    (what a champion pointer and an evaluation name a model by), its model and run names."""
    card = export.card
    said = {"trainctl.model_card_sha256": export.card_sha256}
    for key in ("model_name", "run_name", "architecture"):
        if isinstance(card.get(key), str):
            said[f"trainctl.{key}"] = card[key]
    return said


def encode(
    found: list[tuple[Prediction, str]],
    destination: RunPath,
    k: int,
    provenance: dict[str, str] | None = None,
) -> bytes:
    """The output file's bytes, Parquet or CSV by `destination`'s suffix (see the module), with
    `k` classes a row (the top k asked for, at most the model's classes) in every row's place
    (a CSV of skipped images only lost its class_N columns, a red-team pass); a Parquet file's
    schema carries `provenance` (CSV has no place for it)."""
    import pyarrow as pa

    images = [p.image for p, _ in found]
    errors = [e or None for _, e in found]
    if str(destination).lower().endswith(".parquet"):
        import pyarrow.parquet as pq

        table = pa.table(
            {
                "image": pa.array(images, pa.string()),
                "classes": pa.array(
                    [[n for n, _, _ in p.top] for p, _ in found], pa.list_(pa.string())
                ),
                "probabilities": pa.array(
                    [[q for _, _, q in p.top] for p, _ in found], pa.list_(pa.float64())
                ),
                "error": pa.array(errors, pa.string()),
            }
        ).replace_schema_metadata(provenance or {})
        sink = io.BytesIO()
        pq.write_table(table, sink)
        return sink.getvalue()
    import csv

    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    header = ["image"]
    for rank in range(1, k + 1):
        header += [f"class_{rank}", f"probability_{rank}"]
    writer.writerow([*header, "error"])
    for prediction, error in found:
        cells: list[Any] = [prediction.image]
        for rank in range(k):
            if rank < len(prediction.top):
                name, _, probability = prediction.top[rank]
                cells += [name, f"{probability:.6f}"]
            else:
                cells += ["", ""]
        writer.writerow([csv_text(cell) for cell in (*cells, error)])
    return text.getvalue().encode()
