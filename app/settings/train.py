"""TrainSettings: every run setting, composed from the sections beside this module.

Each section (data.py, model.py, scaling.py, run.py, tracking.py) declares its settings and the
checks that concern only them. What spans sections lives here: empty values meaning unset,
locations kept as URIs and made absolute, the storage endpoint applied to every location, and
the checks that compare settings of different sections.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Self

from pydantic import ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from app.redact import redact
from app.settings.data import DataSettings
from app.settings.gate import never_met_by_the_run
from app.settings.model import ChampionRef, ModelSettings, champion_ref
from app.settings.model_names import is_weights_name
from app.settings.run import RunSettings
from app.settings.scaling import ScalingSettings
from app.settings.signing import SigningSettings
from app.settings.stopping import StoppingSettings
from app.settings.tracking import TrackingSettings
from app.settings.tune import TuneSettings
from app.storage.buckets import ObjectPath
from app.storage.location import absolute_location, location_setting, with_endpoint

ENV_PREFIX = "TRAIN_"

# Set while TrainSettings.from_values validates: the values given are all the settings.
_GIVEN_ONLY: ContextVar[bool] = ContextVar("given_only", default=False)


# Fields are listed (trainctl env, docs/settings.md, the chart schema) in the reverse order of
# these bases: data, model, scaling, run folder, tracking, signing, stopping, sweeps.
class TrainSettings(
    TuneSettings,
    StoppingSettings,
    SigningSettings,
    TrackingSettings,
    RunSettings,
    ScalingSettings,
    ModelSettings,
    DataSettings,
    BaseSettings,
):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        protected_namespaces=(),
        validate_default=True,
        # NaN passes no bound with a clear message ("less than or equal to 10"): refused as such.
        allow_inf_nan=False,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        if _GIVEN_ONLY.get():
            return (init_settings,)
        return init_settings, env_settings, dotenv_settings, file_secret_settings

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> Self:
        """The settings `values` hold, held to every rule, reading nothing else: pydantic-
        settings' model_validate fills what `values` lacks from the process environment and
        ./.env (a rendered ConfigMap was checked with the shell's TRAIN_* variables), and reads
        them again on every call (a sweep's space checks each value it lists)."""
        given_only = _GIVEN_ONLY.set(True)
        try:
            return cls.model_validate(dict(values))
        finally:
            _GIVEN_ONLY.reset(given_only)

    # --- checks across sections -------------------------------------------------------------
    @field_validator(
        "accelerator_type", "ray_address", "warm_start", "storage_endpoint", mode="before"
    )
    @classmethod
    def _empty_means_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("storage_path", "data_path", "warm_start", mode="before")
    @classmethod
    def _uri_stays_a_uri(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name != "warm_start" and isinstance(value, str) and not value.strip():
            # Empty is the default folder, as `logs` and `predict` read it; never the current
            # folder, which in a pod is the container's own disk, gone with the pod.
            return cls.model_fields[info.field_name].default
        if info.field_name == "warm_start":
            value = champion_ref(value)  # champion:<model-name> is neither a path nor a URI
            if isinstance(value, ChampionRef):
                return value
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
        # TRAIN_STOP_AT reads only the validation and training losses and accuracy: no setting
        # rules those out.
        compiles = self.compile == "on" or (self.compile == "auto" and self.use_gpu)
        never = never_met_by_the_run(
            self.promote_if, epochs=self.epochs, gpu=self.use_gpu, compiles=compiles
        )
        if never:
            raise ValueError(f"TRAIN_PROMOTE_IF can never be met by this run: {never}")
        if self.verify_key is not None and self.weights is not None and not self.weights_sha256:
            # As a warm start's plain file is refused (app/run/warm_start.py): a run's signed
            # export built on unpinned weights would vouch for whatever a writer of the storage,
            # or of a shared torchvision cache (held to 8 hex digits of its name), put there
            # (a red-team pass, then a review).
            what = (
                "a torchvision weights name, whose cached file is held only to the 8 hex digits "
                "in its name"
                if is_weights_name(self.weights)
                else "a file"
            )
            raise ValueError(
                f"TRAIN_WEIGHTS={self.weights} is {what}, and TRAIN_VERIFY_KEY is set: pretrained "
                "weights are then pinned by TRAIN_WEIGHTS_SHA256 (`sha256sum` of the file, for a "
                "name the one in <torch_home>/hub/checkpoints/), or come from a signed export as "
                "TRAIN_WARM_START"
            )
        if self.amp == "fp16" and not self.use_gpu:
            raise ValueError(
                "TRAIN_AMP=fp16 needs TRAIN_USE_GPU=true; use TRAIN_AMP=bf16 or off on CPU"
            )
        return self

    # --- derived values ---------------------------------------------------------------------
    @property
    def run_dir(self) -> Path | ObjectPath:
        return self.storage_path / self.run_name

    def redacted(self) -> dict[str, Any]:
        """The effective settings as JSON-ready values, with credentials in URLs removed."""
        values = self.model_dump(mode="json")
        return {key: redact(value) for key, value in values.items()}

    @property
    def champion_name(self) -> str:
        return self.model_name or f"{self.dataset}-{self.model}".replace("_", "-")


def env_name(field: str) -> str:
    return f"{ENV_PREFIX}{field.upper()}"
