"""Run folders and data on object storage: `s3://bucket/prefix` and `gs://bucket/prefix`.

The I/O goes through pyarrow's filesystems, the ones Ray Train and Ray Data use themselves, so
trainctl, Ray's checkpoint uploads and Ray Data's reads share one client and one set of
credentials: the standard chain of each cloud (AWS_* variables, ~/.aws, IRSA's web identity;
GOOGLE_APPLICATION_CREDENTIALS, GKE Workload Identity). S3-compatible stores (MinIO, Ceph)
are reached through TRAIN_STORAGE_ENDPOINT or AWS_ENDPOINT_URL.

`ObjectPath` offers the part of pathlib's API the run folder uses, so app/runfolder/folder.py,
app/runfolder/checkpoints.py and app/runfolder/log_capture.py read the same on a volume and in a
bucket. What an
object store cannot do the same way (append, rename a folder) lives in app/storage/location.py.
An ObjectPath pickles as its URI and endpoint only: every process builds its own client from
its own environment, so no credential travels through Ray's object store.
"""

from __future__ import annotations

import fnmatch
import functools
import io
import os
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from app.storage.uris import (  # noqa: F401 - where callers have always found them
    StoreSettingError,
    check_endpoint,
    check_google_credentials,
    check_path,
    check_uri,
    s3_endpoint,
    uri_scheme,
)

# Attempts per request for transient errors (throttling, 5xx, dropped connections), with
# backoff, by the cloud client itself; then the error reaches the caller. 3 is the AWS SDKs'
# own default (standard retry mode).
RETRIES = 3
TIMEOUT_S = 20.0  # connect and per-request: an unreachable endpoint fails, it never hangs


@functools.cache
def filesystem(scheme: str, endpoint: str | None, budget: float | None = None) -> pafs.FileSystem:
    """One client per process for (scheme, endpoint), from this process's environment.

    `budget`: seconds all attempts of one request may take, for probes (app/storage/probe.py):
    one they give up on still ends soon, and pyarrow waits for it at exit."""
    if scheme == "gs":
        from datetime import timedelta

        check_google_credentials()
        return pafs.GcsFileSystem(retry_time_limit=timedelta(seconds=budget or TIMEOUT_S * 3))
    endpoint, _ = s3_endpoint(endpoint)
    attempts, per_attempt = RETRIES, TIMEOUT_S
    if budget:  # a short budget gets one attempt; whole seconds (curl's stall timer counts
        # seconds, 0 would switch it off), with one share left for the retries' backoff
        attempts = RETRIES if budget >= 3 * RETRIES else 1
        per_attempt = max(1, int(budget / (attempts + 1)))
    options: dict[str, Any] = {
        "connect_timeout": per_attempt,
        "request_timeout": per_attempt,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=attempts),
    }
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        options["region"] = region
    if endpoint:
        parts = urlsplit(endpoint)
        options.update(endpoint_override=parts.netloc, scheme=parts.scheme or "https")
    return pafs.S3FileSystem(**options)


