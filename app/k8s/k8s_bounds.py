"""Names and strings of the chart's values bounded to what the Kubernetes API server accepts.

Both engines check values against the one values.schema.json (Helm natively, `trainctl render`
through jsonschema), so a Secret name, queue name, cron schedule or time zone the API server
would refuse fails at render, naming the value, instead of at `kubectl apply` or, worse, in a
controller's status hours later. Patterns avoid `\\s`, `\\S` and `\\d`: Go's RE2 reads them as
ASCII, Python's `re` as Unicode, and the engines must refuse the same strings.
"""

from __future__ import annotations

import zoneinfo
from typing import Any

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
# Image references as the container runtime parses them (distribution/reference): a tag is up
# to 128 of [A-Za-z0-9_.-], not starting with . or -; a repository an optional registry host
# (and port), then lowercase path components joined by . _ __ or dashes. Anything else renders
# and fails as InvalidImageName only after the pool's GPU nodes were scheduled.
IMAGE_TAG = r"^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$"
_PATH_COMPONENT = r"[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*"
IMAGE_REPOSITORY = (
    rf"^([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{{1,5}})?/)?"
    rf"{_PATH_COMPONENT}(/{_PATH_COMPONENT})*$"
)
# DNS-1123 subdomain: dot-separated DNS labels, at most 253 characters (Secret names).
SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"
SUBDOMAIN_MAX = 253
# A Secret's data keys (k8s.io/apimachinery IsConfigMapKey).
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
# Queue and priority-class names travel as label values (kueue.x-k8s.io/..., volcano.sh/...):
# 63 at most.
LABEL_VALUE_MAX = 63
# Annotations: Kubernetes refuses an object whose annotations (keys + values, in bytes) exceed
# 256 KiB. 32 annotations of keys <= 317 characters and values <= 1,900 characters (4 bytes each
# at worst in UTF-8) stay under it: 32 * (317 + 4 * 1900) = 253,344 bytes <= 262,144, with room
# for the one annotation the chart adds itself.
ANNOTATIONS_MAX = 32
ANNOTATION_VALUE_MAX = 1900


