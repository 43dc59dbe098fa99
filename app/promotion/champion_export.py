"""The champion's files, immutable once promoted: `<storage>/champions/<name>/<card sha256>/`.

A run's `export/` is rewritten by every export of that run, whether or not the new one passes
the gate: a rerun with more epochs, two reruns at once. A pointer naming it would then name
files that changed under it (and no longer match its `card_sha256`). So promotion copies the
export it judged (the bytes export_best wrote, held in memory, not what is on storage now)
into a folder named by its card's sha256, each file created only where no file is (a hard
link on a volume, `If-None-Match: *` in S3: app/storage/conditional.py), the card last, and
the pointer names that folder. Promoting the same card again writes nothing; another card is
another folder; a file already there with other content was altered by someone else, and the
promotion is refused (nothing is overwritten, nothing is pointed at it).
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any

from app.export.card import CARD_FILE
from app.export.signature import SIGNATURE_FILE
from app.promotion import pointer_signature
from app.settings.run import CHAMPIONS_DIR
from app.storage import conditional, safe_fs
from app.storage.entries import no_link_below
from app.storage.location import RunPath
from app.storage.reading import sha256_of

if TYPE_CHECKING:
    from app.export.build import Export


class CopyRefused(Exception):
    """A file of the champion's folder exists with other content, or is not a plain file."""


SHA256 = re.compile(r"[0-9a-f]{64}")


def folder(storage: RunPath, name: str, card_sha256: str) -> RunPath:
    return storage / CHAMPIONS_DIR / name / card_sha256


def named_by(pointer: dict[str, Any], storage: RunPath, name: str) -> RunPath:
    """The champion's copy a pointer of this storage names by its card's sha256: found below
    the storage folder the pointer was read from, not at the absolute `export` it records,
    which names a folder only where the storage was mounted when it was written (and which a
    hand could point anywhere). ValueError where the pointer's card_sha256 is no sha256, or
    where TRAIN_VERIFY_KEY is set and no signed promotion wrote it (pointer_signature.py)."""
    digest = pointer.get("card_sha256")
    if not isinstance(digest, str) or not SHA256.fullmatch(digest):
        raise ValueError(f"its card_sha256 {str(digest)[:80]!r} is not a sha256")
    pointer_signature.check(pointer, name)  # every reader that follows a pointer comes here
    copy = folder(storage, name, digest)
    try:
        return no_link_below(copy, storage)  # read below the storage folder only
    except safe_fs.LinkRefused as err:
        raise LinkedCopy(
            f"{'; '.join(err.problems)}: the champion's copy is never read through a link "
            "(it could lead out of the storage folder); put the copy back as a folder"
        ) from None


class LinkedCopy(ValueError):
    """The champion's copy, or a folder on its way, is a symbolic link."""


def keep(export: Export, storage: RunPath, name: str) -> RunPath:
    """The champion's folder for `export`, its files created where they are not yet (OSError
    where the store refuses a write, CopyRefused where a file there differs)."""
    target = folder(storage, name, export.card_sha256)
    root = storage  # no file is written or read through a link below the storage folder
    signed = [(SIGNATURE_FILE, export.signature)] if export.signature else []
    for file, data in [*export.files.items(), *signed, (CARD_FILE, export.card_bytes)]:
        if conditional.create(target / file, data, root):
            continue
        expected = hashlib.sha256(data).hexdigest()
        try:
            found = sha256_of(target / file, root)
        except (OSError, safe_fs.LinkRefused) as err:
            raise CopyRefused(f"{target / file}: exists and cannot be read ({err})") from None
        if found != expected:
            raise CopyRefused(
                f"{target / file}: exists with sha256 {found}, not the {expected} promoted; "
                "altered, and never overwritten"
            )
    return target
