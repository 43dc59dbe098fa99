"""Signed exports: the key a run signs its model card with, and the key readers check it with
(app/export/signature.py says why a checksum in the same storage is not enough)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator


class SigningSettings(BaseModel):
    signing_key: Path | None = Field(
        None,
        description="Ed25519 private key, a PEM file (`openssl genpkey -algorithm ed25519`), "
        "that signs each export's model card when a run ends (model_card.sig, also in the "
        "champion's copy) and witnesses each checkpoint the run's workers report "
        "(witness.sig): a checkpoint without one is set aside, never resumed from or signed. "
        "Mount it from a Secret only training jobs read.",
    )
    verify_key: Path | None = Field(
        None,
        description="Ed25519 public key, a PEM file: predict, evaluate, warm starts and the "
        "champion comparison load only exports whose model card it verifies, so an export or "
        "champion forged by a writer of the storage is refused. A training run that sets it "
        "signs with the matching TRAIN_SIGNING_KEY, and starts only from what is vouched for: "
        "a signed export (TRAIN_WARM_START), or TRAIN_WEIGHTS (a file or a weights name) "
        "pinned by TRAIN_WEIGHTS_SHA256.",
    )

    @field_validator("signing_key", "verify_key", mode="before")
    @classmethod
    def _key_unset_when_empty(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("signing_key", "verify_key")
    @classmethod
    def _key_path_absolute(cls, value: Path | None) -> Path | None:
        # The driver and `check` may run in other folders than the one it was given in.
        return value.expanduser().absolute() if value is not None else None
