"""Checkpoint folders: write them, prove them intact, find the newest good one, prune old ones.

A checkpoint folder holds:
- model.pt: the unwrapped model's state dict (loads with torch.load(weights_only=True) on CPU);
- train_state.pt: optimizer and grad-scaler state, epoch, step, the position in the epoch, the
  world size and every rank's RNG states, to resume exactly (app/runfolder/interruptions.py);
- meta.json: epoch, metrics and a SHA-256 of each file, and `meta_sha256` over those (and, for
  a mid-epoch checkpoint, its `kind: "step"` and global `step`), so an edited epoch, step or
  metric no longer matches. It is written last, so a folder without a readable meta.json, or
  whose files no longer match it, is partial or corrupt and is skipped.
End-of-epoch checkpoints carry validation metrics and are the only ones ranked by
TRAIN_CHECKPOINT_METRIC; a mid-epoch one (`kind: "step"`, named by
app/runfolder/checkpoint_names.py) is kept only while it is the newest. The epoch must agree
three ways: the folder name,
meta.json and (checked before resuming, since it means loading the file) train_state.pt; and
the weights must fit the model being trained.

On a volume a checkpoint's files are opened below the run folder without following links
(app/storage/safe_fs.py): a linked checkpoint folder or file is unusable, and setting one aside
never writes through a link (a link at either name stops the run with exit 2, naming it).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.runfolder.checkpoint_names import PREFIX, parse_name
from app.runfolder.folder import ray_committed
from app.runfolder.retention import InRunPruner, to_remove
from app.runfolder.state_dicts import (
    MAX_WEIGHTS_BYTES,
    MODEL_FILE,
    fit_problem,
    load_problem,
    plain_keys,
)
from app.storage import bounded_json, safe_fs
from app.storage.entries import Kind, entries
from app.storage.location import RunPath, remove_tree, rename_dir, write_atomic
from app.storage.reading import read_bounded, sha256_of

if TYPE_CHECKING:
    import torch

STATE_FILE = "train_state.pt"
META_FILE = "meta.json"
WITNESSED_METRIC = "meta_sha256"  # rank 0's report names the meta.json it wrote by its digest
CORRUPT_PREFIX = "corrupt_"
REASON_FILE = "UNUSABLE.txt"
# meta.json holds an epoch, a few metrics, two digests and up to MAX_CLASSES class names
MAX_META_BYTES = 32 << 20
# Loaded from memory (the bytes hashed are the bytes loaded): the weights, and the training
# state, whose optimizer holds two AdamW moments per weight besides the scaler and RNG states.
MAX_LOADED_BYTES = {MODEL_FILE: MAX_WEIGHTS_BYTES, STATE_FILE: 3 * MAX_WEIGHTS_BYTES}


@dataclass(frozen=True)
class CheckpointRef:
    path: RunPath
    epoch: int  # epochs completed
    metrics: dict[str, float]
    step: int | None = None  # global step of a mid-epoch checkpoint; None at an epoch's end
    # Training stopped early after this checkpoint (app/training/early_stop.py reads it).
    stopped: dict[str, Any] | None = None
    # Each file's sha256 as `verify` found it (empty where not verified): what is loaded from
    # this reference must hash to it, whoever rewrote the folder since.
    files: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    # meta.json's own digest, over the epoch, metrics and `files` this reference was read
    # from: what a witness signature (app/export/witness.py) vouches for.
    meta_sha256: str = field(default="", compare=False, repr=False)

    @property
    def kind(self) -> str:
        return "epoch" if self.step is None else "step"

    @property
    def order(self) -> tuple[int, int]:
        """Training order: an epoch's end sorts before the next epoch's step checkpoints."""
        return self.epoch, -1 if self.step is None else self.step


def write_checkpoint(
    folder: Path,
    *,
    model_state: dict[str, Any],
    train_state: dict[str, Any],
    epoch: int,
    metrics: dict[str, float],
    class_names: tuple[str, ...] = (),
    step: int | None = None,
    stopped: dict[str, Any] | None = None,
) -> str:
    """Write the checkpoint's files; returns meta.json's digest (`meta_sha256`).

    `class_names` (label i is class_names[i]) go into meta.json as plain JSON strings, so
    the weights' output units keep their meaning wherever the checkpoint travels. `step` set:
    a mid-epoch checkpoint at that global step (`kind: "step"` in meta.json). `stopped`: the
    early stop that ended training after this checkpoint (app/training/early_stop.py)."""
    import torch  # here, not at the top: `status` and `logs` read run folders without torch

    folder.mkdir(parents=True, exist_ok=True)
    torch.save(plain_keys(model_state), folder / MODEL_FILE)
    torch.save(train_state, folder / STATE_FILE)
    files = {name: sha256_of(folder / name, folder.parent) for name in (MODEL_FILE, STATE_FILE)}
    meta: dict[str, Any] = {"epoch": epoch, "metrics": metrics, "files": files}
    if class_names:
        meta["class_names"] = list(class_names)
    if step is not None:
        meta.update(kind="step", step=step)
    if stopped is not None:
        meta["stopped"] = stopped
    meta["meta_sha256"] = _meta_digest(meta)
    (folder / META_FILE).write_text(json.dumps(meta, indent=2))
    return str(meta["meta_sha256"])


def _meta_digest(meta: dict[str, Any]) -> str:
    # Keys only some checkpoints have are covered only where present, so checkpoints written
    # before they existed keep their digest: class_names (image folders), kind and step
    # (mid-epoch checkpoints), stopped (early stops).
    covered = {key: meta.get(key) for key in ("epoch", "metrics", "files")}
    optional = ("class_names", "kind", "step", "stopped")
    covered.update({key: meta[key] for key in optional if key in meta})
    return hashlib.sha256(json.dumps(covered, sort_keys=True).encode()).hexdigest()


def verify(folder: RunPath) -> CheckpointRef:
    """Return the checkpoint's reference, or raise ValueError saying why it is unusable."""
    ref, files = _recorded(folder)
    for name, digest in files.items():
        try:
            found = sha256_of(folder / name, folder.parent)
        except (FileNotFoundError, IsADirectoryError):
            raise ValueError(f"{name} is missing") from None
        except safe_fs.LinkRefused as err:
            raise ValueError(_link_reason(err)) from None
        if found != digest:
            raise ValueError(f"{name} does not match its recorded checksum (truncated or altered)")
    return replace(ref, files=files)


