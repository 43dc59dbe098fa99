"""`trainctl compare RUN...`: runs side by side, from what their run folders hold.

For each run: summary.json (status, epochs, the last epoch's and the best checkpoint's metrics,
duration, settings; from metrics.jsonl where a run has none yet), metrics.jsonl (the curves),
attempts.jsonl (how many workers the last start had) and its evaluations,
`eval/<name>/metrics.json` (a run's end-of-run evaluation is one of them): the one shown is of
a name every run has, so that the figures side by side are of the same data
(_choose_evaluations). Shown: the settings that differ, the final and best figures, time and
accelerator-hours, and the classes whose recall differs most between the runs' evaluations, and
for a sweep's trials which one the sweep exported (sweep.json's best); `--json` gives all of
it, every class included.
One PNG overlays the runs' validation accuracy and losses per epoch.

Accelerator-hours are summary.json's `accelerator_hours` where the run recorded them; else
they are derived, duration x workers (x GPUs per worker: one, with TRAIN_USE_GPU), and say
so. Every file is read the run folder's way (app/runfolder/folder.py): bounded, no link followed,
a damaged record skipped with a warning.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.errors import ConfigError, refused_writes_fail
from app.evaluation.report import run_evaluations
from app.formatting import finite, is_finite, json_safe, mapping, shown
from app.runfolder import folder as run_folder
from app.runfolder.epoch_record import CORE_METRICS
from app.runfolder.summary import STATUS_WORDS, best_epoch, series
from app.runfolder.sweep_records import DONE
from app.settings.tune_plan import TRIAL_NAME
from app.storage.entries import Kind, bucket_there, entries, kind, kind_within, not_a_link
from app.storage.location import (
    RunPath,
    local_write_problem,
    parse_location,
    place_key,
    write_atomic,
)
from app.storage.reading import present

MAX_RUNS = 20
SHOWN_CLASSES = 10  # classes in the table (by spread of recall); --json has them all
IGNORED_SETTINGS = ("run_name",)  # each column is named by it already
CELL = 22  # characters per column of the table
NAME_HEAD = 8  # characters a run name cut in the middle keeps of its start
# A run folder without summary.json: training under its first driver, or that driver killed.
NO_SUMMARY = "no summary yet"


@dataclass
class RunFigures:
    """What one run folder says."""

    run_dir: RunPath
    name: str
    summary: dict[str, Any]
    epochs: list[dict[str, Any]]
    workers: int | None
    evaluations: list[dict[str, Any]]  # every evaluation of the run's own model
    evaluation: dict[str, Any] | None = None  # the one shown (compare's choice)
    hours: dict[str, Any] = field(default_factory=dict)
    # A sweep's trial: whether it is the one the sweep exported and judged (sweep.json's best);
    # None for a run of its own, or where sweep.json does not say.
    sweeps_best: bool | None = None

    @property
    def settings(self) -> dict[str, Any]:
        return mapping(self.summary.get("settings"))

    def record(self, differing: Sequence[str]) -> dict[str, Any]:
        best = self.summary.get("best") if isinstance(self.summary.get("best"), dict) else None
        evaluation = self.evaluation
        return {
            "run": self.name,
            "run_dir": str(self.run_dir),
            "status": self.summary.get("status"),
            "epochs_completed": self.summary.get("epochs_completed"),
            "epochs_target": self.summary.get("epochs_target"),
            "settings": {key: self.settings.get(key) for key in differing},
            "final": mapping(self.summary.get("metrics")),
            "best": best,
            "duration_s": self.summary.get("duration_s"),
            "accelerator_hours": self.hours,
            "sweeps_best": self.sweeps_best,
            "evaluation": None
            if evaluation is None
            else {
                "name": evaluation.get("name"),
                "created": evaluation.get("created"),
                "data": mapping(evaluation.get("data")).get("location"),
                "rows": evaluation.get("rows"),
                "accuracy": evaluation.get("accuracy"),
                "macro_f1": mapping(evaluation.get("macro")).get("f1"),
                "per_class": _per_class(evaluation),
            },
        }


@dataclass(frozen=True)
class Comparison:
    runs: list[RunFigures]
    differing: list[str]
    plot: RunPath | None

    def record(self) -> dict[str, Any]:
        """Everything, as strict JSON holds it (a record's NaN or infinity is null)."""
        return json_safe(
            {
                "runs": [run.record(self.differing) for run in self.runs],
                "settings_differing": self.differing,
                "per_class_recall": _recalls(self.runs),
                "plot": str(self.plot) if self.plot is not None else None,
            }
        )

    def table(self) -> list[str]:
        """The comparison as lines of a fixed-width table, one column per run."""
        rows: list[tuple[str, list[str]]] = [("run", _run_names([r.name for r in self.runs]))]
        rows.append(("status", [_status(r.summary.get("status")) for r in self.runs]))
        rows.append(("epochs", [_epochs(r.summary) for r in self.runs]))
        if any(r.sweeps_best is not None for r in self.runs):
            marks = {True: "yes, exported", False: "no", None: ""}
            rows.append(("sweep's best", [marks[r.sweeps_best] for r in self.runs]))
        for key in self.differing:
            values = [_value(r.settings.get(key)) if r.settings else "unknown" for r in self.runs]
            rows.append((f"setting {key}", _where_they_differ(values)))
        metrics = sorted({k for r in self.runs for k in mapping(r.summary.get("metrics"))})
        for key in metrics:
            rows.append(
                (
                    f"final {key}",
                    [_number(mapping(r.summary.get("metrics")).get(key)) for r in self.runs],
                )
            )
        rows.append(("best", [_best(r.summary) for r in self.runs]))
        rows.append(("duration", [_duration(r.summary.get("duration_s")) for r in self.runs]))
        rows.append(("accelerator-hours", [_hours(r.hours) for r in self.runs]))
        if any(r.evaluation for r in self.runs):
            rows.append(("evaluation", [_eval_name(r.evaluation) for r in self.runs]))
            rows.append(
                (
                    "eval accuracy",
                    [_number((r.evaluation or {}).get("accuracy")) for r in self.runs],
                )
            )
            rows.append(
                (
                    "eval macro F1",
                    [
                        _number(mapping(mapping(r.evaluation).get("macro")).get("f1"))
                        for r in self.runs
                    ],
                )
            )
            recalls = _recalls(self.runs)
            spread = sorted(recalls, key=lambda c: (-_spread(recalls[c]), c))[:SHOWN_CLASSES]
            for name in spread:
                rows.append((f"recall {shown(name)}", [_number(v) for v in recalls[name]]))
        width = max(len(label) for label, _ in rows) + 2
        lines = [label.ljust(width) + "".join(_cell(v) for v in values) for label, values in rows]
        if self.plot is not None:  # whole, not cut to a cell: it is a path to open
            lines.append("curves".ljust(width) + shown(self.plot))
        if why := _different_data([r.evaluation for r in self.runs if r.evaluation]):
            lines.append(
                f"* the evaluations are of different data ({why}): evaluate each run on the "
                "same data with one --name to compare them"
            )
        if any(r.hours and r.hours.get("source") != "recorded" for r in self.runs):
            lines.append("* derived: duration x workers (the run recorded no accelerator_hours)")
        if len(recalls := _recalls(self.runs)) > SHOWN_CLASSES:  # not the rest without a word
            lines.append(
                f"* recall: the {SHOWN_CLASSES} of {len(recalls)} classes whose recall differs "
                "most between the runs; --json has every class"
            )
        return [line.rstrip() for line in lines]


def compare(runs: Sequence[str], out: str | None, overwrite: bool = False) -> Comparison:
    """Every run folder read, the table's figures worked out, and the curves drawn to `out`
    (default compare.png here, replaced on each comparison); ConfigError naming a folder that is
    not a run's, or an `out` already there unless `overwrite` (a mistyped --out would replace
    someone's image, as `predict --out` refuses to)."""
    from app.settings.env import run_location, settings_environ, storage_access

    if not 1 <= len(runs) <= MAX_RUNS:
        raise ConfigError(f"give 2 to {MAX_RUNS} runs to compare ({len(runs)} given)")
    env = settings_environ()
    endpoint, timeout = storage_access(env)
    destination = _plot_location(out or "compare.png", endpoint, replace=overwrite or not out)
    given = [_folder_there(run_location(run, env), timeout) for run in runs]
    labelled = [found for where in given for found in _runs_in(where)]
    if not 2 <= len(labelled) <= MAX_RUNS:
        sweeps = any(label is not None for _, label, _ in labelled)
        counted = ", a sweep's trials counted each" if sweeps else ""
        hint = "; name the trials to compare, trials/trial-NNNN" if sweeps else ""
        raise ConfigError(
            f"give 2 to {MAX_RUNS} runs to compare ({len(labelled)} given{counted}){hint}"
        )
    # By place, not by spelling: runs/base and ../runs/base, or a run's name and its path.
    places = [place_key(where) for where, _, _ in labelled]
    twice = sorted({place for place in places if places.count(place) > 1})
    if twice:
        raise ConfigError(f"{', '.join(twice)}: given more than once; give each run once")
    found = [_read(where, label, best) for where, label, best in labelled]
    keys = sorted({k for r in found for k in r.settings} - set(IGNORED_SETTINGS))
    # A run whose settings record is missing or damaged differs in nothing it can show: it
    # would list every setting as differing. It shows "unknown" where the others differ.
    known = [r for r in found if r.settings]
    differing = [k for k in keys if len({_value(r.settings.get(k)) for r in known}) > 1]
    _choose_evaluations(found)
    with refused_writes_fail(f"--out {out or 'compare.png'!r}", "give --out a place with room"):
        write_atomic(destination, _curves(found))
    return Comparison(found, differing, destination)


def _data_of(evaluation: dict[str, Any]) -> str:
    return str(mapping(evaluation.get("data")).get("location"))


def _different_data(evaluations: list[dict[str, Any]]) -> str | None:
    """Why the evaluations shown side by side are not of one data set, or None. A name every
    run has is not enough: `valid` and `test` are each run's own dataset's."""
    if len({e["name"] for e in evaluations}) > 1:
        return "no name every run has"
    places = sorted({_data_of(e) for e in evaluations})
    if len(places) > 1:
        return f"{evaluations[0]['name']} is {', '.join(shown(p) for p in places)}"
    return None


def _choose_evaluations(runs: Sequence[RunFigures]) -> None:
    """Each run's evaluation to show: of one name every run that has evaluations has, of the
    same data for all where a name is (the one written last among those), so that the figures
    side by side are of the same data; where those runs share none, each run's newest (the
    table says they differ). A run with none (stopped before its run-end evaluation) shows
    none, and changes nothing of what the others show."""
    evaluated = [run for run in runs if run.evaluations]
    named = [{e["name"]: e for e in run.evaluations} for run in evaluated]
    common = set.intersection(*(set(n) for n in named)) if named else set()
    if common:
        alike = {n for n in common if len({_data_of(found[n]) for found in named}) == 1}
        name = max(alike or common, key=lambda n: max(found[n]["time"] for found in named))
        for run, found in zip(evaluated, named, strict=True):
            run.evaluation = found[name]
        return
    for run in evaluated:
        run.evaluation = max(run.evaluations, key=lambda m: m["time"])


def _plot_location(out: str, endpoint: str | None, *, replace: bool) -> RunPath:
    if not out.lower().endswith(".png"):
        raise ConfigError(f"--out {out!r}: must end in .png")
    try:
        where = parse_location(out, endpoint)
    except ValueError as err:
        raise ConfigError(f"--out {out!r}: {err}") from None
    # Refused before any run is read, not after: a folder at the name, or a file where a folder
    # to hold it would be made.
    if problem := local_write_problem(where.parent):
        raise ConfigError(f"--out {out!r}: {problem}")
    found = kind(where)
    if found is Kind.DIR:
        raise ConfigError(f"--out {out!r}: is a folder; name the PNG file to write")
    if found is not None and not replace:
        raise ConfigError(
            f"--out {out!r}: already exists; give a new file name, or --overwrite to replace it"
        )
    return where


def _folder_there(where: RunPath, timeout: float) -> RunPath:
    """`where`, a folder that is there (a bucket answering within `timeout`, or the refusal
    names the store: a store down was an internal error); refused by name where it is nothing,
    a file or a link (nothing there was read as "not a run folder")."""
    found = kind_within(where, "RUN", timeout)
    if found is Kind.LINK:
        not_a_link(where)  # refused, naming the link and its target
    if found is None:
        bucket_there(where, "RUN", timeout)
        raise ConfigError(
            f"{shown(where)}: no such folder; give run folders (or their s3:// / gs:// URIs), "
            "a sweep's folder, or runs' names"
        )
    if found is not Kind.DIR:
        raise ConfigError(f"{shown(where)}: {found.value}, not a run folder")
    return where


def _runs_in(where: RunPath) -> list[tuple[RunPath, str | None, bool | None]]:
    """The run folder given, or a sweep's trials, each labelled `sweep/trial-NNNN` (every
    sweep's trials are named alike) and marked whether it is the sweep's best; ConfigError for
    a sweep none of whose trials has started."""
    # A run folder's summary is read once, by _read: only a folder holding sweep.json is
    # looked into here.
    if not present(where / run_folder.SWEEP_FILE) or run_folder.read_summary(where) is not None:
        return [(where, None, _trial_is_best(where))]  # a run, or what _read names as not one
    folders = [
        entry.path
        for entry in entries(where / run_folder.TRIALS_DIR)
        if entry.kind is Kind.DIR and TRIAL_NAME.fullmatch(entry.name)
    ]
    trials = [trial for trial in folders if _started(trial)]
    record = run_folder.read_sweep(where, damaged=None)  # read once: the best and the ended
    _warn_ended_without_records(where, record, {trial.name for trial in trials})
    if not trials:
        raise ConfigError(
            f"{shown(where)}: a sweep's folder, none of whose trials has started yet: rerun "
            f"`trainctl tune` (`trainctl status {shown(where)}` shows it)"
        )
    best = _best_in(record)
    return [
        (trial, f"{where.name}/{trial.name}", None if best is None else trial.name == best)
        for trial in trials
    ]


def _trial_is_best(run_dir: RunPath) -> bool | None:
    """For a trial's folder given by itself (SWEEP/trials/trial-NNNN): whether it is its
    sweep's best; None for any other run folder."""
    if run_dir.parent.name != run_folder.TRIALS_DIR or not TRIAL_NAME.fullmatch(run_dir.name):
        return None
    best = _best_in(run_folder.read_sweep(run_dir.parent.parent, damaged=None))
    return None if best is None else run_dir.name == best


def _best_in(record: dict[str, Any] | None) -> str | None:
    """The trial the sweep exported and judged, as its sweep.json `record` names it ("" where
    no trial trained to the end); None where sweep.json cannot say (none there, or damaged:
    `trainctl status` of the sweep names the damage)."""
    if record is None:
        return None
    if "best" in record and record["best"] is None:
        return ""
    trial = mapping(record.get("best")).get("trial")
    return trial if isinstance(trial, str) else None


def _warn_ended_without_records(
    sweep_dir: RunPath, record: dict[str, Any] | None, started: set[str]
) -> None:
    """A trial sweep.json (`record`) says ended, with no records in its folder (deleted, or
    the folder gone), is left out as one not started yet is: said, not silently (a red-team
    pass)."""
    trials = (record or {}).get("trials")
    rows = trials if isinstance(trials, list) else []
    for row in rows:
        name, status = mapping(row).get("trial"), mapping(row).get("status")
        if isinstance(name, str) and status in DONE and name not in started:
            print(
                f"trainctl: warning: {shown(name)}: {shown(str(sweep_dir))}/sweep.json says it "
                f"{status}, but its folder holds no {run_folder.SUMMARY_FILE} or "
                f"{run_folder.METRICS_FILE}: left out",
                file=sys.stderr,
            )


def _started(trial: RunPath) -> bool:
    """A trial that has written a run record; a sweep still running has folders that have not
    (Tune made them), and they would refuse the whole comparison."""
    records = (run_folder.SUMMARY_FILE, run_folder.METRICS_FILE)
    return any(present(trial / name) for name in records)


def _read(
    run_dir: RunPath, label: str | None = None, sweeps_best: bool | None = None
) -> RunFigures:
    summary = run_folder.read_summary(run_dir)
    epochs = run_folder.epochs(run_dir)
    if summary is None and not epochs:
        raise ConfigError(
            f"{shown(run_dir)}: not a run folder (no summary.json or metrics.jsonl); give run "
            "folders (or their s3:// / gs:// URIs)"
        )
    summary = summary if summary is not None else _summary_of(epochs)
    starts = run_folder.read_jsonl(run_dir / run_folder.ATTEMPTS_FILE)
    sizes = [s.get("world_size") for s in starts if isinstance(s.get("world_size"), int)]
    figures = RunFigures(
        run_dir=run_dir,
        name=label or str(summary.get("run_name") or run_dir.name),
        summary=summary,
        epochs=epochs,
        workers=sizes[-1] if sizes else None,
        evaluations=run_evaluations(run_dir),
        sweeps_best=sweeps_best,
    )
    figures.hours = accelerator_hours(summary, figures.workers)
    return figures


def _summary_of(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """A run without summary.json yet (its first driver is training, or was killed first): its
    epochs, last figures and best accuracy from metrics.jsonl, where compare showed dashes."""
    last = epochs[-1]
    best = best_epoch(epochs, "val_accuracy")
    return {
        "status": NO_SUMMARY,
        "epochs_completed": last["epoch"],
        "metrics": {name: last.get(name) for name in CORE_METRICS},
        "best": None
        if best is None
        else {
            "metric": "val_accuracy",
            "epoch": best["epoch"],
            "val_accuracy": best["val_accuracy"],
        },
    }


def accelerator_hours(summary: dict[str, Any], workers: int | None) -> dict[str, Any]:
    """The run's accelerator-hours: recorded in summary.json (`accelerator_hours`, a number or
    an object holding `hours`), or derived as duration x workers (x one GPU each with
    TRAIN_USE_GPU); {} where neither is known."""
    recorded = summary.get("accelerator_hours")
    if isinstance(recorded, dict):
        recorded = recorded.get("hours", recorded.get("value"))
    if (hours := finite(recorded)) is not None:
        return {"hours": hours, "source": "recorded"}
    settings = mapping(summary.get("settings"))
    duration = finite(summary.get("duration_s"))
    count = workers or _workers_setting(settings.get("num_workers"))
    if duration is None or count is None:
        return {}
    kind = "gpu" if settings.get("use_gpu") else "cpu"
    return {
        "hours": duration / 3600.0 * count,
        "source": f"derived: duration x {count} worker(s)",
        "kind": kind,
    }


def _workers_setting(value: Any) -> int | None:
    """TRAIN_NUM_WORKERS as recorded ("2", or "2-8" for elastic: the most)."""
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        last = value.split("-")[-1].strip()
        return int(last) if last.isdigit() else None
    return None


def _per_class(evaluation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rows = evaluation.get("per_class")
    if not isinstance(rows, list):
        return {}
    return {
        str(row["class"]): {k: row.get(k) for k in ("precision", "recall", "f1", "support")}
        for row in rows
        if isinstance(row, dict) and "class" in row
    }


def _recalls(runs: list[RunFigures]) -> dict[str, list[float | None]]:
    """Each class's recall in each run's evaluation (None where it has none)."""
    tables = [_per_class(r.evaluation) if r.evaluation else {} for r in runs]
    names = sorted({name for table in tables for name in table})
    return {name: [(t.get(name) or {}).get("recall") for t in tables] for name in names}


def _spread(values: list[float | None]) -> float:
    known = [number for v in values if (number := finite(v)) is not None]
    return max(known) - min(known) if len(known) > 1 else 0.0


def _curves(runs: list[RunFigures]) -> bytes:
    """compare.png: `curves_figure` as PNG bytes."""
    import matplotlib.pyplot as plt

    fig = curves_figure(runs)
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=110)
    plt.close(fig)
    return image.getvalue()


def curves_figure(runs: list[RunFigures]) -> Any:
    """Validation accuracy, and the losses (validation solid, training dashed), per epoch.
    Every line has markers: a run of one epoch (a sweep's trial that ASHA stopped at its grace
    period) is a single point, which a line alone does not draw."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and in pods
    import matplotlib.pyplot as plt

    fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    for index, run in enumerate(runs):
        colour = f"C{index % 10}"
        xs = [int(r["epoch"]) for r in run.epochs]
        label = run.name if run.name.isprintable() else repr(run.name)
        acc_ax.plot(xs, series(run.epochs, "val_accuracy"), marker="o", markersize=3,
                    color=colour, label=label)  # fmt: skip
        loss_ax.plot(xs, series(run.epochs, "val_loss"), marker="o", markersize=3,
                     color=colour, label=f"{label} validation")  # fmt: skip
        loss_ax.plot(xs, series(run.epochs, "train_loss"), marker="o", markersize=3,
                     color=colour, linestyle="--", label=f"{label} training")  # fmt: skip
    acc_ax.set(title="Validation accuracy", xlabel="epoch", ylabel="accuracy")
    loss_ax.set(title="Loss (validation solid, training dashed)", xlabel="epoch",
                ylabel="cross-entropy")  # fmt: skip
    for ax in (acc_ax, loss_ax):
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    acc_ax.legend(fontsize=8)
    return fig


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _number(value: Any) -> str:
    if not is_finite(value):
        return "-"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _epochs(summary: dict[str, Any]) -> str:
    done, target = summary.get("epochs_completed"), summary.get("epochs_target")
    if done is None:
        return "-"
    return f"{done}/{target}" if target is not None else str(done)


def _best(summary: dict[str, Any]) -> str:
    best = summary.get("best")
    if not isinstance(best, dict):
        return "-"
    metric = str(best.get("metric", "val_accuracy"))
    return f"{_number(best.get(metric))} @{best.get('epoch')}"


def _duration(seconds: Any) -> str:
    if (seconds := finite(seconds)) is None:
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _hours(hours: dict[str, Any]) -> str:
    if not hours:
        return "-"
    kind = {"gpu": " GPU", "cpu": " CPU"}.get(hours.get("kind", ""), "")
    derived = "" if hours.get("source") == "recorded" else "*"
    return f"{hours['hours']:.4f}{kind}{derived}"


def _status(status: Any) -> str:
    """As `trainctl status` says it: `stopped` for a run stopped by SIGTERM, not
    summary.json's `interrupted`."""
    if status is None:
        return "-"
    return STATUS_WORDS.get(status, str(status)) if isinstance(status, str) else str(status)


def _eval_name(evaluation: dict[str, Any] | None) -> str:
    if not evaluation:
        return "-"
    return f"{evaluation.get('name')} ({evaluation.get('rows')} rows)"


def _where_they_differ(values: list[str]) -> list[str]:
    """A setting's values, each too long for its cell cut to start at the word (or path part)
    where they begin to differ: `/data/shapes` and `/data/shapes2` were both shown as
    `/data/sh…`, and `beats_champion` beside `beats_champion and class_drop<=0.02` as `…pion`
    and `…pion and class_drop…` (red-team passes). A value that fits is shown whole."""
    if all(len(v) < CELL for v in values):
        return values
    differ = _first_difference(values)
    return [v if len(v) < CELL else _from_word(v, differ) for v in values]


def _run_names(names: list[str]) -> list[str]:
    """Names too long for a cell, cut in the middle where they differ at the end (a sweep's
    trials, `nightly-…/trial-0001`), else as a setting is cut: every trial of a sweep was shown
    as `nightly-sweep/trial-…` (a red-team pass)."""
    tail = CELL - 2 - NAME_HEAD - 1
    shown = []
    for n in names:
        # Where it parts from the name most like it: there it can be told from every other.
        differ = max((_first_difference([n, m]) for m in names if m != n), default=0)
        if len(n) < CELL:
            shown.append(n)
        elif differ >= len(n) - tail:
            shown.append(n[:NAME_HEAD] + "…" + n[-tail:])
        else:
            shown.append(_from_word(n, differ))
    return shown


def _first_difference(values: list[str]) -> int:
    """The first character index where the values differ (the shortest one's length if one
    begins every other)."""
    columns = enumerate(zip(*values, strict=False))
    return next((i for i, chars in columns if len(set(chars)) > 1), min(map(len, values)))


def _from_word(value: str, differ: int) -> str:
    """`value` from the start of the word holding character `differ` (…-prefixed), or from a
    few characters before it where no word starts near."""
    boundary = max(value.rfind(" ", 0, differ + 1), value.rfind("/", 0, differ + 1))
    start = boundary + 1 if boundary >= 0 and differ - boundary < CELL - 2 else differ - 4
    start = max(0, start)
    return ("…" + value[start:]) if start else value


def _cell(value: str) -> str:
    text = value if value.isprintable() else repr(value)
    return (text if len(text) < CELL else text[: CELL - 2] + "…").ljust(CELL)
