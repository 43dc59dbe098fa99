"""Writes that happen only if nothing changed since the read: compare-and-swap in a bucket.

pyarrow's S3 client (app/storage/buckets.py, the one Ray uses) cannot send a conditional PUT:
its writes pass only ACL, Cache-Control, Content-Type, Content-Language and Expires. Two
drivers replacing one object then both succeed, and the later one silently undoes the
earlier one. S3 itself offers the primitive (RFC 9110 preconditions on PutObject):
`If-None-Match: *` creates an object only where none is, `If-Match: <ETag>` replaces it only
while it is the version that was read; a lost race is a 412. Both go through obstore here, the
Python binding of Apache Arrow's `object_store` crate (what Delta Lake and DataFusion write
with), whose `put(mode="create")` and `put(mode={"e_tag": ...})` send exactly these. It reads
the AWS variables pyarrow reads (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
AWS_REGION; IRSA's AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE; the container and instance
metadata endpoints), but not ~/.aws profile files; the endpoint is trainctl's
(TRAIN_STORAGE_ENDPOINT, AWS_ENDPOINT_URL), with a timeout and retries on every request.
(boto3 would send the same headers, but every botocore release pins python-dateutil<3, which
the Kubernetes client trainctl uses cannot run with.) AWS S3, MinIO, Cloudflare R2 and Ceph
RGW honour these headers; a store that answers 501 NotImplemented is reported as the refusal
it is.

Google Cloud Storage has the equivalent (`ifGenerationMatch`), but trainctl's GCS client
(pyarrow) cannot send it: `supported` is False for gs://, and callers say what they do
instead (app/promotion/champion.py).

A volume needs no ETag: a flock serialises the pointer's writers (app/promotion/champion.py),
and `create` there is a hard link of a finished temporary file to the name, which fails where
the name exists (atomic on local file systems and NFS alike).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app.storage import safe_fs
from app.storage.buckets import RETRIES, TIMEOUT_S, ObjectPath, s3_endpoint
from app.storage.location import RunPath


class ConditionalWriteError(OSError):
    """The store could not be asked, or refused a conditional write for another reason than a
    lost race (NotImplemented: it does not support them). An OSError, as pyarrow's are."""


@dataclass(frozen=True)
class Read:
    """An object as read: its bytes (None where there is none) and the ETag that names this
    version of it, for the conditional write that replaces it."""

    data: bytes | None
    etag: str | None


class Guard(enum.Enum):
    """What keeps two writers of one file from undoing each other."""

    LOCK = "a lock held while reading and writing (app/storage/locks.py)"
    COMPARE_AND_SWAP = "a conditional write (If-Match / If-None-Match)"
    NONE = "nothing: the last writer wins"


def guard(path: RunPath) -> Guard:
    """A volume's writers take a lock; S3's send a compare-and-swap; GCS's cannot (see the
    module)."""
    if not isinstance(path, ObjectPath):
        return Guard.LOCK
    return Guard.COMPARE_AND_SWAP if supported(path) else Guard.NONE


def supported(path: RunPath) -> bool:
    """Whether conditional writes (read, replace) can be sent to `path`: in S3 only."""
    return isinstance(path, ObjectPath) and path.scheme == "s3"


def read(path: RunPath, limit: int) -> Read:
    """The object and its ETag in one GET (so the bytes are the version the ETag names);
    ValueError when it is over `limit` bytes, nothing read beyond it. Only where `supported`."""
    import obstore

    path = _object(path)
    store, key = _store(path), _key(path)
    try:
        found = obstore.get(store, key)
        size = int(found.meta["size"])
        if size > limit:
            raise ValueError(f"{size:,} bytes, over the {limit:,} allowed")
        data = bytes(found.bytes())
    except FileNotFoundError:
        return Read(None, None)
    except ValueError:
        raise
    except Exception as err:  # obstore's errors: the store refused, or did not answer
        raise _failed(path, "read", err) from None
    if len(data) > limit:
        raise ValueError(f"over the {limit:,} bytes allowed")
    return Read(data, found.meta.get("e_tag"))


