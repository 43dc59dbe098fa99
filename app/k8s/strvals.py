"""Helm's `--set`, `--set-string` and `--set-json` syntax (Go's helm.sh/helm pkg/strvals).

A port, rule for rule, so `trainctl render --set ...` builds the same values as
`helm template --set ...`: `a.b=c` nests, `a={x,y}` is a list, `a[0].b=c` indexes (at most
65536), `\\` escapes the next character (`a\\.b=c` is the key "a.b", `x\\,y` one value), `,`
separates assignments. `--set` types a value as Helm does (true/false/null in any case, decimal
integers without a leading zero; everything else, floats included, stays a string);
`--set-string` keeps every value a string; `--set-json` reads each value as one JSON document,
as Go's encoding/json does (every number a float64: a whole number beyond 2^53 rounded, one
beyond float64's range refused; a lone UTF-16 surrogate escape becomes U+FFFD); `--set-file`
takes each value as a path whose text the caller's reader returns.
tests/contract/test_values_args.py compares this module with Helm's own parser.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

MAX_INDEX = 65536
MAX_NESTED_NAME_LEVEL = 30
INT64 = (-(2**63), 2**63 - 1)
FLOAT64_EXACT = 2**53  # every whole number up to here is exact in a float64
_JSON_SPACE = " \t\r\n"
_SURROGATE = re.compile("[\ud800-\udfff]")
MODES = ("set", "string", "json", "file")


class StrvalsError(ValueError):
    """The expression is malformed; the message says how, as Helm's does."""


class _NotList(Exception):
    pass


class _EOF(Exception):
    pass


def parse_into(
    expression: str,
    dest: dict[str, Any],
    mode: str = "set",
    read_file: Callable[[str], str] | None = None,
) -> None:
    """Apply one `--set` (mode "set"), `--set-string` ("string"), `--set-json` ("json") or
    `--set-file` ("file": each value is a path, its text what `read_file` returns)."""
    if mode not in MODES or (mode == "file") != (read_file is not None):
        raise ValueError(f"mode {mode!r} with read_file={read_file!r}")
    try:
        _Parser(expression, dest, mode, read_file).parse()
    except RecursionError:  # `[[[[...` or `a[0][0][0]...` thousands deep: no values file is
        raise StrvalsError("nested too deeply") from None


def typed_value(text: str) -> Any:
    """Helm's typedVal: what a `--set` value means."""
    lower = text.lower()
    if lower in ("true", "false"):
        return lower == "true"
    if lower == "null":
        return None
    if text == "0":
        return 0
    # Go's strconv.ParseInt: optional sign, decimal digits, int64 range; no leading zero here.
    if text and text[0] != "0":
        digits = text[1:] if text[0] in "+-" else text
        if digits.isascii() and digits.isdigit():
            number = int(text)
            if INT64[0] <= number <= INT64[1]:
                return number
    return text


