"""Checking ./.env before pydantic-settings reads it.

python-dotenv (under pydantic-settings) skips a line it cannot parse with a warning, and the
settings model ignores keys it does not know, so a typo in .env silently left a default in
place while the same typo as an environment variable was refused. This reads the file with the
same parser and refuses what it would skip, naming the file and the line.
"""

from __future__ import annotations

import io
import os
import re
import stat
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from dotenv.parser import Binding, parse_stream

from app.errors import did_you_mean

PREFIX = "TRAIN_"
MAX_ENV_FILE_BYTES = 1 << 20  # far above any real .env; a link to /dev/zero never ends


def _read(path: Path) -> bytes:
    """The file's bytes: a regular file (a FIFO would block `check` forever) of at most
    MAX_ENV_FILE_BYTES. It may be a link: .env is the operator's own file, often linked."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(mode):
            raise OSError("it is a FIFO, socket or device, not a regular file")
        data = handle.read(MAX_ENV_FILE_BYTES + 1)
    if len(data) > MAX_ENV_FILE_BYTES:
        raise OSError(f"larger than {MAX_ENV_FILE_BYTES // 1024} KiB")
    return data


def _bare(key: str) -> str:
    """The key without the quotes, spaces and invisible characters (zero-width spaces, byte
    order marks) that python-dotenv keeps in it: the name a reader of the file sees."""
    visible = "".join(c for c in key if unicodedata.category(c) != "Cf")
    return visible.strip().strip("\"'").strip()


def spelling_problem(key: str, known: set[str]) -> str | None:
    """Why a key that reads as a TRAIN_ setting would not be read as the one it shows."""
    bare = _bare(key)
    if bare != key:
        return f"{key!r} has quotes or invisible characters around the name; write {bare}=VALUE"
    if key != key.upper() and key.upper() in known:
        # The settings are read without regard to case: a lowercase twin of a setting would
        # decide its value by its place in the file or the environment.
        return f"{key} must be written in capitals: {key.upper()}"
    return None


def check_env_file(path: Path, known: set[str]) -> list[str]:
    """One problem per bad line of `path` (none when it does not exist)."""
    if not path.exists():
        return []
    try:
        data = _read(path)
        text = data.decode("utf-8")
    except IsADirectoryError:
        return [f"{path}: is a folder, not a KEY=VALUE file"]
    except OSError as err:
        return [f"{path}: cannot be read ({err.strerror or err})"]
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        return [f"{path}:{line}: not UTF-8 text (byte {err.start}); save the file as UTF-8"]
    problems = []
    seen: dict[str, int] = {}
    defined: set[str] = set()  # the keys above the line, which python-dotenv expands too
    above: Binding | None = None
    for line, binding in _bindings(text):
        if above is not None and above.key is not None and above.value is not None:
            defined.add(above.key)
        above = binding
        original = binding.original.string
        if binding.error:
            shown = original.strip().splitlines()[0][:60] if original.strip() else ""
            problems.append(f"{path}:{line}: cannot parse {shown!r}; lines must be KEY=VALUE")
            continue
        key = binding.key
        if key is None or not _bare(key).upper().startswith(PREFIX):
            continue  # comments, blank lines, and variables meant for other tools
        if spelling := spelling_problem(key, known):
            problems.append(f"{path}:{line}: {spelling}")
        elif key in seen:
            problems.append(
                f"{path}:{line}: {key} is set again (first on line {seen[key]}); keep one"
            )
        elif binding.value is None:
            problems.append(f"{path}:{line}: {key} has no value; write {key}=VALUE")
        elif key.upper() not in known:
            hint = did_you_mean(key.upper(), known, "run `trainctl env` for the list")
            problems.append(f"{path}:{line}: {key} is not a trainctl setting{hint}")
        elif unset := _unset_references(binding.value, defined):
            problems.append(
                f"{path}:{line}: {key} uses {', '.join('${' + n + '}' for n in unset)}, not set "
                "in the environment or above in this file: python-dotenv would put nothing in "
                "its place; set it, give a default (${NAME:-value}), or write the value out"
            )
        seen.setdefault(key, line)
    return problems


# python-dotenv's interpolation (dotenv.variables): ${NAME}, or ${NAME:-default}.
_REFERENCE = re.compile(r"\$\{(?P<name>[^}:]*)(?::-(?P<default>[^}]*))?\}")


def _unset_references(value: str, defined: set[str]) -> list[str]:
    """The ${NAME} references in `value` that python-dotenv would expand to nothing: a
    `TRAIN_DATA_PATH=${ROOT}/data` with ROOT unset trained on /data (a red-team pass)."""
    return [
        match["name"]
        for match in _REFERENCE.finditer(value)
        if match["default"] is None
        and match["name"] not in os.environ
        and match["name"] not in defined
    ]


def setting_lines(path: Path) -> dict[str, int]:
    """The line of each TRAIN_ key in `path`, a file check_env_file passed: what a refusal of
    a value that came from the file points at (none when there is no file)."""
    if not path.exists():
        return {}
    lines: dict[str, int] = {}
    for line, binding in _bindings(_read(path).decode("utf-8")):
        if binding.key is not None and binding.key.startswith(PREFIX):
            lines.setdefault(binding.key, line)
    return lines


def _bindings(text: str) -> Iterator[tuple[int, Binding]]:
    """python-dotenv's bindings of `text`, each with the line its key is on."""
    for binding in parse_stream(io.StringIO(text)):
        original = binding.original.string
        # The parser counts from the first of any blank lines it folds into a binding.
        blank = original[: len(original) - len(original.lstrip())].count("\n")
        yield binding.original.line + blank, binding
