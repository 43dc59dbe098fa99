"""Is the run storage usable, and the writes that differ between a volume and a bucket.

Checked before any Ray work starts. A run folder is a local `Path` (a volume) or an
`ObjectPath` (s3://, gs://); the few operations an object store does differently (append,
replace, rename a folder, delete a tree) are decided here, once.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import math
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeAlias

from app.errors import ConfigError
from app.storage import safe_fs
from app.storage.buckets import ObjectPath, locate
from app.storage.probe import (
    DEFAULT_TIMEOUT_S,
    describe_store_error,
    ensure_bucket_writable,
    reachable,
)
from app.storage.uris import check_path, check_uri, uri_scheme

RunPath: TypeAlias = Path | ObjectPath


def local_absolute(path: Path) -> Path:
    """`path` with ~ or ~user expanded and made absolute (Ray requires an absolute storage
    path, and workers may start in other folders); ValueError for an unknown user."""
    try:
        return path.expanduser().absolute()
    except RuntimeError:  # pathlib: "Could not determine home directory"
        raise ValueError(f"{str(path).split('/')[0]} names no user on this machine") from None


def place_key(path: RunPath) -> str:
    """One spelling per place, to tell one place given twice: a local path with `.` and `..`
    resolved as written (links are not followed), a URI as it is."""
    return str(path) if isinstance(path, ObjectPath) else os.path.normpath(path)


def parse_location(value: str | os.PathLike[str], endpoint: str | None = None) -> RunPath:
    """The one parse of a storage setting: an ObjectPath for an s3:// or gs:// URI, else an
    absolute local path; ValueError for what only looks like either (app/storage/uris.py)."""
    found = locate(value, endpoint)
    return found if isinstance(found, ObjectPath) else local_absolute(found)


def expand(path: Path | str, what: str) -> Path:
    """`path` with ~ or ~user expanded and made absolute; an unknown user is bad input."""
    try:
        return local_absolute(Path(path))
    except ValueError as err:
        raise ConfigError(f"{what}={path}: {err}") from None


def ensure_writable(path: RunPath, variable: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """Create `path` if needed and prove a file can be written there, or raise ConfigError (a
    bucket's probe waits `timeout` seconds at most: app/storage/probe.py)."""
    if isinstance(path, ObjectPath):
        return ensure_bucket_writable(path, variable, timeout)
    # Checked first: mkdir on an existing file fails with a bare "File exists".
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{variable}={path}: exists but is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        # A link to nothing reads as missing yet cannot be made: mkdir says only "File exists".
        cause = broken_link(path) or err.strerror
        raise ConfigError(f"{variable}={path}: cannot create the folder ({cause})") from None
    if not path.is_dir():
        raise ConfigError(f"{variable}={path}: exists but is not a folder")
    probe = path / f".trainctl-write-test-{uuid.uuid4().hex}"
    try:
        probe.write_bytes(b"ok")
    except OSError as err:
        raise ConfigError(
            f"{variable}={path}: not writable ({err.strerror}); on Kubernetes check the volume's "
            "access mode and the pod's fsGroup"
        ) from None
    finally:
        probe.unlink(missing_ok=True)


def prove_writable(path: RunPath, variable: str, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
    """ensure_writable's verdict in its words, creating nothing (`check`, which leaves nothing
    behind: a mistyped path is not made); a probe file goes into the nearest folder that
    exists. True where writing first makes the folder (a bucket has none to make)."""
    if isinstance(path, ObjectPath):
        ensure_bucket_writable(path, variable, timeout)
        return False
    there = path.is_dir()
    if path.exists() and not there:
        raise ConfigError(f"{variable}={path}: exists but is not a folder")
    if (problem := local_write_problem(path)) and there:
        raise ConfigError(
            f"{variable}={path}: not writable ({problem}); on Kubernetes check the volume's "
            "access mode and the pod's fsGroup"
        )
    if problem:
        raise ConfigError(f"{variable}={path}: cannot create the folder ({problem})")
    return not there


def check_writable(path: RunPath, variable: str, given: str | None = None) -> None:
    """Prove a file can be written in folder `path` without creating anything (ConfigError
    otherwise): a bucket's probe; on a volume, a probe file in the nearest folder that exists.
    The caller creates it when the file is written. `given` is what the user wrote (a file in
    `path`), named in the message in place of the folder."""
    if isinstance(path, ObjectPath):
        return ensure_bucket_writable(path, variable, DEFAULT_TIMEOUT_S)
    if problem := local_write_problem(path):
        raise ConfigError(f"{variable}={given or path}: not writable ({problem})")
    return None


def free_bytes(path: RunPath) -> int | None:
    """Free space where it can be known; None for an object store, which does not say."""
    if isinstance(path, ObjectPath):
        return None
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return shutil.disk_usage(existing).free


def human_bytes(size: float | None) -> str:
    if size is None:
        return "free space not reported by the store"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.1f} TiB"


# --- writes that differ between a volume and a bucket --------------------------------------
# On a volume they go through app/storage/safe_fs.py: `root` is the run folder they must stay inside
# (default: the file's own folder), and a link on the way is refused, never followed.
def append_line(path: RunPath, line: str, root: RunPath | None = None) -> None:
    """Add one line. On a volume an fsync'd append; an object is rewritten whole (only rank 0
    writes these small files, so there is no one to race)."""
    if isinstance(path, ObjectPath):
        try:
            before = path.read_bytes()
        except FileNotFoundError:
            before = b""
        path.write_bytes(before + line.encode() + b"\n")
        return
    safe_fs.append(path, safe_fs.below(path, root), line.encode() + b"\n")


def write_atomic(path: RunPath, data: bytes, root: RunPath | None = None) -> None:
    """Readers see the old content or the new, never half: a rename on a volume (its temporary
    file removed on any error), one PUT in a bucket."""
    if isinstance(path, ObjectPath):
        path.write_bytes(data)
        return
    safe_fs.write_atomic(path, safe_fs.below(path, root), data)


def write_json(path: RunPath, value: Any, root: RunPath | None = None) -> None:
    write_atomic(path, (strict_json(value, indent=2) + "\n").encode(), root)


def strict_json(value: Any, indent: int | None = None) -> str:
    """JSON as the standard has it: a NaN or an infinity (a diverged run's loss) written as
    null, where Python wrote `NaN`, which jq, JavaScript and most readers refuse. trainctl's
    readers take either as a missing figure (app/formatting.py `finite`)."""
    try:
        return json.dumps(value, indent=indent, allow_nan=False)
    except ValueError:  # rare: only then is the value walked
        return json.dumps(_finite_or_null(value), indent=indent, allow_nan=False)


def _finite_or_null(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_null(v) for v in value]
    return value


def rename_dir(folder: RunPath, target: RunPath) -> None:
    """Move a folder to a sibling name; in a bucket a copy of every object, then the originals
    deleted. On a volume a link at either name is refused (LinkRefused)."""
    if isinstance(folder, ObjectPath) and isinstance(target, ObjectPath):
        target.rmtree()
        folder.copy_tree_to(target)
        folder.rmtree()
        return
    assert isinstance(folder, Path) and isinstance(target, Path)
    safe_fs.rename_dir(folder, target, folder.parent)


def replace_folder(folder: RunPath, files: dict[str, bytes], root: RunPath | None = None) -> None:
    """`files` as `folder`'s whole content, replacing what was there, written in their order
    (put a reader's marker last). On a volume they are written into a hidden sibling below
    `root` (default: the folder's parent) that is then renamed into place, a link at either
    name refused (LinkRefused); in a bucket the old objects are deleted, then each file is one
    PUT (a reader that finds the marker finds the rest)."""
    if isinstance(folder, ObjectPath):
        folder.rmtree()
        for name, data in files.items():
            (folder / name).write_bytes(data)
        return
    below = safe_fs.below(folder, root)
    staging = folder.with_name(safe_fs.temporary_name(folder.name))
    try:
        for name, data in files.items():
            safe_fs.write_atomic(staging / name, below, data)
        safe_fs.rename_dir(staging, folder, below)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already when the rename happened


def remove_tree(folder: RunPath) -> None:
    if isinstance(folder, ObjectPath):
        folder.rmtree()
    else:
        shutil.rmtree(folder, ignore_errors=True)


def upload_tree(local: Path, target: ObjectPath) -> None:
    """Copy a folder up; its top-level files last, since markers and metadata there describe
    the rest (a copy cut short then lacks them and reads as incomplete)."""
    files = [p for p in local.rglob("*") if p.is_file()]
    for file in sorted(files, key=lambda p: (p.parent == local, p.as_posix())):
        (target / file.relative_to(local).as_posix()).write_bytes(file.read_bytes())


def download_tree(source: ObjectPath, local: Path) -> Path:
    for file in source.walk_files():
        dest = local / file.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(file.read_bytes())
    return local


@contextlib.contextmanager
def local_copy(path: RunPath) -> Iterator[Path]:
    """A private folder on this machine with `path`'s files, for tools that walk and read local
    files themselves (MLflow and W&B artifact uploads). On a volume too: such a tool follows
    every link it meets, so the files are copied the link-refusing way (app/storage/safe_fs.py,
    below `path`'s own folder): a link or a FIFO planted there is refused (LinkRefused,
    NotRegularFile) instead of uploading what it leads to, or hanging."""
    with tempfile.TemporaryDirectory(prefix="trainctl-copy-") as tmp:
        if isinstance(path, ObjectPath):
            yield download_tree(path, Path(tmp) / path.name)
        else:
            safe_fs.copy_tree(path, path.parent, Path(tmp) / path.name)
            yield Path(tmp) / path.name


class LocalFolder:
    """A folder on this machine standing for `target`, for a library that writes only local
    files (TensorBoard's event writer, logging's rotating file): `target` itself on a volume,
    its opens starting at `root` (default: `target`); in a bucket, whose objects cannot be
    appended to, a private folder seeded with `target`'s files that match `pattern` (paths
    relative to it), which `sync` copies up whole where they changed."""

    def __init__(
        self,
        target: RunPath,
        *,
        root: RunPath | None = None,
        pattern: str = "*",
        prefix: str = "trainctl-local-",
    ) -> None:
        self.target, self.pattern = target, pattern
        self.sent: dict[str, tuple[int, int]] = {}
        self.stopped = threading.Event()
        if isinstance(target, ObjectPath):
            self.path = self.root = Path(tempfile.mkdtemp(prefix=prefix))
            for file in target.walk_files():
                relative = file.relative_to(target).as_posix()
                if fnmatch.fnmatchcase(relative, pattern):
                    (self.path / relative).parent.mkdir(parents=True, exist_ok=True)
                    (self.path / relative).write_bytes(file.read_bytes())
        else:
            self.path = target
            self.root = root if isinstance(root, Path) else target

    def sync(self) -> None:
        """The target brought up to date: new or changed files copied up, top-level ones last
        (markers there describe the rest). Nothing to do on a volume."""
        if not isinstance(self.target, ObjectPath):
            return
        files = [p for p in self.path.rglob("*") if p.is_file()]
        for file in sorted(files, key=lambda p: (p.parent == self.path, p.as_posix())):
            relative = file.relative_to(self.path).as_posix()
            status = file.stat()
            stamp = (status.st_mtime_ns, status.st_size)
            if fnmatch.fnmatchcase(relative, self.pattern) and self.sent.get(relative) != stamp:
                (self.target / relative).write_bytes(file.read_bytes())
                self.sent[relative] = stamp

    def sync_every(self, seconds: float) -> None:
        """Keep syncing every `seconds` in a daemon thread until `stop` (a bucket only: a
        volume's files are the target's own); a failed copy is retried on the next tick."""
        if not isinstance(self.target, ObjectPath):
            return

        def loop() -> None:
            while not self.stopped.wait(seconds):
                with contextlib.suppress(OSError):
                    self.sync()

        threading.Thread(target=loop, name="local-folder-sync", daemon=True).start()

    def stop(self) -> None:
        """The periodic sync stopped, then one last sync (its errors ignored, as the loop's)."""
        self.stopped.set()
        with contextlib.suppress(OSError):
            self.sync()


def local_write_problem(path: RunPath) -> str | None:
    """Why a library writing local files (LocalFolder) could not write `path`, None where it
    could; nothing is created: a probe file goes into the nearest folder that exists. In a
    bucket it writes a private local folder, which it always can (the bucket's own check is
    ensure_writable's)."""
    if isinstance(path, ObjectPath):
        return None
    if link := broken_link(path):
        return link
    folder = path
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    probe = folder / f".trainctl-write-test-{uuid.uuid4().hex}"
    try:
        if not folder.is_dir():
            return f"{folder}: exists but is not a folder"
        probe.write_bytes(b"ok")
    except OSError as err:
        # A folder that exists yet takes no new file (/proc, some FUSE mounts) answers ENOENT,
        # "No such file or directory", about a folder that is there (a red-team pass).
        missing = err.errno == errno.ENOENT and folder.is_dir()
        return f"{folder}: {'no file can be created there' if missing else err.strerror}"
    finally:
        # A full disk makes the file, then refuses its bytes: it was left behind (a red-team
        # pass).
        with contextlib.suppress(OSError):
            probe.unlink(missing_ok=True)
    return None


def broken_link(path: Path) -> str | None:
    """Which of `path` and the folders above it is a symbolic link to nothing, said with its
    target; None where none is."""
    for step in (path, *path.parents):
        if step.is_symlink() and not step.exists():
            return f"{step} is a link to {os.readlink(step)}, which does not exist"
    return None


def storage_options(storage: RunPath) -> dict[str, Any]:
    """Ray Train's RunConfig arguments for this storage: a bucket is given as its filesystem
    (the same client trainctl uses) and the path inside it."""
    if isinstance(storage, ObjectPath):
        return {"storage_path": storage.key, "storage_filesystem": storage.fs}
    return {"storage_path": str(storage)}


def in_storage(storage: RunPath, path_in_fs: str) -> RunPath:
    """A path Ray reports inside the storage filesystem (a checkpoint's), as a location: in a
    bucket the key is taken relative to the bucket, with the storage's endpoint."""
    return storage.at(path_in_fs) if isinstance(storage, ObjectPath) else Path(path_in_fs)


def local_path(path: RunPath) -> Path | None:
    """The path on this machine's file system, or None for a bucket. Outside app/storage only
    for a library that needs a local path (W&B's own folder, the champion pointer's flock),
    each such site saying so; everything else asks the operations here, which decide
    (tests/unit/test_storage_interface.py keeps it so)."""
    return path if isinstance(path, Path) else None


def location_setting(value: Any) -> Any:
    """A storage setting's raw value as the settings model reads it: pathlib would read
    s3://b/p as the folder "s3:/b/p", so a URI is taken apart here, and what only looks like
    one (" s3://b", "s3:/b") is refused (ValueError) rather than made a folder."""
    if isinstance(value, str) and value.strip():
        check_path(value)
    if isinstance(value, str | Path) and uri_scheme(str(value)):
        return ObjectPath(check_uri(str(value)))
    return value


def resolved(location: RunPath) -> RunPath:
    """A volume's path with its links resolved (to compare where two names really lead); a
    bucket location as it is (it has no links)."""
    return location.resolve() if isinstance(location, Path) else location


def absolute_location(value: RunPath | None) -> RunPath | None:
    """A local path made absolute with ~ expanded (local_absolute); a bucket as it is."""
    return local_absolute(value) if isinstance(value, Path) else value


def within(location: RunPath, seconds: float) -> RunPath:
    """`location` read through a client whose every request ends within `seconds` (a bucket's:
    ObjectPath.with_budget); a volume's calls need no such client."""
    return location.with_budget(seconds) if isinstance(location, ObjectPath) else location


def with_endpoint(value: RunPath | None, endpoint: str | None) -> RunPath | None:
    """A bucket location reached through `endpoint`; a local path as it is."""
    if isinstance(value, ObjectPath) and value.endpoint != endpoint:
        return ObjectPath(value.uri, endpoint)
    return value


@contextlib.contextmanager
def written_whole(folder: RunPath, prefix: str) -> Iterator[Path]:
    """A local folder to write `folder`'s files into: `folder` itself on a volume; in a bucket
    a temporary one, copied up once the block ends without an error."""
    if not isinstance(folder, ObjectPath):
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        local = Path(tmp) / folder.name
        yield local
        upload_tree(local, folder)


@contextlib.contextmanager
def store_errors(path: RunPath, variable: str) -> Iterator[None]:
    """Inside: a bucket client's errors (OSError, pyarrow's ArrowException) become a
    ConfigError naming the store and `variable`; a volume's own errors pass as they are (they
    say more)."""
    from pyarrow import ArrowException

    try:
        yield
    except (OSError, ArrowException) as err:
        if not isinstance(path, ObjectPath):
            raise
        raise ConfigError(describe_store_error(path, variable, err)) from None


def ensure_reachable(path: RunPath, variable: str, seconds: float = DEFAULT_TIMEOUT_S) -> None:
    """A bucket's read-only probe within `seconds` (app/storage/probe.py); a volume needs none."""
    if isinstance(path, ObjectPath):
        reachable(path, variable, seconds)
