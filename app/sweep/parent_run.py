"""The sweep's MLflow parent run: one per sweep, each trial's own run its child.

Each trial's driver opens its MLflow run as any run does (app/tracking/clients.py); the sweep
adopts it by setting the `mlflow.parentRunId` tag MLflow's UI nests runs by, after every trial
and again at the end (a rerun adopts what an earlier driver could not). The parent's id is kept
in sweep.json, so a rerun continues the same parent run. MLflow is opt in, as for a run
(MLFLOW_TRACKING_URI); a parent that cannot be written costs a warning, never the sweep: each
trial's figures are in its run folder and its own MLflow run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import click

from app.redact import redact_uri
from app.runfolder.folder import mlflow_run_id
from app.settings import TrainSettings

PARENT_TAG = "mlflow.parentRunId"
STATUS = {"succeeded": "FINISHED", "incomplete": "KILLED", "failed": "FAILED"}


class ParentRun:
    def __init__(self, client: Any = None, run_id: str | None = None, uri: str = "") -> None:
        self.client, self.run_id = client, run_id
        self.ids = {"mlflow": {"run_id": run_id, "tracking_uri": uri}} if run_id else {}
        self.adopted: set[str] = set()

    @classmethod
    def start(cls, settings: TrainSettings, previous: Mapping[str, Any]) -> ParentRun:
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            return cls()
        try:
            before = previous.get("mlflow")
            return cls._start(settings, uri, before if isinstance(before, dict) else {})
        except Exception as err:
            _warn(f"MLflow parent run not started ({type(err).__name__}: {err}); the trials' "
                  "runs are logged without a parent")  # fmt: skip
            return cls()

    @classmethod
    def _start(cls, settings: TrainSettings, uri: str, before: Mapping[str, Any]) -> ParentRun:
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        shown = redact_uri(uri)
        if isinstance(before.get("run_id"), str) and before.get("tracking_uri") == shown:
            try:
                run = client.get_run(before["run_id"])
                client.update_run(run.info.run_id, status="RUNNING")
                return cls(client, run.info.run_id, shown)
            except MlflowException:
                pass  # deleted on the server: a new parent
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "trainctl"
        found = client.get_experiment_by_name(name)
        experiment = found.experiment_id if found else client.create_experiment(name)
        run = client.create_run(
            experiment,
            run_name=settings.run_name,
            tags={"trainctl.sweep_dir": str(settings.run_dir), "trainctl.kind": "sweep"},
        )
        for key, value in {
            "tune_scheduler": settings.tune_scheduler,
            "tune_samples": str(settings.tune_samples),
            "checkpoint_metric": settings.checkpoint_metric,
            "epochs": str(settings.epochs),
        }.items():
            client.log_param(run.info.run_id, key, value)
        return cls(client, run.info.run_id, shown)

    def adopt(self, rows: list[dict[str, Any]]) -> None:
        """Tag every trial's MLflow run as this run's child (once per trial and driver)."""
        if self.client is None:
            return
        for row in rows:
            child = mlflow_run_id(row["tracking"])
            if not child or child in self.adopted:
                continue
            try:
                self.client.set_tag(child, PARENT_TAG, self.run_id)
                if row.get("status") == "stopped":  # its driver was stopped by the scheduler
                    self.client.set_terminated(child, "KILLED")
            except Exception as err:
                _warn(f"MLflow: {row['trial']} not adopted ({type(err).__name__}: {err})")
                continue
            if row.get("status") in ("succeeded", "stopped", "failed"):
                self.adopted.add(child)

    def finish(self, status: str, record: Mapping[str, Any] | None) -> None:
        if self.client is None:
            return
        try:
            best = (record or {}).get("best") or {}
            if best.get("best") is not None:
                self.client.log_metric(self.run_id, f"best_{record['metric']}", best["best"])
                self.client.set_tag(self.run_id, "trainctl.best_trial", best["trial"])
            if record is not None:
                self.client.log_text(self.run_id, json.dumps(record, indent=2), "sweep.json")
            self.client.set_terminated(self.run_id, STATUS.get(status, "FAILED"))
        except Exception as err:
            _warn(f"MLflow parent run not closed ({type(err).__name__}: {err})")


def _warn(text: str) -> None:
    click.echo(f"trainctl: warning: {text}", err=True)
