"""Hypothesis strategies for chart values files, derived from the chart's values.schema.json.

A new chart value needs no edit here: the schema is walked and every key it declares is drawn
from what the schema says of it. Read: $ref, allOf (merged), enum, const, type (one or a list),
minimum, maximum, exclusiveMinimum, minLength, maxLength, pattern (drawn with from_regex), not,
properties, required, additionalProperties, propertyNames, minProperties, maxProperties and
items. Each drawn leaf satisfies its own schema; the if/then conditions across keys (a bucket
for s3, a queue for Kueue) and the chart's rules (app/k8s/rules.py) are not followed, so
some files are refused, and both engines must refuse those alike.

Strings without a pattern are drawn from text where the engines drift apart (quotes, colons,
newlines, template braces, non-ASCII); numbers from those Go prints differently from Python
(1e21, 0.1, 2^53, 1.0) as well as any in range. OVERRIDES holds the few places the schema
cannot say what is worth drawing, each with its reason.
"""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Any

from hypothesis import strategies as st
from jsonschema import Draft7Validator

from app.k8s.names import FREE_FORM_REF
from app.k8s.values import CHART_DIR, chart_file, coalesce

# Text that YAML, Go templates and jinja2 each treat specially.
ODD = st.sampled_from(
    ["", "yes", "null", "0x1F", "1e3", "'", '"', ": ", "#", "{{ .Values }}", "{% raw %}", "\n",
     "a\tb", "ünï", "\u2028", "- x", "[1]", "&a", "*a", "!!str", "%", "\\"]
)  # fmt: skip
ODD_TEXT = st.lists(st.one_of(ODD, st.text(max_size=3)), max_size=4).map("".join)
# Numbers whose text differs between Go and Python formatting, and plain ones.
TRICKY_NUMBERS = (0, 1, 2, 7, 0.5, 1.0, 0.1, 1.5, 3.25, 12.0, 1e-7, 1e-5, 3e-4, 100000000, 1e21)
TRICKY_INTEGERS = (0, 1, 2, 42, 2**31, 2**53 - 1, 2**53, 2**64 - 1)
# Maps and lists stay small: a value file's shape matters here, not its size.
MAX_ENTRIES = 2
# A free-form value (deletionStrategy, dashboardFrom, the collector's env) is passed through as
# YAML or JSON, with any text: what Helm's toYaml cannot write intact (app/k8s/names.py
# FREE_FORM_TEXT, e.g. U+2028 next to a newline) is refused by both engines' schema.
FREE_JSON = st.recursive(
    st.one_of(st.booleans(), st.sampled_from(TRICKY_NUMBERS), ODD_TEXT),
    lambda inner: st.dictionaries(ODD_TEXT, inner, max_size=MAX_ENTRIES),
    max_leaves=4,
)

# Dotted path (a map's values are `*`, a list's items `[]`) -> strategy, where the schema alone
# does not say what is worth drawing.
OVERRIDES: dict[str, st.SearchStrategy[Any] | None] = {
    # Helm reads `global` and this chart ignores it: nothing to compare (None: never drawn).
    "global": None,
    # The cron pattern is too large for from_regex to draw from quickly (seconds per example);
    # these cover each form it allows (macros, steps, lists, ranges, names).
    "schedule.cron": st.sampled_from(
        ["@daily", "0 3 * * 1", "*/15 * * * *", "0 0 1,15 * mon-fri", "5 4 * jan-mar sun"]
    ),
    # Free-form in the schema (Ray's own runtime_env): the shape users give, with odd text.
    "rayJob.runtimeEnv": st.dictionaries(
        st.just("env_vars"), st.dictionaries(st.just("X"), ODD_TEXT), max_size=1
    ),
}
# tune.space: free-form in shape (setting -> {distribution: [values]}); the settings decide what
# a key and its values may be (app/settings/tune_space.py): spaces users write, numbers whose
# text Go and Python write differently among them.
OVERRIDES["tune.space"] = st.dictionaries(
    st.sampled_from(["lr", "weight_decay", "model", "seed"]),
    st.one_of(
        st.builds(lambda lo: {"loguniform": [lo, 0.1]}, st.sampled_from([1e-5, 1e-7, 3e-4])),
        st.builds(lambda hi: {"uniform": [0, hi]}, st.sampled_from([0.5, 1e-5, 0.1])),
        st.just({"choice": ["cnn", "resnet18"]}),
        st.just({"grid": [1, 2, 3]}),
    ),
    max_size=3,
)
# TRAIN_PROMOTE_IF's grammar is the settings' (app/settings/gate.py), which the schema does not
# repeat: gates it takes, spelled as users do, so that most files render in both engines (one
# the settings refuse is refused by `trainctl render` alone; the parity test checks why).
GATES = st.sampled_from(
    ["beats_champion", "val_accuracy>=0.9", "val_loss < 0.25 and beats_champion",
     "beats_champion and val_accuracy > 1e-1", "val_accuracy>=0.5 and val_loss<=2"]
)  # fmt: skip
for _section in ("train", "poolDefaults.train", "nodePools.*.train"):
    OVERRIDES[f"{_section}.promote_if"] = GATES
