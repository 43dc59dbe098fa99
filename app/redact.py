"""One rule for hiding credentials, used wherever a URI or a line of text is printed or stored.

Credentials reach trainctl inside URIs (`s3://KEY:SECRET@bucket`, `https://user:pw@mlflow`) and
in query strings (`?token=...`, presigned `X-Amz-Signature=...`). `urllib.parse.urlsplit` is no
help for the first: an AWS secret key contains `/`, which ends the authority, so the `@` that
ends the credentials lands in the "path" and nothing looks like a password. The rule here
reads the authority by hand instead and masks everything up to the last `@` of the URI when
the part before its first `/` holds a `:` or an `@`.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
# Credentials known by their form, whatever names them: a PEM private key, a token with its
# issuer's prefix (GitHub, Hugging Face, AWS access key IDs, OpenAI-style sk-, Slack, GitLab),
# a JWT. The chart's schema refuses the same forms (app/k8s/names.py KNOWN_CREDENTIAL, built
# from these in RE2's syntax); here they are masked in any text shown.
PRIVATE_KEY = r"-----BEGIN [A-Z ]*PRIVATE KEY-----"
TOKEN_FORMS = (
    r"gh[pousr]_[A-Za-z0-9]{30,}",
    r"github_pat_[A-Za-z0-9_]{30,}",
    r"hf_[A-Za-z0-9]{30,}",
    r"AKIA[0-9A-Z]{16}",
    r"sk-[A-Za-z0-9_-]{20,}",
    r"xox[abposr]-[A-Za-z0-9-]{10,}",
    r"glpat-[A-Za-z0-9_-]{20,}",
)
JWT = r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\."
# The whole key, to its END line (or to the end of the text, where it was cut); a token or a
# JWT with its signature.
_PRIVATE_KEY_BLOCK = re.compile(PRIVATE_KEY + r"(?:.*?-----END [A-Z ]*PRIVATE KEY-----|.*)", re.S)
_TOKEN = re.compile(rf"(?<![A-Za-z0-9_])(?:{'|'.join(TOKEN_FORMS)}|{JWT}[A-Za-z0-9_-]*)")
# A URI inside free text: scheme://, then anything up to whitespace, a quote or angle bracket.
# Look-alikes (`s3:/KEY:SECRET@b`, `s3:\\b`) are refused as paths, and echoed in the refusal:
# one or more slashes or backslashes after the scheme count too.
# Name-like runs are bounded ({0,64}: no real scheme or key name is longer) so that a long
# run without the keyword costs linear time, not quadratic (each start position would rescan
# it); a longer run still matches from its last 65 characters.
_URI_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,64}:[/\\]+[^\s'\"<>`]+")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[/\\]+")
# Query parameters whose value is a secret (case-insensitive, as names vary by service).
_SECRET_PARAM = re.compile(
    r"(?i)([?&;](?:[a-z0-9_.-]{0,64}(?:token|secret|password|passwd|pwd|signature|credential|"
    r"apikey|api_key|access_key|sig|auth)[a-z0-9_.-]{0,64})=)[^&#;\s]*"
)


# Outside URIs: a value assigned to a credential-named key (`AWS_SECRET_ACCESS_KEY=...`, JSON's
# `"password": "..."`), where the name ends in the credential word (`max_tokens=5` stays), and
# HTTP authorization schemes (`Bearer ...`, `Basic ...`). GitHub-style `token ...` counts only as
# the value of an `Authorization:` header: the bare word is ordinary text ("token embeddings").
_SECRET_ASSIGNMENT = re.compile(
    r"(?i)([a-z0-9_.-]{0,64}(?:secret|password|passwd|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"token|credentials?)\"?\s*[=:]\s*\"?)([^\s\"',;}]+)"
)
_AUTH_SCHEME = re.compile(
    r"(?i)(\b(?:bearer|basic)|\bauthorization\"?\s*[:=]\s*\"?token)(\s+)[A-Za-z0-9._~+/=-]{8,}"
)


def redact_uri(uri: str) -> str:
    """`uri` with its user information and secret query values replaced by ***."""
    found = _SCHEME.match(uri)
    if not found:
        return uri
    scheme, rest = found.group(0), uri[found.end() :]
    first = re.split(r"[/\\?#]", rest, maxsplit=1)[0]
    at = rest.rfind("@")
    # With no @ in the first segment, a ':' there is a port, unless an @ follows the segment:
    # then the secret held a '/', and everything up to that @ is credentials.
    if at >= 0 and ("@" in first or (":" in first and at > len(first))):
        rest = f"{MASK}{rest[at:]}"
    return _SECRET_PARAM.sub(rf"\1{MASK}", f"{scheme}{rest}")


def redact_text(text: str) -> str:
    """Free text (a log line, an error message) with every URI, credential-named assignment
    and authorization header value in it redacted, and every credential known by its form."""
    if "-----BEGIN" in text:
        text = _PRIVATE_KEY_BLOCK.sub(MASK, text)
    text = _TOKEN.sub(MASK, text)
    if ":" not in text and "=" not in text:
        return text
    text = _URI_IN_TEXT.sub(lambda match: redact_uri(match.group(0)), text)
    text = _SECRET_ASSIGNMENT.sub(rf"\1{MASK}", text)
    return _AUTH_SCHEME.sub(rf"\1\2{MASK}", text)


def redact(value: Any) -> Any:
    """Strings redacted as text; lists, tuples and dicts walked; anything else as it is."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: redact(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(item) for item in value)
    return value
