"""The sweep's records: sweep.json, trials.csv and sweep.png in <storage>/<sweep>/.

Each trial's row is read from the trial's own run folder (its summary.json and
metrics.jsonl, as `trainctl status` reads a run): the trials' folders are the truth, and these
files are a view of them, rewritten whole (atomically) after every trial and at the end.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from app.formatting import csv_text, finite, is_finite, mapping, one_line, whole
from app.runfolder import checkpoints
from app.runfolder import folder as run_folder
from app.runfolder.folder import SWEEP_FILE as SWEEP_FILE  # the sweep's record
from app.runfolder.folder import TRIALS_DIR
from app.runfolder.summary import STATUS_WORDS, save_figure
from app.storage.entries import refuse_link
from app.storage.location import RunPath, write_atomic, write_json

TRIALS_CSV = "trials.csv"
WARM_START_KEY = "warm_start"  # in sweep.json: the champion its trials start from (app/sweep/)
PLOT_FILE = "sweep.png"
DONE = ("succeeded", "stopped")  # a trial in one of these is not trained again
FAILED = ("failed", "invalid")  # trained again by a rerun, but said apart from the unfinished
HIGHER_IS_BETTER = {"val_accuracy": True, "val_loss": False}


class Trial(Protocol):
    """A drawn trial, as these records read it (app/settings/tune_plan.py's Trial)."""

    @property
    def trial_id(self) -> str: ...

    @property
    def values(self) -> Mapping[str, Any]: ...


T = TypeVar("T", bound=Trial)


def trial_dir(sweep_dir: RunPath, trial: Trial) -> RunPath:
    return sweep_dir / TRIALS_DIR / trial.trial_id


def refuse_planted_trials(sweep_dir: RunPath, trials: list[T]) -> None:
    """A trial folder planted as a link is refused (LinkRefused, exit 2), never trained
    through: by `trainctl tune`, and by `check` before it."""
    for trial in trials:  # a bucket has no links
        refuse_link(trial_dir(sweep_dir, trial), sweep_dir.parent)


def trial_row(
    sweep_dir: RunPath, trial: Trial, metric: str, stopped: dict[str, Any]
) -> dict[str, Any]:
    """What trial `trial`'s folder says: status, epochs, final and best metric, time. The best
    is its checkpoints' (their meta.json's, which promotion reads too), not metrics.jsonl's: the
    sweep's best trial is the one whose checkpoint is exported and judged."""
    folder = trial_dir(sweep_dir, trial)
    summary = run_folder.read_summary(folder) or {}
    epochs = run_folder.epochs(folder)
    values = [float(r[metric]) for r in epochs if is_finite(r.get(metric))]
    kept = [ref.metrics.get(metric) for ref in checkpoints.recorded(folder) if ref.step is None]
    best = [float(v) for v in kept if is_finite(v)]
    higher = HIGHER_IS_BETTER[metric]
    status = summary.get("status")
    # None yet, or damaged (another writer's): the trial is trained on from its checkpoints.
    if not isinstance(status, str) or status not in STATUS_WORDS:
        status = "pending" if not epochs else "interrupted"
    if trial.trial_id in stopped and status not in ("succeeded", "failed"):
        status = "stopped"
    return {
        "trial": trial.trial_id,
        "status": status,
        "values": dict(trial.values),
        "epochs": len(epochs),
        "final": values[-1] if values else None,
        "best": (max(best) if higher else min(best)) if best else None,
        "duration_s": finite(summary.get("duration_s")),
        "error": _error(summary) if status in FAILED else None,
        "run_dir": str(folder),
        "tracking": run_folder.recorded_tracking(summary),
    }


def training_trials(sweep_dir: RunPath, trials: list[T]) -> list[tuple[T, RunPath, str]]:
    """The trials whose drivers are training (their summary says `running`), each with its
    folder and its newest worker group's invocation (attempts.jsonl): what a stop asks for a
    just-in-time checkpoint by."""
    found = []
    for trial in trials:
        folder = trial_dir(sweep_dir, trial)
        summary = run_folder.read_summary(folder) or {}
        starts = run_folder.read_jsonl(folder / run_folder.ATTEMPTS_FILE)
        invocation = starts[-1].get("invocation") if starts else None
        if summary.get("status") == "running" and isinstance(invocation, str):
            found.append((trial, folder, invocation))
    return found


DATA_KEY = "data"  # in sweep.json: the data its trials trained on, as data_of records it


def data_of(fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """What sweep.json keeps of the data's fingerprint (app/export/build.data_fingerprint):
    its files' names and sizes and its rows, not their times, which a copy to another volume
    (a laptop's data, then a RayJob's) does not keep."""
    return {k: fingerprint.get(k) for k in ("files_sha256", "train_rows", "valid_rows")}


def data_problem(before: Mapping[str, Any], now: Mapping[str, Any], data_path: Any) -> str | None:
    """Why a rerun of the sweep recorded in `before` may not train on the data `now` (data_of
    it), None where it may (the same files, or a record from before sweeps kept one). For an
    image folder or Parquet files TRAIN_DATA_PATH is the data, and paths may change between
    reruns: trials trained on other files would be ranked against each other."""
    kept = before.get(DATA_KEY)
    if not isinstance(kept, Mapping) or not isinstance(kept.get("files_sha256"), str):
        return None
    if kept.get("files_sha256") == now.get("files_sha256"):
        return None
    rows = f"{_text(kept.get('train_rows'))} train and {_text(kept.get('valid_rows'))} valid rows"
    return (
        f"TRAIN_DATA_PATH={_text(data_path)}: not the data this sweep's trials trained on (its "
        f"files' names or sizes differ; then {rows}, now {now.get('train_rows')} and "
        f"{now.get('valid_rows')}), and a sweep compares trials trained alike: restore that "
        "data to continue the sweep, or give a new TRAIN_RUN_NAME"
    )


def checkpointed(sweep_dir: RunPath, trial: Trial) -> bool:
    """Whether the trial's folder holds a checkpoint its next start resumes from (as its meta
    records it; the start verifies it)."""
    return bool(checkpoints.recorded(trial_dir(sweep_dir, trial)))


def recorded_stopped(before: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """sweep.json's `stopped`: the trials the scheduler stopped, and when."""
    return {k: v for k, v in mapping(before.get("stopped")).items() if isinstance(v, dict)}


def left_to_train(
    sweep_dir: RunPath, trials: list[T], metric: str, before: dict[str, Any]
) -> list[T]:
    """The trials a rerun of the sweep recorded in `before` trains (any not ended)."""
    stopped = recorded_stopped(before)
    return [t for t in trials if trial_row(sweep_dir, t, metric, stopped)["status"] not in DONE]


def _error(summary: dict[str, Any]) -> str | None:
    """Why a trial failed, as its summary says (another writer's text: one escaped line)."""
    error = summary.get("error")
    return one_line(error, 300) if isinstance(error, str) and error else None


def stopped_by(scheduler: str, judged: Any, trained: int) -> str:
    """Which scheduler stopped a trial at which epoch's result, and the last epoch its folder
    holds: Ray Train's report returns before Tune has judged it, so a trial may train on an
    epoch past its rung before the stop reaches its workers. `judged` comes from sweep.json,
    which many hands write: what is no epoch number is not quoted."""
    if (judged := whole(judged, least=1)) is None:
        return scheduler
    said = f"{scheduler} after epoch {judged}"
    if trained > judged:
        said += f"; epoch {trained} had trained before the stop reached the workers"
    return said


def trained_out(row: Mapping[str, Any], epochs: Any) -> bool:
    """Whether a trial's row says it trained to the end, TRAIN_EPOCHS of them: it succeeded, or
    the scheduler's stop reached its workers only after the last epoch (short epochs: Ray
    Train's report returns before Tune judges it). A trial stopped earlier was judged worse by
    the scheduler on fewer epochs; a failed one has no verdict to trust."""
    if row.get("status") == "succeeded":
        return True
    return row.get("status") == "stopped" and every_epoch(row, epochs)


def every_epoch(row: Mapping[str, Any], epochs: Any) -> bool:
    """Whether a trial's row counts TRAIN_EPOCHS (`epochs`, as sweep.json records it) epochs
    trained, both counts as a record many hands write may hold them."""
    done, target = whole(row.get("epochs")), whole(epochs, least=1)
    return done is not None and target is not None and target <= done


def best_row(rows: list[dict[str, Any]], metric: str, epochs: int) -> dict[str, Any] | None:
    """The trial with the best metric among those that trained to the end (`trained_out`)."""
    done = [r for r in rows if trained_out(r, epochs) and r["best"] is not None]
    if not done:
        return None
    sign = 1 if HIGHER_IS_BETTER[metric] else -1
    return max(done, key=lambda r: (sign * r["best"], -int(r["trial"].split("-")[1])))


def tied_with(rows: list[dict[str, Any]], best: dict[str, Any], epochs: int) -> list[str]:
    """The other trials that trained to the end with exactly `best`'s metric: `best_row`
    keeps the first drawn of them, which the sweep says rather than choosing in silence."""
    return [
        r["trial"]
        for r in rows
        if r["trial"] != best["trial"] and trained_out(r, epochs) and r["best"] == best["best"]
    ]


def write_records(sweep_dir: RunPath, record: dict[str, Any]) -> None:
    """sweep.json and trials.csv, each written whole."""
    write_json(sweep_dir / SWEEP_FILE, record)
    write_atomic(sweep_dir / TRIALS_CSV, trials_csv(record["trials"], record["metric"]).encode())


def trials_csv(rows: list[dict[str, Any]], metric: str) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r["values"]))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["trial", "status", *keys, "epochs", f"final_{metric}", f"best_{metric}", "duration_s"]
    )
    for r in rows:
        writer.writerow(
            [r["trial"], r["status"], *(csv_text(r["values"].get(k, "")) for k in keys),
             r["epochs"], *(shown_value(r[k]) for k in ("final", "best", "duration_s"))]
        )  # fmt: skip
    return out.getvalue()


