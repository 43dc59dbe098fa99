"""`trainctl evaluate RUN DATA`: a run's export scored on labelled images with Ray Data, its
figures and mistakes written to `<run>/eval/<name>/`.

Before Ray starts: the export is verified (app/export/card.py: every file against the card's
sha256; nothing is loaded otherwise) and its weights loaded once into the card's model
(app/export/predict.py, check_loads: a pickle, another model or NaN is refused here, not by
every actor), the data is listed and its classes checked against the
run's (app/evaluation/data.py), --name is checked, and the cluster must be able to hold the
actor pool asked for (--gpus where it has no GPU: exit 2, naming what it has). Then the rows
are read and decoded in Ray Data's tasks and scored by an actor pool
(app/evaluation/scoring.py), and the driver gathers what each row got: the figures
(app/evaluation/metrics.py), the most confident mistakes, and the files that could not be
used (skipped and counted, named in metrics.json and on stderr; --strict stops at the first).

`evaluate` is the part that needs neither a command line nor a data folder: a verified export
and any Ray Dataset of uint8 `image` and integer `label` rows (what
app/data/pipeline.build_datasets gives a training run), scored and written to an eval folder.
A run's end calls it on its best checkpoint's export and validation data (scored in the
driver where the split is small: app/evaluation/scoring.py).
"""

from __future__ import annotations

import contextlib
import heapq
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING, Any

import click
import numpy as np

from app.errors import ConfigError
from app.evaluation.data import EvalData, data_folder, run_split
from app.evaluation.metrics import (
    MATRIX_MAX_CLASSES,
    Outcomes,
    confusion_matrix,
    confusion_pairs,
    most_confused,
    summarize,
)
from app.evaluation.report import (
    RUN_SPLITS,
    checked_name,
    default_name,
    eval_folder,
    report_files,
    run_record,
    write_folder,
)
from app.evaluation.scoring import (
    ScoringOptions,
    check_resources,
    connect,
    precision_of,
    scored_batches,
    with_progress,
)
from app.export.card import CARD_FILE, EXPORT_DIR, Verified, sweep_problem, verified
from app.export.predict import check_loads
from app.formatting import finite, is_finite, shown
from app.runfolder.folder import RUN_RECORDS, TRIALS_DIR
from app.storage.entries import entries, not_a_link
from app.storage.location import RunPath, store_errors
from app.storage.reading import present

if TYPE_CHECKING:
    import ray.data

DEFAULT_MISTAKES = 100
MAX_MISTAKES = 1_000_000
LISTED_SKIPPED = 100  # skipped files named in metrics.json (all are counted)
SHOWN_SKIPPED = 3  # ... and on stderr


@dataclass(frozen=True)
class EvalReport:
    """An evaluation written: its folder and its metrics.json."""

    folder: RunPath
    metrics: dict[str, Any]

    def line(self) -> str:
        """The one summary line `trainctl evaluate` prints."""
        m = self.metrics
        parts = [
            f"{m['rows']:,} rows",
            f"accuracy {m['accuracy']:.4f} ({m['correct']}/{m['rows']})",
        ]
        if "top5_accuracy" in m:
            parts.append(f"top-5 {m['top5_accuracy']:.4f}")
        parts.append(f"macro F1 {m['macro']['f1']:.4f}")
        parts.append(f"ECE {m['expected_calibration_error']:.4f}")
        skipped = m["skipped"]["count"]
        if skipped:
            parts.append(f"{skipped:,} skipped")
        passed = m["data"].get("files_skipped_by_name")
        if passed:  # as `predict` says it: a .gif or a hidden file was left out without a word
            parts.append(
                f"{passed:,} other file(s) not read: not images by name, hidden, or outside the "
                "class folders"
            )
        recorded = m.get("recorded")
        if recorded:
            same = "same" if recorded["val_accuracy"] == m["accuracy"] else "differs"
            if m["data"].get("same_files_as_training") is False:
                same += ": the split's files changed since training"
            parts.append(
                f"training recorded val_accuracy {recorded['val_accuracy']:.4f} at epoch "
                f"{recorded['epoch']} ({same})"
            )
        data = m["data"].get("shown") or shown(m["data"].get("location", "the data"))
        return (
            f"trainctl: evaluated {m['run_name']} on {data}: "
            + ", ".join(parts)
            + f" -> {shown(self.folder)}"
        )


