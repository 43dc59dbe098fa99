"""The export folder's layout and its model card: written by app/export/build.py, verified
here before anything in the folder is loaded.

- `weights.pt`: the best checkpoint's state dict. It is all trainctl ever loads from an export
  (`trainctl predict`, a warm start): with torch.load(weights_only=True), into the model
  trainctl's own code builds from the card's `architecture` and input. Nothing in it can run
  code.
- `model.pt2`: the same model as a `torch.export` program, for model servers. trainctl never
  loads it: torch.export.load unpickles parts of the archive with weights_only=False (its
  weights, when the weights_only load fails, in torch/_export/serde/serialize.py,
  deserialize_torch_artifact; pickled constants always) and evaluates the graph's symbolic
  shape expressions with sympy, that is Python's eval (`_parse_sym_expr`), so an archive
  written by someone else runs their code even without a pickle in it. A server must load it
  only from a source it trusts: the champion pointer records the card's sha256, and the card
  the program's. Where torch.export cannot trace the model the export has no program and the
  card says why (`fallback_reason`); TorchScript is not written, since loading it runs the
  code it carries.
- `model_card.json`: class names, input, architecture, and the sha256 of every file above.

`verified` reads the card and each file it lists once, as a regular file of bounded size,
without following a link (app/storage/safe_fs.py), and hashes what it read; weights.pt is
read into memory and those same bytes are what is loaded: there is no second read for another
writer to change. A mismatch is refused (exit 2) and nothing is loaded. The card itself is
the trust root: whoever may rewrite the card may rewrite the weights too, which is why the
weights are loaded in a way that cannot run code whatever they hold. What can be checked is:
a champion's card against its pointer's sha256, and a run's export/ card against the class
names its run recorded (classes.json), so that an edit of the card alone cannot relabel what
the model answers.

No torch import here: `trainctl predict` checks before it loads.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass
from typing import Any

from app.errors import ConfigError
from app.export import signature
from app.formatting import one_line, shown, whole
from app.redact import redact
from app.runfolder.class_names import (
    CLASSES_FILE,
    describe_difference,
    names_problem,
    recorded,
)
from app.runfolder.folder import EXPORT_DIR as EXPORT_DIR  # the run folder's name for it
from app.runfolder.folder import (
    SUMMARY_FILE,
    SWEEP_FILE,
    TRIALS_DIR,
    holds_run_records,
    read_summary,
    read_sweep,
    run_names,
)
from app.runfolder.state_dicts import MAX_WEIGHTS_BYTES
from app.storage import bounded_json
from app.storage.location import RunPath
from app.storage.reading import present, read_bounded, sha256_of

WEIGHTS_FILE = "weights.pt"  # torch.save(state_dict): what trainctl loads
EXPORTED_PROGRAM = "model.pt2"  # torch.export.save: for model servers, never loaded here
CARD_FILE = "model_card.json"
MODEL_FILES = (WEIGHTS_FILE, EXPORTED_PROGRAM)
FORMATS = {EXPORTED_PROGRAM: "torch.export", WEIGHTS_FILE: "state_dict"}
RETIRED = {"model.ts": "a TorchScript program, which runs the code it carries when loaded"}
MAX_CARD_BYTES = 8 << 20  # class names and the data's file list make up most of it
MAX_PROGRAM_BYTES = 2 * MAX_WEIGHTS_BYTES  # the weights and the graph: hashed, never loaded
# A Parquet dataset trains at its images' stored size, which TRAIN_IMAGE_SIZE does not bound;
# predict's memory is bounded by its pass size instead (app/export/predict.py per_pass).
CHANNELS, MAX_SIDE, MAX_CLASSES = (1, 3), 8192, 100_000


@dataclass(frozen=True)
class Verified:
    """An export whose every listed file matched the card: the card, and weights.pt's bytes
    exactly as they were hashed."""

    card: dict[str, Any]
    weights: bytes
    folder: RunPath
    card_sha256: str = ""  # of the card's bytes as read: what an evaluation names it by


def card_json(card: dict[str, Any]) -> bytes:
    return (json.dumps(card, indent=2) + "\n").encode()


def read_card(
    folder: RunPath, root: RunPath | None = None, card_sha256: str | None = None
) -> dict[str, Any]:
    """The card in export folder `folder` (on a volume opened below `root`, default the folder
    itself, without following a link), shape-checked; ConfigError naming what is wrong.
    `card_sha256`: what the card's bytes must hash to (a champion pointer's), checked on the
    bytes that are then parsed."""
    return _read_card(folder, root, card_sha256)[0]


def _read_card(
    folder: RunPath, root: RunPath | None, card_sha256: str | None = None
) -> tuple[dict[str, Any], bytes]:
    path = folder / CARD_FILE
    _not_beside_run_records(folder)
    try:
        text = read_bounded(path, root or folder, MAX_CARD_BYTES)
        found = hashlib.sha256(text).hexdigest()
        if card_sha256 is not None and found != card_sha256:
            raise ConfigError(
                f"{path}: sha256 {found} is not the {card_sha256} the champion pointer "
                "records; altered since it was promoted, and not loaded"
            )
        card = bounded_json.loads(text.decode("utf-8"), MAX_CARD_BYTES)
    except FileNotFoundError:
        raise ConfigError(
            sweep_problem(folder)
            or f"{folder}: no {CARD_FILE}; give a run folder (with {EXPORT_DIR}/) or its "
            f"{EXPORT_DIR} folder, written by a successful `trainctl train`"
        ) from None
    except (OSError, ValueError) as err:  # a FIFO, over the bound; UnicodeDecodeError
        raise ConfigError(f"{path}: unreadable model card ({_why(err)})") from None
    problem = card_problem(card)
    if problem:
        raise ConfigError(f"{path}: {problem}")
    signature.require(folder, root or folder, text)  # the bytes parsed are the bytes signed
    return card, text


def sweep_best_trial(folder: RunPath) -> RunPath | None:
    """A sweep folder's best trial, the one trial it exported (sweep.json's `best`), as a run
    folder below it; None where `folder` is no sweep or its record names no exported trial.
    Only the trial's id is taken from the record: the folder is the sweep's own trials/<id>,
    and its export is then verified as any run's."""

    trial = _named_best(folder)
    if trial is None:
        return None
    chosen = folder / TRIALS_DIR / trial
    return chosen if present(chosen / EXPORT_DIR / CARD_FILE) else None


