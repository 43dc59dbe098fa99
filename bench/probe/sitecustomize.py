"""Startup probe: with this folder on PYTHONPATH and TRAINCTL_BENCH_PROBE naming a file, every
Python process (the `trainctl` driver and Ray's workers, which inherit its environment) appends
one JSON line to that file when it starts and one when it takes its first optimizer step.

It also notes when `ray` and `app.run.driver` finish importing, to split the driver's start-up. It
lets bench/startup.py time an unmodified `trainctl train` from outside. It never imports torch
itself (that would slow every Ray worker down): it waits for the app to import torch.optim and
only then registers a global optimizer-step hook.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
from typing import Any

_PROBE_FILE = os.environ.get("TRAINCTL_BENCH_PROBE")


def _record(event: str) -> None:
    line = json.dumps({"event": event, "time": time.time(), "pid": os.getpid()}) + "\n"
    # One write on an O_APPEND descriptor: lines from concurrent processes never interleave.
    fd = os.open(str(_PROBE_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _install_step_hook(module: Any) -> None:
    handle = None

    def first_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        _record("first_step")
        if handle is not None:
            handle.remove()

    handle = module.register_optimizer_step_post_hook(first_step)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        _WATCHED[module.__name__](module)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self._seen: set[str] = set()

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _WATCHED or name in self._seen:
            return None
        self._seen.add(name)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


_WATCHED = {
    "torch.optim.optimizer": _install_step_hook,
    "ray": lambda module: _record("ray_imported"),
    "app.run.driver": lambda module: _record("app_imported"),
}


if _PROBE_FILE:
    _record("python_start")
    sys.meta_path.insert(0, _Finder())
