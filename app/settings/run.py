"""Settings for the run folder: where it lives, its name, checkpoints, retention and how
failures and preemptions are survived."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from app.dns import DNS_LABEL
from app.settings.cadence import CheckpointEverySetting
from app.settings.rules import name_or_empty
from app.storage.buckets import ObjectPath
from app.storage.probe import DEFAULT_TIMEOUT_S
from app.storage.uris import check_endpoint

# Folders beside the run folders under storage_path that are not runs: a run of such a name
# would write its records into the champion store.
CHAMPIONS_DIR = "champions"
RESERVED_RUN_NAMES = (CHAMPIONS_DIR,)

# Run names become folder names and, on Kubernetes, RayJob names: keep them to DNS-1123 labels.
# \A and \Z: `$` would also accept a trailing newline, which would end up in a folder name.
RUN_NAME_PATTERN = re.compile(rf"\A{DNS_LABEL}\Z")


class RunSettings(BaseModel):
    storage_path: Path | ObjectPath = Field(
        Path("runs"),
        description="Where run folders and checkpoints go: a shared folder (on Kubernetes, a "
        "path on the ReadWriteMany volume every Ray pod mounts), or s3://bucket/prefix or "
        "gs://bucket/prefix, with credentials from the cloud's own variables or identity.",
    )
    storage_endpoint: str | None = Field(
        None,
        description="S3-compatible endpoint for s3:// paths, e.g. http://minio:9000 (MinIO, "
        "Ceph); empty uses AWS_ENDPOINT_URL, or AWS itself.",
    )
    storage_timeout_s: float = Field(
        DEFAULT_TIMEOUT_S,
        gt=0,
        le=600,
        description="Seconds each check of a bucket (storage, data, warm start, `trainctl "
        "logs`) waits for the store to answer before stopping with exit 2 and the endpoint "
        "that did not answer.",
    )
    run_name: str = Field(
        "",
        description="Run folder under storage_path. The same name resumes the same run; "
        "empty means <dataset>-<model>.",
    )

    @field_validator("run_name")
    @classmethod
    def _run_name_is_dns_label(cls, value: str) -> str:
        if value in RESERVED_RUN_NAMES:
            raise ValueError(
                f"{value!r} is the folder of the champion pointers beside the runs; "
                "choose another name"
            )
        return name_or_empty(
            value, RUN_NAME_PATTERN, "must be 1-63 lowercase letters, digits or '-', starting "
            "and ending with a letter or digit",
        )  # fmt: skip

    max_failures: int = Field(
        3, ge=-1, description="Worker-group failures to recover from; -1 retries forever."
    )
    checkpoints_to_keep: int = Field(2, ge=1, description="Checkpoints kept on storage.")
    checkpoint_metric: Literal["val_accuracy", "val_loss"] = Field(
        "val_accuracy",
        description="Metric that ranks checkpoints when old ones are deleted "
        "(val_accuracy: higher is better, val_loss: lower is better).",
    )

    checkpoint_every: CheckpointEverySetting = Field(
        "epoch",
        description="When to checkpoint: `epoch` (after validation), a step count (`500`: also "
        "every 500 steps) or a duration (`90s`, `10m`, `1h`: also every that long). "
        "Preemption and SIGTERM always get a just-in-time checkpoint.",
    )
    max_preemptions: int = Field(
        -1,
        ge=-1,
        le=1_000_000,
        description="Node preemptions (drained spot nodes) to recover from, counted apart "
        "from TRAIN_MAX_FAILURES; -1 retries forever, 0 stops at the first.",
    )

    @field_validator("storage_endpoint")
    @classmethod
    def _endpoint_is_url(cls, value: str | None) -> str | None:
        return None if value is None else check_endpoint(value)
