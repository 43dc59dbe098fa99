"""Every name below a data folder, within a deadline, on a volume or in a bucket alike.

A data folder (image files to train on or to score) may hold millions of files, so a walk
lists names only and ends within its limit (DeadlineExceeded): a bucket through one recursive
listing with a client whose every request ends within the limit too, a volume folder by folder.

A data folder's link rule differs from a run folder's (app/storage/safe_fs.py refuses every
link there): data is often assembled from links, so on a volume a link to a file inside the
data folder is walked as that file (its path relative to the folder's real path, which the
readers then open without following links); a link leading out of the folder, or to a folder
(it could loop or count files twice), is listed in `refused` and walked no further. A bucket
has no links.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.fs as pafs

from app.storage.buckets import ObjectPath
from app.storage.deadline import DeadlineExceeded, call_with_deadline
from app.storage.location import RunPath

OUTSIDE = "outside the data folder"
TO_FOLDER = "a link to a folder"
BROKEN = "a broken link: nothing is there"
LOOP = "a loop of links: it leads back to itself"
NOT_A_FILE = "a link to something that is not a file (a FIFO, socket or device)"


@dataclass(frozen=True)
class RefusedLink:
    path: Path  # the link
    target: str  # where it resolves to
    real_root: Path  # the data folder's real path, where it had to stay
    why: str  # OUTSIDE, TO_FOLDER, BROKEN, LOOP or NOT_A_FILE


@dataclass
class Walk:
    """What a walk found below `top`: names as parts relative to it."""

    folders: list[tuple[str, ...]] = field(default_factory=list)
    # (parts, the file's path relative to the data folder: a link's target's, where it is one)
    files: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    others: int = 0  # FIFOs, sockets, devices, keys no path reaches: never read
    refused: list[RefusedLink] = field(default_factory=list)


def walk(root: RunPath, below: str, limit_s: float, started: float | None = None) -> Walk:
    """The tree of `root`/`below` ("": `root` itself); FileNotFoundError where it is not
    there, DeadlineExceeded past `limit_s` seconds (on a volume counted from `started`, so
    that walks sharing one limit can say so)."""
    where = str(root / below) if below else str(root)
    if isinstance(root, ObjectPath):
        # A client whose requests end within the limit too: none is left talking.
        client = root.with_budget(limit_s)
        return call_with_deadline(lambda: _bucket(client, below), limit_s, where)
    deadline = (time.monotonic() if started is None else started) + limit_s
    return _volume(root, below, deadline, where, limit_s)


def _bucket(root: ObjectPath, below: str) -> Walk:
    base = f"{root.key}/{below}" if below else root.key
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    infos = root.fs.get_file_info(selector)
    if not infos and not (root / below if below else root).is_dir():
        raise FileNotFoundError(base)
    found = Walk()
    for info in infos:
        parts = tuple(info.path[len(base) + 1 :].split("/"))
        if any(part in ("", ".", "..") for part in parts):
            # A legal key ("a//b.png", "a/../b.png") that no path names: pyarrow's client
            # reads another key or refuses it, so it is passed over and counted, never read
            # as a missing file partway through a run.
            found.others += info.type != pafs.FileType.Directory
            continue
        if info.type == pafs.FileType.Directory:
            found.folders.append(parts)
        else:
            found.files.append((parts, "/".join((below, *parts) if below else parts)))
    return found


def _volume(root: Path, below: str, deadline: float, where: str, limit_s: float) -> Walk:
    real_root = Path(os.path.realpath(root))
    top = real_root / below
    found = Walk()
    if top.is_symlink():
        found.refused.append(RefusedLink(root / below, os.path.realpath(top), real_root, TO_FOLDER))
        return found
    if not top.is_dir():
        raise FileNotFoundError(str(top))
    stack = [top]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if time.monotonic() > deadline:
                    raise DeadlineExceeded(where, limit_s)
                path = Path(entry.path)
                parts = path.relative_to(top).parts
                if entry.is_symlink():
                    _link(found, path, parts, real_root)
                elif entry.is_dir(follow_symlinks=False):
                    found.folders.append(parts)
                    stack.append(path)
                elif entry.is_file(follow_symlinks=False):
                    found.files.append((parts, path.relative_to(real_root).as_posix()))
                else:
                    found.others += 1
    return found


def _loops(target: Path) -> bool:
    """Whether `target` (realpath's answer for a link) is a link still: realpath stops where
    links lead back to themselves, and `loop1 -> loop2 -> loop1` read as a broken link."""
    try:
        os.stat(target)
    except OSError as err:
        return err.errno == errno.ELOOP
    return False


def _link(found: Walk, path: Path, parts: tuple[str, ...], real_root: Path) -> None:
    """A link walked as the file inside the data folder it leads to, or refused."""
    target = Path(os.path.realpath(path))
    if not target.is_relative_to(real_root):
        found.refused.append(RefusedLink(path, str(target), real_root, OUTSIDE))
    elif not target.is_file():
        why = (
            TO_FOLDER if target.is_dir()
            else NOT_A_FILE if target.exists()
            else LOOP if _loops(target)
            else BROKEN
        )  # fmt: skip
        found.refused.append(RefusedLink(path, str(target), real_root, why))
    else:
        found.files.append((parts, target.relative_to(real_root).as_posix()))