# Valid with fewer, but an empty nodePools renders nothing for the engines to compare.
MIN_ENTRIES = {"nodePools": 1}


@cache
def schema() -> dict[str, Any]:
    return chart_file("values.schema.json", CHART_DIR)


@cache
def _defaults() -> dict[str, Any]:
    return chart_file("values.yaml", CHART_DIR)


def _has_default(path: str) -> bool:
    """Whether the chart's values.yaml sets `path`: a user's file may then leave it out, even
    where the schema requires it (the schema checks the merged values)."""
    value: Any = _defaults()
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return True


def _default_at(path: str) -> dict[str, Any]:
    """The chart's default map at `path` ({} where it has none)."""
    value: Any = _defaults()
    for key in filter(None, path.split(".")):
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, dict) else {}


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    """$ref followed and allOf merged into one schema (properties and required combined)."""
    while "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        node = {**schema()["definitions"][name], **{k: v for k, v in node.items() if k != "$ref"}}
    if "allOf" in node and all("if" not in part for part in node["allOf"]):
        merged = {k: v for k, v in node.items() if k != "allOf"}
        for part in map(_resolve, node["allOf"]):
            for key, value in part.items():
                if key == "properties":
                    merged["properties"] = {**merged.get("properties", {}), **value}
                elif key == "required":
                    merged["required"] = [*merged.get("required", []), *value]
                else:
                    merged.setdefault(key, value)
        node = merged
    return node


def from_schema(node: dict[str, Any], path: str = "") -> st.SearchStrategy[Any]:
    """Values that `node` accepts (its conditions across keys aside)."""
    override = OVERRIDES.get(path)
    if override is not None:
        return override
    node = _resolve(node)
    if "const" in node:
        drawn: st.SearchStrategy[Any] = st.just(node["const"])
    elif "enum" in node:
        drawn = st.sampled_from(node["enum"])
    else:
        types = node.get("type") or ("object" if "properties" in node else None)
        if types is None:
            return FREE_JSON
        kinds = [types] if isinstance(types, str) else types
        drawn = st.one_of([_typed(kind, node, path) for kind in kinds])
    if "not" in node:
        refused = _validator(node["not"])
        drawn = drawn.filter(lambda value: not refused.is_valid(value))
    if "if" in node or any("if" in part for part in node.get("allOf", ())):
        # Conditions across keys (a bucket for s3, a queue for Kueue): half the draws meet them,
        # so each branch renders; the other half may break one, for both engines to refuse.
        # Judged as Helm does, over the chart's defaults.
        check, default = _validator(node), _default_at(path)
        meets = drawn.filter(lambda value: check.is_valid(coalesce(default, value)))
        drawn = st.one_of(meets, drawn)
    return drawn


def _validator(node: dict[str, Any]) -> Draft7Validator:
    """A validator for one part of the schema, its $refs resolved against the whole."""
    return Draft7Validator({**node, "definitions": schema()["definitions"]})


