"""Signed model cards: what a writer of the storage cannot forge.

Every checksum trainctl keeps (the card's list of its files' sha256s, summary.json's
`card_sha256`, the champion pointer's) lives in the same storage as what it vouches for: whoever
may write there may rewrite both. A signature is the one anchor outside it. At the end of a run
the driver signs the card's bytes with TRAIN_SIGNING_KEY, an Ed25519 private key only training
jobs read, and writes `model_card.sig` beside the card (in the run's export/ and in the
champion's copy). A reader with TRAIN_VERIFY_KEY, the public half, loads a card only once the
signature over its exact bytes verifies; the card's checksums then vouch for every other file.

Ed25519 (RFC 8032) through `cryptography`: deterministic signatures (the same card signs to
the same bytes, so a champion copy written twice is written alike), small keys, and no
parameters to get wrong. Keys are PEM files, as `openssl genpkey -algorithm ed25519` writes
them; loading one runs no code.

What a signature does not stop: an older card that was signed, put back (a rollback to an
earlier champion); its pointer's version and card_sha256 say which one it is.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from app.errors import ConfigError
from app.formatting import one_line
from app.storage import bounded_json, safe_fs
from app.storage.location import RunPath
from app.storage.reading import read_bounded

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

SIGNATURE_FILE = "model_card.sig"
ALGORITHM = "ed25519"
MAX_KEY_BYTES = 64 << 10
MAX_SIGNATURE_BYTES = 4 << 10
MAKE_KEYS = (
    "openssl genpkey -algorithm ed25519 -out signing.pem && "
    "openssl pkey -in signing.pem -pubout -out verify.pem"
)


def _key_bytes(path: Path, setting: str) -> bytes:
    """The key file's bytes: a regular file of bounded size. A link is followed: the operator
    names this file (a Kubernetes Secret volume's files are links), no storage writer does."""
    try:
        # O_NONBLOCK: a FIFO named as the key returns at once, and is refused below (a plain
        # open waited for a writer forever: a red-team pass). Links are followed (see above).
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise ConfigError(f"{setting}={path}: not a regular file")
            data = file.read(MAX_KEY_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{setting}={path}: no such file") from None
    except OSError as err:  # a folder, unreadable
        raise ConfigError(f"{setting}={path}: cannot be read ({err.strerror or err})") from None
    if len(data) > MAX_KEY_BYTES:
        raise ConfigError(f"{setting}={path}: over {MAX_KEY_BYTES:,} bytes, no key file")
    if (blocks := data.count(b"-----BEGIN ")) > 1:
        # The PEM reader takes the first and ignores the rest: an old and a new verify key put
        # in one file for a rotation verified with the first alone (a red-team pass).
        raise ConfigError(
            f"{setting}={path}: holds {blocks} PEM blocks; it takes one key (the reader would "
            "use the first and ignore the rest): one key per file"
        )
    return data


def private_key(path: Path) -> Ed25519PrivateKey:
    """TRAIN_SIGNING_KEY's key; ConfigError saying what the file must be."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(_key_bytes(path, "TRAIN_SIGNING_KEY"), password=None)
    except (ValueError, TypeError) as err:
        raise ConfigError(
            f"TRAIN_SIGNING_KEY={path}: not an unencrypted PEM private key ({err}); make a "
            f"pair with: {MAKE_KEYS}"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(
            f"TRAIN_SIGNING_KEY={path}: holds a key of type "
            f"{type(key).__name__.removeprefix('_')}, not an Ed25519 key; make a pair with: "
            f"{MAKE_KEYS}"
        )
    return key


def public_key(path: Path) -> Ed25519PublicKey:
    """TRAIN_VERIFY_KEY's key; ConfigError saying what the file must be."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        key = load_pem_public_key(_key_bytes(path, "TRAIN_VERIFY_KEY"))
    except (ValueError, TypeError) as err:
        raise ConfigError(
            f"TRAIN_VERIFY_KEY={path}: not a PEM public key ({err}); write one from the signing "
            "key with: openssl pkey -in signing.pem -pubout -out verify.pem"
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"TRAIN_VERIFY_KEY={path}: not an Ed25519 public key")
    return key


def key_id(key: Ed25519PublicKey) -> str:
    """A short name for a public key (the first 16 hex digits of its raw bytes' sha256)."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw = key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def sign(card_bytes: bytes, key: Ed25519PrivateKey) -> bytes:
    """model_card.sig's bytes for a card."""
    record = {
        "algorithm": ALGORITHM,
        "key_id": key_id(key.public_key()),
        "signature": base64.b64encode(key.sign(card_bytes)).decode(),
    }
    return (json.dumps(record, indent=2) + "\n").encode()


def check(folder: RunPath, root: RunPath, card_bytes: bytes, key: Ed25519PublicKey) -> None:
    """The card's bytes verify against `key` with the model_card.sig beside it; ConfigError
    saying why not (nothing is loaded then)."""
    from cryptography.exceptions import InvalidSignature

    path = folder / SIGNATURE_FILE
    expected = key_id(key)
    try:
        text = read_bounded(path, root, MAX_SIGNATURE_BYTES).decode("utf-8")
        record = bounded_json.loads(text, MAX_SIGNATURE_BYTES)
        if not isinstance(record, dict) or not isinstance(record.get("signature"), str):
            raise ValueError("no `signature` text in it")  # `{}` said only ('signature')
        signature = base64.b64decode(record["signature"], validate=True)
        signed_by = record.get("key_id")
    except FileNotFoundError:
        raise ConfigError(
            f"{folder}: no {SIGNATURE_FILE}: the export is not signed (made without "
            "TRAIN_SIGNING_KEY, or its signature was removed since), and TRAIN_VERIFY_KEY (key "
            f"{expected}) loads only signed ones; not loaded"
        ) from None
    except safe_fs.LinkRefused:
        raise
    except (OSError, ValueError, TypeError, AttributeError) as err:
        why = one_line(str(err), 200)
        raise ConfigError(f"{path}: unreadable signature ({why}); not loaded") from None
    try:
        key.verify(signature, card_bytes)
    except InvalidSignature:
        named = one_line(str(signed_by), 40) if signed_by is not None else None
        by = "" if signed_by == expected or named is None else f" (it names key {named})"
        raise ConfigError(
            f"{path}: the model card's signature does not verify against TRAIN_VERIFY_KEY (key "
            f"{expected}){by}: the card was altered, or signed by another key; not loaded"
        ) from None


@functools.cache
def _cached_public_key(path: str) -> Ed25519PublicKey:
    return public_key(Path(path))


def configured_key() -> Ed25519PublicKey | None:
    """TRAIN_VERIFY_KEY's key, where it is set (the environment, or `.env`): every reader of an
    export checks with it. Loaded once per process."""
    from app.settings.env import settings_environ

    value = settings_environ().get("TRAIN_VERIFY_KEY", "").strip()
    return _cached_public_key(str(Path(value).expanduser().absolute())) if value else None


def require(folder: RunPath, root: RunPath, card_bytes: bytes) -> None:
    """Where TRAIN_VERIFY_KEY is set: the card's bytes verify (`check`); else nothing to do."""
    key = configured_key()
    if key is not None:
        check(folder, root, card_bytes, key)


def configuration(signing: Path | None, verify: Path | None) -> str:
    """`trainctl check`'s line on signing; ConfigError where a run could not work with it: a
    key that does not load, a verify key without the signing key (the run's own export would
    be refused at its end), or two keys that are not a pair."""
    signer = private_key(signing) if signing is not None else None
    checker = public_key(verify) if verify is not None else None
    if signer is None and checker is None:
        return "off: exports carry checksums only (TRAIN_SIGNING_KEY, TRAIN_VERIFY_KEY: signed)"
    if signer is None:
        assert checker is not None
        raise ConfigError(
            f"TRAIN_VERIFY_KEY (key {key_id(checker)}) is set without TRAIN_SIGNING_KEY: this "
            "run's own export would be unsigned, and refused when the run evaluates it; set "
            "TRAIN_SIGNING_KEY to the private half"
        )
    signs = key_id(signer.public_key())
    if checker is None:
        return f"exports signed with key {signs}; readers check them with TRAIN_VERIFY_KEY"
    if key_id(checker) != signs:
        raise ConfigError(
            f"TRAIN_SIGNING_KEY (key {signs}) and TRAIN_VERIFY_KEY (key {key_id(checker)}) are "
            "not a pair: this run's export would be refused by its own check"
        )
    return f"exports signed and verified with key {signs}"
