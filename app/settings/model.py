"""Settings for the network and its optimisation: architecture, pretrained weights,
fine-tuning, augmentation, precision and compilation."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from app.runfolder.epoch_record import MAX_EPOCHS
from app.settings.data import CacheMode
from app.settings.model_names import check_model, check_weights, known_models
from app.settings.tracking import MODEL_NAME_PATTERN
from app.storage.buckets import ObjectPath

CHAMPION_PREFIX = "champion:"


@dataclass(frozen=True)
class ChampionRef:
    """TRAIN_WARM_START=champion:<model-name>: the champion of that TRAIN_MODEL_NAME under
    TRAIN_STORAGE_PATH (resolved by app/run/warm_start.py)."""

    name: str
    doc_label: ClassVar[str] = "champion:<model-name>"  # its type, as docs/settings.md says

    def __str__(self) -> str:
        return f"{CHAMPION_PREFIX}{self.name}"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.is_instance_schema(
            cls, serialization=core_schema.plain_serializer_function_ser_schema(str)
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> dict[str, Any]:
        return {"type": "string"}


def champion_ref(value: Any) -> Any:
    """`champion:<model-name>` as a ChampionRef (ValueError for a name TRAIN_MODEL_NAME would
    refuse); anything else as it is."""
    if not isinstance(value, str) or not value.strip().startswith(CHAMPION_PREFIX):
        return value
    name = value.strip().removeprefix(CHAMPION_PREFIX)
    if not MODEL_NAME_PATTERN.match(name):
        raise ValueError(
            f"{value!r}: champion:<model-name> names a TRAIN_MODEL_NAME: 1-64 letters, "
            "digits, '.', '_' or '-', starting with a letter or digit"
        )
    return ChampionRef(name)


# The tutorial's three, or any torchvision classifier name (app/settings/model_names.py).
ModelName = str
SEED_MAX = 2**64 - 1  # torch.manual_seed's range


class ModelSettings(BaseModel):
    model: ModelName = Field(
        "resnet18",
        json_schema_extra={"enum": list(known_models())},  # the chart's schema refuses others
        description="Network to train: resnet18, vit, or cnn (the tutorial's; small and fast), "
        "whose stems adapt to the data's channel count and image size, or any torchvision "
        "classifier (resnet50, mobilenet_v3_small, efficientnet_b0, convnext_tiny, vit_b_16, "
        "...), whose head is sized to the data's classes.",
    )
    epochs: int = Field(10, ge=1, le=MAX_EPOCHS, description="Total epochs of the run.")
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
    warm_start: Path | ObjectPath | ChampionRef | None = Field(
        None,
        description="Weights that initialise a new run, local or in a bucket: a run folder "
        "(its best checkpoint), a checkpoint folder or its model.pt, an export folder (its "
        "weights.pt), or champion:<model-name> (the champion under TRAIN_STORAGE_PATH). "
        "Checksums are verified and the task (class names, channels, input size) must be this "
        "run's, before Ray starts. Ignored when the run resumes from its own checkpoints. A "
        "sweep resolves it once and starts every trial from the same weights (a champion "
        "promoted meanwhile changes nothing); every model its space names must fit it.",
    )

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
    weights_sha256: str | None = Field(
        None,
        description="The SHA-256 (64 hex digits) TRAIN_WEIGHTS' file must have, checked by the "
        "driver and every worker on the bytes each loads. Without it a weights name's cached "
        "file is held only to the 8 hex digits torchvision puts in its name (32 bits: a writer "
        "of a shared cache can forge them) and a state-dict file to nothing; a value kept in "
        "your values file or GitOps repository is one a writer of the volume cannot change.",
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
        return check_model(value)

    @field_validator("weights", "torch_home", mode="before")
    @classmethod
    def _weights_empty_means_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("weights")
    @classmethod
    def _weights_name_or_file(cls, value: str | None) -> str | None:
        return None if value is None else check_weights(value)

    @field_validator("weights_sha256", mode="before")
    @classmethod
    def _a_sha256(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if not isinstance(value, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", value.strip()):
            raise ValueError(
                "must be a SHA-256: 64 hex digits, as `sha256sum FILE` prints them "
                f"(got {len(str(value).strip())} characters)"
            )
        return value.strip().lower()

    @field_validator("torch_home")
    @classmethod
    def _torch_home_absolute(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser().absolute()

    @model_validator(mode="after")
    def _one_starting_point(self) -> ModelSettings:
        if self.weights is not None and self.warm_start is not None:
            raise ValueError(
                "TRAIN_WEIGHTS and TRAIN_WARM_START are both set; a run starts from one: "
                "TRAIN_WARM_START for a trainctl checkpoint, TRAIN_WEIGHTS for pretrained weights"
            )
        if self.weights_sha256 is not None and self.weights is None:
            raise ValueError(
                "TRAIN_WEIGHTS_SHA256 is set but TRAIN_WEIGHTS is not: it pins the weights "
                "file TRAIN_WEIGHTS names; set both, or neither"
            )
        return self
