"""The experiment trackers' clients: MLflow, TensorBoard and Weights & Biases, for the driver.

Each logs the redacted settings as params once, every epoch's metrics at step=epoch, and the
best checkpoint as an artifact at the end. Its ids go into the run summary before training
starts, so a rerun, a RayJob retry or a driver killed half way continues the same tracker run
instead of opening a second one. Failures are raised: app/tracking/trackers.py retries and buffers.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from app.formatting import finite, one_line, shown_figure
from app.redact import redact_uri
from app.runfolder.epoch_record import CORE_METRICS, TRACKED_METRICS
from app.settings import TrainSettings
from app.storage.location import LocalFolder, RunPath, local_copy, local_path

STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
LEDGER = "logged_epochs.txt"


def flat_params(settings: Mapping[str, Any]) -> dict[str, str]:
    """Settings as tracker params: strings, lists and nested values as JSON."""
    return {
        key: value if isinstance(value, str) else json.dumps(value)
        for key, value in sorted(settings.items())
    }


def _wall(record: Mapping[str, Any]) -> float:
    """When the epoch was recorded; now for a record without a time a float holds (a replayed
    line edited by hand must not stop every later epoch from reaching the tracker)."""
    wall = finite(record.get("time"))
    return time.time() if wall is None else wall


def epoch_metrics(record: Mapping[str, Any]) -> dict[str, float]:
    # NaN and infinities go to the trackers as the floats they are (a diverged loss is worth
    # seeing there); metrics.jsonl holds them as null (JSON has no NaN), sent as NaN. An integer
    # no float holds (a hand-edited record) cannot be sent at all.
    sent = {k: float(v) for k in TRACKED_METRICS if shown_figure(v := record.get(k)) is not None}
    not_finite = {k: math.nan for k in CORE_METRICS if k in record and record[k] is None}
    return {**not_finite, **sent}


def same_server(recorded: object, uri: str) -> bool:
    """Whether a recorded (redacted) tracking URI names the server `uri` does, whatever the
    spelling: the scheme's and host's case, a trailing slash, the scheme's default port, and
    localhost for 127.0.0.1 (a second tracker run replayed every epoch for a trailing slash)."""
    if not isinstance(recorded, str):
        return False

    def canonical(text: str) -> tuple[str, str, int | None, str]:
        parts = urlsplit(redact_uri(text).strip())
        try:
            port = parts.port
        except ValueError:
            port = None
        host = (parts.hostname or "").lower()
        host = "127.0.0.1" if host in ("localhost", "::1") else host
        port = port or {"http": 80, "https": 443}.get(parts.scheme.lower())
        return parts.scheme.lower(), host, port, parts.path.rstrip("/")

    return canonical(recorded) == canonical(uri)


class _MLflow:
    name = "mlflow"

    def __init__(self, settings: TrainSettings, previous: Mapping[str, Any]) -> None:
        # The client's defaults retry an unreachable server for minutes, on the thread that
        # prints epochs: fail fast instead (unless the user chose otherwise);
        # app/tracking/trackers.py keeps the epochs and retries with backoff.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        # The client prints two emoji lines with the run's address as each run ends; the
        # driver's summary lines name it once instead (`ids["run_url"]`).
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        from mlflow.entities import Param
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        uri = os.environ["MLFLOW_TRACKING_URI"]
        self.client = MlflowClient(tracking_uri=uri)
        run = None
        resumed = previous.get("run_id")
        self.note: str | None = None  # why an earlier driver's run is not continued, if so
        if (
            isinstance(resumed, str)
            and resumed
            and not same_server(previous.get("tracking_uri"), uri)
        ):
            self.note = (
                f"mlflow: this run's tracker run {one_line(resumed, 40)} is on "
                f"{one_line(str(previous.get('tracking_uri')), 200)}, and MLFLOW_TRACKING_URI is "
                f"now {redact_uri(uri)}: a new tracker run there gets every epoch"
            )
        elif isinstance(resumed, str) and resumed:
            try:
                run = self.client.get_run(resumed)
            except MlflowException:
                run = None  # deleted on the server: start a new one
        if run is None:
            experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "trainctl"
            found = self.client.get_experiment_by_name(experiment)
            experiment_id = (
                found.experiment_id if found else self.client.create_experiment(experiment)
            )
            run = self.client.create_run(
                experiment_id,
                run_name=settings.run_name,
                tags={"trainctl.run_dir": str(settings.run_dir)},
            )
            params = [Param(k, v[:6000]) for k, v in flat_params(settings.redacted()).items()]
            self.client.log_batch(run.info.run_id, params=params)
            self.resumed = False
        else:
            self.client.update_run(run.info.run_id, status="RUNNING")
            self.resumed = True
            self.note = self._other_experiment(run.info.experiment_id)
        self.run_id = run.info.run_id
        self.ids = {"run_id": self.run_id, "tracking_uri": redact_uri(uri)}
        if uri.startswith(("http://", "https://")):  # the server's UI, as MLflow prints it
            self.ids["run_url"] = (
                f"{redact_uri(uri).rstrip('/')}/#/experiments/{run.info.experiment_id}"
                f"/runs/{self.run_id}"
            )

    def _other_experiment(self, experiment_id: str) -> str | None:
        """Where a continued run's experiment is not MLFLOW_EXPERIMENT_NAME's: it goes on where
        it began, which was said nowhere (a red-team pass changed the name between reruns)."""
        wanted = os.environ.get("MLFLOW_EXPERIMENT_NAME")
        if not wanted:
            return None
        name = self.client.get_experiment(experiment_id).name
        if name == wanted:
            return None
        return (
            f"mlflow: this run's tracker run goes on in experiment {one_line(name, 200)}, where "
            f"it began; MLFLOW_EXPERIMENT_NAME={one_line(wanted, 200)} applies to new runs"
        )

    def log_epoch(self, record: Mapping[str, Any]) -> None:
        from mlflow.entities import Metric

        stamp, step = int(_wall(record) * 1000), int(record["epoch"])
        metrics = [Metric(k, v, stamp, step) for k, v in epoch_metrics(record).items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def logged_epochs(self) -> set[int]:
        return {m.step for m in self.client.get_metric_history(self.run_id, "val_loss")}

    def finish(self, status: str, best: RunPath | None) -> None:
        if best is not None and best.is_dir():
            with local_copy(best) as folder:
                self.client.log_artifacts(self.run_id, str(folder), "best_checkpoint")
        self.client.set_terminated(self.run_id, STATUS.get(status, "FAILED"))


class _TensorBoard:
    name = "tensorboard"

    def __init__(self, settings: TrainSettings, previous: Mapping[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # The event writer needs a local folder: the run folder's on a volume; in a bucket run
        # (objects cannot be appended to) a local copy, uploaded after every epoch.
        self.target = settings.run_dir / "tensorboard"
        self.local = LocalFolder(self.target, prefix="trainctl-tb-")
        self.folder = self.local.path
        # A rerun adds an event file beside the first one; TensorBoard reads them as one run.
        self.writer = SummaryWriter(log_dir=str(self.folder))
        if not previous:
            text = "\n".join(f"    {k}: {v}" for k, v in flat_params(settings.redacted()).items())
            self.writer.add_text("settings", text, 0)
        self.ids = {"log_dir": str(self.target)}

    def _upload(self) -> None:
        self.local.sync()

    def log_epoch(self, record: Mapping[str, Any]) -> None:
        step, wall = int(record["epoch"]), _wall(record)
        for key, value in epoch_metrics(record).items():
            self.writer.add_scalar(key, value, step, walltime=wall)
        self.writer.flush()
        with (self.folder / LEDGER).open("a") as ledger:
            ledger.write(f"{step}\n")
        self._upload()

    def logged_epochs(self) -> set[int]:
        # Event files are costly to parse back: a one-number-per-line ledger beside them.
        path = self.folder / LEDGER
        text = path.read_text() if path.is_file() else ""
        return {int(line) for line in text.split() if line.isdigit()}

    def finish(self, status: str, best: RunPath | None) -> None:
        if best is not None:
            self.writer.add_text("best_checkpoint", f"{best} ({status})", 0)
        self.writer.close()
        self._upload()


class _WandB:
    name = "wandb"

    def __init__(self, settings: TrainSettings, previous: Mapping[str, Any]) -> None:
        import wandb

        self.wandb = wandb
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or "trainctl",
            name=settings.run_name,
            id=previous.get("run_id") if isinstance(previous.get("run_id"), str) else None,
            resume="allow",
            config=settings.redacted(),
            # W&B's own files need a local folder: the run folder on a volume; in a bucket run
            # none (W&B's default, on the driver's disk).
            dir=local_path(settings.run_dir),
        )
        self.ids = {"run_id": self.run.id, "project": self.run.project}

    def log_epoch(self, record: Mapping[str, Any]) -> None:
        self.run.log({**epoch_metrics(record), "epoch": int(record["epoch"])})

    def logged_epochs(self) -> set[int]:
        # W&B steps only grow: epochs a killed driver missed are not logged afterwards.
        return set(range(int(self.run.summary.get("epoch", 0)) + 1))

    def finish(self, status: str, best: RunPath | None) -> None:
        if best is not None and best.is_dir():
            artifact = self.wandb.Artifact(f"{self.run.name}-best", type="model")
            with local_copy(best) as folder:
                artifact.add_dir(str(folder))
                self.run.log_artifact(artifact)
        self.run.finish(exit_code=0 if status == "succeeded" else 1)


# By the names app/tracking/check.py's configured() gives, in the order it gives them.
CLIENTS: dict[str, type] = {"mlflow": _MLflow, "tensorboard": _TensorBoard, "wandb": _WandB}
