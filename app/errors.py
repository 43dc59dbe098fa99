"""The two ways a command can fail, and the exit codes users and CI scripts rely on."""

from __future__ import annotations

import contextlib
import difflib
import errno
import os
import re
from collections.abc import Iterable, Iterator, Sequence

EXIT_OK = 0
EXIT_FAILED = 1  # training or a cluster operation failed at run time
EXIT_INVALID = 2  # bad settings or data, found before any work starts
EXIT_WAIT_TIMEOUT = 3  # `submit --wait --timeout` ran out; the RayJob itself keeps running
EXIT_CLUSTER = 4  # Kubernetes unusable: no kubeconfig, API unreachable, CRD missing, RBAC
EXIT_CTRL_C = 130  # 128 + SIGINT, what shells report for Ctrl-C
EXIT_SIGTERM = 143  # 128 + SIGTERM, what Kubernetes expects from an evicted process


class TrainctlError(Exception):
    """An expected failure: the CLI prints its message, without a traceback, and exits."""

    exit_code = EXIT_FAILED
    label: str | None = None  # the CLI's heading; None: "invalid input" or "failed" by exit code

    def __init__(self, problems: str | Sequence[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class ConfigError(TrainctlError):
    """Invalid settings, values or data: nothing was started."""

    exit_code = EXIT_INVALID


class RunFailed(TrainctlError):
    """Training (or a submitted job) started and then failed."""

    exit_code = EXIT_FAILED


# Writes the machine refuses (a full disk, a quota, a file size limit, a read-only or foreign
# folder): its state, neither a bug nor a wrong input, so a failure (exit 1) that names the place.
REFUSED_WRITES = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}
)


def refused_write(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in REFUSED_WRITES


@contextlib.contextmanager
def refused_writes_fail(place: str, then: str) -> Iterator[None]:
    """A write inside that the machine refuses ends as RunFailed: `place: could not be written
    (why); then`, `then` saying what was kept and what to do; any other error goes on as it is.
    It was "internal error ... please report it" (a red-team pass)."""
    try:
        yield
    except OSError as err:
        if not refused_write(err):
            raise
        why = os.strerror(err.errno or 0)  # a library's strerror may be a sentence of its own
        raise RunFailed(f"{place}: could not be written ({why}); {then}") from None


class WaitTimedOut(TrainctlError):
    """`trainctl submit --wait --timeout` gave up; the RayJob was left running."""

    exit_code = EXIT_WAIT_TIMEOUT


class ClusterError(TrainctlError):
    """The Kubernetes API could not be used: nothing about the job itself is known."""

    exit_code = EXIT_CLUSTER


def did_you_mean(name: str, known: Iterable[str], otherwise: str) -> str:
    """The hint after an unknown name: the closest known one, or `otherwise`. The part every
    known name shares (TRAIN_) is left out of the likeness: counted, it made TRAIN_BOGUS look
    like TRAIN_EPOCHS."""
    names = list(known)
    shared = os.path.commonprefix(names) if len(names) > 1 else ""  # noqa: RUF071 - names
    if not name.startswith(shared):
        shared = ""
    given, rest = name[len(shared) :], sorted(known_name[len(shared) :] for known_name in names)
    # Or a name cut short (val_acc for val_accuracy), which looks less alike than a typo.
    close = (
        difflib.get_close_matches(given, rest, n=1)
        or [candidate for candidate in rest if len(given) >= 3 and candidate.startswith(given)][:1]
    )
    return f"; did you mean {shared}{close[0]}?" if close else f"; {otherwise}"


def connection_cause(error: BaseException) -> str:
    """The innermost reason of a connection failure (urllib3's, under the Kubernetes client's,
    MLflow's and requests' errors), without the pool and URL preamble around it."""
    while getattr(error, "reason", None) is not None and isinstance(error.reason, BaseException):
        error = error.reason  # type: ignore[attr-defined]
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    # "HTTPSConnection(host='h', port=1): Failed to establish ..." -> the part that matters.
    if text.startswith(("HTTPConnection(", "HTTPSConnection(")) and "): " in text:
        text = text.split("): ", 1)[1]
    # urllib3 says what is left of its budget: "read timeout=29.999718081999163" -> 30.0.
    text = _LONG_DECIMAL.sub(lambda found: f"{float(found.group()):.1f}", text)
    return text.rstrip(".")[:300]


_LONG_DECIMAL = re.compile(r"\b\d+\.\d{4,}\b")
