"""Reading the settings from the environment: every problem at once, one line each.

`load_settings` holds ./.env and the TRAIN_* variables to the rules of app/settings/'s
`TrainSettings`; `settings_from_env` holds given variables (a rendered ConfigMap's) to the same
rules, reading nothing else; `storage_access` and `storage_location` hold the few settings
`trainctl logs` needs to the same rules, without the others; `run_location` finds a run given
by its folder or by its name alone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import TypeAdapter, ValidationError
from pydantic_settings import EnvSettingsSource

from app.errors import ConfigError, did_you_mean
from app.redact import redact
from app.settings import ENV_PREFIX, TrainSettings, env_name
from app.storage.location import RunPath, parse_location
from app.storage.uris import check_endpoint

MAX_SHOWN = 200  # characters of a refused value quoted back
ENV_FILE = Path(str(TrainSettings.model_config["env_file"]))  # the file pydantic-settings reads


def load_settings() -> TrainSettings:
    """Read settings from the environment, raising ConfigError with one line per problem.

    ./.env is held to the same rules as the environment: an unknown TRAIN_ key or a line that
    is not KEY=VALUE is refused with its line number, never skipped with a warning.
    """
    _refuse_bad_env_file()
    problems = [line for _, line in _unknown(os.environ)]
    try:
        settings = TrainSettings()
    except ValidationError as err:
        from app.envfile import setting_lines

        # A value the environment does not set came from ./.env: say where, as for its lines.
        in_file = {k: v for k, v in setting_lines(ENV_FILE).items() if k not in os.environ}
        for name, line in _described(err, os.environ):
            problems.append(f"{ENV_FILE}:{in_file[name]}: {line}" if name in in_file else line)
        raise ConfigError(problems) from None
    if problems:
        raise ConfigError(problems)
    return settings


def settings_from_env(env: Mapping[str, str]) -> TrainSettings:
    """The settings `env` holds, read as `load_settings` reads the environment (the same
    decoding, checks and messages) but from `env` alone: not the process environment, not
    ./.env. ConfigError with one line per problem."""
    settings, problems = check_env(env)
    if settings is None or problems:
        raise ConfigError([line for _, line in problems])
    return settings


def check_env(env: Mapping[str, str]) -> tuple[TrainSettings | None, list[tuple[str, str]]]:
    """settings_from_env's settings (None when they fail) and its problems, each with the
    variable it is about ("" for a rule across settings, whose message names them)."""
    problems = _unknown(env)
    # A rendered ConfigMap's values become the pod's environment, where a NUL cannot be: the
    # container would never start.
    problems += [
        (key, f"{key} holds a NUL character, which no environment variable can hold")
        for key, value in sorted(env.items())
        if key.startswith(ENV_PREFIX) and "\x00" in value
    ]
    try:
        settings = TrainSettings.from_values(_GivenEnv(env)())
    except ValidationError as err:
        return None, problems + _described(err, env)
    return settings, problems


class _GivenEnv(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of os.environ."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._given = dict(env)
        super().__init__(TrainSettings)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # As the base class reads os.environ: names compared without case (TrainSettings').
        if self.case_sensitive:
            return dict(self._given)
        return {name.lower(): value for name, value in self._given.items()}


def storage_access(env: Mapping[str, str]) -> tuple[str | None, float]:
    """TRAIN_STORAGE_ENDPOINT and TRAIN_STORAGE_TIMEOUT_S alone, held to the same rules, for
    commands that read a bucket without the other settings (`trainctl logs`)."""
    problems = []
    endpoint = env.get(env_name("storage_endpoint"), "").strip() or None
    if endpoint is not None:
        try:
            endpoint = check_endpoint(env[env_name("storage_endpoint")])
        except ValueError as err:
            given = redact(env[env_name("storage_endpoint")])
            problems.append(f"{env_name('storage_endpoint')}={given!r}: {err}")
    field = TrainSettings.model_fields["storage_timeout_s"]
    timeout = float(field.default)
    given = env.get(env_name("storage_timeout_s"), "").strip()
    if given:
        try:
            timeout = TypeAdapter(Annotated[float, field]).validate_python(given)
        except ValidationError as err:
            message = "; ".join(str(item["msg"]) for item in err.errors())
            problems.append(f"{env_name('storage_timeout_s')}={given!r}: {message}")
    if problems:
        raise ConfigError(problems)
    return endpoint, timeout


def _refuse_bad_env_file() -> None:
    """ConfigError with one line per bad line of ./.env (app/envfile.py); none when it is fine
    or absent."""
    from app.envfile import check_env_file

    problems = check_env_file(ENV_FILE, _known())
    if problems:
        raise ConfigError(problems)


def _known() -> set[str]:
    return {env_name(name) for name in TrainSettings.model_fields}


def _unknown(env: Mapping[str, str]) -> list[tuple[str, str]]:
    from app.envfile import spelling_problem

    known = _known()
    problems = []
    for key in sorted(k for k in env if k.upper().startswith(ENV_PREFIX)):
        if spelling := spelling_problem(key, known):  # .env's rule, the same for the environment
            problems.append((key, spelling))
            continue
        if key in known:
            continue
        hint = did_you_mean(key.upper(), known, "run `trainctl env` for the list")
        problems.append((key, f"{key} is not a trainctl setting{hint}"))
    return problems


def _described(err: ValidationError, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """One line per bad variable: its name, the value given and what is allowed."""
    lines = []
    for item in err.errors():
        message = str(item["msg"]).removeprefix("Value error, ")
        if not item["loc"]:
            lines.append(("", message))
            continue
        name = env_name(str(item["loc"][0]))
        given = env.get(name, env.get(name.lower(), item.get("input")))
        shown = redact(given)
        if isinstance(shown, str) and len(shown) > MAX_SHOWN:
            shown = f"{shown[:MAX_SHOWN]}... ({len(shown):,} characters)"
        if item["type"] == "literal_error" and isinstance(given, str):
            message += _closest(given, str(item.get("ctx", {}).get("expected", "")))
        lines.append((name, f"{name}={shown!r}: {message}"))
    return lines


def _closest(given: str, expected: str) -> str:
    """`; did you mean X?` for a value close to one of a fixed set (pydantic quotes each in
    `expected`), as TRAIN_MODEL's own check says it; nothing where none is close."""
    hint = did_you_mean(given, re.findall(r"'([^']*)'", expected), otherwise="")
    return hint if "did you mean" in hint else ""