def _named_best(folder: RunPath) -> str | None:
    """The trial id sweep.json names as the best (exported) one, None where it names none."""
    record = read_sweep(folder, damaged=None)  # none, a link, damaged: the caller says more
    best = record.get("best") if record is not None else None
    trial = best.get("trial") if isinstance(best, dict) else None
    if not isinstance(trial, str) or not re.fullmatch(r"trial-[0-9]{4,9}", trial):
        return None
    return trial


def sweep_problem(folder: RunPath) -> str | None:
    """Where `folder` (a folder given for its export, or that export/) is a sweep's, or one of
    its trials it did not export: what to give instead (a sweep has no export of its own, and
    exports its best trial only)."""

    sweep = folder.parent if folder.name == EXPORT_DIR else folder
    if sweep.parent.name == TRIALS_DIR and present(sweep.parent.parent / SWEEP_FILE):
        if sweep_best_trial(sweep.parent.parent) is None:  # the sweep's folder answers nothing
            return sweep_problem(sweep.parent.parent)
        return (
            f"{sweep}: a trial the sweep {sweep.parent.parent} did not export (a sweep exports "
            f"only its best trial); give the sweep's folder, which predicts and evaluates with "
            "its best trial, or champion:<model-name> where the sweep promoted it"
        )
    if not present(sweep / SWEEP_FILE):
        return None
    if (best := _named_best(sweep)) is not None:
        # The record names its exported best, and that export is not there: deleted or moved
        # (a red-team pass: "has exported no trial yet" sent the user to rerun a done sweep).
        return (
            f"{sweep}: its sweep.json names {best} as the best trial, the one it exported, but "
            f"{sweep / TRIALS_DIR / best / EXPORT_DIR} holds no model card: the trial's folder "
            f"was deleted or moved (`trainctl status {sweep}` names what is missing); give "
            "champion:<model-name> where the sweep promoted it"
        )
    # Asked where the sweep's record names no exported best trial (sweep_best_trial): its
    # trials are not all ended, or none trained to the end. Its trials' folders then hold no
    # export either, and pointing there sent the user back here.
    return (
        f"{sweep}: a sweep's folder (`trainctl tune`) that has exported no trial yet (it "
        f"exports its best once every trial has ended: `trainctl status {sweep}` shows them); "
        "rerun the sweep to finish it, or give champion:<model-name> where a sweep promoted one"
    )


def _not_beside_run_records(folder: RunPath) -> None:
    """An export is a folder of its own: a run's export/, or one kept apart from any run. A
    card at the top of a run folder, beside its records, is neither: trainctl never writes one
    there, and every check that holds a run's export/ to its run (the card its summary.json
    recorded, its classes, the run a signed card names) looks at export/ only. Another run's
    signed export copied to the top of a run folder was answered as that run's, and a card with
    its class names reversed relabelled every prediction (a red-team pass)."""
    if folder.name == EXPORT_DIR:
        return
    if not (holds_run_records(folder) or present(folder / EXPORT_DIR)):
        return
    raise ConfigError(
        f"{folder}: a run folder with a {CARD_FILE} at its top, beside the run's records: a "
        f"run's export is its {EXPORT_DIR}/ folder, and trainctl writes no card anywhere else in "
        f"it; this one was put there by hand (copied or planted) and is not loaded. Remove it "
        f"(and the files it lists) from the run folder, or give an export folder of its own"
    )


