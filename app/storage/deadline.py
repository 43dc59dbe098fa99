"""Blocking calls with a deadline, during which SIGTERM and Ctrl-C still act at once.

Clients written in C++ (pyarrow's S3 and GCS filesystems, gRPC, DNS lookups) block with the GIL
released, and Python runs signal handlers only on the main thread, between bytecodes: a
SIGTERM that arrives during such a call waits for it to return, which can take minutes, past
Kubernetes' 30 s grace period. `call_with_deadline` runs the call on a daemon thread while the
main thread waits in short slices, so the handler's exception (Ctrl-C's KeyboardInterrupt,
the CLI's SIGTERM) surfaces within a slice, and a call that outlives its deadline is left
behind with a DeadlineExceeded naming what did not answer.

A call left behind keeps running until its own client gives up: the clients given to it
must have their own timeouts too, so that nothing waits on it for long at exit. Those come
from the same budget, so a client that gives up first has met the same deadline: its timeout
is said as DeadlineExceeded too, never as the client's own error (which of the two comes first
is a race on a loaded machine).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

SLICE_S = 0.1  # how often the waiting thread lets Python run signal handlers
# A client's own timeout: a socket's (TimeoutError), curl's inside pyarrow's S3 client, gRPC's.
_CLIENT_TIMED_OUT = re.compile(r"curlCode: 28|Timeout was reached|DEADLINE_EXCEEDED", re.I)


class DeadlineExceeded(TimeoutError):
    """`what` gave no answer within `seconds`."""

    def __init__(self, what: str, seconds: float) -> None:
        self.what = what
        self.seconds = seconds
        super().__init__(f"{what}: no answer within {seconds:g} s")


def call_with_deadline(fn: Callable[[], T], seconds: float, what: str) -> T:
    """`fn()`'s result, or its exception, or DeadlineExceeded after `seconds`."""
    if seconds <= 0:
        raise ValueError(f"a deadline must be positive, not {seconds!r}")
    outcome: dict[str, object] = {}

    def work() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as err:  # handed to the waiting thread, which raises it
            outcome["error"] = err

    worker = threading.Thread(target=work, name=f"deadline: {what}"[:60], daemon=True)
    end = time.monotonic() + seconds
    worker.start()
    # Short joins: between them the main thread runs pending signal handlers, whose exception
    # leaves this loop (the worker, a daemon, is abandoned).
    while worker.is_alive() and (left := end - time.monotonic()) > 0:
        worker.join(min(SLICE_S, left))
    if worker.is_alive():
        raise DeadlineExceeded(what, seconds)
    if "error" in outcome:
        error = outcome["error"]
        if client_timed_out(error):
            raise DeadlineExceeded(what, seconds) from error
        raise error  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def client_timed_out(error: object) -> bool:
    """`error` is a client giving up on an answer that did not come in time."""
    if isinstance(error, DeadlineExceeded):
        return False  # a nested deadline's: it names what did not answer itself
    return isinstance(error, TimeoutError) or (
        isinstance(error, OSError) and bool(_CLIENT_TIMED_OUT.search(str(error)))
    )
