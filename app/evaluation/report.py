"""An evaluation's folder, `<run>/eval/<name>/`: its files, written whole, and read back.

- `metrics.json`: the figures (app/evaluation/metrics.py), what was scored, the export's card
  sha256, and when;
- `confusion.json`: the class names, the count matrix (rows: true class) up to
  MATRIX_MAX_CLASSES classes, and the most confused pairs;
- `confusion.png`: the matrix up to PLOT_MAX_CLASSES classes (class names on both axes,
  colour by the share of the true class, counts written in the cells up to
  ANNOTATE_MAX_CLASSES), beyond that a bar chart of the most confused pairs;
- `mistakes.csv`: file (and row, for Parquet), true class, predicted class, confidence, the
  most confident mistakes first, at most --max-mistakes of them.

Nobody ever sees half an evaluation. On a volume the files are written into a hidden folder
beside the final one (through app/storage/safe_fs.py, below the run folder: no link is
followed) and renamed into place, replacing an earlier evaluation of the same name. A bucket
has no rename: the old objects are deleted, the files written, and metrics.json last; a
reader (`trainctl compare`) takes a folder without metrics.json for no evaluation.
"""

from __future__ import annotations

import csv
import io
import json
import re
import warnings
from typing import Any

from app.errors import ConfigError, refused_writes_fail
from app.formatting import csv_text, is_finite
from app.runfolder.folder import EVAL_DIR
from app.storage import bounded_json, safe_fs
from app.storage.entries import entries
from app.storage.location import RunPath, replace_folder
from app.storage.reading import read_bounded

METRICS_FILE = "metrics.json"
CONFUSION_JSON = "confusion.json"
CONFUSION_PNG = "confusion.png"
MISTAKES_FILE = "mistakes.csv"
PLOT_MAX_CLASSES = 50
ANNOTATE_MAX_CLASSES = 30
PLOTTED_PAIRS = 25
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# The names the run's own evaluations take (app/promotion/evaluation.py): its splits, and the
# champion scored on them.
RUN_SPLITS = ("valid", "test")
RUN_CHAMPION = re.compile(r"champion-v[0-9]+-(valid|test)")
MAX_METRICS_BYTES = 64 << 20  # per-class figures for 100,000 classes fit
MISTAKE_COLUMNS = ("file", "row", "true_class", "predicted_class", "confidence")


def checked_name(name: str) -> str:
    """`--name` as a folder name of its own: letters, digits, '.', '_', '-', starting with a
    letter or digit, at most 64; ConfigError otherwise."""
    if NAME_PATTERN.fullmatch(name):
        return name
    raise ConfigError(
        f"--name {name!r}: must be 1-64 letters, digits, '.', '_' or '-', starting with a "
        "letter or digit (it names the folder eval/<name>/ in the run folder)"
    )


def default_name(location: RunPath, split: str | None) -> str:
    """The name an evaluation gets without --name: the split, or the data folder's own name
    made a safe folder name ("data" when nothing of it is). A data folder named like one of
    the run's own records (another dataset's `test/`) is named with its parent too
    (`pets-test`): it is not the run's split."""
    if split is not None:
        return split
    name = _safe(location.name) or "data"
    if run_record(name):
        name = _safe(f"{location.parent.name}-{name}")
        return name if name and not run_record(name) else f"data-{location.name}"
    return name


def _safe(raw: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", raw).lstrip("._-")[:64]


def run_record(name: str) -> str | None:
    """What eval/<name>/ holds where the run writes it itself (its run-end evaluation of a
    split, the champion scored on that split: what its promotion was judged on), else None."""
    if name in RUN_SPLITS:
        return f"the run-end evaluation of its {name} split"
    if RUN_CHAMPION.fullmatch(name):
        return "the champion's scores on the rows this run was judged on"
    return None


def eval_folder(run_dir: RunPath, name: str) -> RunPath:
    return run_dir / EVAL_DIR / checked_name(name)


def write_folder(folder: RunPath, files: dict[str, bytes], run_dir: RunPath) -> None:
    """`files` as `folder`'s whole content, replacing what was there (see the module), below
    the run folder; metrics.json last, the marker a reader trusts the rest by."""
    others = {name: data for name, data in files.items() if name != METRICS_FILE}
    kept = (
        "the scores were not kept, and nothing of the folder was left half-written: make room "
        "there, then run it again"
    )
    with refused_writes_fail(str(folder), kept):
        replace_folder(folder, {**others, METRICS_FILE: files[METRICS_FILE]}, run_dir)


def report_files(
    metrics: dict[str, Any], confusion: dict[str, Any], mistakes: list[tuple[Any, ...]]
) -> dict[str, bytes]:
    """The folder's files, metrics.json last (a bucket reader's marker)."""
    return {
        CONFUSION_JSON: _json(confusion),
        CONFUSION_PNG: confusion_png(confusion),
        MISTAKES_FILE: mistakes_csv(mistakes),
        METRICS_FILE: _json(metrics),
    }


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2) + "\n").encode()