def _signed_for_its_run(folder: RunPath, card: dict[str, Any]) -> None:
    """Where cards are signed (TRAIN_VERIFY_KEY), a run's export/ holds its own run's card: a
    signed export copied into another run's folder, with that run's summary.json rewritten to
    match, verified, and answered as the other run (found by a red-team pass). Without a key a
    card proves nothing of its origin, and a run folder may be moved or copied at will."""
    if folder.name != EXPORT_DIR or signature.configured_key() is None:
        return
    # An export/ folder kept on its own, beside no record of a run. Not summary.json alone:
    # removing it let another run's signed export be answered as this run's.
    if not holds_run_records(folder.parent):
        return

    named = card.get("run_name")
    if named not in run_names(folder.parent):
        raise ConfigError(
            f"{folder / CARD_FILE}: a signed card of run {one_line(str(named), 100)}, in the "
            f"folder of run {folder.parent.name}: copied from another run, and not loaded; "
            "give that run's folder"
        )


def _same_classes_as_its_run(folder: RunPath, card: dict[str, Any]) -> None:
    """A run's export/ answers in the classes its run recorded when it first trained
    (classes.json): a card edited to other names or another order would relabel every
    prediction and evaluation. ConfigError naming both lists."""
    if folder.name != EXPORT_DIR:
        return
    run_dir = folder.parent
    try:
        names = recorded(run_dir)
    except ValueError as err:
        raise ConfigError(
            f"{folder / CARD_FILE}: its run's classes cannot be told ({err})"
        ) from None
    if names is None:
        return
    run_names, card_names = tuple(redact(list(names))), tuple(card["class_names"])
    if run_names == card_names:
        return
    raise ConfigError(
        f"{folder / CARD_FILE}: its class names are not its run's ({run_dir / CLASSES_FILE}: "
        f"{describe_difference(run_names, card_names)}); the card was altered and is not loaded"
    )


def as_its_run_recorded(folder: RunPath, card: dict[str, Any], card_bytes: bytes) -> None:
    """A run's export/ (any other folder: nothing to compare) answers in its run's classes and
    is the card its run recorded; ConfigError naming what differs. What every reader of a run's
    export checks before loading it: `predict`, `evaluate`, a warm start."""
    _not_beside_run_records(folder)
    _same_classes_as_its_run(folder, card)
    _the_card_its_run_recorded(folder, hashlib.sha256(card_bytes).hexdigest())


def _the_card_its_run_recorded(folder: RunPath, digest: str) -> None:
    """A run's export/ is the one the run exported: its card's sha256 is the one summary.json
    records (promotion.export.card_sha256). The card lists every other file's sha256, so an
    edit to it (another mean or std, which shifts every prediction; another checkpoint epoch)
    is otherwise invisible.

    A run that records none is not held to one: a rerun that is exporting now has set its
    record aside. Without a signature to anchor the card, that is said: a missing, damaged or
    emptied summary.json is also how an altered card would escape this check."""
    if folder.name != EXPORT_DIR:
        return
    summary = read_summary(folder.parent) or {}
    promotion = summary.get("promotion")
    export = promotion.get("export") if isinstance(promotion, dict) else None
    recorded = export.get("card_sha256") if isinstance(export, dict) else None
    if not isinstance(recorded, str):
        if signature.configured_key() is None:
            print(
                f"trainctl: warning: {shown(folder / CARD_FILE)}: checked against its own list "
                f"of files only: {shown(folder.parent / SUMMARY_FILE)} records no card_sha256 "
                "for it (the run is running again, or the record was removed or damaged); "
                "TRAIN_VERIFY_KEY loads only cards your training jobs signed",
                file=sys.stderr,
            )
        return
    if recorded != digest:
        raise ConfigError(
            f"{folder / CARD_FILE}: sha256 {digest} is not the {recorded} its run recorded "
            f"({folder.parent / SUMMARY_FILE}: promotion.export.card_sha256); the card was "
            "altered after the run exported it and is not loaded (or a rerun of the run is "
            "exporting now: try again once it ends)"
        )


def _why(err: OSError | ValueError) -> str:
    return (err.strerror if isinstance(err, OSError) else None) or str(err)


# What a channel's normalization may be: a training run records its data's (std below 1e-6 is
# recorded as 1) or its weights' own (ImageNet's), all well inside these.
_NORMALIZATION = {"mean": (-10.0, 10.0), "std": (1e-6, 10.0)}


