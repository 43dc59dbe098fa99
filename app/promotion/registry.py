"""The MLflow Model Registry, with MLFLOW_TRACKING_URI set: the export is logged as the run's
`model` artifact; a promoted export becomes a new version of the registered model
TRAIN_MODEL_NAME, and the alias `champion` moves to it. Nothing is registered otherwise.

Only what mlflow-skinny's client offers: log_artifacts, create_registered_model,
create_model_version, set_registered_model_alias (no model flavors, no `mlflow.pytorch`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from app.redact import redact_text
from app.runfolder.folder import mlflow_run_id
from app.storage.location import RunPath, local_copy

ALIAS = "champion"
ARTIFACT_PATH = "model"


def enabled(tracking: Mapping[str, Any]) -> str | None:
    """The MLflow run id the export goes to, None when MLflow is not in use for this run."""
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        return None
    return mlflow_run_id(tracking)


def publish(run_id: str, export_dir: RunPath, model_name: str, promote: bool) -> dict[str, Any]:
    """Log the export to the run; when `promote`, register it and move the alias. The record
    for summary.json's `promotion.registry`."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")  # a deadline on every call
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    with local_copy(export_dir) as folder:
        client.log_artifacts(run_id, str(folder), ARTIFACT_PATH)
    record: dict[str, Any] = {"run_id": run_id, "artifact": ARTIFACT_PATH, "registered": False}
    if not promote:
        return record
    try:
        client.create_registered_model(model_name)
    except MlflowException as err:
        if err.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    source = f"{client.get_run(run_id).info.artifact_uri}/{ARTIFACT_PATH}"
    version = client.create_model_version(model_name, source=source, run_id=run_id)
    client.set_registered_model_alias(model_name, ALIAS, version.version)
    record.update(registered=True, model=model_name, version=int(version.version), alias=ALIAS)
    return record


def describe(err: BaseException) -> str:
    return redact_text(
        f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
    )
