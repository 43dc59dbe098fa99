"""Is a bucket usable: every probe has a deadline, and a store's errors are put in words.

A probe first asks the store's endpoint for any HTTP answer, from Python (app/storage/deadline.py's
worker thread), and only then lets pyarrow's client talk to it: a black hole (an endpoint that
accepts connections and never answers) or a missing Google identity is found within
TRAIN_STORAGE_TIMEOUT_S, and SIGTERM or Ctrl-C act at once. pyarrow itself would spend its
whole retry budget (a minute or more), and at exit waits for a request still in flight, so it
is never left talking to an endpoint that did not answer.

Every message names the variable to fix and goes through app/redact.py.
"""

from __future__ import annotations

import http.client
import os
import re
import ssl
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from app.errors import ConfigError
from app.redact import redact_text, redact_uri
from app.storage.buckets import ObjectPath
from app.storage.deadline import DeadlineExceeded, call_with_deadline
from app.storage.uris import StoreSettingError, check_google_credentials, s3_endpoint

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0  # TRAIN_STORAGE_TIMEOUT_S's default
TIMEOUT_VARIABLE = "TRAIN_STORAGE_TIMEOUT_S"
GCS_URL = "https://storage.googleapis.com"
# Endpoints that gave an HTTP answer in this process: asked once, not before every probe.
_answered: set[str] = set()


class StoreUnavailable(ConfigError):
    """A bucket that did not answer, refused, or cannot be configured. Its probe has waited
    already: whoever records the failure should not ask the store again."""

    def __init__(self, problem: str, variable: str) -> None:
        super().__init__(problem)
        self.variable = variable


def probe(path: ObjectPath, variable: str, seconds: float, action: Callable[[], T]) -> T:
    """`action()` (pyarrow calls on `path`) once the store answers, within `seconds` each;
    StoreUnavailable naming `variable` and what is wrong otherwise."""
    try:
        _store_answers(path, seconds)
        return call_with_deadline(action, seconds, str(path))
    except (OSError, pa.ArrowException, StoreSettingError) as err:
        raise StoreUnavailable(describe_store_error(path, variable, err), variable) from None


def reachable(path: ObjectPath, variable: str, seconds: float = DEFAULT_TIMEOUT_S) -> None:
    """A read-only probe (a listing): the store answers and the bucket exists."""
    # The bucket's top level: a missing bucket is an error here, not an empty listing.
    selector = pafs.FileSelector(path.bucket, allow_not_found=False)
    client = path.with_budget(seconds)
    probe(path, variable, seconds, lambda: client.fs.get_file_info(selector))


def ensure_bucket_writable(
    path: ObjectPath, variable: str, seconds: float = DEFAULT_TIMEOUT_S
) -> None:
    """An object can be written under `path` (and is deleted again), or ConfigError."""
    if probe(path, variable, seconds, path.with_budget(seconds).is_file):
        raise ConfigError(f"{variable}={redact_uri(str(path))}: is an object, not a prefix")
    marker = path.with_budget(seconds) / f".trainctl-write-test-{uuid.uuid4().hex}"

    def write_and_delete() -> None:
        marker.write_bytes(b"ok")
        marker.unlink(missing_ok=True)

    probe(path, variable, seconds, write_and_delete)


def is_dir(path: ObjectPath, variable: str, seconds: float = DEFAULT_TIMEOUT_S) -> bool:
    return probe(path, variable, seconds, path.with_budget(seconds).is_dir)


def exists(path: ObjectPath, variable: str, seconds: float = DEFAULT_TIMEOUT_S) -> bool:
    return probe(path, variable, seconds, path.with_budget(seconds).exists)


# --- does the endpoint answer at all ------------------------------------------------------
def target(path: ObjectPath) -> tuple[str, str]:
    """The URL a probe of `path` talks to, and the variables that decide it."""
    if path.scheme == "gs":
        return GCS_URL, "GOOGLE_APPLICATION_CREDENTIALS and the network"
    endpoint, variable = s3_endpoint(path.endpoint)
    if endpoint:
        return endpoint, f"{variable} and the network"
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    host = f"s3.{region}.amazonaws.com" if region else "s3.amazonaws.com"
    return f"https://{host}", "TRAIN_STORAGE_ENDPOINT or AWS_ENDPOINT_URL, AWS_REGION, the network"


def _store_answers(path: ObjectPath, seconds: float) -> None:
    if path.scheme == "gs":
        _google_identity(seconds)
    url, _ = target(path)
    if url not in _answered:
        http_answers(url, seconds)
        _answered.add(url)


def http_answers(url: str, seconds: float) -> None:
    """Any HTTP answer from `url` within `seconds`: DeadlineExceeded or OSError otherwise."""
    parts = urlsplit(url)

    def ask() -> None:
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            # Only "does it answer": no credentials are sent, and the real client verifies.
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            connection = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=seconds, context=context
            )
        else:
            connection = http.client.HTTPConnection(parts.hostname or "", parts.port, seconds)
        try:
            connection.request("HEAD", "/", headers={"Metadata-Flavor": "Google"})
            connection.getresponse().close()
        except http.client.HTTPException as err:
            if isinstance(err, ConnectionError):  # closed without a word: RemoteDisconnected
                raise
            # Otherwise an answer, if not HTTP: the store's own client will say more.
        finally:
            connection.close()

    call_with_deadline(ask, seconds, redact_uri(url))  # the socket's timeout is the deadline's


