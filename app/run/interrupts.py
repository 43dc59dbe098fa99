"""SIGTERM during the driver's blocking calls: a KeyboardInterrupt Ray lets out at once, and a
flag that tells it apart from Ctrl-C however Ray wraps it."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

SIGTERM_SEEN = threading.Event()


class StopForSigterm(KeyboardInterrupt):
    """What the SIGTERM handler raises.

    Ray's blocking calls (the ray.get inside trainer.fit) let only a KeyboardInterrupt out of a
    signal handler at once; any other exception is held back until the call returns, which in
    fit() is when training ends, long after Kubernetes has given up and sent SIGKILL.
    """


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Inside: SIGTERM raises StopForSigterm and sets SIGTERM_SEEN (cleared on entry, so that a
    flag left by an earlier run in this process does not count); the old handler after."""
    SIGTERM_SEEN.clear()
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    SIGTERM_SEEN.set()
    raise StopForSigterm("SIGTERM")
