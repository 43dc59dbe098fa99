"""Helm's values flags as click options, shared by `trainctl render` and `trainctl submit`.

Kept apart from app/k8s/values.py so that importing the CLI does not load the chart machinery.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click


def values_options(func: Callable[..., None]) -> Callable[..., None]:
    """Helm's values flags, for render and submit: -f files merged in order, then --set-json,
    --set, --set-string and --set-file (app/k8s/values.py, app/k8s/strvals.py)."""
    options = [
        click.option(
            "-f",
            "--values",
            "values_files",
            multiple=True,
            type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
            help="Values file (- for stdin), as for Helm; repeat to merge (later files win).",
        ),
        click.option(
            "--set", "set_values", multiple=True, metavar="K=V", help="As helm --set (repeatable)."
        ),
        click.option(
            "--set-string", "set_string", multiple=True, metavar="K=V", help="Values as strings."
        ),
        click.option(
            "--set-json", "set_json", multiple=True, metavar="K=JSON", help="Values as JSON."
        ),
        click.option(
            "--set-file",
            "set_file",
            multiple=True,
            metavar="K=PATH",
            help="Values read from files (regular files, at most 1 MiB each).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func
