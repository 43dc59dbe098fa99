"""The champion pointer: `<storage_path>/champions/<TRAIN_MODEL_NAME>.json`.

A small JSON object naming the run whose export is the current champion, its version (1, 2,
... : one more each time the pointer moves), the metric it won with, its task (class names,
channels, input size: app/promotion/task.py), the immutable copy of its export
(`champions/<name>/<card sha256>/`, app/promotion/export_copy.py) and the sha256 of that
copy's model card (app/export/card.py), so a consumer can check the card it loads is the one
that was promoted.

Replaced whole, never edited, and only by a compare-and-swap: the pointer the gate judges
against is the pointer that is replaced, so two runs (or two pools) finishing at once never
undo each other, and an older or worse model never overwrites a newer champion.
- On a volume, the read-decide-write runs under an exclusive flock on `champions/.<name>.lock`
  (two drivers are serialised: the second decides against the first's pointer), and the write
  is an atomic rename (app/storage/location.py write_atomic).
- In an S3 bucket, the pointer and its ETag are read in one GET and written back with
  `If-Match: <ETag>` (`If-None-Match: *` for the first), app/storage/conditional.py: a writer
  that loses the race gets a 412, reads the new pointer and decides again against it.
- In a GCS bucket, trainctl has no client that can send a precondition
  (`ifGenerationMatch`): the pointer is written whole (one upload) and read back, and a lost
  race is reported (`superseded`), not prevented. docs/gitops.md says so; give concurrent
  pools their own TRAIN_MODEL_NAME there.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from app.errors import did_you_mean
from app.export.card import CARD_FILE
from app.formatting import one_line, whole
from app.promotion.champion_export import LinkedCopy, named_by
from app.promotion.champion_task import pointer_disagrees
from app.settings.run import CHAMPIONS_DIR
from app.storage import bounded_json, conditional, locks, safe_fs
from app.storage.entries import Kind, entries
from app.storage.location import RunPath, write_atomic
from app.storage.reading import present, read_bounded

MAX_POINTER_BYTES = 1 << 20
MAX_VERSION = 10**9
LOCK_WAIT_S = 300.0  # another driver holds it for one read, a copy of its export, one write
MAX_NAMES_SHOWN = 20
SWAP_ATTEMPTS = 30  # lost races in a row before giving up (each one: another run promoted)


class PointerDamaged(ValueError):
    """The pointer exists but is not a pointer: nothing may be compared against it."""


class NoChampion(PointerDamaged):
    """There is no pointer to follow (champion_export): a champion's name not yet promoted."""


@dataclass(frozen=True)
class Replaced:
    before: dict[str, Any] | None  # the pointer the decision was made against
    written: dict[str, Any] | None  # what this call wrote, None when it kept `before`
    after: dict[str, Any] | None  # read back after the write (bucket) or `written`/`before`

    @property
    def superseded(self) -> bool:
        return self.written is not None and self.after != self.written


def pointer_path(storage: RunPath, name: str) -> RunPath:
    return storage / CHAMPIONS_DIR / f"{name}.json"


def champion_names(storage: RunPath) -> list[str]:
    """The TRAIN_MODEL_NAMEs with a pointer under `storage`, sorted (names another writer may
    have planted: shown through one_line where printed)."""
    found = entries(storage / CHAMPIONS_DIR, storage)
    pointers = (e.name for e in found if e.kind is Kind.FILE and not e.name.startswith("."))
    return sorted(n.removesuffix(".json") for n in pointers if n.endswith(".json"))


def other_champions(storage: RunPath, name: str) -> str:
    """What follows "no champion NAME": did you mean another, or the champions there, or
    that there is none yet (each after "; ")."""
    known = [one_line(n, 100) for n in champion_names(storage)]
    if not known:
        return "; there is no champion there yet (a run's gate promotes the first)"
    shown = ", ".join(known[:MAX_NAMES_SHOWN]) + (" ..." if len(known) > MAX_NAMES_SHOWN else "")
    return did_you_mean(name, known, f"the champions there: {shown}")


def _root(path: RunPath) -> RunPath:
    """Where the pointer's opens start: the storage folder, so that neither `champions/` nor
    the pointer is read or written through a link planted there (app/storage/safe_fs.py)."""
    return path.parent.parent


def champion_export(
    storage: RunPath, name: str, endpoint: str | None
) -> tuple[RunPath, dict[str, Any]]:
    """(the export folder, the pointer that names it: its card_sha256, run and version) of
    champion `name` (`trainctl predict champion:<name>`); PointerDamaged where there is none
    to follow."""
    path = pointer_path(storage, name)
    pointer = read_pointer(path)
    if pointer is None:
        raise NoChampion(
            f"{path}: no champion {name} (no pointer there){other_champions(storage, name)}"
        )
    try:
        copy = named_by(pointer, storage, name)
    except LinkedCopy as err:
        raise PointerDamaged(str(err)) from None
    except ValueError as err:
        raise PointerDamaged(f"{path}: not a champion pointer: {err}") from None
    if not present(copy / CARD_FILE):
        raise PointerDamaged(
            f"{path}: the champion's copy it names, {copy}, holds no {CARD_FILE}; fix or "
            "remove the pointer"
        )
    problem = pointer_disagrees(pointer, copy)
    if problem:
        raise PointerDamaged(
            f"{path}: the pointer says otherwise than the model card it names ({problem}): "
            "altered since it was written; fix or remove the pointer"
        )
    return copy, pointer