class ObjectPath:
    """A path in a bucket with the pathlib methods the run folder needs."""

    def __init__(self, uri: str, endpoint: str | None = None, budget: float | None = None) -> None:
        self.uri = uri.rstrip("/")
        self.scheme, _, self.key = self.uri.partition("://")
        self.endpoint = endpoint
        self.budget = budget  # the probes' client (filesystem()); not pickled: workers' own

    # --- naming ---------------------------------------------------------------------------
    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"ObjectPath({self.uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    def __lt__(self, other: ObjectPath) -> bool:
        return self.uri < other.uri

    def __reduce__(self) -> tuple[Any, ...]:
        return (ObjectPath, (self.uri, self.endpoint))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        # In settings: an instance (made from a URI by the field's before-validator), shown
        # and serialised as its URI.
        from pydantic_core import core_schema

        return core_schema.is_instance_schema(
            cls, serialization=core_schema.plain_serializer_function_ser_schema(str)
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> dict[str, Any]:
        return {"type": "string", "format": "uri"}

    def __truediv__(self, part: str) -> ObjectPath:
        return ObjectPath(f"{self.uri}/{str(part).strip('/')}", self.endpoint, self.budget)

    def at(self, key: str) -> ObjectPath:
        """Another key in this store, e.g. one that Ray reports without a scheme."""
        return ObjectPath(f"{self.scheme}://{key.strip('/')}", self.endpoint, self.budget)

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def parent(self) -> ObjectPath:
        head = self.key.rsplit("/", 1)[0] if "/" in self.key else self.key
        return self.at(head)

    @property
    def bucket(self) -> str:
        return self.key.split("/", 1)[0]

    def with_name(self, name: str) -> ObjectPath:
        return self.parent / name

    @property
    def fs(self) -> pafs.FileSystem:
        return filesystem(self.scheme, self.endpoint, self.budget)

    def with_budget(self, seconds: float) -> ObjectPath:
        """This path, read through a client whose requests all end within `seconds`."""
        return ObjectPath(self.uri, self.endpoint, seconds)

    # --- queries --------------------------------------------------------------------------
    def _type(self) -> pafs.FileType:
        return self.fs.get_file_info(self.key).type

    def exists(self) -> bool:
        return self._type() != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        return self._type() == pafs.FileType.Directory

    def is_file(self) -> bool:
        return self._type() == pafs.FileType.File

    def size(self) -> int:
        return self.stamp()[0]

    def stamp(self) -> tuple[int, int]:
        """(size in bytes, last-modified time in ns), from one request."""
        info = self.fs.get_file_info(self.key)
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(f"{self.uri} does not exist")
        return int(info.size or 0), int(info.mtime_ns or 0)

    def iterdir(self) -> Iterator[ObjectPath]:
        selector = pafs.FileSelector(self.key, allow_not_found=True)
        for info in self.fs.get_file_info(selector):
            yield self.at(info.path)

    def glob(self, pattern: str) -> Iterator[ObjectPath]:
        """Direct children whose name matches `pattern` (no `**`: the run folder needs none)."""
        return (child for child in self.iterdir() if fnmatch.fnmatchcase(child.name, pattern))

    def relative_to(self, base: ObjectPath) -> PurePosixPath:
        """The key below `base`'s key, as pathlib's relative_to gives it for a local path."""
        if not self.key.startswith(base.key + "/"):
            raise ValueError(f"{self} is not below {base}")
        return PurePosixPath(self.key[len(base.key) + 1 :])

    def walk_files(self) -> list[ObjectPath]:
        selector = pafs.FileSelector(self.key, recursive=True, allow_not_found=True)
        infos = self.fs.get_file_info(selector)
        return [self.at(i.path) for i in infos if i.type == pafs.FileType.File]

    # --- reading and writing --------------------------------------------------------------
    def read_bytes(self) -> bytes:
        # A random-access file knows its size and fetches it in one request; an input stream's
        # read() of "everything" grows its buffer step by step (64 MiB: 11 s against 0.14 s).
        with self.fs.open_input_file(self.key) as file:
            return file.read()

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes().decode(encoding, errors=errors)

    def write_bytes(self, data: bytes) -> int:
        # One PUT: readers see the old object or the new one, never half of it.
        with self.fs.open_output_stream(self.key) as stream:
            stream.write(data)
        return len(data)

    def write_text(self, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(text.encode(encoding))

    def open(self, mode: str = "rb") -> Any:
        if mode == "rb":
            return io.BytesIO(self.read_bytes())
        raise ValueError(f"{self.uri}: only whole-object reads (rb) are supported")

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to do: a prefix exists once an object is written under it."""

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self.fs.delete_file(self.key)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def rmtree(self) -> None:
        if self.is_dir():
            self.fs.delete_dir(self.key)

    def copy_tree_to(self, target: ObjectPath) -> None:
        for file in self.walk_files():
            relative = file.key[len(self.key) + 1 :]
            self.fs.copy_file(file.key, f"{target.key}/{relative}")


def locate(value: str | os.PathLike[str], endpoint: str | None = None) -> Any:
    """A Path for a local path, an ObjectPath for an s3:// or gs:// URI; ValueError for what
    only looks like either."""
    from pathlib import Path

    text = check_path(os.fspath(value))
    return ObjectPath(check_uri(text), endpoint) if uri_scheme(text) else Path(text)
