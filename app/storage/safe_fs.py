"""Opening files inside a run folder without ever following a link out of it.

A run folder lives on a volume that every RayJob of the namespace can write to, so its entries
are not trusted: a `logs` folder, a checkpoint folder or a `summary.json` replaced by a symbolic
link would make trainctl write (or print) whatever the link points at. Every open below a run
folder here walks down from the run folder one name at a time with O_NOFOLLOW, holding each
folder open (dir fds), so a name swapped for a link between a check and the open is refused
too, and only regular files are read (a FIFO would block a reader forever, a device would
never end): anything else is a `NotRegularFile`, an OSError naming what it is.

The same open serves every file trainctl reads that another hand could have placed: a run
folder's records and checkpoints, an export and its model card, a champion pointer, and the
files an operator names (TRAIN_WEIGHTS, TRAIN_WARM_START, `trainctl predict`'s images), whose
folder is then the `root`. The root itself is opened as given: its path is the operator's
choice. A refused link is a `LinkRefused`, a ConfigError (exit 2) naming the link. Object
stores have no links; callers pass `ObjectPath`s to their own methods and local `Path`s here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from app.errors import ConfigError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a planted FIFO returns at once (and is then refused as not a file);
# it changes nothing for regular files.
_FILE = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class LinkRefused(ConfigError):
    """Symbolic links where a run folder's own files or folders should be: (path, target)."""

    def __init__(self, links: Sequence[tuple[Path, str]]) -> None:
        self.links = list(links)
        super().__init__(
            [
                f"{path}: is a symbolic link (to {target}); trainctl never reads or writes "
                "through a link here: remove it, or name the file itself"
                for path, target in self.links
            ]
        )


class NotRegularFile(OSError):
    """A FIFO, socket or device where a file should be: refused before anything is read."""

    def __init__(self, path: Path, mode: int) -> None:
        super().__init__(errno.EINVAL, f"{_kind(mode)}, not a regular file", str(path))


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"


def below(path: Path, root: object | None) -> Path:
    """Where the opens of local `path` start: `root`, the folder a caller names as it names
    every location (on a volume a `Path`), or else the file's own folder."""
    if root is None:
        return path.parent
    if not isinstance(root, Path):
        raise TypeError(f"{path}: its root {root} is not a folder on this machine")
    return root


def _refused(path: Path, target: str) -> LinkRefused:
    return LinkRefused([(path, target)])


def _parts(path: Path, root: Path) -> list[str]:
    try:
        parts = list(path.relative_to(root).parts)
    except ValueError:
        raise ConfigError(f"{path}: is outside the run folder {root}") from None
    if not parts or any(part in ("", ".", "..") for part in parts):
        raise ConfigError(f"{path}: is not a file name inside the run folder {root}")
    return parts


def _check_link(dir_fd: int, name: str, path: Path) -> None:
    """Raise LinkRefused when `name` in `dir_fd` is a link (the cause of an ELOOP/ENOTDIR)."""
    with contextlib.suppress(OSError):
        if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise _refused(path, os.readlink(name, dir_fd=dir_fd))


@contextlib.contextmanager
def folder_fd(folder: Path, root: Path, *, create: bool = False) -> Iterator[int]:
    """An fd of `folder` (root itself or a folder below it), reached without following links;
    with create=True missing folders are made on the way (root with its parents)."""
    if create:
        root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        here = root
        for name in _parts(folder, root) if folder != root else []:
            here = here / name
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=fd)
            try:
                inner = os.open(name, _DIR, dir_fd=fd)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    _check_link(fd, name, here)
                raise
            # The fd the finally closes is replaced before the old one is closed: a signal
            # (SIGTERM is raised as an exception) between the two would otherwise close the old
            # one twice, and the EBADF would hide the signal.
            fd, outer = inner, fd
            os.close(outer)
        yield fd
    finally:
        os.close(fd)


def _open(path: Path, root: Path, flags: int, *, create: bool = False) -> int:
    with folder_fd(path.parent, root, create=create) as dir_fd:
        try:
            fd = os.open(path.name, flags | _FILE, 0o666, dir_fd=dir_fd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                _check_link(dir_fd, path.name, path)
            raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(path))
        raise NotRegularFile(path, mode)
    return fd


