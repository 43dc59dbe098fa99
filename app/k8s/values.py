"""Chart values for `trainctl render`: the chart's defaults, the user's file, the schema check.

Defaults live in one place, the chart's values.yaml. The package cannot read charts/ once it
is installed as a wheel, so it ships byte-equal copies of Chart.yaml, values.yaml and
values.schema.json next to its templates (app/k8s/templates/chart/). `make manifests` refreshes
the copies and a contract test fails when they differ, so Helm and `trainctl render` always
start from the same defaults and refuse the same values.
"""

from __future__ import annotations

import copy
import errno
import json
import math
import os
import re
import stat
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from app.errors import ConfigError
from app.formatting import yaml_problem
from app.k8s import canonical, names, strvals, values_yaml
from app.redact import redact_text

PACKAGED_DIR = Path(__file__).resolve().parent / "templates" / "chart"
# Only present in a source checkout; used by the sync step and the tests.
CHART_DIR = Path(__file__).resolve().parents[2] / "charts" / "trainctl"
SYNCED_FILES = ("Chart.yaml", "values.yaml", "values.schema.json")
MAX_VALUES_BYTES = 16 * 2**20
# One --set-file value: what a ConfigMap holds; the API server stores no object over ~1.5 MiB.
MAX_SET_FILE_BYTES = 2**20


def chart_file(name: str, folder: Path = PACKAGED_DIR) -> dict[str, Any]:
    """One of SYNCED_FILES, parsed: the packaged copy, or the chart's source (CHART_DIR)."""
    text = (folder / name).read_text()
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


@cache
def chart_metadata() -> dict[str, Any]:
    return chart_file("Chart.yaml")


@cache
def _schema() -> dict[str, Any]:
    return chart_file("values.schema.json")


def default_values() -> dict[str, Any]:
    return copy.deepcopy(_default_values())  # a fresh copy each call: callers change it


@cache
def _default_values() -> dict[str, Any]:
    return chart_file("values.yaml")


