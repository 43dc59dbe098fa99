"""Settings for `trainctl tune`: the search space, how many trials, how many at once, and
the scheduler that stops the weak ones early. `trainctl train` ignores them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

MAX_TRIALS = 10_000  # trials per sweep: each is a run folder on the store


class TuneSettings(BaseModel):
    tune_space: Path | None = Field(
        None,
        description="`trainctl tune`: a YAML file mapping settings to one distribution each: "
        "`lr: {loguniform: [1e-4, 1e-1]}`, `weight_decay: {uniform: [0, 0.1]}`, "
        "`model: {choice: [cnn, resnet18]}`, `global_batch_size: {randint: [32, 256]}` or "
        "`{grid: [...]}` (every value, in every combination). Keys are model and optimisation "
        "settings (lower-case names, as in this table); every value is held to the setting's "
        "own rules before Ray starts.",
    )
    tune_samples: int = Field(
        8,
        ge=1,
        le=MAX_TRIALS,
        description="`trainctl tune`: trials drawn from the space (with `grid:` keys, per "
        f"combination of their values); at most {MAX_TRIALS} trials in all, which `check`, `tune` "
        "and `render` hold the combinations times the samples to.",
    )
    tune_concurrent: int = Field(
        0,
        ge=0,
        le=1000,
        description="`trainctl tune`: trials that train at once; 0 runs as many as the Ray "
        "cluster's CPUs (and GPUs) hold, each trial taking TRAIN_NUM_WORKERS x "
        "TRAIN_CPUS_PER_WORKER CPUs (and a GPU per worker with TRAIN_USE_GPU), and as the "
        "head's memory holds (about 1.5 GiB a trial: its driver and Ray Train controller run "
        "there). A number above what the cluster or the head holds is kept, with a warning "
        "(Tune starts the others as trials end).",
    )
    tune_scheduler: Literal["asha", "random", "grid"] = Field(
        "asha",
        description="`trainctl tune`: asha stops trials that fall behind at each rung "
        "(TRAIN_TUNE_GRACE_PERIOD, TRAIN_TUNE_REDUCTION_FACTOR) on TRAIN_CHECKPOINT_METRIC; "
        "random and grid train every trial to TRAIN_EPOCHS (grid: the space's `grid:` and "
        "`choice:` keys in every combination, at least one of them; ranges are drawn per trial "
        "beside them).",
    )
    tune_grace_period: int = Field(
        1,
        ge=1,
        le=100_000,
        description="`trainctl tune` with asha: epochs every trial trains before it can be "
        "stopped.",
    )
    tune_reduction_factor: int = Field(
        4,
        ge=2,
        le=100,
        description="`trainctl tune` with asha: 1 in this many trials goes on at each rung.",
    )

    @field_validator("tune_space", mode="before")
    @classmethod
    def _space_a_local_file_or_unset(cls, value: Any) -> Any:
        if isinstance(value, str) and "://" in value:
            # As a path it would read ./s3:/bucket/...: say what is read instead.
            raise ValueError(
                "must be a local YAML file (the sweep's driver reads it before Ray starts), "
                "not a URI: copy it next to the command, or give the chart's tune.space"
            )
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("tune_space")
    @classmethod
    def _space_absolute(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser().absolute()
