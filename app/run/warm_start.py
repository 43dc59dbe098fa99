"""TRAIN_WARM_START: the weights a new run starts from, resolved and verified before Ray starts.

What a team has, each resolved to one weights file and the sha256 its bytes must have:
- `champion:<model-name>`: the champion of that TRAIN_MODEL_NAME under TRAIN_STORAGE_PATH: its
  pointer, the model card the pointer's `card_sha256` vouches for, and the card's weights.pt
  (app/export/build.py writes it beside the exported program);
- an export folder (`<run>/export`, or a champion's folder `champions/<name>/<sha>/`): its card
  and weights.pt, as the card's `files` says;
- a run folder: its best verified checkpoint by TRAIN_CHECKPOINT_METRIC;
- a checkpoint folder (its meta.json's checksum of model.pt);
- a state-dict file, which nothing vouches for but the bytes preflight read; an export's
  weights.pt or a checkpoint's model.pt named directly is checked as its folder is.

The task must be this run's where the source records it: an export's or a champion's card
(class names in order, channels, input size, compared as a promotion compares them:
app/promotion/task.py), a checkpoint's class names (meta.json); in every case the weights'
names and shapes must fit the model (app/runfolder/state_dicts.py). Anything else is refused with
exit 2, naming the source and why.

Loading never runs code and loads what was verified: a file is read once into memory (at most
MAX_WEIGHTS_BYTES, a regular file, no link followed), hashed, and those bytes are given to
torch.load(weights_only=True). The driver resolves TRAIN_WARM_START once, in preflight, and
hands the WarmStart (file and sha256: app/training/warm_weights.py) to the workers, which load
it the same way: a file changed since preflight is refused, not loaded, and every worker starts
from the same bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.data.schema import DatasetInfo
from app.errors import ConfigError
from app.export import signature
from app.export.card import (
    CARD_FILE,
    MAX_CARD_BYTES,
    WEIGHTS_FILE,
    as_its_run_recorded,
    card_problem,
)
from app.formatting import one_line
from app.promotion import champion
from app.promotion.champion_task import TaskUnknown, vouched_card
from app.promotion.task import Task
from app.redact import redact_uri
from app.runfolder import checkpoints, retention
from app.runfolder.state_dicts import (
    MODEL_FILE,
    fit_problem,
    shapes_of,
    shapes_problem,
    tensor_problem,
)
from app.settings import TrainSettings
from app.settings.model import ChampionRef
from app.settings.run import CHAMPIONS_DIR
from app.storage import bounded_json, safe_fs
from app.storage.location import RunPath
from app.storage.reading import is_dir_within, present, read_bounded
from app.training.warm_weights import WarmStart, read_weights

# What vouches for a plain file's sha256: only preflight's own reading of it.
FILE_VOUCH = "read before the run started"
# What a refused source is told it could be instead.
TAKES = (
    "TRAIN_WARM_START takes champion:<model-name>, an export/ folder, a run folder, a "
    "checkpoint folder or a state-dict file"
)


def resolve(settings: TrainSettings, info: DatasetInfo | None) -> WarmStart:
    """TRAIN_WARM_START resolved, its checksums verified, its weights loaded once and (with
    the data known) checked against this run's task and model; ConfigError saying why not."""
    value = settings.warm_start
    assert value is not None
    source = redact_uri(str(value))
    if isinstance(value, ChampionRef):
        warm, task = _champion(settings, value, source)
    else:
        warm, task = _location(settings, value, source)
    weights = _weights(warm)
    if info is not None:
        _same_task(warm, task, info)
        problem = fit_problem(weights, _model_shapes(settings, info))
        if problem:
            raise ConfigError(
                f"TRAIN_WARM_START={source} does not fit TRAIN_MODEL={settings.model}: {problem}"
            )
    return dataclasses.replace(warm, shapes=tuple(shapes_of(weights).items()))


def trials_fit_problems(
    warm: WarmStart, per_trial: Mapping[str, TrainSettings], info: DatasetInfo
) -> list[tuple[str, str]]:
    """A sweep's trials whose model the warm start does not fit, with why: a space that
    varies `model` passed check with the base model's fit, and each other model's trials
    then failed in Tune with a traceback (a red-team pass)."""
    shapes = dict(warm.shapes) if warm.shapes else shapes_of(_weights(warm))
    found: dict[tuple[str, int | None], str | None] = {}
    problems = []
    for trial_id, trial in per_trial.items():
        shape = (trial.model, trial.vit_patch)
        if shape not in found:
            found[shape] = shapes_problem(shapes, _model_shapes(trial, info))
        if problem := found[shape]:
            problems.append(
                (
                    trial_id,
                    f"TRAIN_WARM_START={warm.source} does not fit TRAIN_MODEL={trial.model}: "
                    f"{problem}",
                )
            )
    return problems


