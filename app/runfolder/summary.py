"""The run's summary and its curves.png: assembled from what the run folder holds."""

from __future__ import annotations

import contextlib
import io
import math
from typing import Any

from app.formatting import finite, is_finite
from app.runfolder import checkpoints, interruptions, retention
from app.runfolder import folder as run_folder
from app.runfolder.epoch_record import CORE_METRICS
from app.runfolder.folder import CURVES_FILE
from app.storage.location import RunPath, write_atomic

# summary.json's status -> what `status` and `compare` say
STATUS_WORDS = {
    "running": "running",
    "succeeded": "succeeded",
    "failed": "failed",
    "interrupted": "stopped",  # by SIGTERM or Ctrl-C, with what was saved
    "invalid": "invalid",
    "stopped": "stopped early",  # a sweep's trial the scheduler stopped (app/sweep/)
}


def build_summary(
    run_dir: RunPath,
    *,
    status: str,
    run_name: str,
    target_epochs: int,
    settings: dict[str, Any],
    duration_s: float,
    failures: int,
    restored_from: str | None,
    metric: str = "val_accuracy",
    error: str | None = None,
    good: list[checkpoints.CheckpointRef] | None = None,
    epochs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Assemble the summary from what is on storage, so it is true whoever trained the epochs.
    `good` and `epochs`: the checkpoints and metrics.jsonl lines, where the caller read them
    already (one reading, so that the figures agree with what the caller concluded from it)."""
    figures = run_figures(run_dir, metric, good, epochs)
    summary: dict[str, Any] = {
        "status": status,
        "run_name": run_name,
        "run_dir": str(run_dir),
        "epochs_completed": figures["epochs_completed"],
        "epochs_target": target_epochs,
        "metrics": figures["metrics"],
        "best": figures["best"],
        "checkpoint": figures["checkpoint"],
        "restored_from": restored_from,
        "failures": failures,
        "interruptions": figures["interruptions"],
        "duration_s": round(duration_s, 2),
        "curves": figures["curves"],
        "settings": settings,
    }
    if error:
        summary["error"] = error
    return summary


def run_figures(
    run_dir: RunPath,
    metric: str,
    good: list[checkpoints.CheckpointRef] | None = None,
    epochs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The summary's figures of what the run folder holds: epochs completed, the last epoch's
    metrics, the best checkpoint (ranked the way checkpoints are kept: by `metric`), the
    newest checkpoint, every interruption (attempts.jsonl) and the curves' file."""
    epochs = run_folder.epochs(run_dir) if epochs is None else epochs
    good = checkpoints.scan(run_dir).good if good is None else good
    last = epochs[-1] if epochs else {}
    best_ref = next(iter(retention.ranked(good, metric)), None)
    return {
        "epochs_completed": good[0].epoch if good else 0,
        "metrics": {key: last[key] for key in CORE_METRICS if last.get(key) is not None},
        "best": (
            {
                "metric": metric,
                **{key: best_ref.metrics[key] for key in CORE_METRICS if key in best_ref.metrics},
                "epoch": best_ref.epoch,
                "checkpoint": str(best_ref.path),
            }
            if best_ref
            else None
        ),
        "checkpoint": str(good[0].path) if good else None,
        # Every preemption, failure and stop the run went through, from attempts.jsonl.
        "interruptions": interruptions.from_attempts(
            run_folder.read_jsonl(run_dir / run_folder.ATTEMPTS_FILE)
        ),
        "curves": str(run_dir / CURVES_FILE) if epochs else None,
    }


def record_interrupted(run_dir: RunPath, why: str) -> bool:
    """A run whose driver was ended from outside, before it could say so (a sweep's trial, its
    driver gone with the sweep's Ray job): a summary still `running` says `interrupted`, and
    why, with the figures its folder holds, as the run's own driver says them on Ctrl-C or
    SIGTERM. Without them `status` read the trial as none of its epochs trained. The
    checkpoints are read as their meta.json records them: no weights are hashed while the
    sweep stops. Whether it did."""
    summary = run_folder.read_summary(run_dir)
    if summary is None or summary.get("status") != "running":
        return False
    settings = summary.get("settings")
    metric = settings.get("checkpoint_metric") if isinstance(settings, dict) else None
    metric = metric if metric == "val_loss" else "val_accuracy"  # the summary is the storage's
    summary.update(
        run_figures(run_dir, metric, good=checkpoints.recorded(run_dir)),
        status="interrupted",
        error=why,
    )
    with contextlib.suppress(OSError):  # the sweep's record says it either way
        run_folder.write_summary(run_dir, summary)
    return True


def plot_curves(run_dir: RunPath) -> RunPath | None:
    """Loss and accuracy per epoch, side by side; None when no epoch finished yet."""
    epochs = run_folder.epochs(run_dir)
    if not epochs:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and in pods
    import matplotlib.pyplot as plt

    xs = [int(r["epoch"]) for r in epochs]
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    loss_ax.plot(xs, series(epochs, "train_loss"), marker="o", label="train")
    loss_ax.plot(xs, series(epochs, "val_loss"), marker="o", label="validation")
    loss_ax.set(title="Loss", xlabel="epoch", ylabel="cross-entropy")
    loss_ax.legend()
    acc_ax.plot(xs, series(epochs, "val_accuracy"), marker="o", color="tab:green")
    acc_ax.set(title="Validation accuracy", xlabel="epoch", ylabel="accuracy", ylim=(0, 1))
    for ax in (loss_ax, acc_ax):
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(run_dir.name)
    return save_figure(fig, run_dir / CURVES_FILE, dpi=110)


def best_epoch(epochs: list[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """The epoch record best at `metric` (the newest of equals, as retention ranks
    checkpoints); None where no record has a finite figure for it."""
    scored = [r for r in epochs if is_finite(r.get(metric))]
    if not scored:
        return None
    pick = max if retention.higher_is_better(metric) else min
    return pick(reversed(scored), key=lambda r: r[metric])


def series(epochs: list[dict[str, Any]], metric: str) -> list[float]:
    """One metric per epoch record, for a plot: NaN (a gap, not a crash) where a record has no
    number a float holds."""
    return [math.nan if (v := finite(r.get(metric))) is None else v for r in epochs]


def save_figure(fig: Any, path: RunPath, dpi: int) -> RunPath:
    """A matplotlib figure as a PNG at `path`, written whole (a reader never sees half), and
    closed."""
    import matplotlib.pyplot as plt

    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=dpi)
    plt.close(fig)
    write_atomic(path, image.getvalue())
    return path
