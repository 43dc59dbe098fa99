"""The run-end evaluation in the trackers. MLflow: its figures as metrics of the run's MLflow
run and its report files (`confusion.png`, `metrics.json`) as artifacts under `eval/<split>/`.
TensorBoard: the same figures as scalars `eval/<split>/<key>` at the checkpoint's epoch, and
the confusion matrix as an image, in the run's `tensorboard/eval/` folder: TensorBoard shows it
as a run of its own beside the training curves, whose folder keeps one event file per driver.

Metric keys: `eval_<split>_accuracy`, `eval_<split>_macro_f1`, `eval_<split>_weighted_f1`,
`eval_<split>_ece`, and per class `eval_<split>_<recall|precision|f1>_<class>`. MLflow takes
letters, digits, `_`, `-`, `.`, ` ` and `/` in a key, at most 250 characters; a class name is
made of letters, digits, `_` and `-` only (`.` and `/` would make paths of the artifact
store's metric files), anything else an `_`, cut to fit; two classes whose names become one
key get their label number appended. Only mlflow-skinny's client is used (log_batch,
log_artifact), with the registry's deadline on every call (app/promotion/registry.py).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from app.storage.location import LocalFolder, RunPath, local_copy

ARTIFACT_DIR = "eval"
LOGGED_FILES = ("confusion.png", "metrics.json")
FIGURES = ("recall", "precision", "f1")
MAX_KEY_CHARS = 250
MAX_LOGGED_CLASSES = 1000  # per-class metrics sent; beyond, metrics.json (an artifact) has all
BATCH = 1000  # MLflow's limit of metrics per log_batch
EVAL_RUN = "eval"  # tensorboard/eval/: the evaluation as a TensorBoard run of its own


def metric_keys(split: str, class_names: list[str]) -> dict[str, str]:
    """Each class's key part, unique within the split (see the module)."""
    room = MAX_KEY_CHARS - len(f"eval_{split}_precision_") - 8  # 8: a label number's suffix
    keys: dict[str, str] = {}
    taken: set[str] = set()
    for index, name in enumerate(class_names):
        key = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:room] or "_"
        if key in taken:
            key = f"{key}_{index}"
        taken.add(key)
        keys[name] = key
    return keys


def evaluation_metrics(split: str, metrics: dict[str, Any]) -> dict[str, float]:
    """The figures of one evaluation's metrics.json, by MLflow key."""
    found = {
        f"eval_{split}_accuracy": metrics["accuracy"],
        f"eval_{split}_macro_f1": metrics["macro"]["f1"],
        f"eval_{split}_weighted_f1": metrics["weighted"]["f1"],
        f"eval_{split}_ece": metrics["expected_calibration_error"],
    }
    per_class = metrics["per_class"][:MAX_LOGGED_CLASSES]
    keys = metric_keys(split, [c["class"] for c in per_class])
    for c in per_class:
        for figure in FIGURES:
            found[f"eval_{split}_{figure}_{keys[c['class']]}"] = c[figure]
    return {key: float(value) for key, value in found.items()}


def log_to_mlflow(run_id: str, reports: dict[str, Any], step: int = 0) -> dict[str, Any]:
    """Each split's figures (at `step`, the checkpoint's epoch) and files to MLflow run
    `run_id`; the record for summary.json."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")  # a deadline on every call
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    now = int(time.time() * 1000)
    logged, artifacts = 0, []
    for split, report in reports.items():
        figures = evaluation_metrics(split, report.metrics)
        entries = [Metric(key, value, now, step) for key, value in figures.items()]
        for start in range(0, len(entries), BATCH):
            client.log_batch(run_id, metrics=entries[start : start + BATCH])
        logged += len(entries)
        with local_copy(report.folder) as folder:
            for name in LOGGED_FILES:
                client.log_artifact(run_id, str(folder / name), f"{ARTIFACT_DIR}/{split}")
                artifacts.append(f"{ARTIFACT_DIR}/{split}/{name}")
    return {"run_id": run_id, "metrics": logged, "artifacts": artifacts}


def log_to_tensorboard(log_dir: RunPath, reports: dict[str, Any], step: int) -> dict[str, Any]:
    """Each split's figures and confusion matrix to `log_dir`/eval (in a bucket: written
    locally, then uploaded); the record for summary.json."""
    import numpy as np
    from PIL import Image
    from torch.utils.tensorboard import SummaryWriter

    log_dir = log_dir / EVAL_RUN
    # The event writer needs a local folder: log_dir itself on a volume; in a bucket a private
    # copy (objects cannot be appended to), uploaded once the writer is closed.
    local = LocalFolder(log_dir, prefix="trainctl-tb-eval-")
    writer = SummaryWriter(log_dir=str(local.path))
    scalars = 0
    for split, report in reports.items():
        for key, value in evaluation_metrics(split, report.metrics).items():
            writer.add_scalar(f"eval/{split}/{key.removeprefix(f'eval_{split}_')}", value, step)
            scalars += 1
        with local_copy(report.folder) as copy:
            image = np.asarray(Image.open(copy / LOGGED_FILES[0]).convert("RGB"))
        writer.add_image(f"eval/{split}/confusion", image, step, dataformats="HWC")
    writer.close()
    local.sync()
    return {"log_dir": str(log_dir), "scalars": scalars, "step": step}
