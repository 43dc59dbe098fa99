"""How a refusal is printed (app/cli_exit.py): one line per problem, whatever it quotes."""

from __future__ import annotations

import click
import pytest

from app.cli_exit import run_command
from app.errors import EXIT_INVALID, ConfigError


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