def evaluate_command(
    run_dir: RunPath,
    data: str | None,
    *,
    split: str | None,
    name: str | None,
    options: ScoringOptions,
    strict: bool,
    max_mistakes: int,
    allow_missing: bool,
) -> EvalReport:
    """Everything `trainctl evaluate` does: the checks, then `evaluate`. `run_dir`: as
    app/settings/env.run_location found it."""
    from app.settings.env import settings_environ, storage_access

    if data is not None and split is not None:
        raise ConfigError("give DATA or --split, not both")
    if data is None and split is None:
        raise ConfigError(
            "nothing to evaluate on: give DATA (a folder of class folders, or of Parquet files) "
            "or --split valid (the run's own validation data) or --split test"
        )
    if name is not None:
        checked_name(name)
        record = run_record(name)
        if record and name != split:
            again = f" (or --split {name}, which scores that split again)"
            raise ConfigError(
                f"--name {name}: eval/{name}/ is the run's own record ({record}), which "
                f"summary.json points to; give another name{again if name in RUN_SPLITS else ''}"
            )
    if not 0 <= max_mistakes <= MAX_MISTAKES:
        raise ConfigError(f"--max-mistakes {max_mistakes}: must be 0..{MAX_MISTAKES:,}")
    endpoint, _ = storage_access(settings_environ())
    with store_errors(run_dir, "RUN"):
        export = run_export(run_dir)
    card = export.card
    if split is not None:
        source = run_split(card, split, endpoint)
        name, note = split_eval_name(name, source)
        if note:
            click.echo(f"trainctl: {run_dir.name}: {note}", err=True)
    else:
        assert data is not None
        source = data_folder(data, card, endpoint, allow_missing=allow_missing)
    if source.rows == 0:
        raise ConfigError(f"{source.describe()}: no rows to evaluate")
    out = eval_folder(run_dir, name or default_name(source.location, source.split))
    check_loads(export)
    connect()
    check_resources(options)
    return evaluate(
        export, source.dataset(card), out, run_dir=run_dir, data=describe(source),
        options=options, strict=strict, max_mistakes=max_mistakes, row_prefix=source.row_prefix(),
    )  # fmt: skip


def split_eval_name(name: str | None, source: EvalData) -> tuple[str | None, str | None]:
    """The eval folder's name for `--split` (None: the split's own) and a note for the user:
    eval/<split>/ is what the run's promotion was judged on, and summary.json points to it, so
    a score of files that changed since training is kept beside it, not over it."""
    if name is not None or source.same_data is not False:
        return name, None
    split = source.split
    changed = f"{split}-changed"
    return changed, (
        f"the {split} split's files changed since the run trained (their names, sizes or "
        f"modification times): scored into "
        f"eval/{changed}/, the run's own eval/{split}/ kept"
    )


