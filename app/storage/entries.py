"""What is at a name, and what a folder holds: one answer on a volume and in a bucket.

On a volume every question is asked below a root (the run folder, or the data folder) one name
at a time without following a link (app/storage/safe_fs.py): a link is answered as a
`Kind.LINK`, with where it points, never looked through; a FIFO or a device is named as what
it is. A bucket has files and prefixes only (a prefix is a folder once an object lies under
it), and no links: there every answer is one listing or one status request.
"""

from __future__ import annotations

import contextlib
import enum
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from app.storage import safe_fs
from app.storage.buckets import ObjectPath
from app.storage.location import RunPath
from app.storage.probe import DEFAULT_TIMEOUT_S, probe, reachable


class Kind(enum.Enum):
    """What a name is; the value is how messages say it."""

    FILE = "a regular file"
    DIR = "a folder"
    LINK = "a symbolic link"
    FIFO = "a FIFO (named pipe)"
    SOCKET = "a socket"
    CHAR_DEVICE = "a character device"
    BLOCK_DEVICE = "a block device"
    OTHER = "neither a file nor a folder"


_MODES = {
    stat.S_IFREG: Kind.FILE,
    stat.S_IFDIR: Kind.DIR,
    stat.S_IFLNK: Kind.LINK,
    stat.S_IFIFO: Kind.FIFO,
    stat.S_IFSOCK: Kind.SOCKET,
    stat.S_IFCHR: Kind.CHAR_DEVICE,
    stat.S_IFBLK: Kind.BLOCK_DEVICE,
}
_TYPES = {pafs.FileType.File: Kind.FILE, pafs.FileType.Directory: Kind.DIR}


@dataclass(frozen=True)
class Entry:
    """One name in a folder: its location, its kind, its modification time (None in a bucket,
    whose prefixes have none) and, for a link, where it points."""

    path: RunPath
    kind: Kind
    mtime: float | None = None
    link: str | None = None

    @property
    def name(self) -> str:
        return self.path.name

    def refused(self) -> safe_fs.LinkRefused:
        return safe_fs.LinkRefused([(self.path, self.link or "?")])  # type: ignore[list-item]


def kind(path: RunPath, root: RunPath | None = None) -> Kind | None:
    """What `path` is (a link is `Kind.LINK`, not followed), None where nothing is; on a
    volume asked below `root` (default: its folder): a link on the way is LinkRefused."""
    if isinstance(path, ObjectPath):
        return _TYPES.get(path.fs.get_file_info(path.key).type)
    found = safe_fs.lstat(path, safe_fs.below(path, root))
    return None if found is None else _MODES.get(stat.S_IFMT(found.st_mode), Kind.OTHER)


def kind_within(path: RunPath, variable: str, seconds: float = DEFAULT_TIMEOUT_S) -> Kind | None:
    """`kind` of a location an operator named (no root: the name itself is not followed); a
    bucket answers within `seconds` or the refusal names the store and `variable`
    (app/storage/probe.py StoreUnavailable)."""
    if isinstance(path, ObjectPath):
        return probe(path, variable, seconds, lambda: kind(path.with_budget(seconds)))
    return kind(path)


def bucket_there(path: RunPath, variable: str, seconds: float = DEFAULT_TIMEOUT_S) -> None:
    """Where nothing was found at `path`: in a bucket, StoreUnavailable naming a bucket that
    does not exist (a typo in its name read as no such run folder, or no champion yet)."""
    if isinstance(path, ObjectPath):
        reachable(path, variable, seconds)


def refuse_link(path: RunPath, root: RunPath | None = None) -> Kind | None:
    """`kind`, raising LinkRefused (exit 2, naming the link and its target) for a link."""
    found = kind(path, root)
    if found is Kind.LINK:
        raise Entry(path, found, link=_target(path)).refused()  # type: ignore[arg-type]
    return found


def not_a_link(location: RunPath) -> RunPath:
    """`location` itself, refused (LinkRefused) where it is a link: a run folder planted as
    runs/<name> -> anywhere is never read or written through. A bucket has no links."""
    if isinstance(location, Path) and location.is_symlink():
        raise Entry(location, Kind.LINK, link=_target(location)).refused()
    return location


def followed(location: RunPath) -> RunPath:
    """`location`, or the folder it links to where it is itself a link: for a root an operator
    names (a volume mounted behind a link), below which nothing is read through links. A
    bucket has no links."""
    if isinstance(location, Path) and location.is_symlink():
        return location.resolve()
    return location


def no_link_below(location: RunPath, root: RunPath) -> RunPath:
    """`location` itself, refused (LinkRefused) where it, or a folder between `root` and it,
    is a link: what is read there stays below `root`. A bucket has no links."""
    if isinstance(location, Path) and isinstance(root, Path):
        safe_fs.refuse_link(location, root)
    return location


def entries(folder: RunPath, root: RunPath | None = None) -> list[Entry]:
    """The names directly in `folder`, sorted, each with its own kind (a link not followed);
    [] where `folder` is not there. On a volume `folder` is reached below `root` (default:
    `folder` itself) without following a link; in a bucket one listing request."""
    if isinstance(folder, ObjectPath):
        selector = pafs.FileSelector(folder.key, allow_not_found=True)
        infos = folder.fs.get_file_info(selector)
        found = [Entry(folder.at(i.path), _TYPES.get(i.type, Kind.OTHER)) for i in infos]
        return sorted(found, key=lambda entry: entry.name)
    try:
        return _volume_entries(folder, folder if root is None else root)  # type: ignore[arg-type]
    except FileNotFoundError:
        return []


def _volume_entries(folder: Path, root: Path) -> list[Entry]:
    found = []
    with safe_fs.folder_fd(folder, root) as dir_fd:
        for name in sorted(os.listdir(dir_fd)):
            with contextlib.suppress(FileNotFoundError):  # removed since the listing
                status = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                what = _MODES.get(stat.S_IFMT(status.st_mode), Kind.OTHER)
                link = os.readlink(name, dir_fd=dir_fd) if what is Kind.LINK else None
                found.append(Entry(folder / name, what, status.st_mtime, link))
    return found


def links(folder: RunPath, root: RunPath | None = None, depth: int = 1) -> list[Entry]:
    """Every link in `folder` and, up to `depth` levels, in the folders below it (a link is
    never looked through); [] where `folder` is not a folder. A bucket has none: no request."""
    if isinstance(folder, ObjectPath):
        return []
    try:
        found = entries(folder, root)
    except NotADirectoryError:
        return []
    base = folder if root is None else root
    found_links: list[Entry] = []
    for entry in found:
        if entry.kind is Kind.LINK:
            found_links.append(entry)
        elif entry.kind is Kind.DIR and depth > 1:
            found_links += links(entry.path, base, depth - 1)
    return found_links


def _target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"