def recorded(run_dir: RunPath) -> list[CheckpointRef]:
    """The run's checkpoints as their meta.json records them (read and held to its own
    checksum; the weights not hashed), newest first: for listing and ranking what a run holds
    (a sweep's best trial) at the cost of one small file each. What is loaded goes through
    `verify`."""
    found = []
    for folder in _folders(run_dir):
        with contextlib.suppress(ValueError):
            found.append(_recorded(folder)[0])
    return sorted(found, key=lambda ref: ref.order, reverse=True)


def _recorded(folder: RunPath) -> tuple[CheckpointRef, dict[str, str]]:
    """The checkpoint's reference and the files' recorded sha256s, from its meta.json."""
    try:
        text = _read_meta(folder)
    except (FileNotFoundError, IsADirectoryError):
        raise ValueError(f"{META_FILE} is missing (the checkpoint was never completed)") from None
    except safe_fs.LinkRefused as err:
        raise ValueError(_link_reason(err)) from None
    except OSError as err:
        raise ValueError(f"{META_FILE} cannot be read ({err.strerror or err})") from None
    try:
        meta = bounded_json.loads(text.decode("utf-8"), MAX_META_BYTES)
        files, epoch = dict(meta["files"]), int(meta["epoch"])
        step = _meta_step(meta)
        metrics = {str(k): float(v) for k, v in dict(meta.get("metrics", {})).items()}
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as err:
        raise ValueError(f"{META_FILE} is unreadable ({err})") from None
    if meta.get("meta_sha256") != _meta_digest(meta):
        raise ValueError(f"{META_FILE} does not match its recorded checksum (edited or damaged)")
    named = parse_name(folder.name)
    if named is not None and named[0] != epoch:
        raise ValueError(f"{META_FILE} says epoch {epoch} but the folder is named for {named[0]}")
    if named is not None and named[1] != step:
        raise ValueError(f"{META_FILE} says step {step} but the folder is named for {named[1]}")
    if set(files) != {MODEL_FILE, STATE_FILE}:
        raise ValueError(f"{META_FILE} lists {sorted(files)}, not {MODEL_FILE} and {STATE_FILE}")
    stopped = meta.get("stopped")
    stopped = dict(stopped) if isinstance(stopped, dict) else None
    ref = CheckpointRef(
        path=folder, epoch=epoch, metrics=metrics, step=step, stopped=stopped,
        meta_sha256=str(meta["meta_sha256"]),
    )  # fmt: skip
    return ref, {str(name): str(digest) for name, digest in files.items()}


