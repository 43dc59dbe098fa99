"""Ray Train's controller witnesses each checkpoint as rank 0 reports it (app/export/witness.py
says why). Its own module: it imports Ray Train, which the readers of witnesses do not need."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from ray.train import UserCallback

from app.export import signature, witness
from app.runfolder.checkpoints import WITNESSED_METRIC
from app.storage.location import RunPath

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


class Witness(UserCallback):
    """Ray Train's controller signs each checkpoint as rank 0 reports it (see the module)."""

    def __init__(self, run_dir: RunPath, signing_key: Path) -> None:
        self.run_dir, self.signing_key = run_dir, signing_key
        self._key: Ed25519PrivateKey | None = None

    def __getstate__(self) -> dict[str, Any]:
        # The key itself is read on the controller's node (the driver's), never sent.
        return {"run_dir": self.run_dir, "signing_key": self.signing_key}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["run_dir"], state["signing_key"])  # type: ignore[misc]

    def after_report(
        self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any
    ) -> None:
        digest = metrics[0].get(WITNESSED_METRIC) if metrics else None
        if checkpoint is None or not isinstance(digest, str):
            return
        if self._key is None:
            self._key = signature.private_key(self.signing_key)
        witness.write(self.run_dir / PurePosixPath(checkpoint.path).name, digest, self._key)
