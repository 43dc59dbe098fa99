"""Writes that happen only if nothing changed since the read: compare-and-swap in a bucket.

pyarrow's S3 client (app/storage/buckets.py, the one Ray uses) cannot send a conditional PUT:
its writes pass only ACL, Cache-Control, Content-Type, Content-Language and Expires. Two
drivers replacing one object then both succeed, and the later one silently undoes the
earlier one. S3 itself offers the primitive (RFC 9110 preconditions on PutObject):
`If-None-Match: *` creates an object only where none is, `If-Match: <ETag>` replaces it only
while it is the version that was read; a lost race is a 412 (or a 409 while another
conditional write of the key is in flight). Both go through boto3 here, the AWS SDK for
Python, with the same credential chain (AWS_* variables, ~/.aws, IRSA's web identity) and
endpoint (TRAIN_STORAGE_ENDPOINT, AWS_ENDPOINT_URL) as the pyarrow client, its standard retry
mode and a timeout on every request. AWS S3, MinIO, Cloudflare R2 and Ceph RGW honour these
headers; a store that answers 501 NotImplemented is reported as the refusal it is.

Google Cloud Storage has the equivalent (`ifGenerationMatch`), but neither pyarrow's GCS client
nor anything else trainctl installs can send it: `supported` is False for gs://, and callers
say what they do instead (app/promotion/champion.py).

A volume needs no ETag: a flock serialises the pointer's writers (app/promotion/champion.py),
and `create` there is a hard link of a finished temporary file to the name, which fails where
the name exists (atomic on local file systems and NFS alike).
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.storage import safe_fs
from app.storage.buckets import RETRIES, TIMEOUT_S, ObjectPath, s3_endpoint

LOST = ("PreconditionFailed", "ConditionalRequestConflict")  # 412, 409: another writer won
_CLIENT_LOCK = threading.Lock()  # boto3 sessions are not thread-safe; their clients are


class ConditionalWriteError(OSError):
    """The store could not be asked, or refused a conditional write for another reason than a
    lost race (NotImplemented: it does not support them). An OSError, as pyarrow's are."""


@dataclass(frozen=True)
class Read:
    """An object as read: its bytes (None where there is none) and the ETag that names this
    version of it, for the conditional write that replaces it."""

    data: bytes | None
    etag: str | None


def supported(path: ObjectPath) -> bool:
    return path.scheme == "s3"


def missing_client() -> str | None:
    """Why conditional writes to S3 cannot be sent from this image, or None."""
    try:
        import boto3  # noqa: F401
    except ImportError:
        return "boto3 is not installed (trainctl's image ships it for conditional writes to S3)"
    return None


def read(path: ObjectPath, limit: int) -> Read:
    """The object and its ETag in one GET (so the bytes are the version the ETag names);
    ValueError when it is over `limit` bytes, nothing read beyond it."""
    client = _client(path.endpoint)
    bucket, key = _split(path)
    try:
        answer = client.get_object(Bucket=bucket, Key=key)
    except Exception as err:
        if _code(err) in ("NoSuchKey", "404"):
            return Read(None, None)
        raise _failed(path, "read", err) from None
    body = answer["Body"]
    try:
        size = int(answer.get("ContentLength") or 0)
        if size > limit:
            raise ValueError(f"{size:,} bytes, over the {limit:,} allowed")
        data = body.read(limit + 1)
    except ValueError:
        raise
    except Exception as err:  # the connection dropped mid-body
        raise _failed(path, "read", err) from None
    finally:
        body.close()
    if len(data) > limit:
        raise ValueError(f"over the {limit:,} bytes allowed")
    return Read(data, answer.get("ETag"))


def replace(path: ObjectPath, data: bytes, expected: Read) -> bool:
    """Write `data` only if the object is still what `expected` read (absent: only if there is
    still none). False when another writer changed it first: read again and decide again."""
    condition = {"IfMatch": expected.etag} if expected.etag else {"IfNoneMatch": "*"}
    return _put(path, data, condition)


def create(path: Path | ObjectPath, data: bytes, root: Path | None = None) -> bool:
    """Write `data` only where nothing is; False where something is (nothing is overwritten).
    On a volume below `root` (default: its folder), following no link; in GCS an existence
    check and then one upload, which two writers of the same name can both pass (callers
    write content-addressed names there, where both write the same bytes)."""
    if isinstance(path, Path):
        return _create_file(path, root or path.parent, data)
    if supported(path):
        return _put(path, data, {"IfNoneMatch": "*"})
    if path.exists():
        return False
    path.write_bytes(data)
    return True


def _create_file(path: Path, root: Path, data: bytes) -> bool:
    tmp = f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
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


def _put(path: ObjectPath, data: bytes, condition: dict[str, str]) -> bool:
    client = _client(path.endpoint)
    bucket, key = _split(path)
    try:
        client.put_object(Bucket=bucket, Key=key, Body=data, **condition)
    except Exception as err:
        if _code(err) in LOST:
            return False
        raise _failed(path, "write", err) from None
    return True


def _split(path: ObjectPath) -> tuple[str, str]:
    bucket, _, key = path.key.partition("/")
    return bucket, key


def _code(err: Exception) -> str:
    response = getattr(err, "response", None)
    return str(((response or {}).get("Error") or {}).get("Code", ""))


def _failed(path: ObjectPath, what: str, err: Exception) -> ConditionalWriteError:
    code = _code(err)
    if code == "NotImplemented":
        return ConditionalWriteError(
            f"{path}: the store does not support conditional writes (If-Match / If-None-Match "
            "on PUT), which the champion pointer needs to be replaced safely"
        )
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return ConditionalWriteError(f"{path}: {what} failed ({type(err).__name__}: {message})")


def _client(endpoint: str | None) -> Any:
    return _cached_client(endpoint, os.getpid())


@functools.cache
def _cached_client(endpoint: str | None, pid: int) -> Any:
    """One client per process (a forked child builds its own) and endpoint."""
    problem = missing_client()
    if problem:
        raise ConditionalWriteError(problem)
    import boto3
    from botocore.config import Config

    url, _ = s3_endpoint(endpoint)
    config = Config(
        connect_timeout=TIMEOUT_S,
        read_timeout=TIMEOUT_S,
        retries={"max_attempts": RETRIES, "mode": "standard"},
        # As pyarrow addresses a custom endpoint (MinIO, Ceph): bucket in the path.
        s3={"addressing_style": "path" if url else "auto"},
    )
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    with _CLIENT_LOCK:
        session = boto3.session.Session()
        return session.client("s3", endpoint_url=url, region_name=region or None, config=config)
