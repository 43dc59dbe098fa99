"""What `trainctl status` and `trainctl logs` were pointed at: a run folder or a RayJob.

The rule, one for both commands and said in their help: an argument is a path (a run folder,
or for `status` a folder of run folders) when it contains `/`, has a scheme (`s3://`,
`gs://`), or names something that exists here (`.`, `runs`); otherwise it is a RayJob name,
which must be a DNS-1123 label. A RayJob name never contains `/`, so `./name` always means
the folder.
"""

from __future__ import annotations

import os
import re

from app.dns import DNS_LABEL
from app.errors import ConfigError
from app.redact import redact

# How many run folders `trainctl status` reads from a listing, by default and at most.
DEFAULT_LIMIT = 50
MAX_LIMIT = 10_000
RULE = (
    "a path when it contains '/' or '://' or names something that exists here "
    "(e.g. runs/NAME, ./NAME, s3://bucket/runs/NAME), else a RayJob name"
)


def names_path(text: str) -> bool:
    """Whether `text` is a path (run folder, storage folder, URI) rather than a RayJob name."""
    if "/" in text or "://" in text:
        return True
    try:
        return os.path.lexists(text)
    except (OSError, ValueError):  # a NUL byte or a name too long: not a path that exists
        return False


def rayjob_name(text: str, command: str) -> str:
    """`text` as a RayJob name, or ConfigError saying it is neither that nor a path."""
    if re.fullmatch(DNS_LABEL, text):
        return text
    raise ConfigError(
        f"RayJob name {redact(text)!r} is not a valid Kubernetes name: at most 63 lowercase "
        "letters, digits or '-', starting and ending with a letter or digit; nor is it a file "
        f"or folder here: `trainctl {command}` takes {RULE}"
    )
