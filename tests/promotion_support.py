"""Run folders with real checkpoints for the promotion tests, made without Ray.

A checkpoint here is what the training loop writes (app/runfolder/checkpoints.write_checkpoint): the
state dict of the real model for the data, and meta.json with its metrics. The promotion step
reads nothing else, so these folders stand for finished runs of chosen quality.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from app.data.schema import DatasetInfo

INFO = DatasetInfo(
    channels=1, height=8, width=8, num_classes=10, train_rows=40, valid_rows=20, layout="raw",
    mean=(0.3,), std=(0.25,), image_shape=(8, 8), train_class_counts=(4,) * 10,
    valid_class_counts=(2,) * 10,
)  # fmt: skip
# The same images, another question: a champion of INFO's task must not be replaced by it.
CATS_AND_DOGS = dataclasses.replace(
    INFO, num_classes=2, class_names=("cat", "dog"), train_class_counts=(20, 20),
    valid_class_counts=(10, 10),
)  # fmt: skip


def make_run(
    storage: Path,
    name: str,
    accuracy: float,
    epoch: int = 1,
    seed: int = 0,
    info: Any = INFO,
    loss: float | None = None,
    witness_key: Path | None = None,
) -> Path:
    """<storage>/<name> holding one verified checkpoint of a cnn with `accuracy` (and `loss`,
    default 1 - accuracy), for `info`'s data; more epochs are more calls. `witness_key`: the
    signing key that witnesses it, as a signing run's Ray Train controller does
    (app/export/witness.py)."""
    import torch

    from app.runfolder import checkpoint_names, checkpoints
    from app.training.model import build_model

    torch.manual_seed(seed)
    model = build_model("cnn", info)
    run_dir = storage / name
    folder = run_dir / checkpoint_names.dir_name(epoch)
    digest = checkpoints.write_checkpoint(
        folder,
        model_state=model.state_dict(),
        train_state={"epoch": epoch},
        epoch=epoch,
        metrics={
            "epoch": float(epoch),
            "val_accuracy": accuracy,
            "val_loss": 1 - accuracy if loss is None else loss,
        },
        class_names=info.class_names,
    )
    if witness_key is not None:
        from app.export import signature, witness

        witness.write(folder, digest, signature.private_key(witness_key))
    return run_dir


def settings_for(storage: Path, name: str, **extra: Any) -> Any:
    from app.settings import TrainSettings

    return TrainSettings(
        _env_file=None, dataset="digits", model="cnn", storage_path=storage, run_name=name,
        data_path=storage / "no-data", **extra,
    )  # fmt: skip


def exported_run(storage: Path, name: str = "r", accuracy: float = 0.9) -> Path:
    """<storage>/<name>: a finished run (make_run) with its real export, weights.pt, model.pt2
    and the card, written by the promotion step itself (no Ray)."""
    from app.promotion.step import promote_run

    make_run(storage, name, accuracy)
    promote_run(settings_for(storage, name), INFO, {"status": "succeeded"})
    return storage / name
