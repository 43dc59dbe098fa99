"""The CPUs this process may use: fewer than the machine has in a container or a pinned shell.

`os.cpu_count()` counts the machine's online CPUs; a process may be held to fewer by its
affinity mask (`taskset`, cpusets: `os.sched_getaffinity`) and by its cgroup's CPU quota
(Kubernetes CPU limits, `docker --cpus`): cgroup v2's `cpu.max` ("QUOTA PERIOD", or "max"),
cgroup v1's `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none). A quota can be set at any
level of the hierarchy, so every level from the process's cgroup up to the mount is read and
the smallest counts. The usable count is the smaller of the two limits, in whole CPUs (Ray
takes whole CPUs), at least 1.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_MOUNT = "sys/fs/cgroup"
V1_CPU_FOLDERS = ("cpu,cpuacct", "cpu", "cpuacct,cpu")  # how distributions mount it
MAX_READ = 4096  # a cgroup file holds a line or two


@dataclass(frozen=True)
class Cpus:
    usable: int  # whole CPUs this process may use, at least 1
    online: int  # the machine's
    limit: str = ""  # what holds it below `online`, in words ("" when nothing does)

    def describe(self) -> str:
        """e.g. `2 usable CPUs`, `2 usable CPUs (of 64: cgroup cpu.max 200000 100000)`."""
        said = f"{self.usable} usable CPU{'' if self.usable == 1 else 's'}"
        return f"{said} (of {self.online}: {self.limit})" if self.limit else said


def usable_cpus(root: Path = Path("/"), affinity: int | None = None) -> Cpus:
    """This process's CPUs. `root` and `affinity` are for tests: a folder holding
    proc/self/cgroup and sys/fs/cgroup/..., and the size of the affinity mask."""
    online = os.cpu_count() or 1
    if affinity is None:
        affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else online
    quota = cgroup_quota(root)
    limits = []
    usable = float(min(online, affinity))
    if affinity < online:
        limits.append(f"affinity mask of {affinity}")
    if quota is not None and quota[0] < usable:
        usable = quota[0]
        limits.append(quota[1])
    return Cpus(max(1, math.floor(usable)), online, "; ".join(limits))


def cgroup_quota(root: Path = Path("/")) -> tuple[float, str] | None:
    """(the smallest CPU quota on this process's cgroup path, in CPUs; where it was read),
    None when no level sets one or the files cannot be read."""
    found: list[tuple[float, str]] = []
    for controllers, path in _memberships(root):
        if controllers == "":  # cgroup v2: one hierarchy
            for folder in _levels(root / CGROUP_MOUNT, path):
                quota = _v2(folder / "cpu.max")
                if quota is not None:
                    found.append(quota)
        elif "cpu" in controllers.split(","):
            for name in V1_CPU_FOLDERS:
                for folder in _levels(root / CGROUP_MOUNT / name, path):
                    quota = _v1(folder)
                    if quota is not None:
                        found.append(quota)
    return min(found) if found else None


def _memberships(root: Path) -> list[tuple[str, str]]:
    """(controllers, cgroup path) per line of /proc/self/cgroup ("ID:controllers:path")."""
    text = _read(root / "proc/self/cgroup")
    lines = [line.split(":", 2) for line in (text or "").splitlines()]
    return [(parts[1], parts[2]) for parts in lines if len(parts) == 3]


def _levels(mount: Path, path: str) -> list[Path]:
    """The folders from the process's cgroup up to the mount, those that exist here. Inside a
    container the mount is often the container's own cgroup, and the path (the host's view)
    is not below it: the mount's own files then count."""
    parts = [part for part in path.split("/") if part and part not in (".", "..")]
    folders = [mount.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]
    return [folder for folder in folders if folder.is_dir()]


def _v2(path: Path) -> tuple[float, str] | None:
    fields = (_read(path) or "").split()
    if len(fields) != 2 or not fields[0].isdigit() or not fields[1].isdigit():
        return None  # "max 100000": no quota at this level
    quota, period = int(fields[0]), int(fields[1])
    return (quota / period, f"cgroup cpu.max {quota} {period}") if quota and period else None


def _v1(folder: Path) -> tuple[float, str] | None:
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    try:
        quota_us, period_us = int((quota or "").strip()), int((period or "").strip())
    except ValueError:
        return None
    if quota_us <= 0 or period_us <= 0:  # -1: no quota at this level
        return None
    return quota_us / period_us, f"cgroup cpu.cfs_quota_us {quota_us} / period {period_us}"


def _read(path: Path) -> str | None:
    try:
        with open(path, "rb") as file:
            return file.read(MAX_READ).decode("ascii", errors="replace")
    except OSError:
        return None
