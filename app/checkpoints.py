"""Checkpoint folders: write them, prove them intact, find the newest good one, prune old ones.

A checkpoint folder holds:
- model.pt: the unwrapped model's state dict (loads with torch.load(weights_only=True) on CPU);
- train_state.pt: optimizer and grad-scaler state, epoch and step, to resume exactly;
- meta.json: epoch, metrics and a SHA-256 of each file. It is written last, so a folder without a
  readable meta.json, or whose files no longer match it, is partial or corrupt and is skipped.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

MODEL_FILE = "model.pt"
STATE_FILE = "train_state.pt"
META_FILE = "meta.json"
PREFIX = "checkpoint_epoch_"
CORRUPT_PREFIX = "corrupt_"


@dataclass(frozen=True)
class CheckpointRef:
    path: Path
    epoch: int
    metrics: dict[str, float]


def dir_name(epoch: int) -> str:
    return f"{PREFIX}{epoch:04d}"


def write_checkpoint(
    folder: Path,
    *,
    model_state: dict[str, Any],
    train_state: dict[str, Any],
    epoch: int,
    metrics: dict[str, float],
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(model_state, folder / MODEL_FILE)
    torch.save(train_state, folder / STATE_FILE)
    files = {name: _sha256(folder / name) for name in (MODEL_FILE, STATE_FILE)}
    meta = {"epoch": epoch, "metrics": metrics, "files": files}
    (folder / META_FILE).write_text(json.dumps(meta, indent=2))


def verify(folder: Path) -> CheckpointRef:
    """Return the checkpoint's reference, or raise ValueError saying why it is unusable."""
    meta_path = folder / META_FILE
    if not meta_path.is_file():
        raise ValueError(f"{META_FILE} is missing (the checkpoint was never completed)")
    try:
        meta = json.loads(meta_path.read_text())
        files, epoch = dict(meta["files"]), int(meta["epoch"])
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{META_FILE} is unreadable ({err})") from None
    for name, digest in files.items():
        path = folder / name
        if not path.is_file():
            raise ValueError(f"{name} is missing")
        if _sha256(path) != digest:
            raise ValueError(f"{name} does not match its recorded checksum (truncated or altered)")
    return CheckpointRef(path=folder, epoch=epoch, metrics=dict(meta.get("metrics", {})))


def load_train_state(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model state dict, training state) from a verified checkpoint, on CPU."""
    model_state = torch.load(folder / MODEL_FILE, map_location="cpu", weights_only=True)
    train_state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
    return model_state, train_state


def load_weights(path: Path) -> dict[str, Any]:
    """Model weights for a warm start: a checkpoint folder or a model.pt file."""
    file = path / MODEL_FILE if path.is_dir() else path
    return torch.load(file, map_location="cpu", weights_only=True)


@dataclass(frozen=True)
class Scan:
    good: list[CheckpointRef]  # newest first
    bad: list[tuple[Path, str]]  # (folder, why it is unusable)

    @property
    def latest(self) -> CheckpointRef | None:
        return self.good[0] if self.good else None


def scan(run_dir: Path) -> Scan:
    good, bad = [], []
    folders = sorted(run_dir.glob(f"{PREFIX}*")) if run_dir.is_dir() else []
    for folder in folders:
        try:
            good.append(verify(folder))
        except ValueError as err:
            bad.append((folder, str(err)))
    good.sort(key=lambda ref: ref.epoch, reverse=True)
    return Scan(good=good, bad=bad)


def quarantine(folder: Path) -> Path:
    """Rename an unusable checkpoint so no later run trusts it, keeping it for inspection."""
    target = folder.with_name(CORRUPT_PREFIX + folder.name)
    if target.exists():
        shutil.rmtree(target)
    folder.rename(target)
    return target


def prune(run_dir: Path, *, keep: int, metric: str) -> list[Path]:
    """Delete good checkpoints beyond the `keep` best by `metric`, always keeping the newest."""
    good = scan(run_dir).good
    if len(good) <= keep:
        return []
    higher_is_better = metric != "val_loss"
    default = float("-inf") if higher_is_better else float("inf")
    ranked = sorted(
        good, key=lambda ref: ref.metrics.get(metric, default), reverse=higher_is_better
    )
    survivors = {ref.path for ref in ranked[:keep]} | {good[0].path}
    removed = [ref.path for ref in good if ref.path not in survivors]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
