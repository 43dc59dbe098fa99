"""Settings for what a run reports: logs, experiment trackers, and the promotion gate that
decides whether its model becomes the champion."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, field_validator

from app.errors import EXIT_CLUSTER, EXIT_FAILED, EXIT_INVALID, EXIT_WAIT_TIMEOUT
from app.settings.gate import GateSetting
from app.settings.rules import name_or_empty

# Champion names become a file name and an MLflow registered-model name.
_MODEL_NAME = "[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
MODEL_NAME_PATTERN = re.compile(rf"\A{_MODEL_NAME}\Z")
MODEL_NAME_JSON_PATTERN = f"^({_MODEL_NAME})?$"  # the chart's schema; empty: the default name
TRAINCTL_EXITS = (EXIT_FAILED, EXIT_INVALID, EXIT_WAIT_TIMEOUT, EXIT_CLUSTER)  # 1-4


class TrackingSettings(BaseModel):
    log_max_mb: float = Field(
        20.0,
        gt=0,
        le=10240,
        description="Size at which each driver and worker log under <run_dir>/logs/ rotates "
        "(three older files are kept per log).",
    )
    tensorboard: bool = Field(
        False,
        description="Write TensorBoard event files under <run_dir>/tensorboard/ (rank 0). "
        "MLflow and W&B switch on by their own variables: MLFLOW_TRACKING_URI, "
        "WANDB_API_KEY or WANDB_MODE.",
    )

    tracking_required: bool = Field(
        True,
        description="Stop the run (exit 2, before Ray starts) when a configured tracker "
        "(MLFLOW_TRACKING_URI, WANDB_API_KEY or WANDB_MODE, TRAIN_TENSORBOARD) cannot work; "
        "false warns and trains without it.",
    )
    tracking_timeout_s: float = Field(
        5,
        gt=0,
        le=120,
        description="Seconds a tracking server gets to answer the preflight probe (one try, "
        "no retries). Mid-run, a failed tracker call is retried with backoff and its epochs "
        "are kept until delivered.",
    )

    promote_if: GateSetting = Field(
        "beats_champion",
        description="Gate a successful run must pass to become the champion: `beats_champion` "
        "(better than the champion on TRAIN_CHECKPOINT_METRIC), a threshold such as "
        "`val_accuracy>=0.95` (any epoch-record metric; >=, >, <=, <), per-class terms "
        "judged on the run-end evaluation: `min_class_recall>=0.8` (every class; also "
        "precision, f1), `recall[cat]>=0.9` (one class), `class_drop<=0.02` (no class's "
        "recall more than this below the champion's on the same rows), joined by `and`. "
        "Judged on the dataset's held-out test/ split where it has one, else on the "
        "validation data.",
    )
    model_name: str = Field(
        "",
        json_schema_extra={"pattern": MODEL_NAME_JSON_PATTERN},
        description="Name the champion is kept under: <storage_path>/champions/<name>.json "
        "(its files in champions/<name>/) and the MLflow registered model. One task per name: "
        "only a model of the champion's class names, channels and input size replaces it. "
        "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit; empty means "
        "<dataset>-<model> (TRAIN_MODEL's, also for a sweep whose space varies model: set it "
        "there, as check warns).",
    )
    not_promoted_exit: int = Field(
        0,
        ge=0,
        le=125,
        json_schema_extra={"not": {"enum": list(TRAINCTL_EXITS)}},
        description="Exit code of a run that trained but did not pass TRAIN_PROMOTE_IF: 0 (the "
        "run succeeded, the champion stays), or e.g. 5 for pipelines that stop there (1-4 are "
        "taken by trainctl's own failures).",
    )

    @field_validator("model_name")
    @classmethod
    def _model_name_is_safe(cls, value: str) -> str:
        return name_or_empty(
            value, MODEL_NAME_PATTERN,
            "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )  # fmt: skip

    @field_validator("not_promoted_exit")
    @classmethod
    def _exit_is_free(cls, value: int) -> int:
        if value in TRAINCTL_EXITS:
            raise ValueError("1-4 are trainctl's own exit codes; use 0, or 5-125")
        return value