def mistakes_csv(rows: list[tuple[Any, ...]]) -> bytes:
    """MISTAKE_COLUMNS, one row per mistake; `row` is empty for an image file."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(MISTAKE_COLUMNS)
    for file, row, true, predicted, confidence in rows:
        cells = [file, "" if row is None else row, true, predicted, f"{confidence:.6f}"]
        writer.writerow([csv_text(cell) for cell in cells])
    return text.getvalue().encode()


def confusion_png(confusion: dict[str, Any]) -> bytes:
    """The matrix (up to PLOT_MAX_CLASSES classes), else the most confused pairs."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and in pods
    import matplotlib.pyplot as plt
    import numpy as np

    names = confusion["classes"]
    matrix = confusion.get("matrix")
    if matrix is not None and len(names) <= PLOT_MAX_CLASSES:
        counts = np.asarray(matrix, dtype=np.int64)
        support = counts.sum(axis=1, keepdims=True)
        share = np.divide(counts, support, out=np.zeros(counts.shape), where=support > 0)
        side = max(4.0, 0.32 * len(names) + 2.5)
        fig, ax = plt.subplots(figsize=(side + 1.2, side), constrained_layout=True)
        image = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
        ticks = np.arange(len(names))
        labels = [_label(n) for n in names]
        ax.set_xticks(ticks, labels, rotation=90, fontsize=8)
        ax.set_yticks(ticks, labels, fontsize=8)
        ax.set(xlabel="predicted class", ylabel="true class")
        if len(names) <= ANNOTATE_MAX_CLASSES:
            for (row, column), count in np.ndenumerate(counts):
                if count:
                    colour = "white" if share[row, column] > 0.5 else "black"
                    ax.text(column, row, str(count), ha="center", va="center", fontsize=7,
                            color=colour)  # fmt: skip
        fig.colorbar(image, ax=ax, label="share of the true class's rows")
        ax.set_title("Confusion matrix (counts; colour: share of the true class)")
    else:
        pairs = confusion["most_confused"][:PLOTTED_PAIRS]
        fig, ax = plt.subplots(
            figsize=(9, max(3.0, 0.3 * len(pairs) + 1.5)), constrained_layout=True
        )
        shown_pairs = [f"{_label(p['true'])} -> {_label(p['predicted'])}" for p in pairs]
        ax.barh(range(len(pairs)), [p["count"] for p in pairs], color="tab:blue")
        ax.set_yticks(range(len(pairs)), shown_pairs, fontsize=8)
        ax.invert_yaxis()
        ax.set(
            xlabel="rows", title=f"Most confused pairs (true -> predicted), of {len(names)} classes"
        )
        if not pairs:
            ax.text(0.5, 0.5, "no mistakes", ha="center", va="center", transform=ax.transAxes)
    image_bytes = io.BytesIO()
    with warnings.catch_warnings():
        # Class names in scripts the bundled font lacks (CJK) are drawn as boxes, and
        # confusion.json keeps them: one warning line per glyph would only be noise.
        warnings.filterwarnings("ignore", "Glyph .* missing from font", UserWarning)
        fig.savefig(image_bytes, format="png", dpi=110)
    plt.close(fig)
    return image_bytes.getvalue()


def _label(name: str) -> str:
    """A class name as an axis label: printable, and short enough to leave room for the plot."""
    text = name if name.isprintable() else repr(name)
    return text if len(text) <= 24 else text[:23] + "…"


def read_metrics(folder: RunPath) -> dict[str, Any] | None:
    """An evaluation's metrics.json, or None where it has none (yet) or it is unreadable."""
    try:
        text = read_bounded(folder / METRICS_FILE, None, MAX_METRICS_BYTES).decode("utf-8")
        found = bounded_json.loads(text, MAX_METRICS_BYTES)
    except (OSError, ValueError, safe_fs.LinkRefused):
        return None
    return found if isinstance(found, dict) else None


def _other_model(metrics: dict[str, Any] | None) -> bool:
    data = (metrics or {}).get("data")
    return isinstance(data, dict) and bool(data.get("scored_as"))


def latest_metrics(run_dir: RunPath) -> dict[str, Any] | None:
    """The run's newest complete evaluation (by its recorded time), with its folder name as
    `name`; None where it has none."""
    return max(run_evaluations(run_dir), key=lambda m: m["time"], default=None)


def run_evaluations(run_dir: RunPath) -> list[dict[str, Any]]:
    """The run's complete evaluations of its own model, each with its folder name as `name`."""
    root = run_dir / EVAL_DIR
    try:
        # A hidden name is an evaluation being written.
        names = [e.name for e in entries(root, run_dir) if not e.name.startswith(".")]
    except (OSError, ValueError, safe_fs.LinkRefused):
        return []
    found = []
    for name in names:
        metrics = read_metrics(root / name)
        if _other_model(metrics):
            continue  # the champion scored on this run's rows for its gate: not this run's
        if metrics is not None and is_finite(metrics.get("time")):
            found.append({**metrics, "name": name})
    return found
