"""Running `trainctl` in-process and asserting what a refused input must look like."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def trainctl(*args: str) -> Result:
    """The real CLI entry point (app.cli.run, what `main` exits with), output captured."""
    from app.cli import run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(list(args))
    return Result(code, out.getvalue(), err.getvalue())


def assert_refused(result: Result, code: int, *needles: str) -> None:
    """Exit `code`, every needle named in the message, no traceback."""
    assert result.code == code, result.text
    assert "Traceback" not in result.text, result.text
    assert "internal error" not in result.text, result.text
    for needle in needles:
        assert needle in result.text, (needle, result.text)


def files_under(path: Path) -> list[str]:
    if not path.exists():
        return []
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))