def _typed(kind: str, node: dict[str, Any], path: str) -> st.SearchStrategy[Any]:
    if kind == "boolean":
        return st.booleans()
    if kind in ("integer", "number"):
        return _number(kind, node)
    if kind == "string":
        return _string(node)
    if kind == "array":
        items = from_schema(node.get("items", {}), f"{path}.[]")
        return st.lists(items, max_size=MAX_ENTRIES)
    if kind == "object":
        return _object(node, path)
    raise ValueError(f"{path}: schema type {kind!r} has no strategy; add one here")


def _number(kind: str, node: dict[str, Any]) -> st.SearchStrategy[Any]:
    # Unbounded below: a few negatives are enough; unbounded above: Helm's exact range.
    low = node.get("minimum", node.get("exclusiveMinimum", -1000))
    high = node.get("maximum", 2**53 - 1)

    def fits(value: float) -> bool:
        above = value > node["exclusiveMinimum"] if "exclusiveMinimum" in node else value >= low
        return above and value <= high

    if kind == "integer":
        tricky = [n for n in TRICKY_INTEGERS if fits(n)]
        ranged = st.integers(min_value=math.ceil(low), max_value=min(high, low + 10**6))
    else:
        tricky = [n for n in TRICKY_NUMBERS if fits(n)]
        ranged = st.floats(
            min_value=low,
            max_value=min(high, 1e22),
            exclude_min="exclusiveMinimum" in node,
            allow_nan=False,
            allow_infinity=False,
        )
    ranged = ranged.filter(fits)
    return st.one_of(st.sampled_from(tricky), ranged) if tricky else ranged


def _string(node: dict[str, Any]) -> st.SearchStrategy[str]:
    low, high = node.get("minLength", 0), node.get("maxLength", math.inf)
    if "pattern" in node:
        # Go's `$` is the end of the text: fullmatch draws no trailing newline either.
        pattern = re.sub(r"(?<!\\)\$$", "", node["pattern"].removeprefix("^"))
        drawn = st.from_regex(pattern, fullmatch=True)
    else:
        drawn = ODD_TEXT if low == 0 else st.one_of(ODD_TEXT, st.text(min_size=low, max_size=8))
    return drawn.filter(lambda text: low <= len(text) <= high)


def _object(node: dict[str, Any], path: str) -> st.SearchStrategy[dict[str, Any]]:
    properties = node.get("properties", {})
    extra = node.get("additionalProperties", True)
    if not properties and extra in (True, {}, {"$ref": FREE_FORM_REF}):
        return FREE_JSON.map(lambda v: v if isinstance(v, dict) else {})
    # A required key the properties do not name is one of the map's own entries (cpu, memory).
    named = {**{key: extra for key in node.get("required", ())}, **properties}
    where = {key: f"{path}.{key}".lstrip(".") for key in named}
    required = {key for key in node.get("required", ()) if not _has_default(where[key])}
    # A key a condition tests (storage.type, scheduler.name, dataPool.autoscaling) is always
    # drawn: each branch of the condition then gets its share of the files.
    conditions = [node, *node.get("allOf", ())]
    required |= {key for part in conditions for key in part.get("if", {}).get("required", ())}
    fields = {
        key: from_schema(sub, where[key])
        for key, sub in named.items()
        if not (where[key] in OVERRIDES and OVERRIDES[where[key]] is None)
    }
    drawn: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
        {k: v for k, v in fields.items() if k in required},
        optional={k: v for k, v in fields.items() if k not in required},
    )
    if isinstance(extra, dict):
        names = from_schema({"type": "string", **node.get("propertyNames", {})})
        size = min(MAX_ENTRIES, node.get("maxProperties", MAX_ENTRIES))
        entries = st.dictionaries(
            names, from_schema(extra, f"{path}.*"), min_size=MIN_ENTRIES.get(path, 0), max_size=size
        )
        drawn = st.tuples(drawn, entries).map(lambda pair: {**pair[1], **pair[0]})
    low = node.get("minProperties", 0)
    return drawn.filter(lambda value: len(value) >= low) if low else drawn


def values_files() -> st.SearchStrategy[dict[str, Any]]:
    """A user's values file: only what they chose to set, the chart's defaults for the rest."""
    return from_schema(schema())
