"""Deadlines for everything `submit`, `status` and `logs` wait on.

The official client retries a silent API server three times at 30 s each (two minutes without a
word) and waits on a kubeconfig `exec` credential plugin forever. Here every request has one
timeout, retries are few and said aloud, and a plugin that does not answer is stopped.

TRAINCTL_API_TIMEOUT (seconds, default 30) bounds each request and each credential plugin run;
TRAINCTL_API_RETRIES (default 2) is how many times an unreachable API server is tried again.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import Any, TypeVar

import click

from app.errors import ConfigError

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_RETRIES = 2
RETRY_DELAY_S = 5.0
T = TypeVar("T")
PLUGIN_FAILURES: list[str] = []


def api_timeout() -> float:
    return _number("TRAINCTL_API_TIMEOUT", DEFAULT_TIMEOUT_S, float, 0.1, 3600)


def api_retries() -> int:
    return int(_number("TRAINCTL_API_RETRIES", DEFAULT_RETRIES, int, 0, 20))


def _number(name: str, default: float, kind: Callable[[str], Any], low: float, high: float) -> Any:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise ConfigError(f"{name}={raw!r}: must be a number from {low:g} to {high:g}")
    return value


def with_retries(call: Callable[[], T], retryable: tuple[type[BaseException], ...]) -> T:
    """`call()`, tried again after RETRY_DELAY_S when it raises `retryable`, saying so."""
    import time

    attempts = api_retries() + 1
    delay = min(RETRY_DELAY_S, api_timeout())  # a short timeout asked for quick answers
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except retryable as err:
            if attempt == attempts:
                raise
            click.echo(
                f"trainctl: Kubernetes API did not answer ({type(err).__name__}); retrying in "
                f"{delay:g} s ({attempt + 1}/{attempts})",
                err=True,
            )
            time.sleep(delay)
    raise AssertionError("unreachable")


class _DeadlinePopen(subprocess.Popen):  # type: ignore[type-arg]
    """Popen whose communicate() gives up after the API timeout and stops the plugin."""

    def communicate(self, input: Any = None, timeout: float | None = None) -> Any:
        from kubernetes.config.config_exception import ConfigException

        limit = timeout or api_timeout()
        try:
            return super().communicate(input, timeout=limit)
        except subprocess.TimeoutExpired:
            self.kill()
            super().communicate()
            command = self.args[0] if isinstance(self.args, list) and self.args else self.args
            message = (
                f"the kubeconfig's exec credential plugin {command} gave no answer within "
                f"{limit:g} s (TRAINCTL_API_TIMEOUT)"
            )
            # The client only logs a failed plugin and goes on without credentials: keep the
            # reason for Cluster.connect to report.
            PLUGIN_FAILURES.append(message)
            raise ConfigException(message) from None


class _SubprocessWithDeadline:
    """The `subprocess` module as the client's exec provider sees it, with _DeadlinePopen."""

    def __getattr__(self, name: str) -> Any:
        return _DeadlinePopen if name == "Popen" else getattr(subprocess, name)


def bound_exec_plugins() -> None:
    """Make the kubernetes client's exec credential plugins time out (idempotent)."""
    from kubernetes.config import exec_provider

    exec_provider.subprocess = _SubprocessWithDeadline()  # type: ignore[assignment]