def _numbers(low: int, high: int) -> str:
    """Decimal numbers low..high (a single digit may carry a leading 0), by tens."""
    parts = []
    for tens in range(low // 10, high // 10 + 1):
        first = low % 10 if tens == low // 10 else 0
        last = high % 10 if tens == high // 10 else 9
        digits = str(first) if first == last else f"[{first}-{last}]"
        parts.append(("0?" if tens == 0 else str(tens)) + digits)
    return "|".join(parts)


def _cron_field(low: int, high: int, names: tuple[str, ...] = ()) -> str:
    """One field: `*`, `?`, values, and ranges that run upwards (robfig/cron refuses
    `30-10`), each with an optional /step, comma-separated."""
    ranges = [f"{'0?' if a < 10 else ''}{a}-({_numbers(a, high)})" for a in range(low, high + 1)]
    ranges += [f"{a}-({'|'.join(names[i:])})" for i, a in enumerate(names)]
    words = f"|(?i:{'|'.join(ranges[high - low + 1 :] + list(names))})" if names else ""
    item = rf"(\*|\?|{'|'.join(ranges[: high - low + 1])}|{_numbers(low, high)}{words})"
    item = rf"{item}(/[1-9][0-9]*)?"
    return rf"{item}(,{item})*"


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# robfig/cron's standard parser (what the CronJob controller uses), field by field: its
# day of the week is 0-6 (Sunday is 0; 7 is refused there, unlike some crons).
_MINUTE = _cron_field(0, 59)
_HOUR = _cron_field(0, 23)
_DAY = _cron_field(1, 31)
_MONTH = _cron_field(1, 12, _MONTHS)
_WEEKDAY = _cron_field(0, 6, _DAYS)
# Fields are separated by ASCII spaces or tabs only: a no-break space is refused.
CRON = (
    r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|"
    rf"{_MINUTE}[ \t]+{_HOUR}[ \t]+{_DAY}[ \t]+{_MONTH}[ \t]+{_WEEKDAY})$"
)


def definitions() -> dict[str, Any]:
    optional_subdomain = {
        "type": "string",
        "pattern": rf"^({SUBDOMAIN})?$",
        "maxLength": SUBDOMAIN_MAX,
    }
    return {
        "k8sName": {
            "type": "string",
            "pattern": rf"^{SUBDOMAIN}$",
            "maxLength": SUBDOMAIN_MAX,
            "description": "a Kubernetes object name: lowercase letters, digits, '-' and '.', "
            f"beginning and ending with a letter or digit, up to {SUBDOMAIN_MAX} characters",
        },
        # Each said in words: a refusal quotes the description, not the raw pattern.
        "optionalK8sName": dict(
            optional_subdomain,
            description="empty, or a Kubernetes object name: lowercase letters, digits, '-' and "
            f"'.', beginning and ending with a letter or digit, up to {SUBDOMAIN_MAX} characters",
        ),
        "labelValueName": dict(
            optional_subdomain,
            maxLength=LABEL_VALUE_MAX,
            description="empty, or a name of lowercase letters, digits, '-' and '.', beginning "
            f"and ending with a letter or digit, up to {LABEL_VALUE_MAX} characters",
        ),
        "secretKey": {
            "type": "string",
            "pattern": SECRET_KEY,
            "maxLength": SUBDOMAIN_MAX,
            # IsConfigMapKey refuses '.', '..' and any key that starts with '..'.
            "not": {"pattern": r"^\.\.|^\.$", "description": "'.', '..' or a leading '..'"},
            "description": "a Secret's key: letters, digits, '-', '_' and '.', up to "
            f"{SUBDOMAIN_MAX} characters",
        },
        "cron": {
            "type": "string",
            "pattern": CRON,
            "description": "five fields (minute 0-59, hour 0-23, day 1-31, month 1-12 or "
            "jan-dec, weekday 0-6 or sun-sat) of *, values, upward ranges and /steps, separated "
            "by spaces, or @hourly, @daily (@midnight), @weekly, @monthly, @yearly (@annually)",
        },
        # The zones of the IANA database, as of the machine that generated the schema.
        "timeZone": {
            "enum": ["", *sorted(zoneinfo.available_timezones())],
            "description": "an IANA time zone such as Europe/Berlin, or empty for the controller's",
        },
    }


def bound_names(schema: dict[str, Any]) -> dict[str, Any]:
    """Point each name-like value of the chart's schema at its Kubernetes bound."""
    defs = schema["definitions"]
    defs.update(definitions())
    annotations = defs["annotations"]
    annotations["maxProperties"] = ANNOTATIONS_MAX
    annotations["additionalProperties"]["maxLength"] = ANNOTATION_VALUE_MAX
    annotations["description"] = (
        f"Kubernetes annotations: qualified-name keys, string values; at most {ANNOTATIONS_MAX} "
        f"of at most {ANNOTATION_VALUE_MAX} characters, so the total stays under 256 KiB."
    )
    props = schema["properties"]
    secret_env = props["secretEnv"]["items"]["properties"]
    secret_env["key"] = {"$ref": "#/definitions/secretKey"}
    _keep_description(props["rayAuth"]["properties"], "existingSecret", "optionalK8sName")
    _keep_description(props["storage"]["properties"], "credentialsSecret", "optionalK8sName")
    # Kueue, Volcano and KAI queues are objects named as DNS subdomains (the schema's
    # conditions hold scheduler.queue to labelValueName for them); YuniKorn's are label values.
    _keep_description(props["scheduler"]["properties"], "queue", "labelValue")
    _keep_description(props["scheduler"]["properties"], "priorityClass", "labelValueName")
    _keep_description(props["schedule"]["properties"], "cron", "cron")
    _keep_description(props["schedule"]["properties"], "timeZone", "timeZone")
    image = props["image"]["properties"]
    image["repository"].update(pattern=IMAGE_REPOSITORY, maxLength=255)
    image["repository"]["description"] = (
        "An image name as the container runtime parses it: [registry[:port]/]path, the path in "
        "lowercase; the tag goes in image.tag, a digest in image.digest."
    )
    image["tag"]["pattern"] = IMAGE_TAG
    image["tag"]["description"] = (
        "An image tag: up to 128 letters, digits, '_', '.' or '-', not starting with '.' or "
        "'-'; empty means the chart's appVersion; a digest (@sha256:...) goes in image.digest."
    )
    # Secret names, or Kubernetes' own form ({name: regcred}), which most charts take.
    props["imagePullSecrets"]["items"] = {
        "anyOf": [
            {"$ref": "#/definitions/k8sName"},
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {"name": {"$ref": "#/definitions/k8sName"}},
            },
        ],
        "description": "A Secret's name (lowercase letters, digits, '-' and '.', at most 253), "
        "given as regcred or as {name: regcred}.",
    }
    account = props["serviceAccount"]
    account["not"] = {
        "required": ["create", "name"],
        "properties": {"create": {"const": True}, "name": {"const": "default"}},
        "description": "serviceAccount.create with name default would take over the "
        "namespace's default ServiceAccount (its annotations then apply to every pod there, "
        "and a prune deletes it): give another name, or create: false to use it as it is",
    }
    return schema


def _keep_description(props: dict[str, Any], name: str, ref: str) -> None:
    description = props.get(name, {}).get("description")
    props[name] = {"$ref": f"#/definitions/{ref}"}
    if description:
        props[name] = {"description": description, **props[name]}