def _google_identity(seconds: float) -> None:
    """Credentials the GCS client will find; without any it tries the metadata server for
    a minute and a half, then blames something else."""
    check_google_credentials()
    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return
    try:
        config = Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud")
    except RuntimeError:  # no home folder: no gcloud credentials in it either
        config = None
    if config and (config / "application_default_credentials.json").is_file():
        return
    host = os.environ.get("GCE_METADATA_ROOT") or "metadata.google.internal"
    if f"http://{host}" in _answered:
        return
    try:
        http_answers(f"http://{host}", seconds)
    except OSError as err:
        raise StoreSettingError(
            # Not "credentials: NAME": redaction reads that as a secret's value, and masked
            # the variable's name the message asks for.
            "no Google credentials found (GOOGLE_APPLICATION_CREDENTIALS is not set, gcloud has "
            f"no application-default credentials, and the metadata server {host} (GKE Workload "
            f"Identity) did not answer: {_reason(err)}); set GOOGLE_APPLICATION_CREDENTIALS to "
            "a service-account key file, or give the pod a Workload Identity"
        ) from None
    _answered.add(f"http://{host}")


# --- what a store's errors mean -----------------------------------------------------------
# pyarrow reports AWS errors as "AWS Error <CODE> during <operation>"; GCS's as HTTP statuses.
_REFUSED = re.compile(
    r"ACCESS_DENIED|INVALID_ACCESS_KEY_ID|SIGNATURE_DOES_NOT_MATCH|EXPIRED_TOKEN|"
    r"INVALID_TOKEN|UNAUTHORIZED|FORBIDDEN|HTTP status 40[13]|PermissionDenied|Unauthenticated|"
    r"credentials",
    re.IGNORECASE,
)
_NO_BUCKET = re.compile(r"NO_SUCH_BUCKET|bucket does not exist|Bucket '.*' not found", re.I)
_UNREACHABLE = re.compile(
    r"NETWORK_CONNECTION|Could not resolve|Couldn't connect|Connection refused|Timeout|"
    r"curlCode|ServiceUnavailable|SERVICE_UNAVAILABLE|Name or service not known|"
    r"name resolution|nodename nor servname|No route to host|Network is unreachable|"
    r"closed the connection|Connection reset",
    re.IGNORECASE,
)


def unanswered(
    path: Path | ObjectPath, variable: str, what: str, err: DeadlineExceeded
) -> StoreUnavailable:
    """`what`, read from `path`, unanswered within its deadline: for a bucket, its endpoint and
    what to check; for a folder (a mount that hangs), the folder."""
    if isinstance(path, ObjectPath):
        said = describe_store_error(path, variable, err)
    else:
        said = f"{path}: no answer within {err.seconds:g} s ({TIMEOUT_VARIABLE})"
    return StoreUnavailable(f"{what}: {said}", variable)


def describe_store_error(path: ObjectPath, variable: str, err: BaseException) -> str:
    """One line naming the variable and what is wrong; the client's text never carries keys,
    and neither does this (only the error's kind is kept, redacted, not the request)."""
    return redact_text(_describe(path, f"{variable}={redact_uri(str(path))}", err))


def _describe(path: ObjectPath, where: str, err: BaseException) -> str:
    if isinstance(err, StoreSettingError):
        return f"{where}: {err}"
    try:
        url, check = target(path)
    except StoreSettingError as bad:
        return f"{where}: {bad}"
    if isinstance(err, DeadlineExceeded):
        return (
            f"{where}: the store at {url} did not answer within {err.seconds:g} s "
            f"({TIMEOUT_VARIABLE}); check {check}"
        )
    text = str(err)
    if _NO_BUCKET.search(text):
        return f"{where}: bucket {path.bucket!r} does not exist (create it, or fix the name)"
    if _REFUSED.search(text):
        return (
            f"{where}: the store refused the credentials ({_code(text)}); check AWS_ACCESS_KEY_ID"
            "/AWS_SECRET_ACCESS_KEY, the pod's service account (IRSA, Workload Identity) or "
            "the bucket's policy"
        )
    if _UNREACHABLE.search(text):
        return f"{where}: the store at {url} cannot be reached ({_reason(err)}); check {check}"
    # Any other answer: said as the store's, with where it came from (a bare RESOURCE_NOT_FOUND
    # from an endpoint that is not an object store read as the whole reason: a red-team pass).
    return f"{where}: the store at {url} answered {_code(text)}; check {check}"


def _reason(err: BaseException) -> str:
    if isinstance(err, DeadlineExceeded):
        return f"no answer within {err.seconds:g} s"
    if isinstance(err, OSError) and err.strerror and not str(err).startswith("AWS Error"):
        return err.strerror
    return _code(str(err))


def _code(text: str) -> str:
    match = re.search(r"AWS Error ([A-Z_]+)", text)
    if match:
        return match.group(1)
    first = text.strip().splitlines()[0] if text.strip() else "error"
    return first[:200]
