"""How a refusal is printed (app/cli_exit.py): one line per problem, whatever it quotes."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from app.cli_exit import run_command
from app.errors import EXIT_FAILED, EXIT_INVALID, ConfigError


def test_a_problem_is_one_printed_line_whatever_it_quotes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Problems quote what they found (names of files, keys, settings): a newline there began a
    line that read as a problem of its own, and an escape sequence drove the terminal."""

    @click.group()
    def cli() -> None: ...

    @cli.command()
    def refuse() -> None:
        raise ConfigError(["found 'a\n  - forged\x1b[31m'", "a second\tproblem"])

    assert run_command(cli, ["refuse"]) == EXIT_INVALID
    assert capsys.readouterr().err.splitlines() == [
        "trainctl: invalid input:",
        "  - found 'a\\n  - forged\\x1b[31m'",
        "  - a second\tproblem",
    ]


def test_signals_held_ignores_ctrl_c_and_sigterm_then_puts_their_handlers_back() -> None:
    """What the command's last step, leaving Ray, runs under: a Ctrl-C there is ignored, not a
    KeyboardInterrupt inside Ray's shutdown."""
    import os
    import signal
    import time

    from app.held_signals import signals_held

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with signals_held():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # delivered and ignored: nothing is raised here
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_write_the_machine_refuses_is_a_failure_naming_the_place_not_a_bug(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Where a command does not say what it was writing, a full disk is still the machine's
    state: exit 1 naming the file, not "internal error ... please report it"."""
    import errno

    @click.group()
    def cli() -> None: ...

    @cli.command()
    def write() -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "/data/runs/r/summary.json")

    assert run_command(cli, ["write"]) == EXIT_FAILED
    assert capsys.readouterr().err.splitlines() == [
        "trainctl: failed:",
        "  - /data/runs/r/summary.json: No space left on device: the machine refused it (a full "
        "disk, a quota, a file size limit, or a file or folder this user may not change); fix "
        "that, then run the command again",
    ]


EXIT = """
import atexit, sys
from app import ray_cluster
from app.cli_exit import exit_process
atexit.register(lambda: print("exit hook ran", flush=True))
if sys.argv[1] == "midway":
    ray_cluster._STOPPED_MIDWAY.set()  # as _leave_half_started records it
print("said", flush=True)
exit_process(130)
"""


def test_after_a_start_stopped_midway_the_process_ends_without_exit_hooks() -> None:
    """Ray's exit hooks, run on the core worker of a start stopped midway, crashed the process
    with a segmentation fault now and then (rc -11 after `trainctl: interrupted`, a red-team
    pass): such a process ends with its code, its output flushed, and no exit hook run."""
    for case, hook in (("midway", False), ("started", True)):
        done = subprocess.run(
            [sys.executable, "-c", EXIT, case], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 130 and done.stdout.startswith("said"), done
        assert ("exit hook ran" in done.stdout) is hook, (case, done.stdout)
