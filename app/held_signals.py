"""Ctrl-C and SIGTERM held off while something must finish: leaving Ray once a command's work
is done (app/cli_exit.py), stopping what a stopped ray.init started (app/ray_cluster.py)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM ignored inside (main thread only), the handlers put back after."""
    held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