def _meta_step(meta: dict[str, Any]) -> int | None:
    kind = meta.get("kind", "epoch")
    if kind == "epoch":
        return None
    if kind != "step" or type(meta.get("step")) is not int or meta["step"] < 0:
        raise ValueError(f"kind {kind!r} with step {meta.get('step')!r}")
    return int(meta["step"])


def _read_meta(folder: RunPath) -> bytes:
    try:
        return read_bounded(folder / META_FILE, folder.parent, MAX_META_BYTES)
    except ValueError:
        raise ValueError(f"{META_FILE} is over {MAX_META_BYTES:,} bytes") from None


def _link_reason(err: safe_fs.LinkRefused) -> str:
    path, target = err.links[0]
    return f"{path.name} is a symbolic link (to {target}), which is never followed"


class Misfit(str):
    """resume_problem's answer for a checkpoint that loads but whose weights are of another
    model or class count (not damaged: what the run's data or model makes now differs)."""


def resume_problem(ref: CheckpointRef, expected: dict[str, torch.Size]) -> str | None:
    """Why a verified checkpoint still cannot resume this run (None when it can).

    `expected` is the model's own {name: shape}: a checkpoint of another model or another
    class count passes its checksums and would fail inside every worker, every retry.
    """
    try:
        model_state, train_state = load_train_state(ref.path, ref.files)
    except Exception as err:  # any unpickling failure means "unusable", whatever its type
        return f"cannot be loaded ({load_problem(err)})"
    if not isinstance(train_state, dict) or train_state.get("epoch") != ref.epoch:
        got = train_state.get("epoch") if isinstance(train_state, dict) else None
        return f"{STATE_FILE} holds epoch {got}, but {META_FILE} and the folder say {ref.epoch}"
    problem = fit_problem(model_state, expected)
    return Misfit(f"its weights do not fit this model ({problem})") if problem else None


class CheckpointAltered(ValueError):
    """A checkpoint file whose bytes are not the ones verified: rewritten since."""