def open_read(path: Path, root: Path, limit: int | None = None) -> BinaryIO:
    """`path` (below `root`) opened for reading; FileNotFoundError when it is not there;
    ValueError when the open file is larger than `limit` (its size read from the descriptor,
    so it is the file that will be read)."""
    file = os.fdopen(_open(path, root, os.O_RDONLY), "rb")
    size = os.fstat(file.fileno()).st_size
    if limit is not None and size > limit:
        file.close()
        raise ValueError(f"{path} is {size:,} bytes, over the {limit:,} allowed")
    return file


def open_append(path: Path, root: Path) -> BinaryIO:
    """`path` opened for appending, created (with its folders) when missing."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    return os.fdopen(_open(path, root, flags, create=True), "ab")


def read_bytes(path: Path, root: Path, limit: int | None = None) -> bytes:
    """The whole file; ValueError when it is larger than `limit` (nothing read beyond it)."""
    with open_read(path, root, limit) as file:
        data = file.read(limit + 1 if limit is not None else -1)
    if limit is not None and len(data) > limit:  # it grew while being read
        raise ValueError(f"{path} is over the {limit:,} bytes allowed")
    return data


def append(path: Path, root: Path, data: bytes) -> None:
    """Add `data` at the end, fsync'd: a record survives the process being killed after."""
    with open_append(path, root) as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def temporary_name(name: str) -> str:
    """A hidden name beside `name` for a file or folder written before it is renamed to `name`.
    A pid and a random part: drivers in two pods of a shared volume may have the same pid. Of
    `name` only its start: a name near the file system's 255-byte limit (a legal --out) would
    be over it with the suffix, and the write refused as if the name were at fault."""
    return f".{name[:100]}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def write_atomic(path: Path, root: Path, data: bytes) -> None:
    """Replace `path` whole: readers see the old content or the new. The rename replaces a
    link at `path` itself, never what it points at; the temporary file goes on any error."""
    tmp = temporary_name(path.name)
    with folder_fd(path.parent, root, create=True) as dir_fd:
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE
            fd = os.open(tmp, flags, 0o666, dir_fd=dir_fd)
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dir_fd)


def lstat(path: Path, root: Path) -> os.stat_result | None:
    """`path`'s own status (a link is not followed), None when it is not there."""
    try:
        with folder_fd(path.parent, root) as dir_fd:
            return os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def refuse_link(path: Path, root: Path) -> os.stat_result | None:
    """lstat, raising LinkRefused when `path` (or a folder on the way) is a link."""
    found = lstat(path, root)
    if found is not None and stat.S_ISLNK(found.st_mode):
        raise _refused(path, os.readlink(path))
    return found


def makedirs(folder: Path, root: Path) -> None:
    with folder_fd(folder, root, create=True):
        pass


def rename_dir(folder: Path, target: Path, root: Path) -> None:
    """Move a real folder to `target` (same parent), replacing a real folder there; a link at
    either name is refused rather than moved or deleted through."""
    if folder.parent != target.parent:
        raise ValueError(f"{folder} and {target} are not in one folder")
    for path in (folder, target):
        refuse_link(path, root)
    with folder_fd(folder.parent, root) as dir_fd:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(target.name, dir_fd=dir_fd)  # fd-based: links inside are not followed
        os.rename(folder.name, target.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def entries(folder: Path, root: Path) -> list[tuple[str, os.stat_result]]:
    """The names in `folder` with their own status (links not followed), sorted by name."""
    with folder_fd(folder, root) as dir_fd:
        names = sorted(os.listdir(dir_fd))
        found = []
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                found.append((name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False)))
    return found


def copy_tree(folder: Path, root: Path, dest: Path) -> None:
    """Copy the files below `folder` into the new local folder `dest`, each opened as a regular
    file without following a link (LinkRefused, NotRegularFile otherwise): what a tool that
    walks folders itself (an artifact upload) then reads is only what was reached this way."""
    dest.mkdir(mode=0o700)
    for name, status in entries(folder, root):
        if stat.S_ISDIR(status.st_mode):
            copy_tree(folder / name, root, dest / name)
            continue
        with open_read(folder / name, root) as source, (dest / name).open("xb") as target:
            shutil.copyfileobj(source, target)