def run_export(run_dir: RunPath, *, as_recorded: bool = True) -> Verified:
    """The run's verified export; ConfigError saying what to do where there is none.
    `as_recorded`: held to the card summary.json records (off for the run's own driver)."""
    not_a_link(run_dir)  # runs/<name> planted as a link: its eval/ would be written through it
    folder = run_dir / EXPORT_DIR
    if not present(folder / CARD_FILE):
        if run_dir.name == EXPORT_DIR and present(run_dir / CARD_FILE):
            raise ConfigError(
                f"{shown(run_dir)}: an export folder; evaluate writes its report into the run's "
                f"eval/: give the run folder, {shown(run_dir.parent)}"
            )
        if not run_dir.is_dir():
            what = "is a file, not a run folder" if present(run_dir) else "no such run folder"
            raise ConfigError(f"{shown(run_dir)}: {what}; give a run folder (or URI)")
        from app.runfolder.folder import read_summary

        missing = f"{shown(run_dir)}: no {EXPORT_DIR}/{CARD_FILE}"
        if problem := sweep_problem(run_dir):  # a sweep, or a trial it did not export
            raise ConfigError(problem)
        summary = read_summary(run_dir)
        names = {entry.name for entry in entries(run_dir)}
        if not names & set(RUN_RECORDS) and not any(n.startswith("checkpoint_") for n in names):
            # Nothing of a run (/tmp, a data folder): "finish it" would send the user astray.
            raise ConfigError(
                f"{missing}, and none of a run's records ({', '.join(RUN_RECORDS)}, "
                "checkpoints): not a run folder; give the folder a run wrote "
                "(TRAIN_STORAGE_PATH/TRAIN_RUN_NAME), or its URI"
            )
        if (summary or {}).get("status") == "succeeded":
            if run_dir.parent.name == TRIALS_DIR:  # training a trial again would change nothing
                raise ConfigError(
                    f"{missing}; the run succeeded without one (a sweep's trial other than its "
                    "best is not exported): evaluate the sweep's best trial, or a run that has one"
                )
            raise ConfigError(
                f"{missing}; the run succeeded, and its export/ was removed since: evaluate "
                "another run, or train again under a new TRAIN_RUN_NAME"
            )
        raise ConfigError(
            f"{missing}; a run exports its best checkpoint when it succeeds: finish it "
            "(`trainctl train` with the same TRAIN_RUN_NAME resumes it), or evaluate another run"
        )
    # Opened below the run folder: neither export/ nor a file in it is read through a link.
    return verified(folder, run_dir, as_recorded=as_recorded)


def describe(source: EvalData) -> dict[str, Any]:
    """metrics.json's `data`: what was scored."""
    return {
        "location": str(source.location),
        "shown": source.describe(),
        "layout": source.layout,
        "split": source.split,
        "rows_listed": source.rows,
        "files_skipped_by_name": source.skipped_files,
        "same_files_as_training": source.same_data,
    }


