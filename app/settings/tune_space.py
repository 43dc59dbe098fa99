"""TRAIN_TUNE_SPACE: the search space of `trainctl tune`, read and checked before Ray starts
(pure but the read; here beside the settings it is held to, so that `trainctl render` checks a
chart's `tune.space` too).

    lr: {loguniform: [1.0e-4, 1.0e-1]}
    weight_decay: {uniform: [0, 0.1]}
    global_batch_size: {randint: [32, 256]}     # both ends included
    model: {choice: [cnn, resnet18]}
    augment: {grid: [crop, none]}                # every value, in every combination

Keys are the lower-case names of the settings a trial may vary (VARIABLE): model and
optimisation settings, not where the sweep lives or what it runs on, so that every trial is
the same kind of run on the same resources. Every end of a range and every listed value is
held to the setting's own rules (app/settings: bounds, names) here, and tune_plan.py holds every
drawn trial's settings to them again: a value torch cannot take is refused with the setting's
own message, naming the key, before anything trains.
"""

from __future__ import annotations

import contextlib
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import ValidationError

from app.errors import ConfigError, did_you_mean
from app.formatting import shown, yaml_problem
from app.settings import ENV_PREFIX, TrainSettings
from app.settings.model import ModelSettings
from app.storage import safe_fs

MAX_SPACE_BYTES = 64 * 1024
MAX_VALUES = 1000  # values of one choice/grid
KINDS = ("loguniform", "uniform", "randint", "choice", "grid")
RANGES = ("loguniform", "uniform", "randint")
# What a trial may vary: the model and its optimisation. Not TRAIN_EPOCHS (the sweep's budget,
# ASHA's horizon), not where the weights come from, not the run's place or resources.
FIXED = frozenset({"epochs", "warm_start", "weights", "weights_sha256", "torch_home"})
VARIABLE: tuple[str, ...] = tuple(n for n in ModelSettings.model_fields if n not in FIXED)
SPACE = "TRAIN_TUNE_SPACE"
# The sweep's own settings and the chart's values that set them (app/k8s/train_values.py names
# these keys in render's messages too): a trial never varies them.
CHART_KEYS = {
    "tune_space": "tune.space",
    "tune_samples": "tune.samples",
    "tune_concurrent": "tune.concurrent",
    "tune_scheduler": "tune.scheduler",
    "tune_grace_period": "tune.gracePeriod",
    "tune_reduction_factor": "tune.reductionFactor",
}


@dataclass(frozen=True)
class Dimension:
    """One key of the space: a distribution over the values of one setting."""

    key: str
    kind: str  # one of KINDS
    values: tuple[Any, ...]  # [low, high] for a range, the values for choice and grid

    @property
    def integer(self) -> bool:
        return _annotation(self.key) is int

    def describe(self) -> str:
        return f"{self.kind} {list(self.values)}"