def read_pointer(path: RunPath) -> dict[str, Any] | None:
    """The pointer, None when there is none; PointerDamaged when it is unreadable."""
    try:
        data = read_bounded(path, _root(path), MAX_POINTER_BYTES)
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as err:  # oversized, a folder
        raise PointerDamaged(f"{path}: unreadable champion pointer ({err})") from None
    except safe_fs.LinkRefused:  # a ConfigError: it would stop the step instead of keeping
        raise PointerDamaged(
            f"{path}: unreadable champion pointer (a symbolic link, not followed)"
        ) from None
    return parse_pointer(path, data)


def last_version(pointer: dict[str, Any], where: object) -> str | None:
    """Why no promotion can follow the champion `pointer`, or None: its version is the last a
    pointer may hold, and the next would be refused by every reader of it."""
    if pointer.get("version") != MAX_VERSION:
        return None
    return (
        f"the champion's pointer {where} is at v{MAX_VERSION:,}, the last version a pointer may "
        "hold, so no promotion can follow it: remove the pointer (the next run that passes the "
        "gate becomes v1) or use another TRAIN_MODEL_NAME"
    )


def parse_pointer(path: RunPath, data: bytes | None) -> dict[str, Any] | None:
    """The pointer in `data` (None: there is none); PointerDamaged when it is not one."""
    if data is None:
        return None
    try:
        pointer = bounded_json.loads(data.decode("utf-8"), MAX_POINTER_BYTES, unique_keys=True)
    except ValueError as err:  # not UTF-8, not JSON, too deep
        raise PointerDamaged(f"{path}: unreadable champion pointer ({err})") from None
    version = pointer.get("version") if isinstance(pointer, dict) else None
    if whole(version) is None:
        raise PointerDamaged(f"{path}: not a champion pointer (no whole-number `version`)")
    # A count of promotions: the next one numbers itself from it, and every line shows it.
    if not 1 <= version <= MAX_VERSION:
        shown = one_line(str(version), 40)
        raise PointerDamaged(
            f"{path}: not a champion pointer (`version` {shown} is not a promotion count from "
            f"1 to {MAX_VERSION:,})"
        )
    # The gate compares with `metrics` (beats_champion): anything but an object there would
    # stop the gate midway instead of keeping the champion with a reason.
    if not isinstance(pointer.get("metrics", {}), dict):
        raise PointerDamaged(f"{path}: not a champion pointer (`metrics` is not an object)")
    return pointer


def encode(pointer: dict[str, Any]) -> bytes:
    return (json.dumps(pointer, indent=2) + "\n").encode()


Decide = Callable[[dict[str, Any] | None], dict[str, Any] | None]


def replace(path: RunPath, decide: Decide) -> Replaced:
    """Read the pointer, let `decide` return the new one (or None to keep it), write it whole,
    as one step: nobody else's pointer lands between the read `decide` judged and the write.

    `decide` may raise: nothing is written then. It may be called again (a lost race in a
    bucket), each time with the pointer as it is then."""
    if conditional.guard(path) is conditional.Guard.COMPARE_AND_SWAP:
        return _swap(path, decide)
    try:
        with _exclusive(path) as locked:
            before = read_pointer(path)
            new = decide(before)
            if new is None:
                return Replaced(before, None, before)
            write_atomic(path, encode(new), _root(path))
            after = new if locked else read_pointer(path)  # GCS: no lock; read back who won
    except safe_fs.LinkRefused as err:  # a ConfigError: the step keeps the champion instead
        raise PointerDamaged(f"{path}: {'; '.join(err.problems)}") from None
    return Replaced(before, new, after)


def _swap(path: RunPath, decide: Decide) -> Replaced:
    """Compare-and-swap in S3: read with the ETag, decide, write If-Match that ETag; a lost
    race is read again and decided again, against the pointer that won it."""
    for attempt in range(SWAP_ATTEMPTS):
        try:
            found = conditional.read(path, MAX_POINTER_BYTES)
        except ValueError as err:
            raise PointerDamaged(f"{path}: unreadable champion pointer ({err})") from None
        before = parse_pointer(path, found.data)
        new = decide(before)
        if new is None:
            return Replaced(before, None, before)
        if conditional.replace(path, encode(new), found):
            return Replaced(before, new, new)
        # Jittered, growing pauses: writers that collided do not collide again in step.
        time.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))
    raise conditional.ConditionalWriteError(
        f"{path}: replaced by other runs {SWAP_ATTEMPTS} times while this one decided; not written"
    )


@contextlib.contextmanager
def _exclusive(path: RunPath) -> Iterator[bool]:
    """The pointer's writers kept out while deciding and writing (True: a flock on a volume);
    False where the store has no locks (app/storage/locks.py)."""
    with contextlib.ExitStack() as held:
        try:
            locked = held.enter_context(locks.exclusive(path, _root(path), LOCK_WAIT_S))
        except safe_fs.LinkRefused as err:  # `champions/` itself: kept, with the reason
            raise PointerDamaged("; ".join(err.problems)) from None
        except locks.LockUnavailable as err:  # the lock's name taken by a link, or held long
            raise PointerDamaged(str(err)) from None
        yield locked