def card_problem(card: Any) -> str | None:
    """What makes `card` unusable for prediction, or None."""
    if not isinstance(card, dict):
        return "not a JSON object"
    files = card.get("files")
    if not isinstance(files, dict) or not files:
        return "`files` must map the export's file names to their sha256"
    for name, why in RETIRED.items():
        if name in files:
            return (
                f"`files` lists {name}, {why}: trainctl no longer writes or loads it; it loads "
                f"only {WEIGHTS_FILE} (a state dict). Export the run again with this trainctl"
            )
    if not set(files) <= set(MODEL_FILES) or card.get("file") not in files:
        return f"`files` may name only {', '.join(MODEL_FILES)}, and must hold `file`"
    if WEIGHTS_FILE not in files:
        return (
            f"`files` has no {WEIGHTS_FILE}: trainctl loads an export's weights only from that "
            "state dict (never a program, whose loading can run code); export the run again "
            "with this trainctl"
        )
    if not all(isinstance(v, str) and len(v) == 64 for v in files.values()):
        return "`files` must map each file to its sha256 (64 hex digits)"
    architecture, patch = card.get("architecture"), card.get("vit_patch", 0)
    if not isinstance(architecture, str) or not architecture:
        return "`architecture` must name the model (TRAIN_MODEL of the run)"
    if whole(patch, 0, MAX_SIDE) is None:
        return f"`vit_patch` must be a whole number 0..{MAX_SIDE}"
    input_ = card.get("input")
    if not isinstance(input_, dict):
        return "`input` is missing"
    channels, height, width = (input_.get(k) for k in ("channels", "height", "width"))
    if type(channels) is not int or channels not in CHANNELS:
        return "input.channels must be 1 (grayscale) or 3 (RGB)"
    for name, value in (("height", height), ("width", width)):
        if whole(value, 1, MAX_SIDE) is None:
            return f"input.{name} must be a whole number 1..{MAX_SIDE}"
    # Pixels are read as 0..1 and normalized as (x - mean) / std in float32: a NaN, an infinity
    # or a std of 1e-300 there scored every image NaN, and NaN's argmax still answered a class.
    for name, (low, high) in _NORMALIZATION.items():
        values = input_.get(name)
        if (
            not isinstance(values, list)
            or len(values) != channels
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        ):
            return f"input.{name} must hold {channels} numbers, one per channel"
        if not all(low <= v <= high for v in values):  # False for NaN
            return f"input.{name} must hold numbers from {low:g} to {high:g} (pixels read as 0..1)"
    names = card.get("class_names")
    if (
        not isinstance(names, list)
        or not 1 <= len(names) <= MAX_CLASSES
        or not all(isinstance(n, str) for n in names)
    ):
        return f"class_names must be a list of 1..{MAX_CLASSES} strings"
    return names_problem(names)


def verified(
    folder: RunPath,
    root: RunPath | None = None,
    card_sha256: str | None = None,
    *,
    as_recorded: bool = True,
) -> Verified:
    """The card and weights.pt's bytes once every file the card lists matches its sha256 (and
    the card `card_sha256`, where given); ConfigError naming the file (and both checksums)
    otherwise. On a volume every file is opened below `root` (default: the folder itself)
    without following a link, as a regular file of bounded size. Nothing is loaded before
    this passes. A run's export/ must also be the one its run recorded (`as_recorded`: off
    only for the run's own driver, which is writing that record)."""
    root = root or folder
    card, text = _read_card(folder, root, card_sha256)
    if card_sha256 is None:  # a champion's copy is vouched for by its pointer's sha256
        _same_classes_as_its_run(folder, card)
        _signed_for_its_run(folder, card)
        if as_recorded:
            _the_card_its_run_recorded(folder, hashlib.sha256(text).hexdigest())
    weights = b""
    for name, expected in card["files"].items():
        path = folder / name
        try:
            if name == WEIGHTS_FILE:  # read once: these bytes are hashed, then loaded
                weights = read_bounded(path, root, MAX_WEIGHTS_BYTES)
                found = hashlib.sha256(weights).hexdigest()
            else:
                found = sha256_of(path, root, MAX_PROGRAM_BYTES)
        except FileNotFoundError:
            raise ConfigError(f"{path}: missing; the model card lists it") from None
        except (OSError, ValueError) as err:  # a FIFO or device; over the bound (a link:
            # LinkRefused, a ConfigError naming it, goes on as it is)
            raise ConfigError(f"{path}: cannot be read ({_why(err)})") from None
        if found != expected:
            raise ConfigError(
                f"{path}: sha256 {found} does not match the model card's {expected}; "
                "the export was altered or damaged and is not loaded"
            )
    return Verified(card, weights, folder, hashlib.sha256(text).hexdigest())