def load_space(path: Path, base: TrainSettings) -> dict[str, Dimension]:
    """The space in `path` (a local file, read without following a link, at most 64 KiB)."""
    where = f"{SPACE}={shown(path)}"  # escaped: a newline in the path could forge a line
    if "\x00" in str(path):
        raise ConfigError(f"{where}: a path cannot hold a NUL byte; give the space's YAML file")
    try:
        raw = safe_fs.read_bytes(path, path.parent, MAX_SPACE_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except safe_fs.LinkRefused:
        raise ConfigError(f"{where}: is a link; give the file itself") from None
    except ValueError:  # over the limit, nothing read beyond it
        raise ConfigError(f"{where}: larger than {MAX_SPACE_BYTES // 1024} KiB") from None
    except OSError as err:
        raise ConfigError(f"{where}: cannot be read ({err.strerror or err})") from None
    try:
        data = yaml.load(raw.decode("utf-8"), Loader=_SpaceLoader)  # a SafeLoader
    except _KeyTwice as err:
        raise ConfigError(f"{where}: {err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{where}: not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: not YAML ({yaml_problem(err)})") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply to be a space") from None
    return parse_space(data, base, where)


class _KeyTwice(yaml.YAMLError):
    pass


class _SpaceLoader(yaml.SafeLoader):
    """SafeLoader, refusing a key given twice: YAML keeps the last silently, and a space
    whose `lr` was edited in two places would draw from the one nobody reads last."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults`, YAML's merge: the keys given here override its own
            key, line = self.construct_object(key_node, deep=deep), key_node.start_mark.line + 1
            if not isinstance(key, str):
                continue  # parse_space names a key that is not a setting's name
            if key in seen:
                raise _KeyTwice(f"line {line}: {key} is given twice (first on line {seen[key]})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def parse_space(data: Any, base: TrainSettings, where: str = SPACE) -> dict[str, Dimension]:
    """The space from its YAML value, each value held to the rules of the settings `base`
    varies: every problem at once, one line each, naming the key."""
    fixed = base.model_dump(mode="json")
    if not isinstance(data, dict) or not data:
        raise ConfigError(
            f"{where}: must map settings to distributions, e.g. `lr: {{loguniform: [1e-4, 1e-1]}}`"
        )
    space, problems = {}, []
    for key, given in data.items():
        try:
            space[str(key)] = _dimension(key, given, fixed)
        except ValueError as err:
            problems.append(f"{where}: {key!s}: {err}")
    if problems:
        raise ConfigError(problems)
    return space


def _dimension(key: Any, given: Any, base: dict[str, Any]) -> Dimension:
    if isinstance(key, str) and f"tune_{key}" in CHART_KEYS:
        raise ValueError(  # `scheduler: asha` in the space: a setting of the sweep itself
            f"a setting of the sweep, not of a trial: set TRAIN_TUNE_{key.upper()} (the chart's "
            f"{CHART_KEYS['tune_' + key]}) instead"
        )
    if isinstance(key, str) and key.upper().startswith(ENV_PREFIX):
        named = key[len(ENV_PREFIX) :].lower()  # TRAIN_LR, the variable: the space names `lr`
        if named in TrainSettings.model_fields:
            raise ValueError(f"write the setting as `{named}` (a space names settings without "
                             f"{ENV_PREFIX})")  # fmt: skip
    if not isinstance(key, str) or key not in TrainSettings.model_fields:
        known = {n for n in TrainSettings.model_fields}
        hint = did_you_mean(str(key), known, f"a trial may vary: {', '.join(VARIABLE)}")
        raise ValueError(f"not a trainctl setting{hint}")
    if key not in VARIABLE:
        raise ValueError(
            f"is not a setting a trial may vary (the sweep fixes it); a trial may vary: "
            f"{', '.join(VARIABLE)}"
        )
    if not isinstance(given, dict) or len(given) != 1:
        raise ValueError(f"give one distribution: a mapping with one of {', '.join(KINDS)}")
    ((kind, values),) = given.items()
    if kind not in KINDS:
        raise ValueError(f"{kind!r} is not a distribution; use one of {', '.join(KINDS)}")
    if isinstance(values, list) and not values:
        wanted = "give [low, high]" if kind in RANGES else "list at least one value"
        raise ValueError(f"{kind} is empty: {wanted}")
    if not isinstance(values, list):
        raise ValueError(f"{kind} takes a list: {'[low, high]' if kind in RANGES else '[...]'}")
    numeric = _annotation(key) in (int, float)
    if kind in RANGES:
        if not numeric:
            raise ValueError(f"{kind} is for numeric settings; use choice or grid for {key}")
        return Dimension(key, kind, _range(key, kind, values, base))
    if len(values) > MAX_VALUES:
        raise ValueError(f"{kind} takes at most {MAX_VALUES} values")
    if any(isinstance(v, dict | list) or v is None for v in values):
        raise ValueError(f"{kind} takes plain values (numbers, words, true/false)")
    flag = next((v for v in values if isinstance(v, bool)), None)
    if numeric and flag is not None:
        # pydantic would take true as 1 (lr 1.0) without a word: a slip of YAML, not a value.
        raise ValueError(
            f"{kind} of {key} holds {str(flag).lower()}, a boolean, where {key} takes "
            "numbers (YAML reads true, false, on, off, yes and no unquoted as booleans)"
        )
    unique = tuple(dict.fromkeys(_typed(key, v) for v in values))
    for value in unique:
        check_value(base, key, value)
    return Dimension(key, kind, unique)


def _range(key: str, kind: str, values: list[Any], base: dict[str, Any]) -> tuple[Any, ...]:
    if len(values) != 2:
        raise ValueError(f"{kind} takes [low, high]")
    try:
        low, high = (_number(v) for v in values)
    except ValueError:
        raise ValueError(f"{kind} takes two numbers, not {values!r}") from None
    if kind == "randint" or _annotation(key) is int:
        if kind == "randint" and not (_whole(low) and _whole(high)):
            raise ValueError(f"randint takes two whole numbers, not {values!r}")
        low, high = math.ceil(low), math.floor(high)
    if not low <= high:
        raise ValueError(f"{kind} needs low <= high, not {values!r}")
    if kind == "loguniform" and low <= 0:
        raise ValueError(f"loguniform needs 0 < low, not {values!r}")
    typed = (int(low), int(high)) if _annotation(key) is int else (float(low), float(high))
    for end in typed:
        check_value(base, key, end)
    return typed


def _number(value: Any) -> int | float:
    """Whole numbers stay exact ints (TRAIN_SEED goes up to 2^64 - 1, past what a float holds
    exactly), the rest are floats. YAML 1.1 reads 1e-4 (no dot) as a string: numbers written
    either way are numbers here."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError
    return number


def _whole(number: int | float) -> bool:
    return isinstance(number, int) or number.is_integer()


def _typed(key: str, value: Any) -> Any:
    kind = _annotation(key)
    if kind in (int, float) and not isinstance(value, bool):
        try:
            number = _number(value)
        except ValueError:
            return value  # the setting's own check says what it takes
        return int(number) if kind is int and _whole(number) else number
    return value


def check_value(base: dict[str, Any], key: str, value: Any) -> None:
    """`value` held to setting `key`'s own rules, and to the rules across settings, with the
    other settings as `base` (TrainSettings.model_dump(mode="json")) has them; ValueError
    with the settings' own message."""
    try:
        TrainSettings.from_values({**base, key: value})
    except ValidationError as err:
        hint = ""
        if isinstance(value, bool) and TrainSettings.model_fields[key].annotation is not bool:
            hint = " (YAML reads on, off, yes and no unquoted as true and false: quote the word)"
        raise ValueError(f"{value!r}: {settings_message(err)}{hint}") from None


def settings_message(err: ValidationError) -> str:
    """The settings' refusal, each problem named by its TRAIN_ variable."""
    lines = []
    for item in err.errors():
        message = str(item["msg"]).removeprefix("Value error, ")
        name = f"TRAIN_{str(item['loc'][0]).upper()} " if item["loc"] else ""
        lines.append(f"{name}{message}")
    return "; ".join(lines)


def _annotation(key: str) -> Any:
    """int, float, or `choice` for a setting of listed values (Literal, bool, a model name)."""
    annotation = TrainSettings.model_fields[key].annotation
    if annotation in (int, float):
        return annotation
    if annotation is bool or get_origin(annotation) is Literal:
        return "choice"
    if get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 and args[0] in (int, float) else "other"
    return "choice" if key == "model" else "other"
