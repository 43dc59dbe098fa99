"""The champion's task, as the pointer records it or, for a pointer written before it did, as
the model card it vouches for says.

The card is read the way everything another writer could change is read: bounded
(MAX_CARD_BYTES), as a regular file below its export folder without following a link
(app/storage/reading.read_bounded), and used only once its sha256 is the pointer's
`card_sha256`; its shape is app/export/card.py's to judge. Read once, checked, parsed: the
bytes hashed are the bytes read.
"""

from __future__ import annotations

import hashlib
from typing import Any

from app.export.card import CARD_FILE, MAX_CARD_BYTES, card_problem
from app.promotion.task import Task
from app.storage import bounded_json, safe_fs
from app.storage.location import parse_location
from app.storage.reading import read_bounded


class TaskUnknown(Exception):
    """Neither the pointer nor a card it vouches for says what the champion's task is."""


def champion_task(pointer: dict[str, Any], endpoint: str | None = None) -> Task:
    """The task of the champion `pointer` names; TaskUnknown saying why it cannot be told."""
    if "task" in pointer:
        try:
            return Task.from_record(pointer["task"])
        except ValueError as err:
            raise TaskUnknown(f"the pointer's {err}") from None
    return Task.from_card(verified_card(pointer, endpoint))


def verified_card(pointer: dict[str, Any], endpoint: str | None = None) -> dict[str, Any]:
    """The model card the pointer names, once its sha256 is the pointer's `card_sha256`."""
    export, expected = pointer.get("export"), pointer.get("card_sha256")
    if not isinstance(export, str) or not isinstance(expected, str):
        raise TaskUnknown("the pointer names no export or no card_sha256")
    try:
        folder = parse_location(export, endpoint)
        path = folder / CARD_FILE
        data = read_bounded(path, folder, MAX_CARD_BYTES)
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
    return card
