"""What every tracker probe shares: a deadline over a whole exchange, the opt-out they all
name, and whether a client library is installed (app/tracking/check.py runs the probes)."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable
from typing import Any

from app.errors import ConfigError

OPT_OUT = "or set TRAIN_TRACKING_REQUIRED=false to train without it"


def within(seconds: float, what: str, call: Callable[[], Any]) -> Any:
    """`call()` on a daemon thread, given up after `seconds`: name resolution and TLS have no
    timeout of their own in the HTTP clients, so only a thread bounds the whole exchange."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as err:  # handed to the caller's thread
            outcome["error"] = err

    thread = threading.Thread(target=target, name="tracker-probe", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise ConfigError(
            f"{what}: no answer within {seconds:g} s (TRAIN_TRACKING_TIMEOUT_S); check the "
            f"address and that the server is up, raise TRAIN_TRACKING_TIMEOUT_S, {OPT_OUT}"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: a module blocked in sys.modules
        return False