def load_train_state(
    folder: RunPath, files: Mapping[str, str] | None = None, reported: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model state dict, training state) of a checkpoint, on CPU, loaded from exactly the
    bytes verified: each file is read once into memory and loaded only when those bytes hash
    to `files` (a CheckpointRef's, as `verify` found them before) or, where not given, to
    what its meta.json records now, that meta.json being the one of digest `reported` where
    given (the one rank 0 reported to Ray). CheckpointAltered where one does not: a writer
    replaced it between the check and the load."""
    vouched = "verified before this run loaded it"
    if not files:
        ref, files = _recorded(folder)
        vouched = f"its {META_FILE} records"
        if reported is not None and ref.meta_sha256 != reported:
            raise CheckpointAltered(
                f"{folder.name}/{META_FILE} has digest {ref.meta_sha256}, not the {reported} of "
                "the checkpoint this run's training reported to Ray: rewritten since, and not "
                "loaded (an altered checkpoint is never trusted)"
            )
    model_state = plain_keys(_load(folder / MODEL_FILE, files[MODEL_FILE], vouched))
    train_state = _load(folder / STATE_FILE, files[STATE_FILE], vouched)
    return model_state, train_state


def _load(file: RunPath, digest: str, vouched: str) -> Any:
    try:
        data = read_bounded(file, file.parent.parent, MAX_LOADED_BYTES[file.name])
    except safe_fs.LinkRefused as err:
        raise ValueError(_link_reason(err)) from None
    except ValueError as err:  # over the bound, or not a regular file
        raise ValueError(f"{file.parent.name}/{file.name}: {err}") from None
    found = hashlib.sha256(data).hexdigest()
    if found != digest:
        raise CheckpointAltered(
            f"{file.parent.name}/{file.name} has sha256 {found}, not the {digest} {vouched}: "
            "rewritten since, and not loaded (an altered checkpoint is never trusted)"
        )
    import torch

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


@dataclass(frozen=True)
class Scan:
    good: list[CheckpointRef]  # newest first
    bad: list[tuple[RunPath, str]]  # (folder, why it is unusable)

    @property
    def latest(self) -> CheckpointRef | None:
        return self.good[0] if self.good else None


def scan(run_dir: RunPath, skip: Collection[RunPath] = ()) -> Scan:
    """Every checkpoint folder verified; those in `skip` (already verified) left out."""
    good, bad = [], []
    folders = [folder for folder in _folders(run_dir) if folder not in skip]
    for folder in folders:
        try:
            good.append(verify(folder))
        except ValueError as err:
            bad.append((folder, str(err)))
    good.sort(key=lambda ref: ref.order, reverse=True)
    return Scan(good=good, bad=bad)


def has_checkpoints(run_dir: RunPath) -> bool:
    """Whether the run folder holds a checkpoint folder, usable or not (none is read)."""
    return bool(_folders(run_dir))


def _folders(run_dir: RunPath) -> list[RunPath]:
    """The checkpoint folders; on a volume a link of that name is listed too (verify then
    finds it unusable), but a link never gets listed through."""
    try:
        listed = entries(run_dir)
    except NotADirectoryError:
        return []
    kinds = (Kind.DIR, Kind.LINK)
    return [e.path for e in listed if e.name.startswith(PREFIX) and e.kind in kinds]


def quarantine(folder: RunPath, reason: str = "") -> RunPath:
    """Rename an unusable checkpoint so no later run trusts it, keeping it for inspection.

    On a volume a link at the folder's name or at its corrupt_ name is refused (LinkRefused,
    exit 2 before Ray starts), and the reason is written by an atomic replace, which replaces a
    planted UNUSABLE.txt link instead of writing through it."""
    target = folder.with_name(CORRUPT_PREFIX + folder.name)
    rename_dir(folder, target)
    if reason:
        write_atomic(target / REASON_FILE, (reason + "\n").encode(), target.parent)
    return target


def set_aside(folder: RunPath, why: str, say: Callable[[str], None]) -> None:
    """`quarantine` the unusable checkpoint `folder` and say so, with why."""
    moved = quarantine(folder, why)
    say(f"checkpoint {folder.name} is unusable: {why}; set aside as {moved.name}")


def prune(
    run_dir: RunPath, *, keep: int, metric: str, good: list[CheckpointRef] | None = None
) -> list[RunPath]:
    """Delete the checkpoints app/runfolder/retention.py `to_remove` chooses; return their paths.

    The one retention pass, run after each epoch while Ray trains (retention.InRunPruner) and
    at the end of the run, where it also covers earlier drivers' checkpoints, which Ray never saw.
    `good`: the folder's scan, where the caller has one (every file hashed once per pass).
    """
    good = scan(run_dir).good if good is None else good
    removed = [ref.path for ref in to_remove(good, keep=keep, metric=metric)]
    for path in removed:
        remove_tree(path)
    return removed


def in_run_pruner(
    run_dir: RunPath,
    *,
    keep: int,
    metric: str,
    warn: Callable[[str], None],
    trusted: Callable[[list[CheckpointRef]], list[CheckpointRef]] = list,
) -> InRunPruner:
    """The driver's pruner for the run folder at `run_dir`. It sees only the checkpoints Ray
    has committed (app/runfolder/folder.py `ray_committed`): one complete on storage but not
    committed yet must not count as the newest, since a worker failure restarts from Ray's
    newest committed checkpoint, which must therefore still be there.
    `trusted`: of those, the ones it may rank (a signing run's: those its controller witnessed,
    app/export/witness.py). Ray's record is a file in the storage too: a checkpoint planted with
    its name added would otherwise rank best, or be the newest, and the run's own be deleted.
    One left out is looked at again at the next pass (its witness may not be written yet), and
    at the run's end, where it is set aside."""

    def committed_new(known: Collection[RunPath]) -> list[CheckpointRef]:
        names = ray_committed(run_dir)
        return trusted([r for r in scan(run_dir, skip=known).good if r.path.name in names])

    return InRunPruner(
        verify_new=committed_new,
        prune=lambda good: prune(run_dir, keep=keep, metric=metric, good=good),
        warn=warn,
    )
