"""Values files read as Helm reads them (sigs.k8s.io/yaml over go-yaml v2), not as PyYAML does.

Helm's reading differs from PyYAML's YAML 1.1 in ways users meet: `3e-4` and `1e3` are numbers
(PyYAML: strings), `017` is octal and `08` is 8, `1_000` is 1000, dates stay strings (PyYAML:
datetime), `.inf`/`.nan` are refused (JSON has neither), unknown tags are ignored rather than
refused, only the first document counts, and map keys become strings. Like Helm, `y`, `n`,
`yes`, `no`, `on` and `off` are booleans (go-yaml v2 keeps YAML 1.1's booleans; quote them for
strings). tests/contract/test_values_args.py holds this module to Helm's own reader.

Three of these readings surprise people, so `load` notes them where it meets them (render and
submit print them as WARNING lines, with the file and line): a number with a leading 0
(`epochs: 010` is 8, octal), a key that is one of YAML 1.1's word booleans (`yes:` becomes
the key "true"), and a key given twice in one mapping (the last wins: a merge conflict's
leftover `train:` drops the first). Helm reads them the same way and says nothing.

Loading is PyYAML's SafeLoader underneath (it never constructs objects from tags), plus
go-yaml's alias budget: a document whose aliases expand it past 400,000 nodes, mostly by
aliasing ("billion laughs"), is refused before anything is expanded.
"""

from __future__ import annotations

import base64
import math
import re
import struct
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

_PLAIN = "tag:trainctl:helm-plain"
_TAG = "tag:yaml.org,2002:"
_BOOLS = {
    **dict.fromkeys(
        ["y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"], True
    ),
    **dict.fromkeys(
        ["n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"], False
    ),
}
_WORDS = ("true", "false")  # the booleans meant as such; y, yes, on, n, no, off surprise as keys
_LEADING_ZERO = re.compile(r"[-+]?0[0-9_]+")  # 010: octal to Helm, ten to a reader
_NULLS = ("", "~", "null", "Null", "NULL")
_SPECIAL = {
    **dict.fromkeys([".nan", ".NaN", ".NAN"], math.nan),
    **dict.fromkeys([".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"], math.inf),
    **dict.fromkeys(["-.inf", "-.Inf", "-.INF"], -math.inf),
}
_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_INT64 = (-(2**63), 2**63 - 1)
_SURROGATE = re.compile("[\ud800-\udfff]")  # only an escape makes one: UTF-8 cannot hold it
_UINT64_MAX = 2**64 - 1
# go-yaml v2's alias budget (decode.go: allowedAliasRatio).
_ALIAS_LOW, _ALIAS_HIGH = 400_000, 4_000_000


class ValuesYAMLError(yaml.YAMLError):
    """A document Helm would refuse; the message says why."""


def go_scalar(text: str) -> Any:
    """What go-yaml v2 makes of a plain (unquoted, untagged) scalar."""
    if text in _NULLS:
        return None
    if text in _BOOLS:
        return _BOOLS[text]
    if text in _SPECIAL:
        return _SPECIAL[text]
    if not text or text[0] not in "+-.0123456789":
        return text
    plain = text.replace("_", "")
    if text[0] == ".":
        if re.fullmatch(r"\.[0-9]+([eE][-+]?[0-9]+)?", plain):
            return _finite(float(plain), text)
        return text
    number = _go_parse_int(plain)
    if number is not None:
        return number
    if _YAML_FLOAT.fullmatch(plain):
        return _finite(float(plain), text)
    return text


def _finite(value: float, text: str) -> float | str:
    return text if math.isinf(value) else value  # Go: out of range, so it stays a string


def _go_parse_int(text: str) -> int | None:
    """strconv.ParseInt(text, 0, 64), then ParseUint for what int64 cannot hold."""
    signed = text[:1] in ("+", "-")
    body = text[1:] if signed else text
    if not body:
        return None
    base = 10
    if body[0] == "0":
        prefix = body[1:2].lower()
        if len(body) >= 3 and prefix in ("b", "o", "x"):
            base, body = {"b": 2, "o": 8, "x": 16}[prefix], body[2:]
        else:
            base, body = 8, body[1:]
    if not all(ch in "0123456789abcdef"[:base] for ch in body.lower()):
        return None
    number = int(body, base) if body else 0
    number = -number if text[0] == "-" else number
    if _INT64[0] <= number <= _INT64[1] or (not signed and number <= _UINT64_MAX):
        return number
    return None


