"""app/process_tree.py on real processes: what a command started is found below it and ended,
and a pid is only signalled while it is still the process that was found."""

from __future__ import annotations

import subprocess
import sys
import time

from app import process_tree

# A child that starts a grandchild deaf to SIGTERM, then waits: two levels, one that needs SIGKILL.
TREE = """
import signal, subprocess, sys, time
DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True)"
subprocess.Popen([sys.executable, "-c", DEAF + "; time.sleep(300)"], stdout=sys.stdout)
time.sleep(300)
"""


def _started_tree() -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "up"
    return child


def test_a_tree_below_this_process_is_found_and_ended_deaf_ones_included() -> None:
    child = _started_tree()
    try:
        mine = [p for p in process_tree.descendants() if p.pid == child.pid]
        assert len(mine) == 1
        grandchildren = process_tree.descendants(child.pid)
        assert len(grandchildren) == 1  # the one that ignores SIGTERM
        ended = process_tree.end(mine + grandchildren, grace_s=1.0)
        assert {p.pid for p in ended} == {child.pid, grandchildren[0].pid}
        assert child.wait(timeout=30) != 0
        assert not any(process_tree._running(p, process_tree.PROC) for p in grandchildren)
    finally:
        child.kill()


def test_a_pid_that_is_another_process_now_is_left_alone() -> None:
    child = _started_tree()
    try:
        (found,) = [p for p in process_tree.descendants() if p.pid == child.pid]
        other = process_tree.Proc(found.pid, found.started + 1)  # the pid given to a later process
        assert process_tree.end([other], grace_s=0.1) == []
        time.sleep(0.2)
        assert child.poll() is None  # still running: never signalled
    finally:
        process_tree.end(process_tree.descendants(child.pid), grace_s=0.1)
        child.kill()
        child.wait(timeout=30)