def evaluate(
    export: Verified,
    rows: ray.data.Dataset,
    out: RunPath,
    *,
    run_dir: RunPath,
    data: dict[str, Any],
    options: ScoringOptions | None = None,
    strict: bool = False,
    max_mistakes: int = DEFAULT_MISTAKES,
    row_prefix: tuple[str, str] | None = None,
    strict_hint: str = "--strict stops at the first",
) -> EvalReport:
    """Score `rows` with `export`'s model on an actor pool (or in this process:
    `options.in_process`), and write eval folder `out` in `run_dir` (metrics.json,
    confusion.json, confusion.png, mistakes.csv) whole.

    `rows`: a Ray Dataset of {"image": uint8 (H, W, C) at the card's input size, "label":
    int64 (the card's label numbers)}, optionally "path" (a file, shown in mistakes.csv;
    Parquet files' rows are numbered in order) and "error" (why the row could not be read:
    skipped and counted, or with `strict` a ConfigError). Ray must be initialized. `data`
    describes the rows for metrics.json (`describe`); a `split` there makes the figure the
    checkpoint recorded part of the report. `row_prefix`: for rows from files of many rows,
    their folder in the rows' `path` and as shown (EvalData.row_prefix). `strict_hint`: how
    the caller's user stops at the first file that cannot be used, said beside the skipped."""
    options = options or ScoringOptions()
    started, wall = time.monotonic(), time.time()
    card = export.card
    names = list(card["class_names"])
    # Closed however _gather ends: its progress thread stops with it, not with the frame.
    with contextlib.closing(
        with_progress(scored_batches(rows, export, options), None, "rows")
    ) as said:
        found = _gather(said, strict, max_mistakes, row_prefix)
    if found.skipped:
        unit = "row" if row_prefix else "file"
        _warn_skipped(found.skipped, found.skipped_listed, f"{strict_hint} {unit}", unit)
    if found.outcomes.rows == 0:
        raise ConfigError(
            f"{data.get('shown', 'the data')}: none of its {found.skipped:,} rows could be used"
            + (f" (first: {found.skipped_listed[0]['reason']})" if found.skipped_listed else "")
        )
    figures = summarize(found.outcomes, names)
    checkpoint = card.get("checkpoint") if isinstance(card.get("checkpoint"), dict) else {}
    metrics = {
        "run_name": card.get("run_name") or run_dir.name,
        "run_dir": str(run_dir),
        "name": out.name,
        "data": data,
        "export": {
            "card_sha256": export.card_sha256,
            "architecture": card["architecture"],
            "checkpoint_epoch": checkpoint.get("epoch"),
        },
        "precision": {"off": "float32"}.get(p := precision_of(card, options.gpus), p),
        "device": "gpu" if options.gpus else "cpu",
        "scored_in": "this process" if options.in_process else "an actor pool",
        **figures,
        "skipped": {"count": found.skipped, "first": found.skipped_listed},
        "time": wall,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall)),
        "duration_s": round(time.monotonic() - started, 3),
    }
    figures = checkpoint.get("metrics") or {}
    recorded = figures.get("val_accuracy")
    if data.get("split") == "valid" and is_finite(recorded):
        metrics["recorded"] = {"val_accuracy": recorded, "epoch": checkpoint.get("epoch")}
        if (loss := finite(figures.get("val_loss"))) is not None:
            metrics["recorded"]["val_loss"] = loss
    mistakes = [(m[2], m[3], names[m[4]], names[m[5]], m[0]) for m in found.mistakes]
    write_folder(out, report_files(metrics, _confusion(found.outcomes, names), mistakes), run_dir)
    return EvalReport(out, metrics)


def _confusion(outcomes: Outcomes, names: list[str]) -> dict[str, Any]:
    """confusion.json: the matrix (up to MATRIX_MAX_CLASSES classes) and the most confused
    pairs."""
    support = np.bincount(outcomes.labels, minlength=len(names))
    pairs = confusion_pairs(outcomes.labels, outcomes.predicted, len(names))
    matrix = (
        confusion_matrix(outcomes.labels, outcomes.predicted, len(names)).tolist()
        if len(names) <= MATRIX_MAX_CLASSES
        else None
    )
    return {
        "classes": names,
        "rows_are": "true class",
        "columns_are": "predicted class",
        "matrix": matrix,
        "most_confused": most_confused(pairs, support, names),
    }


@dataclass
class _Gathered:
    outcomes: Outcomes
    skipped: int
    skipped_listed: list[dict[str, Any]]
    # (confidence, order, file, row, true, predicted), most confident first
    mistakes: list[tuple[float, int, str | None, int | None, int, int]]