def record_metric(record: dict[str, Any]) -> str:
    """The metric a sweep.json ranks its trials by; val_accuracy where it names none we know."""
    metric = record.get("metric")
    return metric if isinstance(metric, str) and metric in HIGHER_IS_BETTER else "val_accuracy"


def table(record: dict[str, Any]) -> str:
    """The trials as `trainctl status` shows them, best first: first those the sweep could
    ship (trained to the end), then the rest, so that a stopped trial that scored higher never
    heads the table above the one exported. sweep.json lies in a folder
    many hands write: a field of another type than trainctl writes is shown as missing, and
    every text is escaped (one_line), so it can neither crash the table nor drive a terminal."""
    listed = [r for r in _listed(record.get("trials")) if isinstance(r, dict)]
    rows = [_shown_row(r) for r in listed]
    metric = record_metric(record)
    keys = list(dict.fromkeys(k for r in rows for k in r["values"]))
    head = ["TRIAL", "STATUS", *(k.upper() for k in keys), "EPOCHS", "FINAL", "BEST", "TIME"]
    sign = -1 if HIGHER_IS_BETTER[metric] else 1
    for shown, row in zip(rows, listed, strict=True):
        shown["shippable"] = trained_out(row, record.get("epochs"))
    ordered = sorted(
        rows, key=lambda r: (not r["shippable"], r["best"] is None, sign * (r["best"] or 0))
    )
    # A trial the scheduler stopped is "stopped early", as status and compare say of it; a
    # bare "stopped" reads as SIGTERM or Ctrl-C, which a sweep's rows call "interrupted".
    early = STATUS_WORDS["stopped"]
    body = [
        [r["trial"], early if r["status"] == "stopped" else r["status"],
         *(r["values"].get(k, "") for k in keys), r["epochs"],
         _figure(r["final"]), _figure(r["best"]), _seconds(r["duration_s"])]
        for r in ordered
    ]  # fmt: skip
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
             for line in [head, *body]]  # fmt: skip
    best = mapping(record.get("best"))
    said = (
        f"best {_text(best['trial'])} ({_figure(finite(best.get('best')))})"
        if "trial" in best
        else _none_finished(listed, record.get("epochs"))
    )
    lines.insert(0, f"sweep {_text(record.get('sweep'))}: {_text(record.get('status', '?'))}, "
                    f"metric {metric}, {said}")  # fmt: skip
    promotion = mapping(record.get("promotion")).get("line")
    if promotion:
        lines.append(f"promotion: {_text(promotion)}")
    return "\n".join(lines)


