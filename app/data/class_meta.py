"""Class names in Parquet: how a dataset carries them (the rule every list obeys is
app/runfolder/class_names.py `names_problem`, since a run records its names too).

In Parquet the names are a JSON list in the schema metadata, under one key: `trainctl
prepare-data --from-folder` writes them; `inspect_dataset` reads them back, so a dataset
prepared from an image folder still knows which label is which class. The value is plain JSON,
bounded before it is parsed: nothing in a data file can run code.
"""

from __future__ import annotations

import json

from app.runfolder.class_names import MAX_CLASSES, names_problem
from app.storage import bounded_json

CLASS_NAMES_KEY = b"trainctl.class_names"
MAX_BYTES = 64 << 20  # MAX_CLASSES names of up to 255 bytes each, JSON-escaped


def encode(class_names: tuple[str, ...]) -> dict[bytes, bytes]:
    return {CLASS_NAMES_KEY: json.dumps(list(class_names)).encode()} if class_names else {}


def decode(metadata: dict[bytes, bytes] | None) -> tuple[str, ...]:
    """The names in a schema's metadata; () when there are none; ValueError when damaged."""
    raw = (metadata or {}).get(CLASS_NAMES_KEY)
    if raw is None:
        return ()
    if len(raw) > MAX_BYTES:
        raise ValueError(f"{CLASS_NAMES_KEY.decode()} is over {MAX_BYTES:,} bytes")
    try:
        names = bounded_json.loads(raw.decode("utf-8", "replace"), MAX_BYTES)
    except ValueError as err:  # json's own words alone did not say which metadata was damaged
        raise ValueError(f"{CLASS_NAMES_KEY.decode()} in its schema is not JSON ({err})") from None
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