def _gather(
    batches: Iterator[dict[str, np.ndarray]],
    strict: bool,
    max_mistakes: int,
    parquet: tuple[str, str] | None,
) -> _Gathered:
    """Every scored row, streamed: the outcomes, the skipped rows, and a bounded heap of the
    most confident mistakes."""
    parts: dict[str, list[np.ndarray]] = {
        k: [] for k in ("label", "predicted", "confidence", "top_index", "loss")
    }
    skipped, listed = 0, []
    heap: list[tuple[float, int, str | None, int | None, int, int]] = []
    order = count()
    per_file: dict[str, int] = {}
    position = 0
    for batch in batches:
        size = len(batch["label"])
        files, numbers = _where(batch, size, parquet, per_file, position)
        position += size
        errors = batch.get("error")
        bad = np.flatnonzero(errors != "") if errors is not None else np.zeros(0, np.int64)
        for index in bad:
            reason = _reason(files[index], numbers[index], str(errors[index]), parquet)
            if strict:
                unit = "row" if parquet else "file"
                raise ConfigError(
                    f"{reason} (--strict stops at the first {unit} that cannot be used; without "
                    f"it such {unit}s are skipped and counted)"
                )
            skipped += 1
            if len(listed) < LISTED_SKIPPED:
                listed.append({"file": files[index], "row": numbers[index], "reason": reason})
        good = np.ones(size, bool)
        good[bad] = False
        for key in parts:
            parts[key].append(np.asarray(batch[key])[good])
        if max_mistakes:
            _keep_mistakes(heap, order, batch, good, files, numbers, max_mistakes)
    joined = {k: np.concatenate(v) if v else np.zeros(0) for k, v in parts.items()}
    rows = len(joined["label"])
    outcomes = Outcomes(
        labels=joined["label"].astype(np.int64),
        predicted=joined["predicted"].astype(np.int64),
        confidence=joined["confidence"].astype(np.float64),
        top=joined["top_index"].astype(np.int64).reshape(rows, -1 if rows else 0),
        loss=joined["loss"].astype(np.float64),
    )
    mistakes = sorted(heap, reverse=True)  # most confident first; ties: the earlier row first
    return _Gathered(outcomes, skipped, listed, mistakes)


def _keep_mistakes(
    heap: list[tuple[float, int, str | None, int | None, int, int]],
    order: Iterator[int],
    batch: dict[str, np.ndarray],
    good: np.ndarray,
    files: list[str | None],
    numbers: list[int | None],
    max_mistakes: int,
) -> None:
    """The batch's wrong rows into `heap`, which keeps the `max_mistakes` most confident."""
    labels, predicted = np.asarray(batch["label"]), np.asarray(batch["predicted"])
    wrong = np.flatnonzero(good & (labels != predicted))
    if not len(wrong):
        return
    confidence = np.asarray(batch["confidence"])
    if len(wrong) > max_mistakes:  # only this batch's most confident can enter
        wrong = wrong[np.argsort(-confidence[wrong], kind="stable")[:max_mistakes]]
    for index in wrong:
        entry = (float(confidence[index]), -next(order), files[index], numbers[index],
                 int(labels[index]), int(predicted[index]))  # fmt: skip
        if len(heap) < max_mistakes:
            heapq.heappush(heap, entry)
        else:
            heapq.heappushpop(heap, entry)


def _where(
    batch: dict[str, np.ndarray],
    size: int,
    parquet: tuple[str, str] | None,
    per_file: dict[str, int],
    position: int,
) -> tuple[list[str | None], list[int | None]]:
    """Each row's file (relative to the data folder) and, for Parquet, its row in the file
    (rows come in order); without a `path` column, no file and the row's position."""
    paths = batch.get("path")
    if paths is None:
        return [None] * size, list(range(position, position + size))
    if parquet is None:
        return [str(p) for p in paths], [None] * size
    files, numbers = [], []
    for path in map(str, paths):
        number = per_file.get(path, 0)
        per_file[path] = number + 1
        files.append(path.removeprefix(parquet[0]))
        numbers.append(number)
    return files, numbers


def _reason(file: str | None, row: int | None, error: str, parquet: tuple[str, str] | None) -> str:
    if parquet is not None and file is not None:
        return f"{shown(parquet[1] + file)}: row {row}: {error}"
    return error  # an image file's reason names it already


def _warn_skipped(skipped: int, listed: list[dict[str, Any]], strict_hint: str, unit: str) -> None:
    first = "; ".join(item["reason"] for item in listed[:SHOWN_SKIPPED])
    more = " ..." if skipped > SHOWN_SKIPPED else ""
    click.echo(
        f"trainctl: skipped {skipped:,} {unit}(s) that cannot be used (listed in metrics.json; "
        f"{strict_hint}): {first}{more}",
        err=True,
    )
