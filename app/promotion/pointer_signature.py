"""A champion pointer signed as a promotion: what a writer of the storage cannot forge.

A run signs its export's card whether or not the gate promotes it (app/export/signature.py),
so a signed card says "trainctl made this", not "this won". Anyone who may write the storage
could copy a refused run's signed export into `champions/<name>/<sha256>/` and point the
pointer at it, and every reader with TRAIN_VERIFY_KEY would load it. So the promotion step
signs, with TRAIN_SIGNING_KEY, the statement "card <sha256> is version <n> of champion
<name>" into the pointer it writes, and where TRAIN_VERIFY_KEY is set a pointer is followed
only when that statement verifies for the pointer's name (its file name), version and card.

What it does not stop: a pointer that was signed, put back whole (a rollback to an earlier
promotion); its version says which one it is.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

from app.export import signature
from app.formatting import one_line

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

FIELD = "promotion_signature"


class NotPromoted(ValueError):
    """A pointer that TRAIN_VERIFY_KEY does not vouch for as a promotion."""


def statement(name: str, pointer: dict[str, Any]) -> bytes:
    """The bytes signed: the champion's name, the pointer's version and card, nothing else."""
    said = {
        "card_sha256": pointer.get("card_sha256"),
        "model_name": name,
        "version": pointer.get("version"),
    }
    return json.dumps(said, sort_keys=True, separators=(",", ":")).encode()


def signed(pointer: dict[str, Any], name: str, key: Ed25519PrivateKey) -> dict[str, Any]:
    """`pointer` with its promotion signature."""
    record = {
        "algorithm": signature.ALGORITHM,
        "key_id": signature.key_id(key.public_key()),
        "signature": base64.b64encode(key.sign(statement(name, pointer))).decode(),
    }
    return {**pointer, FIELD: record}


def check(pointer: dict[str, Any], name: str) -> None:
    """Where TRAIN_VERIFY_KEY is set: the pointer's promotion signature verifies for `name`,
    its version and its card; NotPromoted saying why not. Else nothing to do."""
    from cryptography.exceptions import InvalidSignature

    key = signature.configured_key()
    if key is None:
        return
    expected = signature.key_id(key)
    record = pointer.get(FIELD)
    if record is None:
        raise NotPromoted(
            f"it carries no {FIELD}, and with TRAIN_VERIFY_KEY (key {expected}) only a pointer "
            "a signed promotion wrote is followed (one written by hand, or by a trainctl "
            "before promotions were signed, is not); remove it, and the next run that passes "
            "the gate becomes the champion"
        )
    try:
        raw = base64.b64decode(str(record["signature"]), validate=True)
        key.verify(raw, statement(name, pointer))
    except (TypeError, KeyError, ValueError):
        raise NotPromoted(f"its {FIELD} is unreadable") from None
    except InvalidSignature:
        named = record.get("key_id")
        by = "" if named in (None, expected) else f" (it names key {one_line(str(named), 40)})"
        raise NotPromoted(
            f"its {FIELD} does not verify against TRAIN_VERIFY_KEY (key {expected}){by}: its "
            "name, version or card was changed after the promotion, or another key signed it"
        ) from None