class _Parser:
    def __init__(
        self, text: str, data: dict[str, Any], mode: str, read_file: Callable[[str], str] | None
    ) -> None:
        self.text = text
        self.pos = 0
        self.data = data
        self.mode = mode
        self.read_file = read_file

    # -- the scanner (Go's bytes.Buffer read rune by rune) ------------------------------------

    def _read(self) -> str:
        if self.pos >= len(self.text):
            raise _EOF
        ch = self.text[self.pos]
        self.pos += 1
        return ch

    def _until(self, stop: str) -> tuple[str, str | None]:
        """Runes up to a stop rune (consumed, returned); None as the stop at the end."""
        out = []
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            self.pos += 1
            if ch in stop:
                return "".join(out), ch
            if ch == "\\":
                if self.pos >= len(self.text):
                    return "".join(out), None
                ch = self.text[self.pos]
                self.pos += 1
            out.append(ch)
        return "".join(out), None

    def _value(self, runes: str) -> Any:
        if self.read_file is not None:
            return self.read_file(runes)
        return runes if self.mode == "string" else typed_value(runes)

    # -- the grammar -------------------------------------------------------------------------

    def parse(self) -> None:
        while True:
            try:
                self._key(self.data, 0)
            except _EOF:
                return

    def _key(self, data: dict[str, Any], level: int) -> None:
        key, last = self._until("=[,.")
        if last is None:
            if not key:
                raise _EOF
            raise StrvalsError(f"key {key!r} has no value")
        if last == "[":
            index = self._index()
            current = data.get(key, [])
            if key in data and not isinstance(current, list):
                raise StrvalsError(f"key {key!r} is not a list (it is {_kind(current)})")
            try:
                items = self._list_item(list(current or []), index, level)
            except _EOF:
                _set(data, key, list(current or []))  # as Helm: the list stays, unchanged
                raise
            _set(data, key, items)
            return
        if last == "=":
            if self.mode == "json":
                if self._empty():
                    _set(data, key, None)
                    return
                _set(data, key, self._json())
                self._empty()
                return
            try:
                _set(data, key, self._list())
            except _NotList:
                runes, _ = self._until(",")
                _set(data, key, self._value(runes))
            except _EOF:
                _set(data, key, "")
                raise
            return
        if last == ",":
            _set(data, key, "")
            raise StrvalsError(f"key {key!r} has no value (cannot end with ,)")
        # last == ".": a nested map
        level += 1
        if level > MAX_NESTED_NAME_LEVEL:
            raise StrvalsError(
                "value name nested level is greater than maximum supported nested level of "
                f"{MAX_NESTED_NAME_LEVEL}"
            )
        inner = data.get(key, {}) if key in data else {}
        if not isinstance(inner, dict):
            raise StrvalsError(f"key {key!r} is not a map (it is {_kind(inner)})")
        try:
            self._key(inner, level)
        except _EOF:
            if inner:
                _set(data, key, inner)
            raise
        if not inner:
            raise StrvalsError(f"key map {key!r} has no value")
        _set(data, key, inner)

    def _index(self) -> int:
        text, last = self._until("]")
        if last is None:
            raise _EOF  # Helm ends quietly here: `a[0` sets nothing
        try:
            # Go's strconv.Atoi: an optional sign and ASCII digits only.
            digits = text[1:] if text[:1] in ("+", "-") else text
            if not (digits.isascii() and digits.isdigit()):
                raise ValueError
            return int(text)
        except ValueError:
            raise StrvalsError(f"error parsing index: {text!r} is not a number") from None

    def _list_item(self, items: list[Any], index: int, level: int) -> list[Any]:
        if index < 0:
            raise StrvalsError(f"negative {index} index not allowed")
        rest, last = self._until("[.=")
        if rest:
            raise StrvalsError(f"unexpected data at end of array index: {rest!r}")
        if last is None:
            raise _EOF
        if last == "=":
            if self.mode == "json":
                if self._empty():
                    return _set_index(items, index, None)
                items = _set_index(items, index, self._json())
                self._empty()
                return items
            try:
                return _set_index(items, index, self._list())
            except _NotList:
                runes, _ = self._until(",")
                return _set_index(items, index, self._value(runes))
            except _EOF:
                return _set_index(items, index, "")
        if last == "[":
            inner_index = self._index()
            inner = items[index] if index < len(items) and items[index] is not None else []
            if not isinstance(inner, list):
                raise StrvalsError(f"index {index} is not a list (it is {_kind(inner)})")
            return _set_index(items, index, self._list_item(list(inner), inner_index, level))
        # last == ".": a map inside the list
        inner = items[index] if index < len(items) else {}
        if not isinstance(inner, dict):
            inner = {}  # Helm: indices out of order start an empty map
        self._key(inner, level)
        return _set_index(items, index, inner)

    def _list(self) -> list[Any]:
        ch = self._read()
        if ch != "{":
            self.pos -= 1
            raise _NotList
        items = []
        while True:
            runes, last = self._until(",}")
            if last is None:
                raise StrvalsError("list must terminate with '}'")
            items.append(self._value(runes))
            if last == "}":
                if self.pos < len(self.text) and self.text[self.pos] == ",":
                    self.pos += 1
                return items

    def _empty(self) -> bool:
        """Spaces up to a comma or the end mean no value; both are consumed, nothing else is."""
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            self.pos += 1
            if ch == ",":
                return True
            if not ch.isspace():
                self.pos -= 1
                return False
        return True

    def _json(self) -> Any:
        start = self.pos
        while start < len(self.text) and self.text[start] in _JSON_SPACE:
            start += 1

        def refuse(name: str) -> Any:
            raise ValueError(f"{name} is not JSON")

        decoder = json.JSONDecoder(
            parse_constant=refuse, parse_float=_go_float64, parse_int=_go_float64_int
        )
        try:
            value, end = decoder.raw_decode(self.text, start)
        except ValueError as err:
            raise StrvalsError(f"invalid JSON value: {err}") from None
        if _cut_short(self.text[start:end], self.text[end : end + 1]):
            # Python's decoder stops before `1.` or `1e`; Go's reads the number on and fails.
            raise StrvalsError(
                f"invalid JSON value: number {self.text[start : end + 1]!r} ends early"
            )
        self.pos = end
        return _go_text(value)


def _cut_short(token: str, after: str) -> bool:
    """Whether a number `token` goes on, for Go's scanner, into `after`: a `.` with no fraction
    yet, or an `e` with no exponent yet (each then needs digits)."""
    if not token or token[0] not in "-0123456789":
        return False
    exponent = "e" in token.lower()
    return (after == "." and "." not in token and not exponent) or (
        after in ("e", "E") and not exponent
    )


def _go_float64(text: str) -> float:
    """A JSON number as Go's encoding/json decodes it into an interface: a float64, and an
    error where it is out of float64's range (Python would make it inf)."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text} is out of range (it does not fit a float64)")
    return value


def _go_float64_int(text: str) -> int | float:
    """A JSON integer as a float64 holds it: kept an int while exact (so 5 stays 5), rounded
    beyond 2^53 as Go rounds it, refused beyond float64's range."""
    value = int(text)
    return value if abs(value) <= FLOAT64_EXACT else _go_float64(text)


def _go_text(value: Any) -> Any:
    """Strings (and keys) as Go decodes them: a lone surrogate escape (`"\\ud800"`) is U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_go_text(key): _go_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_go_text(item) for item in value]
    return value


def _set(data: dict[str, Any], key: str, value: Any) -> None:
    if key:  # Helm ignores an empty key
        data[key] = value


def _set_index(items: list[Any], index: int, value: Any) -> list[Any]:
    if index < 0:
        raise StrvalsError(f"negative {index} index not allowed")
    if index > MAX_INDEX:
        raise StrvalsError(
            f"index of {index} is greater than maximum supported index of {MAX_INDEX}"
        )
    if len(items) <= index:
        items = items + [None] * (index + 1 - len(items))
    items[index] = value
    return items


def _kind(value: Any) -> str:
    return {dict: "a map", list: "a list", str: "a string", bool: "a bool"}.get(
        type(value), type(value).__name__
    )
