"""Checking ./.env before pydantic-settings reads it.

python-dotenv (under pydantic-settings) skips a line it cannot parse with a warning, and the
settings model ignores keys it does not know, so a typo in .env silently left a default in
place while the same typo as an environment variable was refused. This reads the file with the
same parser and refuses what it would skip, naming the file and the line.
"""

from __future__ import annotations

import io
from pathlib import Path

from dotenv.parser import parse_stream

from app.errors import did_you_mean

PREFIX = "TRAIN_"


def check_env_file(path: Path, known: set[str]) -> list[str]:
    """One problem per bad line of `path` (none when it does not exist)."""
    if not path.exists():
        return []
    try:
        text = path.read_bytes().decode("utf-8")
    except IsADirectoryError:
        return [f"{path}: is a folder, not a KEY=VALUE file"]
    except OSError as err:
        return [f"{path}: cannot be read ({err.strerror or err})"]
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        return [f"{path}:{line}: not UTF-8 text (byte {err.start}); save the file as UTF-8"]
    problems = []
    for binding in parse_stream(io.StringIO(text)):
        original = binding.original.string
        # The parser counts from the first of any blank lines it folds into a binding.
        line = binding.original.line + original[: len(original) - len(original.lstrip())].count(
            "\n"
        )
        if binding.error:
            shown = original.strip().splitlines()[0][:60] if original.strip() else ""
            problems.append(f"{path}:{line}: cannot parse {shown!r}; lines must be KEY=VALUE")
            continue
        key = binding.key
        if key is None or not key.upper().startswith(PREFIX):
            continue  # comments, blank lines, and variables meant for other tools
        if binding.value is None:
            problems.append(f"{path}:{line}: {key} has no value; write {key}=VALUE")
        elif key.upper() not in known:
            hint = did_you_mean(key.upper(), known, "run `trainctl env` for the list")
            problems.append(f"{path}:{line}: {key} is not a trainctl setting{hint}")
    return problems
