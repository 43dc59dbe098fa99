"""Running `trainctl` in-process and asserting what a refused input must look like."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
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
    """The real CLI entry point (app.cli.run, what `main` exits with), output captured.

    A Ray connection the command made (a local cluster it started, a cluster it joined) ends
    with it, as it does when the command's process exits: left running, a local cluster
    would spend this test process's CPU for the rest of the session."""
    from app.cli import run

    connected = _ray_connected()
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(list(args))
    finally:
        if not connected and _ray_connected():
            sys.modules["ray"].shutdown()
    return Result(code, out.getvalue(), err.getvalue())


def _ray_connected() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def trainctl_with(
    env: Mapping[str, str], cwd: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """`trainctl(*args)` with `env` as the whole environment and `cwd` as the folder (a .env is
    read from there), answered as `run_trainctl` answers: for tables of cases that stop before
    Ray starts, without a Python and torch start each. On pytest's main thread only: it sets
    the process's environment while it runs."""
    saved, here = dict(os.environ), Path.cwd()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    # urllib's module-level opener keeps the proxies of the environment it was built in: built
    # again for `env` (a dead proxy that makes a download fail), and again once it is gone.
    urllib.request.install_opener(None)  # type: ignore[arg-type]
    try:
        result = trainctl(*args)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        os.chdir(here)
        urllib.request.install_opener(None)  # type: ignore[arg-type]
    return subprocess.CompletedProcess(["trainctl", *args], result.code, result.out, result.err)


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


class Payload:
    """A pickle that writes a file when it is unpickled: the proof that nothing was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.write_text, (self.marker, "code ran"))


def malicious_torch_file(marker: Path) -> bytes:
    """What torch.save writes for an object whose unpickling writes `marker`: loaded with
    weights_only=False (torch.export's fallback, or a plain torch.load) it runs."""
    import torch

    buffer = io.BytesIO()
    torch.save({"weight": Payload(marker)}, buffer)
    return buffer.getvalue()