class HelmValuesLoader(yaml.SafeLoader):
    """SafeLoader with go-yaml v2's scalar resolution and alias budget; `notes` gathers the
    readings that surprise (the module's docstring)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.notes: list[tuple[int, int, str]] = []  # (line, column, what it says)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[str, int] = {}  # a key's text -> the line it was first given on
        for key, _ in node.value:
            if isinstance(key, ScalarNode) and key.value != "<<":
                line = key.start_mark.line + 1
                if key.value in first:
                    said = (
                        f"the key {key.value} is given twice in one mapping (first on line "
                        f"{first[key.value]}); the last one wins, as in Helm, so the first is "
                        "dropped"
                    )
                    self.notes.append((line, key.start_mark.column, said))
                first.setdefault(key.value, line)
            if key.tag == _PLAIN and key.value in _BOOLS and key.value.lower() not in _WORDS:
                meant = "true" if _BOOLS[key.value] else "false"
                said = (
                    f"the key {key.value} is read as the boolean {meant}, so it becomes the key "
                    f'"{meant}" (YAML 1.1, as Helm reads it); write "{key.value}" to keep '
                    "the word"
                )
                self.notes.append((key.start_mark.line + 1, key.start_mark.column, said))
        return super().construct_mapping(node, deep=deep)

    def construct_scalar(self, node: Node) -> Any:
        value = super().construct_scalar(node)
        if isinstance(value, str) and (surrogate := _SURROGATE.search(value)):
            code = ord(surrogate.group())
            raise ValuesYAMLError(
                f"line {node.start_mark.line + 1}: \\u{code:04x} is half of a UTF-16 "
                "surrogate pair, which YAML (and Helm) refuses in an escape: write the "
                "character itself (UTF-8), or one \\U escape of 8 digits (\\U0001f600)"
            )
        return value

    def resolve(self, kind: type[Node], value: Any, implicit: Any) -> str:
        if kind is ScalarNode and implicit[0]:
            return _TAG + "merge" if value == "<<" else _PLAIN
        return super().resolve(kind, value, implicit)

    def compose_document(self) -> Node:
        node = super().compose_document()
        _check_aliasing(node)
        return node


def _construct_plain(loader: HelmValuesLoader, node: ScalarNode) -> Any:
    value = go_scalar(node.value)
    if type(value) is int and _LEADING_ZERO.fullmatch(node.value):
        decimal = int(node.value.replace("_", ""), 10)
        if decimal != value:
            said = (
                f"{node.value} is read as the octal number {value} (a leading 0 means octal to "
                f'Helm); write {decimal} to mean {decimal}, or "{node.value}" for the text'
            )
            loader.notes.append((node.start_mark.line + 1, node.start_mark.column, said))
    if isinstance(value, float) and not math.isfinite(value):
        raise yaml.constructor.ConstructorError(
            None, None, f"{node.value} is not a value Helm accepts (JSON has no inf or NaN)",
            node.start_mark,
        )  # fmt: skip
    return value


def _typed(kind: type, name: str) -> Any:
    def construct(loader: HelmValuesLoader, node: Node) -> Any:
        value = _construct_plain(loader, node) if isinstance(node, ScalarNode) else None
        if kind is float and type(value) is int:
            value = float(value)
        if type(value) is not kind:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot decode {node.value!r} as a !!{name}", node.start_mark
            )
        return value

    return construct


def _construct_binary(loader: HelmValuesLoader, node: ScalarNode) -> str:
    raw = base64.b64decode(loader.construct_scalar(node))
    return raw.decode("utf-8", errors="replace")  # Go's JSON writes invalid UTF-8 as U+FFFD


def _construct_set(loader: HelmValuesLoader, node: MappingNode) -> dict[Any, None]:
    return dict.fromkeys(loader.construct_mapping(node))


def _construct_any(loader: HelmValuesLoader, suffix: Any, node: Node) -> Any:
    """Unknown tags (`!foo`, `!!python/object:...`) are ignored, as Helm ignores them."""
    if isinstance(node, ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_mapping(node, deep=True)


HelmValuesLoader.yaml_constructors = dict(HelmValuesLoader.yaml_constructors)
HelmValuesLoader.yaml_multi_constructors = {}
for _tag in list(HelmValuesLoader.yaml_constructors):
    if _tag is None or _tag.startswith(_TAG + "python") or _tag in (_TAG + "omap", _TAG + "pairs"):
        del HelmValuesLoader.yaml_constructors[_tag]
HelmValuesLoader.add_constructor(_PLAIN, _construct_plain)
HelmValuesLoader.add_constructor(_TAG + "merge", yaml.SafeLoader.construct_yaml_str)
HelmValuesLoader.add_constructor(_TAG + "timestamp", yaml.SafeLoader.construct_yaml_str)
HelmValuesLoader.add_constructor(_TAG + "int", _typed(int, "int"))
HelmValuesLoader.add_constructor(_TAG + "float", _typed(float, "float"))
HelmValuesLoader.add_constructor(_TAG + "bool", _typed(bool, "bool"))
HelmValuesLoader.add_constructor(_TAG + "null", _typed(type(None), "null"))
HelmValuesLoader.add_constructor(_TAG + "binary", _construct_binary)
HelmValuesLoader.add_constructor(_TAG + "set", _construct_set)
HelmValuesLoader.add_multi_constructor("", _construct_any)


def _check_aliasing(root: Node | None) -> None:
    """Refuse what go-yaml refuses: an alias inside itself, or expansion mostly by aliases."""
    if root is None:
        return
    sizes: dict[int, int] = {}
    active: set[int] = set()
    # Iterative post-order walk: a deep document must not overflow Python's stack here.
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            continue
        if key in sizes:
            continue
        if key in active:
            raise ValuesYAMLError(f"an anchor contains itself ({node.start_mark})")
        active.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    expanded, distinct = sizes[id(root)], len(sizes)
    if expanded > _ALIAS_LOW and (expanded - distinct) / expanded > _allowed_ratio(expanded):
        raise ValuesYAMLError(
            f"document contains excessive aliasing: aliases expand {distinct} nodes to "
            f"{expanded} (Helm refuses such a document too)"
        )


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _allowed_ratio(count: int) -> float:
    if count >= _ALIAS_HIGH:
        return 0.10
    return 0.99 - 0.89 * (count - _ALIAS_LOW) / (_ALIAS_HIGH - _ALIAS_LOW)


def load(text: str, notes: list[str] | None = None) -> Any:
    """The first document of text, as Helm's values reader sees it (keys as strings); the
    readings that surprise, each `line N: ...`, added to `notes`."""
    loader = HelmValuesLoader(text)
    try:
        node = loader.get_node() if loader.check_node() else None
        data = loader.construct_document(node) if node is not None else None
        if node is not None:
            _second_document(loader)
    finally:
        loader.dispose()
    if notes is not None:  # in the file's order; an alias repeats what it points at
        notes.extend(f"line {line}: {said}" for line, _, said in sorted(set(loader.notes)))
    return _json_keys(data)


SECOND_DOCUMENT = (
    "a second YAML document starts here (after ---), and nothing in it is read: Helm reads a "
    "values file's first document only; merge it into the first, or give it as a file of its "
    "own (-f)"
)


def _second_document(loader: HelmValuesLoader) -> None:
    """Notes a document after the first that holds anything: silently dropped, as by Helm."""
    try:
        if not loader.check_node():
            return
        line = loader.peek_event().start_mark.line + 1
        node = loader.get_node()
    except yaml.YAMLError:  # what follows is not read either way; the first document stands
        return
    if node is not None and not (isinstance(node, yaml.ScalarNode) and node.value == ""):
        loader.notes.append((line, 0, SECOND_DOCUMENT))


def _json_keys(value: Any) -> Any:
    """sigs.k8s.io/yaml's YAML-to-JSON step: every map key becomes a string."""
    if isinstance(value, dict):
        return {_key(k): _json_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_keys(v) for v in value]
    return value


def _key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        return _go_float32_g(key)
    if isinstance(key, str):
        return key
    raise ValuesYAMLError(f"unsupported map key {key!r}: Helm takes strings, numbers, booleans")


def _go_float32_g(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32), how sigs.k8s.io/yaml names a float key."""
    f32 = struct.unpack("f", struct.pack("f", value))[0]
    for digits in range(1, 10):
        text = f"{f32:.{digits - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == f32:
            break
    mantissa, exp_text = text.split("e")
    exp = int(exp_text)
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    if exp < -4 or exp >= 6:  # Go's shortest 'g' switches to an exponent at 1e6
        return f"{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return repr(float(f"{mantissa}e{exp}")).removesuffix(".0")
