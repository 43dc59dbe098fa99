"""Witnessed checkpoints: a run that signs its exports signs only weights its own workers wrote.

A checkpoint's meta.json digest proves its files belong together, not who wrote them: whoever
can write the storage can put a checkpoint of their own training into a run folder (with an
epoch past TRAIN_EPOCHS, the run finds nothing left to train), and the run would rank it best,
export it and sign the card with TRAIN_SIGNING_KEY, vouching for weights it never trained.

So rank 0 reports the digest of the meta.json it wrote through Ray (the report's
`meta_sha256`, app/training/checkpoint_report.py), not through the storage, and Ray Train's
controller (on the driver's node, where the signing key is mounted) signs it, with the run
folder and the checkpoint's name, as the checkpoint is reported: `witness.sig` in the
checkpoint's folder (app/export/witness_callback.py). Where TRAIN_SIGNING_KEY is set, a
checkpoint without a witness that verifies is set aside before it can resume, rank or be
exported, like a corrupt one, with the reason. What is exported is loaded against the very
digests the witness signed (CheckpointRef.files, read with `meta_sha256`).

What a witness cannot tell: a checkpoint Ray committed in the moment before its driver was
killed, before the controller signed it. It is set aside too, and the run resumes from the
one before it. (After SIGTERM the driver waits for the witness of its just-in-time checkpoint,
app/run/signals.py `await_witness`; SIGKILL leaves no time.)
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from app.export import signature
from app.formatting import one_line
from app.runfolder.checkpoints import CheckpointRef, set_aside
from app.storage import bounded_json, safe_fs
from app.storage.location import RunPath, write_atomic
from app.storage.reading import read_bounded

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

WITNESS_FILE = "witness.sig"
PURPOSE = "trainctl checkpoint witness"  # what the signed bytes are: never a model card


def message(run_dir: RunPath, name: str, meta_sha256: str) -> bytes:
    """The bytes a witness signs: this run, this checkpoint, this meta.json."""
    record = {"purpose": PURPOSE, "run": run_identity(run_dir), "checkpoint": name,
              "meta_sha256": meta_sha256}  # fmt: skip
    return json.dumps(record, sort_keys=True).encode()


def run_identity(run_dir: RunPath) -> str:
    """The run a witness names: its folder's name (TRAIN_RUN_NAME), and a sweep's trial by its
    sweep too (every sweep has a trial-0001). Not the whole path: a volume mounted elsewhere,
    or a bucket named with another endpoint, holds the same run, and the driver and Ray's
    controller spell a bucket's paths each their own way."""
    from app.runfolder.folder import TRIALS_DIR

    if run_dir.parent.name == TRIALS_DIR:
        return f"{run_dir.parent.parent.name}/{TRIALS_DIR}/{run_dir.name}"
    return run_dir.name


def write(folder: RunPath, meta_sha256: str, key: Ed25519PrivateKey) -> None:
    """Sign the checkpoint `folder` as holding the meta.json of digest `meta_sha256`."""
    signed = key.sign(message(folder.parent, folder.name, meta_sha256))
    record = {
        "algorithm": signature.ALGORITHM,
        "key_id": signature.key_id(key.public_key()),
        "signature": base64.b64encode(signed).decode(),
    }
    write_atomic(folder / WITNESS_FILE, (json.dumps(record) + "\n").encode(), folder.parent)


def problem(ref: CheckpointRef, key: Ed25519PublicKey) -> str | None:
    """Why the checkpoint `ref` is not one this run's workers wrote, as far as its witness
    tells; None when the witness verifies over the meta.json `ref` was read from."""
    from cryptography.exceptions import InvalidSignature

    folder = ref.path
    try:
        text = read_bounded(folder / WITNESS_FILE, folder.parent, signature.MAX_SIGNATURE_BYTES)
        record = bounded_json.loads(text.decode("utf-8"), signature.MAX_SIGNATURE_BYTES)
        signed = base64.b64decode(str(record["signature"]), validate=True)
    except FileNotFoundError:
        return (
            f"no {WITNESS_FILE}: this run's training did not report it (written by another "
            "hand, or committed as its driver was killed), and TRAIN_SIGNING_KEY signs only "
            "what it trained"
        )
    except safe_fs.LinkRefused:
        return f"{WITNESS_FILE} is a link"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        return f"{WITNESS_FILE} is unreadable ({one_line(str(err), 200)})"
    try:
        key.verify(signed, message(folder.parent, folder.name, ref.meta_sha256))
    except InvalidSignature:
        return (
            f"{WITNESS_FILE} does not verify over its meta.json: the checkpoint was replaced or "
            "copied from another run, or witnessed by another key"
        )
    return None


def unwitnessed(
    refs: list[CheckpointRef], signing_key: Path | None
) -> list[tuple[CheckpointRef, str]]:
    """The checkpoints of `refs` a run with `signing_key` may not use, each with why. Without a
    signing key none: every checkpoint is usable as its checksums say."""
    if signing_key is None:
        return []
    key = signature.private_key(signing_key).public_key()
    found = ((ref, problem(ref, key)) for ref in refs)
    return [(ref, why) for ref, why in found if why is not None]


def verified_only(refs: list[CheckpointRef], signing_key: Path | None) -> list[CheckpointRef]:
    """`refs` less the unwitnessed (`unwitnessed`), moving nothing: what the in-run pruner may
    rank while the controller may not have witnessed the newest yet."""
    refused = {ref.path for ref, _ in unwitnessed(refs, signing_key)}
    return [ref for ref in refs if ref.path not in refused]


def witnessed(
    refs: list[CheckpointRef], signing_key: Path | None, say: Callable[[str], None]
) -> list[CheckpointRef]:
    """`refs` less the unwitnessed (`unwitnessed`), which are set aside as corrupt ones are
    (renamed corrupt_..., the reason in UNUSABLE.txt) and said."""
    refused = unwitnessed(refs, signing_key)
    for ref, why in refused:
        set_aside(ref.path, why, say)
    gone = {ref.path for ref, _ in refused}
    return [ref for ref in refs if ref.path not in gone]
