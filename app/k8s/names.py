"""Kubernetes' rules for names, label keys and values, annotation keys: one place, two uses.

The chart's values.schema.json bounds every user-given map key with these patterns (written by
`python -m app.k8s.train_schema --write`), so Helm and `trainctl render` refuse the same keys;
`trainctl logs` and `status` check names and namespaces with them before any API request.
Patterns avoid look-arounds: Helm evaluates them with Go's RE2.
"""

from __future__ import annotations

import re
from typing import Any

from app.dns import DNS_LABEL as _DNS_LABEL
from app.errors import ConfigError

# A DNS-1123 label: a namespace, a RayJob or pod name.
DNS_LABEL = rf"^{_DNS_LABEL}$"
# A label or annotation key: an optional DNS subdomain prefix and '/', then a name of at most
# 63 characters (alphanumerics at both ends, '-', '_' and '.' inside).
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
QUALIFIED_NAME = rf"^({_DNS_LABEL}(\.{_DNS_LABEL})*/)?{_NAME}$"
QUALIFIED_NAME_MAX = 253 + 1 + 63
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
LABEL_VALUE_MAX = 63
# Kubernetes allows 256 KiB for all annotations of an object together.
ANNOTATION_VALUE_MAX = 262_144
# Characters Helm's toYaml cannot write (DEL, the C1 controls, the non-characters U+FFFE and
# U+FFFF: it renders the whole annotations block empty, keep-policy included), or writes raw
# where a YAML 1.1 reader sees a line break (NEL: the value arrives changed). Literal
# characters, not escapes, so that Go's and Python's regex engines read the pattern alike.
YAML_SAFE_TEXT = "^[^\u007f-\u009f\ufffe\uffff]*$"
# `ray start` flag names; KubeRay pastes the values into the head's shell command line, so
# control characters and shell metacharacters are refused there.
RAY_START_KEY = r"^[a-z][a-z0-9-]{0,62}$"
RAY_START_VALUE = "^[^\\x00-\\x1f\\x7f;&|$`<>\\\\]*$"
RAY_START_VALUE_MAX = 1024


def schema_definitions() -> dict[str, Any]:
    """The `definitions` the chart's maps refer to (`$ref: #/definitions/<name>`)."""
    key = {
        "type": "string",
        "pattern": QUALIFIED_NAME,
        "maxLength": QUALIFIED_NAME_MAX,
        # The prefix is a DNS subdomain: 253 characters at most (RE2 has no lookahead).
        "not": {"pattern": "^[^/]{254,}/", "description": "a prefix over 253 characters"},
    }
    label_value = {"type": "string", "pattern": LABEL_VALUE, "maxLength": LABEL_VALUE_MAX}
    return {
        "labels": {
            "type": "object",
            "description": "Kubernetes labels: qualified-name keys ([prefix/]name, name at "
            "most 63 characters), values of at most 63 alphanumerics, '-', '_' or '.'.",
            "propertyNames": key,
            "additionalProperties": label_value,
        },
        "annotations": {
            "type": "object",
            "description": "Kubernetes annotations: qualified-name keys, string values.",
            "propertyNames": key,
            "additionalProperties": {
                "type": "string",
                "maxLength": ANNOTATION_VALUE_MAX,
                "pattern": YAML_SAFE_TEXT,
            },
        },
        "nodeSelector": {
            "type": "object",
            "description": "Node labels a pod needs: label keys and label values.",
            "propertyNames": key,
            "additionalProperties": label_value,
        },
        "rayStartParams": {
            "type": "object",
            "description": "Extra `ray start` flags for the head (without the leading --); "
            "KubeRay sets labels, resources, num-gpus and memory itself.",
            "propertyNames": {
                "pattern": RAY_START_KEY,
                "not": {"enum": ["labels", "resources", "num-gpus", "memory"]},
            },
            "additionalProperties": {
                "type": "string",
                "pattern": RAY_START_VALUE,
                "maxLength": RAY_START_VALUE_MAX,
            },
        },
        "resourceName": key,
        # A label value of its own (a YuniKorn queue such as root.team_a travels as one).
        "labelValue": label_value,
        "tolerations": _tolerations(label_value),
    }


def _tolerations(label_value: dict[str, Any]) -> dict[str, Any]:
    """Kubernetes' toleration rules: a label key (empty with Exists: every taint) and a label
    value. Helm's toYaml renders a list holding text it cannot write (see YAML_SAFE_TEXT) as
    nothing at all, so a free string here would drop every toleration of the pool unsaid."""
    optional_key = {
        "type": "string",
        "pattern": f"^({QUALIFIED_NAME[1:-1]})?$",
        "maxLength": QUALIFIED_NAME_MAX,
    }
    return {
        "type": "array",
        "items": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "key": optional_key,
                "operator": {"enum": ["Exists", "Equal"]},
                "value": label_value,
                "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                "tolerationSeconds": {"type": "integer"},
            },
        },
    }


def check_dns_label(value: str, what: str) -> None:
    """Refuse a name that is not a DNS-1123 label before it reaches a request URL."""
    if not re.fullmatch(DNS_LABEL[1:-1], value):
        raise ConfigError(
            f"{what} {value!r} is not a valid Kubernetes name: at most 63 lowercase letters, "
            "digits or '-', starting and ending with a letter or digit"
        )