def _weights(warm: WarmStart) -> dict[str, Any]:
    try:
        state = warm.load_weights()
    except ConfigError:
        raise
    except Exception as err:  # not a torch file, or one that needs unpickling code
        raise ConfigError(
            f"TRAIN_WARM_START={warm.source}: cannot be loaded as weights "
            f"({type(err).__name__}): {_not_weights(warm.file)}"
        ) from None
    if not isinstance(state, dict):
        raise ConfigError(
            f"TRAIN_WARM_START={warm.source}: holds a {type(state).__name__}, not a state dict; "
            f"{TAKES}"
        )
    if problem := tensor_problem(state):  # meta, sparse or non-finite: would fail in training
        raise ConfigError(f"TRAIN_WARM_START={warm.source}: {problem}")
    return state


def _not_weights(file: RunPath) -> str:
    """What to give instead of a file torch.load(weights_only=True) refuses: the champion's
    pointer file is the common slip (`champion:<name>` is how a champion is named)."""
    if file.name.endswith(".json") and file.parent.name == CHAMPIONS_DIR:
        name = file.name.removesuffix(".json")
        return f"{file.name} is a champion's pointer: write TRAIN_WARM_START=champion:{name}"
    return f"not a plain state-dict file (tensors only, as torch.save writes them); {TAKES}"


@dataclass(frozen=True)
class _Task:
    """What a source records of its task: a whole Task (a card), or class names only."""

    task: Task | None = None
    class_names: tuple[str, ...] = ()


def _same_task(warm: WarmStart, found: _Task, info: DatasetInfo) -> None:
    run = Task.of_info(info)
    if found.task is not None and not found.task.same(run):
        raise ConfigError(
            f"TRAIN_WARM_START={warm.source}: {warm.described} is another task: "
            f"{found.task.describe()}; this run {run.describe().removeprefix('classes ')} "
            f"({found.task.difference(run)}); a warm start must answer the same question (or "
            "start from TRAIN_WEIGHTS, whose head is sized to the data)"
        )
    names = info.label_names()
    if found.class_names and tuple(found.class_names) != names:
        shown = Task.of(list(found.class_names), info.channels, info.height, info.width)
        raise ConfigError(
            f"TRAIN_WARM_START={warm.source}: {warm.described} was trained on other classes: "
            f"{shown.describe()}; this run {run.describe().removeprefix('classes ')}"
        )


def _champion(settings: TrainSettings, ref: ChampionRef, source: str) -> tuple[WarmStart, _Task]:
    path = champion.pointer_path(settings.storage_path, ref.name)
    try:
        pointer = champion.read_pointer(path)
    except champion.PointerDamaged as err:
        raise ConfigError(f"TRAIN_WARM_START={source}: {err}") from None
    if pointer is None:
        raise ConfigError(
            f"TRAIN_WARM_START={source}: no champion {ref.name} under TRAIN_STORAGE_PATH "
            f"({redact_uri(str(path))} is not there)"
            + champion.other_champions(settings.storage_path, ref.name)
        )
    try:
        folder, card = vouched_card(pointer, settings.storage_path, ref.name)
    except TaskUnknown as err:
        raise ConfigError(f"TRAIN_WARM_START={source}: the champion's card: {err}") from None
    run = pointer.get("run_name", "?")
    described = f"champion {ref.name} v{pointer.get('version')} (run {run}, epoch " + (
        f"{pointer.get('epoch')})"
    )
    return _from_card(folder, card, source, described), _Task(Task.from_card(card))


def _location(settings: TrainSettings, path: RunPath, source: str) -> tuple[WarmStart, _Task]:
    if not is_dir_within(path, "TRAIN_WARM_START", settings.storage_timeout_s):
        return _file_or_its_folder(path, source)
    if present(path / CARD_FILE):
        card = _card(path, source)
        return _from_card(path, card, source, f"export {source}"), _Task(Task.from_card(card))
    if present(path / checkpoints.META_FILE):
        return _checkpoint(path, source, f"checkpoint {source}")
    good = checkpoints.scan(path).good
    best = next(iter(retention.ranked(good, settings.checkpoint_metric)), None)
    if best is None:
        raise ConfigError(
            f"TRAIN_WARM_START={source}: a folder with no model_card.json (an export), no "
            f"{checkpoints.META_FILE} (a checkpoint) and no verified checkpoint (a run folder); "
            "give one of those, a state-dict file, or champion:<model-name>"
        )
    value = best.metrics.get(settings.checkpoint_metric)
    figure = f", {settings.checkpoint_metric} {value:.4g}" if value is not None else ""
    described = f"run {source}'s best checkpoint {best.path.name} (epoch {best.epoch}{figure})"
    return _checkpoint(best.path, source, described)