def storage_location(value: str, label: str, endpoint: str | None) -> RunPath:
    """A storage location given on the command line, parsed as `train` parses
    TRAIN_STORAGE_PATH (app/storage/location.py); `label` names it in the refusal."""
    try:
        return parse_location(value, endpoint)
    except ValueError as err:
        raise ConfigError(f"{label}: {err}") from None


def settings_environ() -> dict[str, str]:
    """The TRAIN_* variables as `train` reads them: ./.env's, then the environment's over them
    (pydantic-settings' order), for the commands that need a few settings without the others
    (`logs`, `predict`, `status`, `compare`). A .env `train` would refuse is refused here too."""
    from dotenv import dotenv_values

    _refuse_bad_env_file()
    from_file = dotenv_values(ENV_FILE) if ENV_FILE.is_file() else {}
    given = {k: v for k, v in from_file.items() if k.startswith(ENV_PREFIX) and v is not None}
    return {**given, **os.environ}


def run_location(value: str, env: Mapping[str, str]) -> RunPath:
    """RUN on the command line (`evaluate`, `compare`, `predict`): a run folder's path or URI,
    or, where it is a bare name (or a sweep's trial, SWEEP/trial-NNNN) and no such folder is
    here, the run of that name under TRAIN_STORAGE_PATH, where `train` (or `tune`) put it
    (through TRAIN_STORAGE_ENDPOINT for a bucket).
    A bare name that is neither is refused naming both places."""
    from app.formatting import one_path
    from app.settings.tune_plan import TRIAL_NAME, TRIALS_DIR
    from app.storage.reading import is_dir_within

    endpoint, timeout = storage_access(env)
    label = f"RUN {redact(value)!r}"
    given = storage_location(value, label, endpoint)
    bare = value not in ("", ".", "..") and "/" not in value and os.sep not in value
    # SWEEP/trial-NNNN, as `compare` and `status` label a sweep's trials: given back, it is
    # that trial under TRAIN_STORAGE_PATH (its folder is SWEEP/trials/trial-NNNN).
    sweep, _, trial = value.partition("/")
    labelled = bool(sweep) and sweep not in (".", "..") and TRIAL_NAME.fullmatch(trial)
    if not (bare or labelled) or os.path.lexists(value):
        return given
    variable = env_name("storage_path")
    storage = storage_location(storage_path_setting(env), variable, endpoint)
    under = storage / value if bare else storage / sweep / TRIALS_DIR / trial
    try:
        if is_dir_within(under, variable, timeout):
            return under
    except (OSError, ValueError) as err:  # a name the system refuses: too long, a NUL
        raise ConfigError(f"{label}: {getattr(err, 'strerror', None) or err}") from None
    raise ConfigError(
        f"{label}: no such folder here, and no run of that name under {variable} "
        f"({one_path(storage)}); give a run folder's path or URI, or a run's name"
    )


def storage_path_setting(env: Mapping[str, str]) -> str:
    """TRAIN_STORAGE_PATH as given in `env` (settings_environ's), or its default when unset
    or empty (as `train` reads it)."""
    given = env.get(env_name("storage_path"), "").strip()
    return given or str(TrainSettings.model_fields["storage_path"].default)
