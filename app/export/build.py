"""Export a run's best checkpoint as a self-contained artifact, with its model card.

`<run>/export/weights.pt` is the checkpoint's state dict, what trainctl itself loads (predict,
warm starts: with weights_only, into the model its code builds from the card). Beside it
`model.pt2` is a `torch.export` program for model servers (a dynamic batch dimension, float32
NCHW input, normalized as the card says); where torch.export cannot trace the model there is
no program and the card records why (no TorchScript fallback: loading one runs the code it
carries; app/export/card.py). The files are made in memory (never in a temporary folder: see
`_save`) and then put through app/storage (a rename on a volume, one PUT per object in a
bucket), the card last: a reader finds the old card, or a new card whose checksums match the
files beside it. The bytes written are returned too: promotion copies exactly these into the
champion's immutable folder (app/promotion/champion_export.py), never what another driver may
have written since.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from app.data.schema import DatasetInfo
from app.errors import ConfigError
from app.export import signature
from app.export.card import (
    CARD_FILE,
    EXPORT_DIR,
    EXPORTED_PROGRAM,
    FORMATS,
    WEIGHTS_FILE,
    card_json,
    read_card,
)
from app.redact import redact
from app.runfolder import checkpoints
from app.settings import TrainSettings
from app.storage.location import RunPath, write_atomic
from app.storage.reading import file_stamp, walk_files

MAX_BATCH = 65_536  # the exported program's dynamic batch dimension: 1..MAX_BATCH
MAX_LISTED_FILES = 2_000  # beyond this the fingerprint keeps only the hash of the full list
VERSIONED = ("trainctl", "torch", "torchvision", "ray")


def class_names(info: DatasetInfo) -> list[str]:
    return list(info.label_names())


@dataclass(frozen=True)
class Export:
    """What export_best wrote: the card, its bytes and sha256, and every file's bytes."""

    card: dict[str, Any]
    card_bytes: bytes
    card_sha256: str
    files: dict[str, bytes]  # the model file and weights.pt, by name (the card not included)
    signature: bytes = b""  # model_card.sig's, where TRAIN_SIGNING_KEY signed the card


def export_best(
    settings: TrainSettings, info: DatasetInfo, best: checkpoints.CheckpointRef
) -> Export:
    """Write <run>/export/ from the verified checkpoint `best`."""
    import torch

    from app.training.model import build_model

    model = build_model(settings.model, info, settings.vit_patch)
    model_state, _ = checkpoints.load_train_state(best.path, best.files)  # as verified
    model.load_state_dict(model_state)
    model.eval()
    example = torch.zeros(2, info.channels, info.height, info.width)
    weights = io.BytesIO()
    torch.save(model.state_dict(), weights)
    program, program_bytes, fallback = _save(model, example)
    files = {WEIGHTS_FILE: weights.getvalue()}
    if program is not None:
        files[program] = program_bytes
    digests = {file: hashlib.sha256(data).hexdigest() for file, data in files.items()}
    card = build_card(settings, info, best, program or WEIGHTS_FILE, digests, fallback)
    key = signature.private_key(settings.signing_key) if settings.signing_key else None
    if key is not None:
        card["signed_by"] = {"algorithm": signature.ALGORITHM,
                             "key_id": signature.key_id(key.public_key())}  # fmt: skip
    folder = settings.run_dir / EXPORT_DIR
    root = settings.run_dir  # neither export/ nor a file in it is written through a link
    for file, data in files.items():
        write_atomic(folder / file, data, root)
    text = card_json(card)
    signed = signature.sign(text, key) if key is not None else b""
    if signed:
        write_atomic(folder / signature.SIGNATURE_FILE, signed, root)
    write_atomic(folder / CARD_FILE, text, root)  # last: it vouches for the rest
    return Export(card, text, hashlib.sha256(text).hexdigest(), files, signed)


def _save(model: Any, example: Any) -> tuple[str | None, bytes, str | None]:
    """(the program's file name, its bytes, None), or (None, b"", why torch.export could not
    trace the model). Saved to memory, not to a temporary folder: torch's archive writer
    aborts the whole process (a C++ `terminate`) when a write of its file fails, as on a full
    disk."""
    import torch

    try:
        batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
        program = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
        saved = io.BytesIO()
        torch.export.save(program, saved)
        return EXPORTED_PROGRAM, saved.getvalue(), None
    except Exception as err:  # any tracing failure: the export is then the weights alone
        return None, b"", f"torch.export failed ({type(err).__name__}: {str(err).strip()[:500]})"