def _card(folder: RunPath, source: str) -> dict[str, Any]:
    """An export folder's own card: bounded, a regular file, no link; shape-checked."""
    try:
        data = read_bounded(folder / CARD_FILE, folder, MAX_CARD_BYTES)
        card = bounded_json.loads(data.decode("utf-8"), MAX_CARD_BYTES)
    except safe_fs.LinkRefused as err:
        raise ConfigError([f"TRAIN_WARM_START={source}: {p}" for p in err.problems]) from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"TRAIN_WARM_START={source}: unreadable {CARD_FILE} ({err})") from None
    try:
        signature.require(folder, folder, data)
    except ConfigError as err:
        raise ConfigError([f"TRAIN_WARM_START={source}: {p}" for p in err.problems]) from None
    files = card.get("files") if isinstance(card, dict) else None
    if isinstance(files, dict) and WEIGHTS_FILE not in files:
        raise ConfigError(
            f"TRAIN_WARM_START={source}: export {source} has no {WEIGHTS_FILE} (exported before "
            "trainctl wrote one); start from its run folder instead, whose best checkpoint "
            "holds the same weights"
        )
    problem = card_problem(card)
    if problem:
        raise ConfigError(f"TRAIN_WARM_START={source}: {CARD_FILE}: {problem}")
    try:
        as_its_run_recorded(folder, card, data)  # as `predict` and `evaluate` check it
    except ConfigError as err:
        raise ConfigError([f"TRAIN_WARM_START={source}: {p}" for p in err.problems]) from None
    return card


def _from_card(folder: RunPath, card: dict[str, Any], source: str, described: str) -> WarmStart:
    """The export's weights.pt (card_problem made sure the card lists it) and its digest."""
    digest = card["files"][WEIGHTS_FILE]
    return WarmStart(source, described, folder / WEIGHTS_FILE, digest, "its model card records")


def _checkpoint(folder: RunPath, source: str, described: str) -> tuple[WarmStart, _Task]:
    """A checkpoint folder, verified (meta.json's checksums), and the digest of its model.pt
    and class names as its meta.json records them."""
    _unsigned(source, described)
    try:
        checkpoints.verify(folder)
        data = read_bounded(folder / checkpoints.META_FILE, folder, checkpoints.MAX_META_BYTES)
        meta = json.loads(data)
        digest = meta["files"][MODEL_FILE]
        names = tuple(str(n) for n in meta.get("class_names") or ())
    except (ValueError, OSError, KeyError, TypeError, safe_fs.LinkRefused) as err:
        raise ConfigError(f"TRAIN_WARM_START={source}: an unusable checkpoint ({err})") from None
    vouch = f"its {checkpoints.META_FILE} records"
    return WarmStart(source, described, folder / MODEL_FILE, str(digest), vouch), _Task(None, names)


def _file_or_its_folder(path: RunPath, source: str) -> tuple[WarmStart, _Task]:
    """A file; an export's weights.pt or a checkpoint's model.pt is its folder's, checked as its
    folder is (checksum and task): named directly, it would otherwise load unverified."""
    folder = path.parent
    where = redact_uri(str(folder))
    if path.name == WEIGHTS_FILE and present(folder / CARD_FILE):
        card = _card(folder, source)
        described = f"export {where} (named by its {WEIGHTS_FILE})"
        return _from_card(folder, card, source, described), _Task(Task.from_card(card))
    if path.name == MODEL_FILE and present(folder / checkpoints.META_FILE):
        return _checkpoint(folder, source, f"checkpoint {where} (named by its {MODEL_FILE})")
    return _file(path, source), _Task()


def _unsigned(source: str, described: str) -> None:
    """With TRAIN_VERIFY_KEY set, weights come only from signed exports: a checkpoint or a
    plain file carries no signature, and anyone who can write the storage could have made it."""
    if signature.configured_key() is not None:
        raise ConfigError(
            f"TRAIN_WARM_START={source}: {described} is not signed, and TRAIN_VERIFY_KEY is set: "
            "warm starts then come only from signed exports (an export/ folder, its weights.pt, "
            "or champion:<model-name>)"
        )


def _file(path: RunPath, source: str) -> WarmStart:
    """A state-dict file: the digest of its bytes as read now, what every worker must read."""
    _unsigned(source, f"file {source}")
    digest = hashlib.sha256(read_weights(path, source)).hexdigest()
    return WarmStart(source, f"file {source}", path, digest, FILE_VOUCH)


def _model_shapes(settings: TrainSettings, info: DatasetInfo) -> dict[str, Any]:
    from app.training.weights import shapes_and_head

    return shapes_and_head(settings, info)[0]


def champion_moved(warm: WarmStart, earlier: Any) -> str | None:
    """Why the trials left of a sweep cannot start from `warm`, the champion as it is now,
    where its sweep.json recorded (`earlier`) that they started from other weights; or None."""
    if not isinstance(earlier, dict):
        return None
    was, described = earlier.get("sha256"), earlier.get("described")
    if not isinstance(was, str) or was == warm.sha256:
        return None
    return (
        f"TRAIN_WARM_START={warm.source}: this sweep's trials started from "
        f"{one_line(described, 200) if isinstance(described, str) else 'other weights'} "
        f"(sha256 {one_line(was[:12], 20)}); it is now {warm.described} (sha256 "
        f"{warm.sha256[:12]}), and the trials left would start from other weights than the "
        "ones trained. Start a new sweep (another TRAIN_RUN_NAME)"
    )
