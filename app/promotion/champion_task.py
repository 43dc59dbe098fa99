"""The champion, as the model card its pointer vouches for says: its task, and the figures the
gate compares with.

The card is read the way everything another writer could change is read: bounded
(MAX_CARD_BYTES), as a regular file below its export folder without following a link
(app/storage/reading.read_bounded), and used only once its sha256 is the pointer's
`card_sha256`; its shape is app/export/card.py's to judge. Read once, checked, parsed: the
bytes hashed are the bytes read.

The pointer also records the champion's task, metrics and value, for people and for
`check`. Those are believed only where they are the card's: a pointer edited by hand (or by a
faulty writer) to say a worse figure or another class list would otherwise let a worse model,
or a model of another task, take the champion's place. One small file more is read per
promotion for it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from app.errors import ConfigError
from app.export import signature
from app.export.card import CARD_FILE, MAX_CARD_BYTES, card_problem
from app.formatting import one_line
from app.promotion import champion_export, pointer_signature
from app.promotion.task import Task
from app.storage import bounded_json, safe_fs
from app.storage.location import RunPath
from app.storage.reading import read_bounded


class TaskUnknown(Exception):
    """No card the pointer vouches for says what the champion is, or the pointer says
    otherwise than that card: nothing proves what the champion's task and figures are."""


def champion_task(pointer: dict[str, Any], storage: RunPath, name: str) -> Task:
    """The task of champion `name`, whose pointer under `storage` is `pointer`, from its
    verified card (and, where TRAIN_VERIFY_KEY is set, its signature: the figures a run must
    beat are a signed card's, not a planted one's), once what the pointer says of the champion
    (task, metrics, value) is what the card says; TaskUnknown otherwise."""
    _, card = vouched_card(pointer, storage, name)
    return Task.from_card(card)


def vouched_card(
    pointer: dict[str, Any], storage: RunPath, name: str
) -> tuple[RunPath, dict[str, Any]]:
    """(the copy, its card) of champion `name`, once the card is verified (sha256, and the
    signature where TRAIN_VERIFY_KEY is set) and says what the pointer says of its champion
    (run, task, figures): what is judged against or fine-tuned from; TaskUnknown otherwise."""
    folder = champion_copy(pointer, storage, name)
    card = verified_card(pointer, folder, signed=True)
    _agreeing(pointer, card)
    return folder, card


def pointer_disagrees(pointer: dict[str, Any], folder: RunPath) -> str | None:
    """What the pointer says of its champion that the card it vouches for in `folder` does
    not, for a reader that then loads that card itself (`trainctl predict champion:`), or None;
    None too where the card does not verify: that reader refuses it in its own words, and the
    card it loads is this one, its bytes fixed by the pointer's sha256."""
    try:
        card = verified_card(pointer, folder)
    except TaskUnknown:
        return None
    return _contradiction(pointer, card)


def _agreeing(pointer: dict[str, Any], card: dict[str, Any]) -> None:
    problem = _contradiction(pointer, card)
    if problem:
        raise TaskUnknown(
            f"the pointer says otherwise than the model card it names ({problem}): altered "
            "since it was written"
        )


def _contradiction(pointer: dict[str, Any], card: dict[str, Any]) -> str | None:
    """What the pointer says of its champion that its card does not, or None."""
    task = Task.from_card(card)
    if "task" in pointer:
        try:
            recorded = Task.from_record(pointer["task"])
        except ValueError as err:
            return f"its {err}"
        if recorded != task:  # every field: the listed names as well as their digest
            return f"its task is {recorded.describe()}, the card's {task.describe()}"
    if "run_name" in pointer and pointer["run_name"] != card.get("run_name"):
        named = _shown(card.get("run_name"))
        return f"its run is {_shown(pointer['run_name'])}, the card's {named}"
    checkpoint = card.get("checkpoint")
    figures = checkpoint.get("metrics") if isinstance(checkpoint, dict) else None
    if not isinstance(figures, dict):
        return "the card records no checkpoint metrics"
    if "metrics" in pointer and _canonical(pointer["metrics"]) != _canonical(figures):
        return _metrics_differ(pointer["metrics"], figures)
    metric = pointer.get("metric")
    stated = figures.get(metric) if isinstance(metric, str) else None
    if "value" in pointer and _canonical(pointer["value"]) != _canonical(stated):
        return f"its value is {_shown(pointer['value'])}, the card's {metric} {_shown(stated)}"
    return None


def _metrics_differ(recorded: Any, figures: dict[str, Any]) -> str:
    """The figures that differ, each beside the card's: the whole of both, cut to a line,
    showed two identical prefixes and never the edited figure."""
    if not isinstance(recorded, dict):
        return f"its metrics are {_shown(recorded)}, not figures by name as the card's"
    names = sorted({*recorded, *figures}, key=str)
    differ = [k for k in names if _canonical(recorded.get(k)) != _canonical(figures.get(k))]
    shown = "; ".join(
        f"{one_line(str(k), 80)} {_shown(recorded.get(k))}, the card's {_shown(figures.get(k))}"
        for k in differ[:5]
    )
    more = f" and {len(differ) - 5} more" if len(differ) > 5 else ""
    return f"its metrics differ from the card's: {shown}{more}"


def _canonical(value: Any) -> str:
    """A figure or set of figures as JSON writes it: NaN equals NaN, key order is moot."""
    return json.dumps(value, sort_keys=True)


def _shown(value: Any) -> str:
    return one_line(_canonical(value), 200)


def champion_copy(pointer: dict[str, Any], storage: RunPath, name: str) -> RunPath:
    """The champion's copy the pointer names (app/promotion/champion_export.py), or
    TaskUnknown where it names none."""
    try:
        return champion_export.named_by(pointer, storage, name)
    except pointer_signature.NotPromoted as err:
        raise TaskUnknown(f"the pointer is not followed: {err}") from None
    except ValueError as err:
        raise TaskUnknown(f"the pointer names no copy of the champion: {err}") from None


def verified_card(
    pointer: dict[str, Any], folder: RunPath, *, signed: bool = False
) -> dict[str, Any]:
    """The model card in the champion's copy `folder`, once its sha256 is the pointer's
    `card_sha256`; `signed`: and its signature, where TRAIN_VERIFY_KEY is set (what loads
    weights; telling the champion's task needs no signature)."""
    expected = pointer.get("card_sha256")
    export = str(folder)
    try:
        data = read_bounded(folder / CARD_FILE, folder, MAX_CARD_BYTES)
    except FileNotFoundError:
        raise TaskUnknown(f"{export}/{CARD_FILE} is gone") from None
    except safe_fs.LinkRefused:
        raise TaskUnknown(f"{export}/{CARD_FILE} is a symbolic link, not followed") from None
    except (OSError, ValueError) as err:
        raise TaskUnknown(f"{export}/{CARD_FILE} cannot be read ({err})") from None
    found = hashlib.sha256(data).hexdigest()
    if found != expected:
        raise TaskUnknown(f"{export}/{CARD_FILE} has sha256 {found}, not the pointer's {expected}")
    try:
        card = bounded_json.loads(data.decode("utf-8"), MAX_CARD_BYTES)
    except ValueError as err:
        raise TaskUnknown(f"{export}/{CARD_FILE} is not JSON ({err})") from None
    problem = card_problem(card)
    if problem:
        raise TaskUnknown(f"{export}/{CARD_FILE}: {problem}")
    if signed:
        try:
            signature.require(folder, folder, data)
        except ConfigError as err:
            raise TaskUnknown("; ".join(err.problems)) from None
    return card
