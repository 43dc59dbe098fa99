"""What a storage URI, an S3 endpoint and the cloud clients' own variables may be.

Checked before any client is built, so that a value that cannot work is refused with the
variable's name and what is allowed (exit 2), never reported later as an unreachable store,
or created as a local folder with a URI-like name.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from urllib.parse import urlsplit

from app.redact import redact_uri

SCHEMES = ("s3", "gs")
# S3 bucket rules (3-63 lowercase letters, digits, dots, hyphens); GCS allows underscores and
# longer dotted names, so this is the loose union and the store has the last word.
BUCKET_PATTERN = re.compile(r"\A[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]\Z")
URI_PATTERN = re.compile(r"\A([A-Za-z][A-Za-z0-9+.-]*)://")
MAX_KEY_FILE = 1 << 20  # a service-account key is a few KiB
# A local path that a URI was meant to be: `s3:/b`, `s3:\\b`, `gs:b`, `s3//b`. pathlib would make
# a folder of that name in the working directory and the run would "succeed" there.
LOOKALIKE_PATTERN = re.compile(r"\A(?:[A-Za-z][A-Za-z0-9+.-]*:|(?:s3|gs|gcs)[/\\]{2})", re.I)
HOST_PATTERN = re.compile(r"\A(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])\Z")
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


class StoreSettingError(ValueError):
    """A variable the cloud client reads (not a TRAIN_ setting) that cannot work; the message
    names it."""


def uri_scheme(value: object) -> str | None:
    """The scheme of a `scheme://...` string (lowercased), None for a plain path."""
    match = URI_PATTERN.match(str(value))
    return match.group(1).lower() if match else None


def check_path(value: str) -> str:
    """`value` if it is a URI or a plain path, ValueError for what only looks like one: spaces
    around it, control characters in it, or a URI with a slash missing or turned around."""
    if value != value.strip():
        raise ValueError("leading or trailing spaces; remove them")
    if not value:
        raise ValueError("is empty; give a folder, s3://bucket/prefix or gs://bucket/prefix")
    bad = next((c for c in value if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        # A newline or escape sequence inside (a pasted terminal colour, a YAML block's line):
        # a URI parser drops tabs and newlines silently, a folder keeps them in its name, and
        # printed, the location starts a line of its own. (A name that is not UTF-8 is not one
        # of these: its readers name it so.)
        raise ValueError(
            f"holds the control character {bad!r}: a location is one line of printable characters"
        )
    # Full-width or other compatibility forms (`ｓ3://b`) read as a URI to a person.
    folded = unicodedata.normalize("NFKC", value)
    if folded != value and (uri_scheme(folded) or LOOKALIKE_PATTERN.match(folded)):
        raise ValueError(
            f"looks like the URI {folded!r} but is written with look-alike characters; "
            "type it in plain ASCII"
        )
    if not uri_scheme(value) and LOOKALIKE_PATTERN.match(value):
        raise ValueError(
            "looks like a URI but is not one; write s3://bucket/prefix or gs://bucket/prefix, "
            "or start a local folder whose name has a ':' with ./"
        )
    return value


def check_uri(value: str) -> str:
    """`value` normalised (no trailing slash), or ValueError naming what is allowed."""
    check_path(value)
    scheme = uri_scheme(value)
    if scheme not in SCHEMES:
        raise ValueError(
            f"unknown scheme {scheme}://; use a local path, s3://bucket/prefix or "
            "gs://bucket/prefix"
        )
    # Checked on the text: a secret key may hold '/', which urlsplit takes for the path.
    if "@" in value.partition("?")[0]:
        raise ValueError("credentials do not belong in the path; use the cloud's own variables")
    try:
        parts = urlsplit(value)
    except ValueError:  # "Invalid IPv6 URL": no bucket name either
        raise ValueError("no bucket name; use s3://bucket/prefix or gs://bucket/prefix") from None
    if parts.query or parts.fragment:
        raise ValueError("a storage path takes no ?query or #fragment")
    if not BUCKET_PATTERN.match(parts.netloc):
        raise ValueError(
            f"{parts.netloc!r} is not a bucket name (3-63 lowercase letters, digits, '.', '-')"
        )
    key = "/".join(part for part in parts.path.split("/") if part)
    if any(part in (".", "..") for part in key.split("/")):
        raise ValueError("'.' and '..' are not allowed in an object key")
    if "\\" in key or any(ord(char) < 32 or ord(char) == 127 for char in key):
        raise ValueError("an object key takes no backslashes or control characters")
    return f"{scheme}://{parts.netloc}" + (f"/{key}" if key else "")


def check_endpoint(value: str) -> str:
    """`value` as scheme://host[:port], or ValueError naming what is allowed."""
    allowed = "must be an http:// or https:// URL such as http://minio:9000"
    if value != value.strip() or any(char.isspace() for char in value):
        raise ValueError(f"{allowed}, without spaces")
    if "@" in value:  # before urlsplit: a secret with '/' would read as a path
        raise ValueError("credentials do not belong in the endpoint; use AWS_* variables")
    try:
        parts = urlsplit(value)
    except ValueError:  # "Invalid IPv6 URL"
        raise ValueError(allowed) from None
    if parts.scheme.lower() not in ("http", "https") or not value.lower().startswith(
        parts.scheme.lower() + "://"
    ):
        raise ValueError(allowed)
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise ValueError(f"{allowed}; only scheme, host and port, no path or ?query")
    # By hand: urlsplit's .port accepts 0 and raises bare errors for the rest.
    split_at = parts.netloc.rfind("]") + 1 if parts.netloc.startswith("[") else 0
    colon = parts.netloc.find(":", split_at)
    host = parts.netloc if colon < 0 else parts.netloc[:colon]
    port = None if colon < 0 else parts.netloc[colon + 1 :]
    if not HOST_PATTERN.match(host):
        raise ValueError(f"{allowed}; {host!r} is not a host name or IP address")
    if port is not None and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"{allowed}; the port must be a number from 1 to 65535, not {port!r}")
    return f"{parts.scheme.lower()}://{parts.netloc}"


def s3_endpoint(endpoint: str | None) -> tuple[str | None, str]:
    """The S3 endpoint in use and the variable it comes from: TRAIN_STORAGE_ENDPOINT (checked
    with the settings), else the AWS SDK's own variables, checked here."""
    if endpoint:
        return endpoint, "TRAIN_STORAGE_ENDPOINT"
    for name in ENDPOINT_VARIABLES:
        value = os.environ.get(name, "")
        if value.strip():
            try:
                return check_endpoint(value), name
            except ValueError as err:
                raise StoreSettingError(f"{name}={redact_uri(value)!r}: {err}") from None
    return None, ""


def check_google_credentials() -> None:
    """GOOGLE_APPLICATION_CREDENTIALS, when set, must name a readable JSON key file: the GCS
    client otherwise fails with a page of C++ status text, or only after its retries."""
    name = "GOOGLE_APPLICATION_CREDENTIALS"
    value = os.environ.get(name)
    if value is None:
        return
    allowed = "must be the path of a service-account or workload-identity JSON key file"
    try:
        with open(value, "rb") as handle:
            text = handle.read(MAX_KEY_FILE + 1)
    except OSError as err:
        raise StoreSettingError(f"{name}={value!r}: {allowed} ({err.strerror})") from None
    try:
        key = json.loads(text) if len(text) <= MAX_KEY_FILE else None
    except ValueError:
        key = None
    if not isinstance(key, dict) or not isinstance(key.get("type"), str):
        raise StoreSettingError(f"{name}={value!r}: {allowed}; this file is not one")
