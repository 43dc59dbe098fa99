"""JSON from a run folder, bounded before it is parsed.

Run-folder records (summary.json, metrics.jsonl, attempts.jsonl, a checkpoint's meta.json) are
written by trainctl and are a few levels deep; anything on a shared volume may still have been
replaced. Python's json raises RecursionError on deep nesting (`[[[[...` 100k deep) and a
RecursionError is not a ValueError, so such a file crashed every command that read it, reruns
included. Here nesting and size are checked first, with a cheap scan, and a file over either
bound is a ValueError: damaged, like any other unreadable record.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 32  # trainctl's own records nest at most 4 levels (summary -> settings -> ...)
# A string (escapes included) or one bracket: brackets inside strings do not count. Every
# character but '"' is taken by one branch of the loop (DOTALL: an escaped newline too, and a
# lone backslash at the end), and an unclosed string runs to the end: the regex never gives
# characters back, so a crafted record (an unclosed run of \" pairs) costs linear time.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.|\\\Z)*(?:"|\Z)|[\[\]{}]', re.DOTALL)


def depth(text: str) -> int:
    """The deepest nesting of arrays and objects in `text` (unbalanced text still counts)."""
    level = deepest = 0
    for match in _TOKENS.finditer(text):
        token = match.group(0)
        if token in ("[", "{"):
            level += 1
            deepest = max(deepest, level)
        elif token in ("]", "}"):
            level -= 1
    return deepest


def loads(text: str, max_chars: int | None = None, *, unique_keys: bool = False) -> Any:
    """json.loads, or ValueError when `text` is longer than max_chars or nests deeper than
    MAX_DEPTH (checked before parsing, so the parser never recurses that far), or, with
    `unique_keys`, holds an object naming a key twice (Python keeps the last, other readers
    the first: a record two readers would read differently)."""
    if max_chars is not None and len(text) > max_chars:
        raise ValueError(f"{len(text):,} characters, over the {max_chars:,} allowed")
    if (found := depth(text)) > MAX_DEPTH:
        raise ValueError(f"nested {found} levels deep, over the {MAX_DEPTH} allowed")
    return json.loads(text, object_pairs_hook=_once if unique_keys else None)


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for key, value in pairs:
        if key in record:
            raise ValueError(f"the key {json.dumps(key)[:60]} is given twice")
        record[key] = value
    return record