def coalesce(defaults: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of user values over chart defaults.

    Maps merge key by key, anything else replaces, and a null removes a key the defaults have
    (Helm's way of deleting a default); a null elsewhere stays, for the schema to refuse.
    """
    merged = copy.deepcopy(defaults)
    for key, value in overrides.items():
        if value is None and key in merged:
            del merged[key]
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = coalesce(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def merge_maps(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of one -f file over the files before it (pkg/cli/values mergeMaps).

    Maps merge key by key and the later file wins; lists and scalars are replaced whole; a null
    is kept, so that coalescing over the chart's defaults then deletes that key.
    """
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_maps(merged[key], value)
        else:
            merged[key] = value
    return merged


def user_values(
    files: Sequence[Path] = (),
    *,
    notes: list[str] | None = None,
    set_json: Sequence[str] = (),
    set_values: Sequence[str] = (),
    set_string: Sequence[str] = (),
    set_file: Sequence[str] = (),
) -> dict[str, Any]:
    """What Helm's -f files, --set-json, --set, --set-string and --set-file make, in Helm's
    order; what in the files Helm reads in a way that surprises, added to `notes`."""
    user: dict[str, Any] = {}
    for path in files:
        user = merge_maps(user, read_values_file(path, notes))
    for option, mode, expressions in (
        ("--set-json", "json", set_json),
        ("--set", "set", set_values),
        ("--set-string", "string", set_string),
        ("--set-file", "file", set_file),
    ):
        for expression in expressions:
            shown = expression if len(expression) <= 200 else f"{expression[:200]}..."
            _refuse_undecodable(option, shown, expression)
            reader = (lambda text, e=shown: read_set_file(text, e)) if mode == "file" else None
            try:
                strvals.parse_into(expression, user, mode, reader)
            except strvals.StrvalsError as err:
                raise ConfigError(
                    f"{option} {shown!r}: {err}; the syntax is KEY=VALUE[,KEY=VALUE...], "
                    "e.g. train.epochs=5, a.b[0]=x, a={x,y} (escape , and . in a key with \\)"
                ) from None
    return user


def _refuse_undecodable(option: str, shown: str, expression: str) -> None:
    """An argument that was not UTF-8 (Python keeps its bytes as surrogates): Helm would carry
    the raw bytes into the manifests, where YAML readers change or refuse them."""
    try:
        expression.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ConfigError(
            f"{option} {shown!r}: not UTF-8 text (character {err.start + 1}); give values as UTF-8"
        ) from None


def read_set_file(path: str, expression: str) -> str:
    """The text of one `--set-file` value's file (stdin for `-`, as in Helm): a regular file,
    not a link (a planted link would copy whatever it points at, a credential, into the
    manifests), read without blocking (a FIFO would hang), at most MAX_SET_FILE_BYTES, UTF-8."""
    where = f"--set-file {expression!r}: {path!r}"
    if path.strip() == "-":
        data = sys.stdin.buffer.read(MAX_SET_FILE_BYTES + 1)
    else:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise ConfigError(
                    f"{where} is a symbolic link; --set-file reads regular files only, not "
                    "through links: give the file it points to"
                ) from None
            raise ConfigError(f"{where}: {err.strerror or err}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ConfigError(
                f"{where} is not a regular file (a folder, FIFO or device); --set-file reads "
                "regular files only"
            )
        try:
            with os.fdopen(fd, "rb") as handle:
                data = handle.read(MAX_SET_FILE_BYTES + 1)
        except OSError as err:
            raise ConfigError(f"{where}: {err.strerror or err}") from None
    if len(data) > MAX_SET_FILE_BYTES:
        raise ConfigError(
            f"{where} is larger than {MAX_SET_FILE_BYTES // 2**20} MiB, the most a --set-file "
            "value may be (a ConfigMap holds 1 MiB, any Kubernetes object about 1.5 MiB)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{where} is not UTF-8 text (byte {err.start}); --set-file takes text (encode "
            "binary data, e.g. with base64)"
        ) from None


def _read_capped(path: Path) -> bytes:
    """The file's bytes (stdin for `-`, as in Helm), refusing more than MAX_VALUES_BYTES: a
    device like /dev/zero must not be read forever."""
    if str(path) == "-":
        data = sys.stdin.buffer.read(MAX_VALUES_BYTES + 1)
    else:
        with path.open("rb") as handle:
            data = handle.read(MAX_VALUES_BYTES + 1)
    if len(data) > MAX_VALUES_BYTES:
        raise ConfigError(
            f"values file {path}: larger than {MAX_VALUES_BYTES // 2**20} MiB; values files are "
            "small YAML documents"
        )
    return data


def read_values_file(path: Path, notes: list[str] | None = None) -> dict[str, Any]:
    """One -f file, read as Helm reads it (app/k8s/values_yaml.py); a WARNING line added to
    `notes` for each reading that surprises (`010` is 8), naming the file and line."""
    try:
        text = _read_capped(path).decode("utf-8")
    except OSError as err:
        raise ConfigError(f"values file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"values file {path}: not UTF-8 text (byte {err.start}); save it as UTF-8"
        ) from None
    surprises: list[str] = []
    try:
        data = values_yaml.load(text, surprises)
    except yaml.YAMLError as err:
        raise ConfigError(f"values file {path} is not valid YAML: {yaml_problem(err)}") from None
    except RecursionError:
        raise ConfigError(f"values file {path} is nested too deeply to be values") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"values file {path} must hold a mapping, not {type(data).__name__}")
    if notes is not None:
        notes.extend(f"WARNING: values file {path}, {said}" for said in surprises)
    return data


def validate(values: dict[str, Any]) -> None:
    """Check values against the chart's values.schema.json; one line per problem."""
    validator = _validator_class()(_schema())
    errors = sorted(validator.iter_errors(values), key=lambda e: list(map(str, e.absolute_path)))
    # A value of the wrong type also "fails" the rules that refuse some text (a `not` of a
    # pattern holds vacuously for a number): `1 is not allowed: a URI with a password in it`
    # beside the real problem. Its type is what is wrong.
    mistyped = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    errors = [
        e
        for e in errors
        if not (e.validator in ("not", "enum") and tuple(e.absolute_path) in mistyped)
    ]
    # A name two rules refuse (RAY_AUTH_TOKEN: Ray's, and credential-like) is told the first
    # one, in the schema's order: the second's advice (secretEnv:) would be wrong for it.
    seen: set[tuple[Any, ...]] = set()
    errors = [e for e in errors if not _named_again(e, seen)]
    if errors:
        # A refused value may be a credential given in the wrong place: never echoed whole.
        # One line each: a value failing two rules (type and enum) may be described alike.
        raise ConfigError(list(dict.fromkeys(redact_text(_bounded(err)) for err in errors)))


def _named_again(err: Any, seen: set[tuple[Any, ...]]) -> bool:
    """Whether `err` refuses a key's name that an earlier rule already refused."""
    if err.validator != "not" or "propertyNames" not in err.schema_path:
        return False
    name = (*err.absolute_path, err.instance)
    if name in seen:
        return True
    seen.add(name)
    return False


@cache
def _validator_class() -> Any:
    """Draft 7 with Go's reading of `$`: the end of the text, not before a final newline.

    Python's `$` also matches before a trailing newline, so `^[A-Z_]+$` would pass "FOO\\n"
    here while Helm (RE2) refuses it; both engines must refuse the same values.
    """
    import re

    from jsonschema import Draft7Validator, validators
    from jsonschema.exceptions import ValidationError

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "string"):
            return
        strict = patrn[:-1] + r"\Z" if patrn.endswith("$") and not patrn.endswith("\\$") else patrn
        if not re.search(strict, instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    return validators.extend(Draft7Validator, {"pattern": pattern})


# Why a value written as a word reaches the schema as true or false (YAML 1.1, as Helm reads it).
YAML_BOOLEANS = "YAML reads yes, no, on and off unquoted as booleans"


# Value patterns refused for being credentials (app/k8s/names.py).
CREDENTIAL_FORMS = frozenset({names.URI_PASSWORD, names.AUTH_HEADER, names.KNOWN_CREDENTIAL})


def set_path(parts: Any) -> str:
    """A value's path as --set takes it: list items as [i], and in a key the characters --set
    reads as syntax escaped (`cloud\\.google\\.com/gke-spot`, as Helm's docs write it)."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
            continue
        key = re.sub(r"([\\.,=\[\]])", r"\\\1", str(part))
        path += f".{key}" if path else key
    return path


SHOWN_VALUE = 120  # characters of a refused value quoted back (a 2 MB runTag was, whole)


def _bounded(err: Any) -> str:
    """_describe's line with a long refused text quoted by its start and its length."""
    said = _describe(err)
    value = err.instance
    if isinstance(value, str) and len(value) > SHOWN_VALUE:
        short = f"{value[: SHOWN_VALUE // 2]!r}... ({len(value):,} characters)"
        said = said.replace(repr(value), short).replace(value, short)
    return said


def _describe(err: Any) -> str:
    """One line for a schema error: where, what is wrong, and what is allowed (the settings'
    own message for a `train:` value, else by the rule the value broke)."""
    where = ".".join(str(part) for part in err.absolute_path) or "(top level)"
    refused = _settings_refusal(list(err.absolute_path), err.instance)
    if refused and isinstance(err.instance, bool):
        # `amp: off` is false to YAML 1.1 (and to Helm): the settings' "TRAIN_AMP='false':
        # Input should be 'auto', 'off', ..." read as a contradiction without this.
        return (
            f"{where}: {refused}; {canonical.scalar(err.instance)} is a boolean here: "
            f"{YAML_BOOLEANS}, so quote the word you meant"
        )
    if refused and _held_as_a_float(err.instance):
        # `epochs: 10...0` (43 digits) was said as TRAIN_EPOCHS='1e+42', "unable to parse
        # string as an integer", of a number the user wrote as one (a red-team pass).
        bounds = [f"{k} {err.schema[k]:g}" for k in ("minimum", "maximum") if k in err.schema]
        allowed = f"; allowed: {', '.join(bounds)}" if bounds else ""
        return (
            f"{where}: {refused}; {canonical.scalar(err.instance)} is how Helm writes a whole "
            f"number this large (it holds numbers in 64 bits){allowed}"
        )
    if refused:
        # What `trainctl train` would say of it, which names the forms the setting takes.
        return f"{where}: {refused}"
    by_rule = {
        "type": _wrong_type,
        "not": _refused_by_not,
        "pattern": _refused_by_pattern,
        "additionalProperties": _unknown_key,
        "required": _deleted,
    }
    said = by_rule[err.validator](err, where) if err.validator in by_rule else None
    return said or _other_rule(err, where) or f"{where}: {err.message}"


def _deleted(err: Any, where: str) -> str | None:
    """A key the chart needs whose default a null (an empty value) deleted; None for a key
    the chart has no default for, which the schema's own words name."""
    path = [str(part) for part in err.absolute_path]
    said = []
    for key in [k for k in err.validator_value if k not in err.instance]:
        default: Any = default_values()
        for part in (*path, key):
            default = default[part] if isinstance(default, dict) and part in default else None
        if default is None:
            continue
        shown = (
            "a map" if isinstance(default, dict)
            else "a list" if isinstance(default, list)
            else repr(default) if isinstance(default, str)
            else canonical.scalar(default)
        )  # fmt: skip
        said.append(
            f"{'.'.join((*path, key))}: missing: the chart needs it ({shown} by default), and a "
            "null (an empty value) deletes the chart's default; give it a value"
        )
    return "; ".join(said) or None


def _wrong_type(err: Any, where: str) -> str | None:
    if err.instance is None:  # YAML's null (or an empty value), not Python's None
        wanted = err.validator_value
        wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
        return f"{where}: null (an empty value) is not allowed here: {_a(wanted)} is wanted"
    if _typed_by_set(err.instance, err.validator_value):
        return _text_typed(err, where)
    wanted = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
    if isinstance(err.instance, dict | list) and wanted == ["string"]:
        kind = "a mapping" if isinstance(err.instance, dict) else "a list"
        about = err.schema.get("description") if isinstance(err.schema, dict) else None
        return f"{where}: {kind} is given, and text is wanted" + (f": {about}" if about else "")
    if isinstance(err.instance, bool) and {"integer", "number"} & set(wanted):
        text = canonical.scalar(err.instance)
        return (
            f"{where}: {text} is a boolean, and a number is wanted ({YAML_BOOLEANS}; a count "
            "is written as digits)"
        )
    if isinstance(err.instance, float) and "integer" in wanted and "number" not in wanted:
        return f"{where}: {canonical.scalar(err.instance)} is not a whole number, and one is wanted"
    if err.validator_value == "boolean" and isinstance(err.instance, str):
        return f"{where}: {err.instance!r} is text, and true or false is wanted: write it unquoted"
    if "object" in wanted and not {"number", "integer", "string"} & set(wanted):
        # A number or a word where a mapping belongs: how to write a number is no help there.
        about = err.schema.get("description") if isinstance(err.schema, dict) else None
        shown = canonical.scalar(err.instance) if err.instance != "" else '"" (empty text)'
        return f"{where}: {shown} is not a mapping, and one is wanted" + (
            f" ({about})" if isinstance(about, str) and len(about) <= 200 else ""
        )
    if isinstance(err.instance, str) and _is_number(err.instance):
        return _number_as_text(err, where, wanted)
    return None


def _text_typed(err: Any, where: str) -> str:
    """Text wanted, and YAML or --set typed the value (a number, a boolean): how to keep it
    text in a values file and on the command line."""
    if isinstance(err.instance, float):
        # Only a file makes a number of 2.10 (Helm's --set keeps a decimal as text), and YAML
        # drops its trailing zero: quoting what it read back would tag 2.1, not 2.10.
        text = canonical.scalar(err.instance)
        trap = (
            f'unquoted, YAML reads {text}0 as the number {text} too: "{text}0" keeps it'
            if "." in text
            else f"YAML read the number {text}"
        )
        return (
            f"{where}: {text} is a number, and text is wanted: quote it in the values file as "
            f"you mean it ({trap}); --set and --set-string keep a value with a decimal point "
            "as text"
        )
    text = canonical.scalar(err.instance)
    kind = "a boolean" if isinstance(err.instance, bool) else "a number"
    also = f", or the word you wrote: {YAML_BOOLEANS} too" if isinstance(err.instance, bool) else ""
    return (
        f"{where}: {text} is {kind}, and text is wanted: in a values file quote it "
        f'("{text}"{also}); --set reads {text} as {kind} too (as Helm does): give it with '
        f"--set-string {set_path(err.absolute_path)}={text}"
    )


def _number_as_text(err: Any, where: str, wanted: list[Any]) -> str:
    """A number wanted, and the value is text that reads as one: how to give it as a number."""
    quoted = f"{where}: {err.message}: in a values file write {err.instance} unquoted"
    if isinstance(strvals.typed_value(err.instance), int):
        given = f"--set {where}={err.instance}"
        return f"{quoted}; --set-string keeps it a string: give it with {given}"
    if "integer" in wanted and "number" not in wanted:  # no spelling of 1.5 is a count
        return f"{where}: {err.instance} is not a whole number, and one is wanted"
    # Helm's --set types only integers, booleans and null: 0.001 stays a string there too.
    return (
        f"{quoted}; --set keeps it a string too (as Helm does): give it with "
        f"--set-json {where}={err.instance}"
    )


def _refused_by_not(err: Any, where: str) -> str | None:
    rule = err.validator_value
    if rule.get("pattern") in CREDENTIAL_FORMS:
        # Refused for being a credential: the value is never quoted back, masked or not. No
        # colon after the key: redact_text masks the word after `MY_TOKEN:` (it read `***
        # allowed`, a red-team pass).
        return f"{where} holds a value that is not allowed: {rule['description']}"
    if "description" in rule:
        if isinstance(err.instance, dict | list):  # the rule says what of it is refused
            return f"{where}: {rule['description']}"
        return f"{where}: {err.instance!r} is not allowed: {rule['description']}"
    if "pattern" in rule:
        return f"{where}: {err.instance!r} is not allowed here (refused pattern {rule['pattern']})"
    return None


def _refused_by_pattern(err: Any, where: str) -> str | None:
    if err.validator_value == names.FREE_FORM_TEXT:
        what = "key" if "propertyNames" in err.schema_path else "text"
        return (
            f"{where}: the {what} {err.instance!r} holds a character this value may not hold "
            f"({names.FREE_FORM_REFUSED}): Helm's toYaml would write it so that the manifest "
            "breaks or the value changes; remove it"
        )
    if len(err.validator_value) > 200 or "description" in err.schema:
        # A cron pattern is kilobytes of regex, an image name's a maze: say what the value
        # should be instead, where the schema says it.
        what = err.schema.get("description") or "the form this value takes"
        return f"{where}: {err.instance!r} is not allowed: {what}"
    return None


def _unknown_key(err: Any, where: str) -> str:
    known = ", ".join(sorted(err.schema.get("properties", {})))
    if err.path and err.path[-1] == "train":
        return f"{where}: {err.message}; settable TRAIN_* keys: {known}"
    return f"{where}: {err.message}; allowed: {known}"


def _a(kind: str) -> str:
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"


BOUNDS = {
    "minimum": "at least",
    "exclusiveMinimum": "greater than",
    "maximum": "at most",
    "exclusiveMaximum": "less than",
}


def _other_rule(err: Any, where: str) -> str | None:
    """Bounds, sizes, lengths and lists of choices that the schema words itself."""
    if err.validator == "exclusiveMinimum" and len(err.path) > 1 and err.path[-2] == "loguniform":
        return f"{where}: loguniform takes [low, high] above 0 (it draws their logarithms)"
    if err.validator in BOUNDS:
        hint = f" ({err.schema['description']})" if err.schema.get("description") else ""
        bound = canonical.scalar(err.validator_value)
        value = canonical.scalar(err.instance)
        return f"{where}: {value} is not allowed: it must be {BOUNDS[err.validator]} {bound}{hint}"
    if err.validator in ("minProperties", "minItems") and "description" in err.schema:
        return f"{where}: {err.message}: {err.schema['description']}"
    if err.validator == "maxLength":
        what = "name" if "propertyNames" in err.schema_path else "value"
        return (
            f"{where}: the {what} {err.instance!r} is {len(err.instance)} characters, over the "
            f"{err.validator_value} allowed"
        )
    if err.validator == "anyOf" and "description" in err.schema:  # e.g. "a name, or {name:}"
        return f"{where}: {err.instance!r} is not allowed: {err.schema['description']}"
    if err.validator == "enum" and len(err.validator_value) > 20:
        hint = f" ({err.schema['description']})" if err.schema.get("description") else ""
        return (
            f"{where}: {err.instance!r} is not one of the {len(err.validator_value)} allowed{hint}"
        )
    return None


def _settings_refusal(path: list[Any], value: Any) -> str | None:
    """The settings model's message for a `train:` value (or a sweep's value of a setting) it
    refuses (TRAIN_X='...': ...), as the pods would read it; None for other keys, or a value
    the settings take."""
    if len(path) == 5 and path[:2] == ["tune", "space"]:  # tune.space.<setting>.<kind>.<n>
        path = ["train", path[2]]  # a trial's value of that setting
    sections = (["train"], ["poolDefaults", "train"], ["nodePools", "*", "train"])
    if value is None or not any(
        len(path) == len(s) + 1 and all(a in ("*", b) for a, b in zip(s, path, strict=False))
        for s in sections
    ):
        return None
    from app.settings import TrainSettings, env_name
    from app.settings.env import check_env

    setting = path[-1]
    if setting not in TrainSettings.model_fields:
        return None
    name = env_name(setting)
    text = canonical.go_json(value) if isinstance(value, dict | list) else canonical.scalar(value)
    _, problems = check_env({name: text})
    return next((line for about, line in problems if about == name), None)


def _held_as_a_float(value: Any) -> bool:
    """A whole number the chart writes in float notation (1e+42): beyond what it holds
    exactly, as YAML and Helm read an integer too large for 64 bits."""
    return (
        isinstance(value, float)
        and math.isfinite(value)
        and value.is_integer()
        and "e" in canonical.scalar(value)
    )


def _typed_by_set(value: Any, types: Any) -> bool:
    """A number or boolean where the schema wants text: what `--set` makes of `true` or `42`."""
    wanted = [types] if isinstance(types, str) else list(types)
    return isinstance(value, bool | int | float) and "string" in wanted


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def merged_pool(values: dict[str, Any], pool: dict[str, Any] | None) -> dict[str, Any]:
    """A pool over poolDefaults: each key the pool sets replaces the default's key."""
    merged = copy.deepcopy(values.get("poolDefaults") or {})
    merged.update(copy.deepcopy(pool or {}))
    return merged


def enabled_pools(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    pools = {}
    for name in sorted(values.get("nodePools") or {}):
        pool = merged_pool(values, values["nodePools"][name])
        if pool.get("enabled"):
            pools[name] = pool
    return pools


def merged_train(values: dict[str, Any], pool: dict[str, Any]) -> dict[str, Any]:
    train = dict(values.get("train") or {})
    train.update(pool.get("train") or {})
    return {key: value for key, value in sorted(train.items()) if value is not None}
