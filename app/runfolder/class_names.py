"""A run's class names: recorded once in <run_dir>/classes.json, and the same on every rerun.

Label i means class_names[i] for the whole life of a run: its checkpoints' output units are in
that order. A rerun whose data yields other names (a class folder added, removed or renamed)
would silently give the old weights' units new meanings, so it is refused (exit 2, before Ray
starts) with the difference named. Data without names (Parquet with bare label ids) records
nothing and is checked against nothing, except that a run that recorded names keeps them.

Label i means names[i], so a list naming one class twice has no meaning: which label is
"cat"? The same holds for two names that are one text written two ways in Unicode (`café` as
NFC, one code point for é, and as NFD, e plus a combining accent: macOS writes folder names
the second way, most tools the first). Such a list would give two classes that look the same
in every message, card and prediction, so it is refused wherever a list comes from (folder
names, Parquet metadata, classes.json, a checkpoint's or a model card's), naming both spellings
(`names_problem`, the one rule). Names are kept as written, not normalised: they are also the
folders' and objects' names. Letter case is not folded: `A` and `a` are two classes of a
letters dataset.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

from app.formatting import shown
from app.runfolder.folder import read_record_file
from app.storage import bounded_json, safe_fs
from app.storage.location import RunPath, write_json

CLASSES_FILE = "classes.json"  # also one of the run folder's own names (app/runfolder/folder.py)
MAX_BYTES = 64 << 20  # MAX_CLASSES names of up to 255 bytes each, JSON-escaped
MAX_CLASSES = 100_000  # the model's output layer has one unit per class


def recorded(run_dir: RunPath) -> tuple[str, ...] | None:
    """The names the run recorded, or None when it recorded none. ValueError when the file is
    there but unreadable: guessing would risk the very mix-up the file prevents."""
    path = run_dir / CLASSES_FILE
    try:
        value: Any = bounded_json.loads(read_record_file(path, MAX_BYTES).decode("utf-8"))
    except (FileNotFoundError, NotADirectoryError):  # no run folder there: storage says why
        return None
    except (OSError, ValueError, safe_fs.LinkRefused) as err:
        raise ValueError(f"{path} cannot be read ({err})") from None
    names = value.get("class_names") if isinstance(value, dict) else None
    if (
        not isinstance(names, list)
        or len(names) > MAX_CLASSES
        or not all(isinstance(n, str) for n in names)
    ):
        raise ValueError(f"{path} is damaged (no list of class names)")
    if problem := names_problem(names):
        raise ValueError(f"{path} is damaged ({problem})")
    return tuple(names)


def _newest_checkpoints(run_dir: RunPath) -> tuple[str, ...] | None:
    """The names in the newest intact checkpoint's meta.json, for a run folder that lost (or
    predates) classes.json; None when it has no checkpoint or its checkpoint names none."""
    from app.runfolder import checkpoints  # only when classes.json is missing

    latest = checkpoints.scan(run_dir).latest
    if latest is None:
        return None
    try:
        text = read_record_file(latest.path / checkpoints.META_FILE, checkpoints.MAX_META_BYTES)
        meta = bounded_json.loads(text.decode("utf-8"), checkpoints.MAX_META_BYTES)
    except (OSError, ValueError, safe_fs.LinkRefused):  # changed since the scan: it decides
        return None
    names = meta.get("class_names") if isinstance(meta, dict) else None
    if not isinstance(names, list):
        return None
    # Names the checkpoint cannot mean (a class twice) compare unequal to any data's, so the
    # run is refused with the difference named rather than trusted.
    return tuple(str(n) for n in names)


def class_names_problem(run_dir: RunPath, names: tuple[str, ...], source: object) -> str | None:
    """Why data with these class `names` (() for bare label ids), read from `source`, cannot
    continue the run at run_dir, or None."""
    try:
        before = recorded(run_dir)
    except ValueError as err:
        return f"{err}; remove it only if the run's checkpoints should start over"
    if before is None and names:  # only then worth verifying the checkpoints
        before = _newest_checkpoints(run_dir)
    if before is None or before == names:
        return None
    return (
        f"{source}: the classes differ from those run {run_dir.name} recorded "
        f"({describe_difference(before, names)}); label numbers would "
        "change meaning: restore the class folders, or train a new run (TRAIN_RUN_NAME)"
    )


def describe_difference(before: tuple[str, ...], now: tuple[str, ...]) -> str:
    """What changed between two class lists, in a few words."""
    if not now:
        return f"the run has {len(before)} named classes, this data has only label numbers"
    added = [n for n in now if n not in set(before)]
    removed = [n for n in before if n not in set(now)]
    parts = []
    for word, names in (("new", added), ("missing", removed)):
        if names:
            listed = ", ".join(shown(n) for n in names[:5]) + (" ..." if len(names) > 5 else "")
            parts.append(f"{word}: {listed}")
    old = {unicodedata.normalize("NFC", n): n for n in removed}
    for name in added:
        if (was := old.get(unicodedata.normalize("NFC", name))) is not None:
            parts.append(
                f"{name!a} was {was!a}: the same name in another Unicode "
                "normalisation (NFC/NFD), which makes it another class"
            )
            break
    if not parts and len(before) != len(now):  # a list that names a class twice
        parts.append(f"{len(before)} names before, {len(now)} now, some named more than once")
    elif not parts:
        moved = next(i for i, (a, b) in enumerate(zip(before, now, strict=True)) if a != b)
        parts.append(f"same names in another order from label {moved}")
    return "; ".join(parts)


def record(run_dir: RunPath, names: tuple[str, ...]) -> None:
    """Write classes.json when the data has names and the run has none recorded yet."""
    if names and recorded(run_dir) is None:
        write_json(run_dir / CLASSES_FILE, {"class_names": list(names)})


def one_form(name: str) -> str:
    """The form every spelling of a class name shares (NFC): a folder made on macOS (NFD) and
    the same name typed elsewhere (NFC) are one class. A dataset never holds two names of one
    form (names_problem refuses them), so matching by it is unambiguous."""
    return unicodedata.normalize("NFC", name)


def spelled_as(typed: str, names: Sequence[str]) -> str | None:
    """The class of `names` that `typed` (a gate's `recall[...]`) names, as the dataset spells
    it: the same name in any Unicode form (one_form), else the one name that differs from it
    only by spaces around it (a folder named ` lead`, typed `recall[lead]`); None where none
    or several do."""
    by_form = {one_form(n): n for n in names}
    if one_form(typed) in by_form:
        return by_form[one_form(typed)]
    loose = [n for n in names if one_form(n).strip() == one_form(typed).strip()]
    return loose[0] if len(loose) == 1 else None


def names_problem(names: Sequence[str]) -> str | None:
    """Why `names` cannot label classes (a name twice, or one name in two Unicode
    normalisations), or None. Names are shown with ascii() so that the two spellings differ."""
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        key = one_form(name)
        if key not in seen:
            seen[key] = index
            continue
        first = names[seen[key]]
        if first == name:
            return (
                f"class {name!a} is named twice (labels {seen[key]} and {index}); each "
                "class needs one name"
            )
        look = f", both shown as {key}" if key.isprintable() else ""
        return (
            f"class names {first!a} (label {seen[key]}) and {name!a} (label {index}) "
            f"are one name in two Unicode normalisations{look}; they would be two classes that "
            "look the same: rename one (or merge them)"
        )
    return None