def build_card(
    settings: TrainSettings,
    info: DatasetInfo,
    best: checkpoints.CheckpointRef,
    file: str,
    digests: dict[str, str],
    fallback: str | None,
) -> dict[str, Any]:
    """The card; `digests`: the sha256 of each file beside it (`file`, the one a model server
    loads, and weights.pt)."""
    # Every path and setting through the one redaction rule: the card travels with the model.
    return redact(
        {
            "model_name": settings.champion_name,
            "run_name": settings.run_name,
            "run_dir": str(settings.run_dir),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "format": FORMATS[file],
            "fallback_reason": fallback,
            "file": file,
            "files": digests,
            "weights": WEIGHTS_FILE,
            "architecture": settings.model,
            "vit_patch": settings.vit_patch,
            "class_names": class_names(info),
            "input": {
                "channels": info.channels,
                "height": info.height,
                "width": info.width,
                "dtype": "float32",
                "layout": "NCHW",
                "scale": "pixel / 255",
                # What training did to a file of an image folder (and `trainctl predict` does):
                # a model server must do the same for the card's metrics to hold.
                "resize": "shorter side to the input size, center crop, bilinear",
                "color": "RGB (every mode converted)" if info.channels == 3 else "as stored",
                "mean": list(info.mean),
                "std": list(info.std),
            },
            "checkpoint": _checkpoint(best),
            "data": _trained_on(settings, info, best),
            "settings": settings.redacted(),
            "versions": versions(),
        }
    )


def _checkpoint(best: checkpoints.CheckpointRef) -> dict[str, Any]:
    return {"path": str(best.path), "epoch": best.epoch, "metrics": best.metrics}


def _trained_on(
    settings: TrainSettings, info: DatasetInfo, best: checkpoints.CheckpointRef
) -> dict[str, Any]:
    """The fingerprint of the data `best` was trained on. A rerun that trains nothing exports
    the same checkpoint again: the fingerprint its first export took, as it was trained, is
    kept (an evaluation then tells files changed since, rather than calling today's files the
    ones trained on); otherwise today's."""
    try:
        earlier = read_card(settings.run_dir / EXPORT_DIR, settings.run_dir)
    except ConfigError:  # none yet, or one that does not read: today's files
        return data_fingerprint(info)
    same = json.dumps(earlier.get("checkpoint"), sort_keys=True) == json.dumps(
        redact(_checkpoint(best)), sort_keys=True
    )
    data = earlier.get("data")
    return data if same and isinstance(data, dict) else data_fingerprint(info)


def data_fingerprint(info: DatasetInfo) -> dict[str, Any]:
    """The training and validation files, with sizes, and sha256s over that list: a rerun on
    changed data gets another fingerprint without anyone reading the data again.
    `files_sha256` covers names and sizes; `stamps_sha256` their modification times too, so
    that a file written again to the same size is a change (a red-team pass: `--split valid`
    then replaced the run's own record with figures of other images)."""
    root = info.path
    listed: list[tuple[str, int, int]] = []
    for split in ("train", "valid"):
        if root is None:
            break
        folder = root / split
        for path in sorted(walk_files(folder), key=str) if folder.is_dir() else []:
            listed.append((f"{split}/{_relative(path, folder)}", *file_stamp(path)))
    names = "\n".join(f"{p}\t{s}" for p, s, _ in listed)
    stamps = "\n".join(f"{p}\t{s}\t{m}" for p, s, m in listed)
    return {
        "path": "" if root is None else str(root),
        "train_rows": info.train_rows,
        "valid_rows": info.valid_rows,
        "files_sha256": hashlib.sha256(names.encode()).hexdigest(),
        "stamps_sha256": hashlib.sha256(stamps.encode()).hexdigest(),
        "file_count": len(listed),
        "files": [{"path": p, "bytes": s} for p, s, _ in listed[:MAX_LISTED_FILES]],
    }


def _relative(path: RunPath, folder: RunPath) -> str:
    return str(path.relative_to(folder))  # type: ignore[arg-type]


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found
