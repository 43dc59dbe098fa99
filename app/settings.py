"""Every run setting, declared once.

`trainctl train` reads these from `TRAIN_*` environment variables (and a `.env` file in the
working directory). The env listing (`trainctl env`), docs/settings.md, the Helm chart's
ConfigMap and the rendered manifests all derive from this one class, so a setting is added
here and nowhere else.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.data.image_size import IMAGE_SIZE_MAX, IMAGE_SIZE_MIN, IMAGE_SIZE_RULE
from app.dns import DNS_LABEL
from app.redact import redact
from app.run.cadence import CheckpointEverySetting
from app.storage.buckets import ObjectPath
from app.storage.location import absolute_location, location_setting, with_endpoint
from app.storage.probe import DEFAULT_TIMEOUT_S
from app.storage.uris import check_endpoint

ENV_PREFIX = "TRAIN_"
NAMED_DATASETS = ("digits", "synthetic", "mnist", "fashion_mnist", "cifar10")
DatasetName = Literal[
    "digits", "synthetic", "mnist", "fashion_mnist", "cifar10", "parquet", "folder"
]
# The tutorial's three, or any torchvision classifier name (checked by _model_is_known).
ModelName = str
CacheMode = Literal["auto", "on", "off"]

# Run names become folder names and, on Kubernetes, RayJob names: keep them to DNS-1123 labels.
# \A and \Z: `$` would also accept a trailing newline, which would end up in a folder name.
RUN_NAME_PATTERN = re.compile(rf"\A{DNS_LABEL}\Z")
SEED_MAX = 2**64 - 1  # torch.manual_seed's range
# ASCII digits only: Python's \d also takes other scripts' digits, which int() then reads.
WORKERS_PATTERN = re.compile(r"\A\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?\Z")
MAX_WORKERS = 10_000
# Champion names become a file name and an MLflow registered-model name.
MODEL_NAME_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


class WorkerRange(NamedTuple):
    """How many training workers to run: fixed when min == max, elastic otherwise."""

    min: int
    max: int

    @property
    def elastic(self) -> bool:
        return self.min != self.max


class TrainSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        protected_namespaces=(),
        validate_default=True,
    )

    # --- data ---------------------------------------------------------------------------
    dataset: DatasetName = Field(
        "digits",
        description="What to train on: a built-in dataset (digits, synthetic, mnist, "
        "fashion_mnist, cifar10), `parquet` for your own train/ and valid/ folders of Parquet "
        "files, or `folder` for train/<class>/* and valid/<class>/* image files.",
    )
    data_path: Path | ObjectPath = Field(
        Path("data"),
        description="Where the data lives: a folder, or s3://bucket/prefix or gs://bucket/prefix. "
        "A built-in dataset is kept in <data_path>/<dataset>/ and prepared there on first use; "
        "for `parquet` and `folder` this folder holds train/ and valid/.",
    )

    cache_dataset: CacheMode = Field(
        "auto",
        description="Keep the decoded dataset in Ray's object store after the first epoch "
        "reads it, so later epochs skip Parquet: auto when train + valid take at most half "
        "of the object-store memory, on always, off to stream from the files every epoch.",
    )

    # --- model and optimisation ---------------------------------------------------------
    model: ModelName = Field(
        "resnet18",
        json_schema_extra={"pattern": r"^[a-z][a-z0-9_]*$"},  # the chart's schema; names: below
        description="Network to train: resnet18, vit, or cnn (the tutorial's; small and fast), "
        "whose stems adapt to the data's channel count and image size, or any torchvision "
        "classifier (resnet50, mobilenet_v3_small, efficientnet_b0, convnext_tiny, vit_b_16, "
        "...), whose head is sized to the data's classes.",
    )
    epochs: int = Field(10, ge=1, le=100_000, description="Total epochs of the run.")
    global_batch_size: int = Field(
        128,
        ge=1,
        le=2**24,
        description="Samples per optimizer step across all workers; each worker gets "
        "global_batch_size / workers.",
    )
    lr: float = Field(1e-3, gt=0, le=10, description="Peak learning rate (AdamW, cosine decay).")
    weight_decay: float = Field(0.01, ge=0, le=1, description="AdamW weight decay.")
    seed: int = Field(
        0, ge=0, le=SEED_MAX, description="Seed for weights, shuffling and synthetic data."
    )
    amp: Literal["auto", "off", "bf16", "fp16"] = Field(
        "auto",
        description="Mixed precision: off, bf16 (CPU or GPU) or fp16 (GPU only); auto is bf16 "
        "on GPUs that support it and off on CPU.",
    )
    compile: CacheMode = Field(
        "auto",
        description="Run the model through torch.compile: auto is on for GPU workers and off "
        "on CPU; a compilation failure is reported in one line and the run trains uncompiled.",
    )
    vit_patch: int = Field(
        0,
        ge=0,
        le=1024,
        description="ViT patch size in pixels; 0 picks the largest of 16, 8, 4, 2 that leaves "
        "a grid of at least 7x7 patches (28px: 4, 32px: 4, 64px: 8, 224px: 16).",
    )
    warm_start: Path | ObjectPath | None = Field(
        None,
        description="Checkpoint folder (or its model.pt), local or in a bucket, whose weights "
        "initialise a new run. Ignored when the run resumes from its own checkpoints.",
    )

    # --- scaling --------------------------------------------------------------------------
    num_workers: str = Field(
        "2",
        description="Training workers: a count such as `4`, or `MIN-MAX` such as `2-8` for "
        "elastic training that grows and shrinks with the cluster.",
    )
    use_gpu: bool = Field(False, description="Give each worker one GPU and train with NCCL.")
    cpus_per_worker: float = Field(1.0, gt=0, le=512, description="CPUs reserved per worker.")
    accelerator_type: str | None = Field(
        None,
        description="Ray accelerator type to pin workers to, e.g. A100 or L4 "
        "(matches Ray's `accelerator_type:<name>` node resource).",
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster to join, e.g. `auto` or ray://host:10001. Empty starts a "
        "local cluster unless RAY_ADDRESS is set (as it is inside a RayJob).",
    )
    capacity_wait_s: float = Field(
        10,
        ge=0,
        le=3600,
        description="Seconds to let a joined cluster's nodes come up before a request it "
        "cannot hold (workers, GPUs, accelerator type) is refused with exit 2.",
    )

    ray_connect_timeout: float = Field(
        60,
        gt=0,
        le=3600,
        description="Seconds to wait for the Ray cluster at TRAIN_RAY_ADDRESS (or RAY_ADDRESS) "
        "to answer before giving up with exit 2; retries are announced every 5 s.",
    )

    # --- run folder, checkpoints, fault tolerance ----------------------------------------
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
    max_failures: int = Field(
        3, ge=-1, description="Worker-group failures to recover from; -1 retries forever."
    )
    checkpoints_to_keep: int = Field(2, ge=1, description="Checkpoints kept on storage.")
    checkpoint_metric: Literal["val_accuracy", "val_loss"] = Field(
        "val_accuracy",
        description="Metric that ranks checkpoints when old ones are deleted "
        "(val_accuracy: higher is better, val_loss: lower is better).",
    )

    # --- observability --------------------------------------------------------------------
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

    # --- image folders ---
    image_size: int = Field(
        0,
        ge=0,
        le=IMAGE_SIZE_MAX,
        description="Side in pixels that TRAIN_DATASET=folder images are resized (shorter side) "
        f"and center-cropped to; 0 picks it from the model: {IMAGE_SIZE_RULE}. "
        f"Otherwise {IMAGE_SIZE_MIN}..{IMAGE_SIZE_MAX}.",
    )

    @field_validator("image_size")
    @classmethod
    def _image_size_bounded(cls, value: int) -> int:
        if value and value < IMAGE_SIZE_MIN:
            raise ValueError(f"must be 0 (from the model) or {IMAGE_SIZE_MIN}..{IMAGE_SIZE_MAX}")
        return value

    # --- model zoo, pretrained weights, fine-tuning, augmentation (issue 26) ---
    weights: str | None = Field(
        None,
        description="Pretrained weights for TRAIN_MODEL: a torchvision weights name such as "
        "ResNet50_Weights.IMAGENET1K_V2 (or DEFAULT, the model's default weights), or a state-"
        "dict file, local or in a bucket; the head is kept only where its shape fits the data's "
        "classes. With a weights name, mean and std follow the weights' own transforms.",
    )
    torch_home: Path | None = Field(
        None,
        description="torchvision's download cache (TORCH_HOME) for TRAIN_WEIGHTS names, seen by "
        "the driver and every worker; empty uses TORCH_HOME or ~/.cache/torch. Without "
        "internet, place the weights file in <torch_home>/hub/checkpoints/.",
    )
    freeze: Literal["none", "backbone"] = Field(
        "none",
        description="backbone trains only the classifier head: every other parameter is frozen "
        "(and its BatchNorm statistics too); none trains everything.",
    )
    backbone_lr_scale: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Learning-rate multiplier for every parameter but the head's (the usual "
        "fine-tuning recipe is 0.1); 1 trains all at TRAIN_LR.",
    )
    augment: Literal["auto", "none", "crop_flip", "crop"] = Field(
        "auto",
        description="Training-batch augmentation on the device: crop (random crop with padding "
        "up to 64px, random resized crop above), crop_flip (also horizontal flips); auto is "
        "crop for the digit datasets (digits, mnist), where a flip changes the class, and "
        "crop_flip otherwise. Validation is never augmented.",
    )

    @field_validator("model")
    @classmethod
    def _model_is_known(cls, value: str) -> str:
        from app.training.zoo import TUTORIAL_MODELS, is_zoo, known_models

        if value in TUTORIAL_MODELS or is_zoo(value):
            return value
        from app.errors import did_you_mean

        hint = did_you_mean(value, known_models(), "`trainctl env` describes TRAIN_MODEL")
        raise ValueError(f"must be cnn, resnet18, vit or a torchvision classifier name{hint}")

    @field_validator("weights", "torch_home", mode="before")
    @classmethod
    def _weights_empty_means_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("weights")
    @classmethod
    def _weights_name_or_file(cls, value: str | None) -> str | None:
        from app.training.weights import check_weights_setting

        return None if value is None else check_weights_setting(value)

    @field_validator("torch_home")
    @classmethod
    def _torch_home_absolute(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser().absolute()

    @model_validator(mode="after")
    def _one_starting_point(self) -> TrainSettings:
        if self.weights is not None and self.warm_start is not None:
            raise ValueError(
                "TRAIN_WEIGHTS and TRAIN_WARM_START are both set; a run starts from one: "
                "TRAIN_WARM_START for a trainctl checkpoint, TRAIN_WEIGHTS for pretrained weights"
            )
        return self

    # --- promotion (issue 27) -------------------------------------------------------------
    promote_if: str = Field(
        "beats_champion",
        description="Gate a successful run must pass to become the champion: `beats_champion` "
        "(better than the champion on TRAIN_CHECKPOINT_METRIC), a threshold such as "
        "`val_accuracy>=0.95` (any epoch-record metric; >=, >, <=, <), or both joined by `and`.",
    )
    model_name: str = Field(
        "",
        description="Name the champion is kept under: <storage_path>/champions/<name>.json and "
        "the MLflow registered model. 1-64 letters, digits, '.', '_' or '-', starting with a "
        "letter or digit; empty means <dataset>-<model>.",
    )
    not_promoted_exit: int = Field(
        0,
        ge=0,
        le=125,
        description="Exit code of a run that trained but did not pass TRAIN_PROMOTE_IF: 0 (the "
        "run succeeded, the champion stays), or e.g. 5 for pipelines that stop there (1-4 are "
        "taken by trainctl's own failures).",
    )

    @field_validator("promote_if")
    @classmethod
    def _gate_parses(cls, value: str) -> str:
        from app.promotion.gate import parse_gate

        return str(parse_gate(value))  # canonical text: the summary and the docs show this

    @field_validator("model_name")
    @classmethod
    def _model_name_is_safe(cls, value: str) -> str:
        if value and not MODEL_NAME_PATTERN.match(value):
            raise ValueError(
                "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        return value

    @field_validator("not_promoted_exit")
    @classmethod
    def _exit_is_free(cls, value: int) -> int:
        if value in (1, 2, 3, 4):
            raise ValueError("1-4 are trainctl's own exit codes; use 0, or 5-125")
        return value

    @property
    def gate(self) -> Any:
        """TRAIN_PROMOTE_IF as an app.promotion.gate.Gate (validated above)."""
        from app.promotion.gate import parse_gate

        return parse_gate(self.promote_if)

    @property
    def champion_name(self) -> str:
        return self.model_name or f"{self.dataset}-{self.model}".replace("_", "-")

    # --- preemption (issue 25) ---
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

    # --- validators, next to what they check ----------------------------------------------
    @field_validator("num_workers")
    @classmethod
    def _workers_is_count_or_range(cls, value: str) -> str:
        match = WORKERS_PATTERN.match(value)
        if not match:
            raise ValueError("must be a whole number such as 4, or MIN-MAX such as 2-8")
        low = int(match.group(1))
        high = int(match.group(2) or low)
        if low < 1 or high < low:
            raise ValueError("needs 1 <= MIN <= MAX")
        if high > MAX_WORKERS:
            raise ValueError(f"at most {MAX_WORKERS} workers")
        return f"{low}" if low == high else f"{low}-{high}"

    @field_validator("run_name")
    @classmethod
    def _run_name_is_dns_label(cls, value: str) -> str:
        if value and not RUN_NAME_PATTERN.match(value):
            raise ValueError(
                "must be 1-63 lowercase letters, digits or '-', starting and ending "
                "with a letter or digit"
            )
        return value

    @field_validator(
        "accelerator_type", "ray_address", "warm_start", "storage_endpoint", mode="before"
    )
    @classmethod
    def _empty_means_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("storage_endpoint")
    @classmethod
    def _endpoint_is_url(cls, value: str | None) -> str | None:
        return None if value is None else check_endpoint(value)

    @field_validator("storage_path", "data_path", "warm_start", mode="before")
    @classmethod
    def _uri_stays_a_uri(cls, value: Any) -> Any:
        return location_setting(value)

    @field_validator("storage_path", "data_path", "warm_start")
    @classmethod
    def _absolute(cls, value: Path | ObjectPath | None) -> Path | ObjectPath | None:
        # Ray requires an absolute storage path, and workers may start in other folders.
        return absolute_location(value)

    @model_validator(mode="after")
    def _consistent(self) -> TrainSettings:
        for name in ("storage_path", "data_path", "warm_start"):
            setattr(self, name, with_endpoint(getattr(self, name), self.storage_endpoint))
        if not self.run_name:
            self.run_name = f"{self.dataset}-{self.model}".replace("_", "-")
        if self.global_batch_size < self.workers.max:
            raise ValueError(
                f"TRAIN_GLOBAL_BATCH_SIZE={self.global_batch_size} is smaller than the "
                f"{self.workers.max} workers of TRAIN_NUM_WORKERS={self.num_workers}; "
                "every worker needs at least one sample per step"
            )
        if self.amp == "fp16" and not self.use_gpu:
            raise ValueError(
                "TRAIN_AMP=fp16 needs TRAIN_USE_GPU=true; use TRAIN_AMP=bf16 or off on CPU"
            )
        return self

    # --- derived values --------------------------------------------------------------------
    @property
    def workers(self) -> WorkerRange:
        low, _, high = self.num_workers.partition("-")
        return WorkerRange(int(low), int(high or low))

    @property
    def run_dir(self) -> Path | ObjectPath:
        return self.storage_path / self.run_name

    @property
    def dataset_dir(self) -> Path | ObjectPath:
        """Folder holding train/ and valid/ for this run's dataset."""
        if self.dataset in ("parquet", "folder"):
            return self.data_path
        return self.data_path / self.dataset

    def redacted(self) -> dict[str, Any]:
        """The effective settings as JSON-ready values, with credentials in URLs removed."""
        values = self.model_dump(mode="json")
        return {key: redact(value) for key, value in values.items()}


def env_name(field: str) -> str:
    return f"{ENV_PREFIX}{field.upper()}"
