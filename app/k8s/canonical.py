"""Text forms that Go templates (Helm) and Python must produce byte for byte.

Helm hands every number in the values to templates as a float64, and Go prints floats its own
way (1000000 -> "1e+06", JSON 0.00001 -> "0.00001"), while Python prints "1000000.0" and
"1e-05". Each function here copies one Go behaviour the chart relies on, and is named after the
chart helper it mirrors; tests/contract/test_render_parity.py renders both on awkward values.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

EXACT_INTEGERS = 2.0**53  # every whole float64 below this is exact; `trainctl.str` agrees


def _shortest_digits(value: float) -> tuple[str, int]:
    """Shortest round-trip digits and the decimal exponent of the first digit."""
    _, digits, exponent = Decimal(repr(abs(value))).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    return text, len(digits) + int(exponent) - 1


def go_float(value: float) -> str:
    """Go's fmt %v for a float64: shortest digits, exponent form below 1e-4 or from 1e6."""
    if value == 0:
        return "0"
    digits, exp = _shortest_digits(value)
    sign = "-" if value < 0 else ""
    if exp < -4 or exp >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return sign + format(Decimal(repr(abs(value))), "f")


def scalar(value: Any) -> str:
    """The chart's `trainctl.str`: integral numbers print as integers, bools as true/false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        # As integers only while a float64 holds them exactly; the chart's int64 would overflow.
        if math.isfinite(value) and value == math.floor(value) and abs(value) < EXACT_INTEGERS:
            return str(int(value))
        return go_float(value)
    return str(value)


def canon(value: Any) -> str:
    """The chart's `trainctl.canon`: hash input with no quoting or escaping to get wrong."""
    return _walk(value, key=lambda k: f"s{_blen(k)}:{k}=", leaf=_canon_leaf)


def _canon_leaf(value: Any) -> str:
    if isinstance(value, str):
        return f"s{_blen(value)}:{value}"
    if isinstance(value, bool):
        return "btrue" if value else "bfalse"
    if value is None:
        return "null"
    return "n" + scalar(float(value) if isinstance(value, int) else value)


def _walk(value: Any, *, key: Callable[[str], str], leaf: Callable[[Any], str]) -> str:
    """Maps as {key(k)value,...} in sorted key order, lists as [item,...], the rest leaf()."""
    if isinstance(value, dict):
        items = (key(k) + _walk(value[k], key=key, leaf=leaf) for k in sorted(value))
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_walk(item, key=key, leaf=leaf) for item in value) + "]"
    return leaf(value)


def _blen(text: str) -> int:
    # Go's len() counts bytes.
    return len(text.encode("utf-8"))


def content_hash(
    spec: dict[str, Any], data: dict[str, Any], scheduler: dict[str, str] | None = None
) -> str:
    """8 hex characters of sha256 over the RayJob spec, its ConfigMap data and, where given,
    Kueue's queue and priority class (the chart's "trainctl.runName")."""
    hashed: dict[str, Any] = {"spec": spec, "data": data}
    if scheduler is not None:
        hashed["scheduler"] = scheduler
    text = canon(hashed)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def _go_json_float(value: float) -> str:
    # encoding/json: integral floats print as integers; %e outside [1e-6, 1e21), "e-07" -> "e-7".
    if value == math.floor(value) and abs(value) < 1e21:
        return str(int(value))
    digits, exp = _shortest_digits(value)
    sign = "-" if value < 0 else ""
    if abs(value) < 1e-6 or abs(value) >= 1e21:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp)}"
    return sign + format(Decimal(repr(abs(value))), "f")


def go_json(value: Any) -> str:
    """Sprig's toJson: compact, sorted keys, HTML characters escaped, Go's number format."""
    return _walk(value, key=lambda k: _json_leaf(str(k)) + ":", leaf=_json_leaf)


def _json_leaf(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return _go_json_float(float(value))
    text = json.dumps(str(value), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