def _none_finished(rows: list[dict[str, Any]], epochs: Any) -> str:
    """The header of a sweep with no best trial yet. A trial stopped after its last epoch (the
    sweep interrupted while the trial's run was ending) has trained every epoch: "no trial
    trained to the end yet" read as false beside its row, and it ends at once on a rerun."""
    every = [
        _text(r.get("trial"))
        for r in rows
        if r.get("status") == "interrupted" and every_epoch(r, epochs)
    ]
    if not every:
        return "no trial trained to the end yet"
    shown = ", ".join(every[:3]) + (f" and {len(every) - 3} more" if len(every) > 3 else "")
    return (
        f"no trial finished yet ({shown} trained every epoch but did not end: rerun the sweep "
        "to finish)"
    )


def brief(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """One sweep as a storage listing shows it: its status as sweep.json last said it, how
    many of its trials ended, its best trial. Escaped and typed as `table` is."""
    rows = [_shown_row(r) for r in _listed(record.get("trials")) if isinstance(r, dict)]
    best = mapping(record.get("best"))
    return {
        "name": _text(name),
        "status": _text(record.get("status", "?")),
        "trials": len(rows),
        "ended": sum(r["status"] in DONE for r in rows),
        "metric": record_metric(record),
        "best_trial": _text(best["trial"]) if isinstance(best.get("trial"), str) else None,
        "best": finite(best.get("best")),
    }


def brief_line(sweep: dict[str, Any]) -> str:
    """`nightly: succeeded, 4 of 4 trials ended, best trial-0002 (val_accuracy 0.9526)`."""
    said = f"{sweep['name']}: {sweep['status']}"
    if sweep["trials"]:
        said += f", {sweep['ended']} of {sweep['trials']} trials ended"
    if sweep["best_trial"] is not None:
        figure = _figure(sweep["best"]) or "missing"
        said += f", best {sweep['best_trial']} ({sweep['metric']} {figure})"
    return said


def _shown_row(row: dict[str, Any]) -> dict[str, Any]:
    """A sweep.json trial row as the table shows it: texts escaped, figures numbers or None."""
    values = mapping(row.get("values"))
    return {
        "trial": _text(row.get("trial")),
        "status": _text(row.get("status")),
        "values": {_text(k): _text(shown_value(v)) for k, v in values.items()},
        "epochs": _text(row.get("epochs")),
        "final": finite(row.get("final")),
        "best": finite(row.get("best")),
        "duration_s": finite(row.get("duration_s")),
    }


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return one_line(str(value), 200)


def importance(rows: list[dict[str, Any]]) -> list[str]:
    """The keys whose values go with the biggest change in the best metric, most first: for a
    numeric key the size of its rank correlation with the metric (Spearman's |rho|), for any
    other the correlation ratio (eta) of the metric's means across its values; both 0..1."""
    scored = [r for r in rows if r["best"] is not None]
    keys = list(dict.fromkeys(k for r in rows for k in r["values"]))
    metric = [float(r["best"]) for r in scored]
    strength = {}
    for key in keys:
        values = [r["values"].get(key) for r in scored]
        if values and all(is_finite(v) for v in values):
            strength[key] = abs(_pearson(_ranks(values), _ranks(metric)))
        else:
            strength[key] = _eta([str(v) for v in values], metric)
    return sorted(keys, key=lambda k: -strength[k])


def _ranks(values: list[Any]) -> list[float]:
    """Average ranks (ties share theirs)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2
        start = end + 1
    return ranks


def _pearson(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0


def _eta(labels: list[str], ys: list[float]) -> float:
    if len(ys) < 2:
        return 0.0
    mean = sum(ys) / len(ys)
    total = sum((y - mean) ** 2 for y in ys)
    groups: dict[str, list[float]] = {}
    for label, y in zip(labels, ys, strict=True):
        groups.setdefault(label, []).append(y)
    between = sum(len(g) * (sum(g) / len(g) - mean) ** 2 for g in groups.values())
    return math.sqrt(between / total) if total > 0 and len(groups) > 1 else 0.0


def plot(sweep_dir: RunPath, record: dict[str, Any], space_kinds: dict[str, str]) -> RunPath:
    """sweep.png: each trial's best metric against the (up to) three most important keys."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, metric = record["trials"], record["metric"]
    chosen = mapping(record.get("best")).get("trial")  # the trial the sweep ships
    keys = importance(rows)[:3] or ["trial"]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        shown = [r for r in rows if r["best"] is not None]
        xs = [r["values"].get(key, r["trial"]) for r in shown]
        if xs and not all(is_finite(x) for x in xs):
            xs = [str(x) for x in xs]
        ys = [r["best"] for r in shown]
        colors = ["tab:green" if r["status"] == "succeeded" else "tab:gray" for r in shown]
        ax.scatter(xs, ys, c=colors)
        for x, y, row in zip(xs, ys, shown, strict=True):
            if row["trial"] == chosen:
                ax.scatter([x], [y], marker="*", s=260, c="gold", edgecolors="black", zorder=3)
                ax.annotate(chosen, (x, y), textcoords="offset points", xytext=(8, -12))
        if space_kinds.get(key) == "loguniform":
            ax.set_xscale("log")
        ax.set(xlabel=key, ylabel=f"best {metric}", title=key)
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"{record['sweep']}: green trained to the end, grey stopped or failed, "
        "star the trial shipped"
    )
    fig.tight_layout()
    return save_figure(fig, sweep_dir / PLOT_FILE, dpi=100)


def shown_value(value: Any) -> str:
    """A trial's drawn value as the table and the sweep's lines show it."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _figure(value: float | None) -> str:
    """A metric as the table shows it: four decimals, as every epoch line does (0.4 beside
    0.6167 read as two kinds of figure)."""
    return "" if value is None else f"{value:.4f}"


def _seconds(value: Any) -> str:
    return f"{float(value):.0f}s" if is_finite(value) else "-"


def _say(message: str) -> None:
    import click

    click.echo(f"trainctl: {message}")
