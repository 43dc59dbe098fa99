"""How a `trainctl` command ends: its exit code, and one message instead of a traceback.

Expected failures raise TrainctlError subclasses (app/errors.py has the codes); SIGTERM and
Ctrl-C end every phase of every command cleanly.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading
from types import FrameType
from typing import NoReturn

import click

from app.errors import (
    EXIT_CTRL_C,
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_SIGTERM,
    ConfigError,
    RunFailed,
    TrainctlError,
    refused_write,
)
from app.formatting import one_path, printable_line
from app.held_signals import signals_held
from app.ray_cluster import stopped_midway_start


def exit_process(code: int) -> NoReturn:
    """End the process with `code`: through Python's exit, or, after a local Ray cluster's start
    was stopped midway (app/ray_cluster.py stopped_midway_start), without its exit hooks, once
    the output is flushed: Ray's, run on a half-built core worker, crashed the process."""
    if stopped_midway_start():
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    sys.exit(code)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every `finally` (staging folders, locks) runs."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated("SIGTERM")


def run_command(cli: click.Group, argv: list[str] | None = None) -> int:
    """Run one command of `cli` and return its exit code; failures end in a message, not a
    traceback."""
    # Every phase of every command stops cleanly on SIGTERM (`train` installs its own handler
    # while it trains, to record the run as interrupted).
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    joined_before = _ray_joined()
    try:
        return _run(cli, argv)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
            if not joined_before:
                _leave_ray()


def _ray_joined() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _leave_ray() -> None:
    """Leave the Ray cluster this command joined, stopping the local one it started, before
    the process exits, with Ctrl-C and SIGTERM held off: the command's work is done (or
    stopped) by then. Left to Ray's exit hook, a Ctrl-C there cut the local cluster's shutdown
    short, printed Ray's traceback and left exit code 0 (a red-team pass)."""
    if not _ray_joined():
        return
    import ray

    with signals_held():
        try:
            ray.shutdown()
        except Exception as err:  # the command's work is done: its exit code stands
            click.echo(f"trainctl: warning: leaving Ray: {type(err).__name__}: {err}", err=True)


def _run(cli: click.Group, argv: list[str] | None) -> int:
    try:
        code = cli.main(args=argv, prog_name="trainctl", standalone_mode=False)
    except TrainctlError as err:
        return _said(err)
    except click.exceptions.Abort as err:
        if isinstance(err.__context__, Terminated):
            click.echo("trainctl: stopped by SIGTERM", err=True)
            return EXIT_SIGTERM
        if isinstance(err.__context__, KeyboardInterrupt):  # click's wrapping of Ctrl-C
            click.echo("trainctl: interrupted", err=True)
            return EXIT_CTRL_C
        click.echo("trainctl: aborted", err=True)
        return EXIT_FAILED
    except click.ClickException as err:
        err.show()
        return EXIT_INVALID
    except Terminated:
        click.echo("trainctl: stopped by SIGTERM", err=True)
        return EXIT_SIGTERM
    except KeyboardInterrupt:
        click.echo("trainctl: interrupted", err=True)
        return EXIT_CTRL_C
    except OSError as err:
        if refused_write(err):
            # Where the command did not say what it was writing: still the machine's state,
            # not a bug to report (`compare --out` on a full disk said "internal error ...
            # please report it", a red-team pass).
            why = err.strerror or os.strerror(err.errno or 0)
            return _said(
                RunFailed(
                    f"{_named(err, 'a file or folder')}: {why}: the machine refused it (a full "
                    "disk, a quota, a file size limit, or a file or folder this user may not "
                    "change); fix that, then run the command again"
                )
            )
        if err.errno == errno.ENAMETOOLONG:
            # A path given on the command line or in a setting, too long for the file system:
            # wherever a command first touches it, the input is what is wrong.
            return _said(
                ConfigError(
                    f"{_named(err, 'a path')}: a name in it is too long for the file system (at "
                    "most 255 bytes per name, 4096 per path)"
                )
            )
        return _internal(err)
    except Exception as err:
        return _internal(err)
    return code if isinstance(code, int) else 0


def _said(err: TrainctlError) -> int:
    """The failure's heading, one line per problem, and its exit code."""
    label = err.label or ("invalid input" if err.exit_code == EXIT_INVALID else "failed")
    click.echo(f"trainctl: {label}:", err=True)
    for problem in err.problems:
        click.echo(f"  - {printable_line(problem)}", err=True)
    return err.exit_code


def _named(err: OSError, otherwise: str) -> str:
    return one_path(err.filename, 200) if err.filename else otherwise


def _internal(err: Exception) -> int:
    """A bug: still one line, the traceback only on request."""
    if os.environ.get("TRAINCTL_DEBUG"):
        raise err
    click.echo(f"trainctl: internal error: {type(err).__name__}: {err}", err=True)
    click.echo("  (set TRAINCTL_DEBUG=1 to see where; please report it)", err=True)
    return EXIT_FAILED
