"""The processes below this one, read from Linux's /proc, and ended where a library's own stop
left them behind.

A local Ray cluster stopped while `ray.init` was still starting it (Ctrl-C or SIGTERM in
`trainctl train`'s first seconds) lost its raylet before the raylet had stopped its agents:
they lived on under PID 1 for a minute or more, 220 MB each start (a red-team pass). What this
process started is taken before the stop and ended after it. Each process is known by its pid
and its start time, so a pid the system has since given to another process is left alone.
Elsewhere than Linux (no /proc) there is nothing to read and nothing is ended.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Proc:
    pid: int
    started: int  # clock ticks after boot (/proc/<pid>/stat field 22): with the pid, one process


def descendants(root: int | None = None, proc: Path = PROC) -> list[Proc]:
    """Every live process below `root` (this one by default), children before their own."""
    root = os.getpid() if root is None else root
    children: dict[int, list[Proc]] = {}
    for pid in _pids(proc):
        found = _stat(proc, pid)
        if found is not None:
            parent, started, _ = found
            children.setdefault(parent, []).append(Proc(pid, started))
    below, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            below.append(child)
            todo.append(child.pid)
    return below


def end(processes: list[Proc], grace_s: float = 3.0, proc: Path = PROC) -> list[Proc]:
    """SIGTERM to each of `processes` still running, SIGKILL to those still running after
    `grace_s`, which are then awaited as long again; returns those that were running."""
    running = [p for p in processes if _running(p, proc)]
    _signal(running, signal.SIGTERM)
    _await(running, grace_s, proc)
    _signal([p for p in running if _running(p, proc)], signal.SIGKILL)
    _await(running, grace_s, proc)
    return running


def _await(processes: list[Proc], seconds: float, proc: Path) -> None:
    deadline = time.monotonic() + seconds
    while any(_running(p, proc) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.05)


def _pids(proc: Path) -> list[int]:
    try:
        return [int(entry.name) for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:  # no /proc: not Linux
        return []


def _stat(proc: Path, pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time, state) of `pid`; None where it is gone or unreadable."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last.
    fields = text.rsplit(")", 1)[-1].split()
    try:
        return int(fields[1]), int(fields[19]), fields[0]
    except (IndexError, ValueError):
        return None


def _running(process: Proc, proc: Path) -> bool:
    """The same process (pid and start time) and not a zombie (ended, waiting to be reaped)."""
    found = _stat(proc, process.pid)
    return found is not None and found[1] == process.started and found[2] != "Z"


def _signal(processes: list[Proc], signum: int) -> None:
    for process in processes:
        try:
            os.kill(process.pid, signum)
        except OSError:  # ended meanwhile, or not this user's
            continue