def replace(path: RunPath, data: bytes, expected: Read) -> bool:
    """Write `data` only if the object is still what `expected` read (absent: only if there is
    still none). False when another writer changed it first: read again and decide again."""
    mode: Any = {"e_tag": expected.etag} if expected.etag else "create"
    return _put(_object(path), data, mode)


def _object(path: RunPath) -> ObjectPath:
    if not supported(path):
        raise ConditionalWriteError(f"{path}: no conditional writes here (S3 only)")
    return path  # type: ignore[return-value]


def create(path: RunPath, data: bytes, root: RunPath | None = None) -> bool:
    """Write `data` only where nothing is; False where something is (nothing is overwritten).
    On a volume below `root` (default: its folder), following no link; in GCS an existence
    check and then one upload, which two writers of the same name can both pass (callers
    write content-addressed names there, where both write the same bytes)."""
    if not isinstance(path, ObjectPath):
        return _create_file(path, safe_fs.below(path, root), data)
    if supported(path):
        return _put(path, data, "create")
    if path.exists():
        return False
    path.write_bytes(data)
    return True


def _create_file(path: Path, root: Path, data: bytes) -> bool:
    tmp = safe_fs.temporary_name(path.name)
    with safe_fs.folder_fd(path.parent, root, create=True) as folder:
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            with os.fdopen(os.open(tmp, flags, 0o666, dir_fd=folder), "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())  # whole on disk before the name points at it
            try:
                os.link(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder,
                        follow_symlinks=False)  # fmt: skip
            except FileExistsError:  # a file, folder or link of that name: never replaced
                return False
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=folder)


def _put(path: ObjectPath, data: bytes, mode: Any) -> bool:
    import obstore
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    try:
        obstore.put(_store(path), _key(path), data, mode=mode, use_multipart=False)
    except (AlreadyExistsError, PreconditionError):  # 412 (or 409): another writer won
        return False
    except Exception as err:
        raise _failed(path, "write", err) from None
    return True


def _key(path: ObjectPath) -> str:
    return path.key.partition("/")[2]


def _failed(path: ObjectPath, what: str, err: Exception) -> ConditionalWriteError:
    text = str(err).strip()
    if "NotImplemented" in text or "501" in text:
        return ConditionalWriteError(
            f"{path}: the store does not support conditional writes (If-Match / If-None-Match "
            "on PUT), which the champion pointer needs to be replaced safely"
        )
    message = text.splitlines()[0] if text else type(err).__name__
    return ConditionalWriteError(f"{path}: {what} failed ({type(err).__name__}: {message})")


def missing_client() -> str | None:
    """Why conditional writes to S3 cannot be sent from this image, or None."""
    try:
        import obstore  # noqa: F401
    except ImportError:
        return "obstore is not installed (trainctl's image ships it for conditional writes to S3)"
    return None


def _store(path: ObjectPath) -> Any:
    return _cached_store(path.bucket, path.endpoint, os.getpid())


@functools.cache
def _cached_store(bucket: str, endpoint: str | None, pid: int) -> Any:
    """One client per process (a forked child builds its own), bucket and endpoint."""
    problem = missing_client()
    if problem:
        raise ConditionalWriteError(problem)
    from obstore.store import S3Store

    url, _ = s3_endpoint(endpoint)
    config: dict[str, Any] = {}
    if url:  # MinIO, Ceph: the bucket in the path, as pyarrow addresses them
        config.update(endpoint=url, virtual_hosted_style_request=False)
    else:
        config["virtual_hosted_style_request"] = True
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region and not url:  # AWS answers a request in another region with a redirect
        import pyarrow.fs as pafs

        region = pafs.resolve_s3_region(bucket)
    if region:
        config["region"] = region
    return S3Store(
        bucket,
        config=config,  # type: ignore[arg-type]
        client_options={
            "allow_http": bool(url) and urlsplit(url).scheme == "http",
            "connect_timeout": timedelta(seconds=TIMEOUT_S),
            "timeout": timedelta(seconds=TIMEOUT_S),
        },
        retry_config={"max_retries": RETRIES, "retry_timeout": timedelta(seconds=3 * TIMEOUT_S)},
    )
