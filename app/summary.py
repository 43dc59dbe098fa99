"""summary.json and curves.png: what a person (or CI script) reads after a run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from app import checkpoints, history

SUMMARY_FILE = "summary.json"
CURVES_FILE = "curves.png"
METRIC_KEYS = ("train_loss", "val_loss", "val_accuracy")


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / SUMMARY_FILE
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def write_summary(run_dir: Path, summary: dict[str, Any]) -> Path:
    """Write atomically: readers (and `trainctl submit --wait`) never see half a file."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / SUMMARY_FILE
    tmp = path.with_name(f".{SUMMARY_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path


def build_summary(
    run_dir: Path,
    *,
    status: str,
    run_name: str,
    target_epochs: int,
    settings: dict[str, Any],
    duration_s: float,
    failures: int,
    restored_from: str | None,
    error: str | None = None,
) -> dict[str, Any]:
    """Assemble the summary from what is on storage, so it is true whoever trained the epochs."""
    epochs = history.epochs(run_dir)
    good = checkpoints.scan(run_dir).good
    last = epochs[-1] if epochs else {}
    best_ref = max(good, key=lambda ref: ref.metrics.get("val_accuracy", -1.0), default=None)
    summary: dict[str, Any] = {
        "status": status,
        "run_name": run_name,
        "run_dir": str(run_dir),
        "epochs_completed": good[0].epoch if good else 0,
        "epochs_target": target_epochs,
        "metrics": {key: last[key] for key in METRIC_KEYS if last.get(key) is not None},
        "best": (
            {
                "val_accuracy": best_ref.metrics.get("val_accuracy"),
                "epoch": best_ref.epoch,
                "checkpoint": str(best_ref.path),
            }
            if best_ref
            else None
        ),
        "checkpoint": str(good[0].path) if good else None,
        "restored_from": restored_from,
        "failures": failures,
        "duration_s": round(duration_s, 2),
        "curves": str(run_dir / CURVES_FILE) if epochs else None,
        "settings": settings,
    }
    if error:
        summary["error"] = error
    return summary


def plot_curves(run_dir: Path) -> Path | None:
    """Loss and accuracy per epoch, side by side; None when no epoch finished yet."""
    epochs = history.epochs(run_dir)
    if not epochs:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and in pods
    import matplotlib.pyplot as plt

    xs = [int(r["epoch"]) for r in epochs]
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    nan = float("nan")  # a line without a metric leaves a gap, not a crash
    loss_ax.plot(xs, [r.get("train_loss", nan) for r in epochs], marker="o", label="train")
    loss_ax.plot(xs, [r.get("val_loss", nan) for r in epochs], marker="o", label="validation")
    loss_ax.set(title="Loss", xlabel="epoch", ylabel="cross-entropy")
    loss_ax.legend()
    acc_ax.plot(xs, [r.get("val_accuracy", nan) for r in epochs], marker="o", color="tab:green")
    acc_ax.set(title="Validation accuracy", xlabel="epoch", ylabel="accuracy", ylim=(0, 1))
    for ax in (loss_ax, acc_ax):
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(run_dir.name)
    path = run_dir / CURVES_FILE
    tmp = path.with_name(f".{CURVES_FILE}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return path
