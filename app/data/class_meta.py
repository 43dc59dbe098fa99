"""Class names: the rule every list of them obeys, and how Parquet carries them.

Label i means names[i], so a list naming one class twice has no meaning: which label is
"cat"? The same holds for two names that are one text written two ways in Unicode (`café` as
NFC, one code point for é, and as NFD, e plus a combining accent: macOS writes folder names
the second way, most tools the first). Such a list would give two classes that look the same
in every message, card and prediction, so it is refused wherever a list comes from (folder
names, Parquet metadata, classes.json, a checkpoint's or a model card's), naming both spellings.
Names are kept as written, not normalised: they are also the folders' and objects' names.
Letter case is not folded: `A` and `a` are two classes of a letters dataset.

In Parquet the names are a JSON list in the schema metadata, under one key: `trainctl
prepare-data --from-folder` writes them; `inspect_dataset` reads them back, so a dataset
prepared from an image folder still knows which label is which class. The value is plain JSON,
bounded before it is parsed: nothing in a data file can run code.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence

from app.storage import bounded_json

CLASS_NAMES_KEY = b"trainctl.class_names"
MAX_BYTES = 64 << 20  # MAX_CLASSES names of up to 255 bytes each, JSON-escaped


def encode(class_names: tuple[str, ...]) -> dict[bytes, bytes]:
    return {CLASS_NAMES_KEY: json.dumps(list(class_names)).encode()} if class_names else {}


def decode(metadata: dict[bytes, bytes] | None) -> tuple[str, ...]:
    """The names in a schema's metadata; () when there are none; ValueError when damaged."""
    from app.data.schema import MAX_CLASSES  # schema imports this module

    raw = (metadata or {}).get(CLASS_NAMES_KEY)
    if raw is None:
        return ()
    if len(raw) > MAX_BYTES:
        raise ValueError(f"{CLASS_NAMES_KEY.decode()} is over {MAX_BYTES:,} bytes")
    names = bounded_json.loads(raw.decode("utf-8", "replace"), MAX_BYTES)
    if (
        not isinstance(names, list)
        or not 2 <= len(names) <= MAX_CLASSES
        or not all(isinstance(n, str) for n in names)
    ):
        raise ValueError(f"{CLASS_NAMES_KEY.decode()} is not a list of 2..{MAX_CLASSES} names")
    problem = names_problem(names)
    if problem:
        raise ValueError(f"{CLASS_NAMES_KEY.decode()}: {problem}")
    return tuple(names)


def names_problem(names: Sequence[str]) -> str | None:
    """Why `names` cannot label classes (a name twice, or one name in two Unicode
    normalisations), or None. Names are shown with ascii() so that the two spellings differ."""
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        key = unicodedata.normalize("NFC", name)
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
