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
from app.redact import JWT, PRIVATE_KEY, TOKEN_FORMS

# A DNS-1123 label: a namespace, a RayJob or pod name.
DNS_LABEL = rf"^{_DNS_LABEL}$"
# A label or annotation key: an optional DNS subdomain prefix and '/', then a name of at most
# 63 characters (alphanumerics at both ends, '-', '_' and '.' inside).
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
QUALIFIED_NAME = rf"^({_DNS_LABEL}(\.{_DNS_LABEL})*/)?{_NAME}$"
QUALIFIED_NAME_MAX = 253 + 1 + 63
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
LABEL_VALUE_MAX = 63
QUALIFIED_NAME_SAID = (
    "a qualified name, [prefix/]name: the name 1-63 letters, digits, '-', '_' or '.', starting "
    "and ending with a letter or digit; the prefix, where given, a DNS subdomain (lowercase "
    "labels joined by dots), as in example.com/team"
)
LABEL_VALUE_SAID = (
    "a label value: empty, or at most 63 letters, digits, '-', '_' or '.', starting and ending "
    "with a letter or digit"
)
# Kubernetes allows 256 KiB for all annotations of an object together.
ANNOTATION_VALUE_MAX = 262_144
# Characters Go's YAML writer (sigs.k8s.io/yaml: Helm's toYaml, and `kubectl get -o yaml` or
# `kubectl edit` on the applied object) cannot write (DEL, the C1 controls, the non-characters
# U+FFFE and U+FFFF: toYaml renders the whole value empty) or writes raw where a YAML 1.1
# reader sees a line break (NEL: the value arrives changed). The chart quotes annotation values
# itself, but they stay refused there: invisible control characters are a mistake, and the
# object would not survive those tools. Literal characters, not escapes, so that Go's and
# Python's regex engines read the pattern alike.
YAML_SAFE_TEXT = "^[^\u007f-\u009f\ufffe\uffff]*$"
# Text of a free-form value (rayJob.deletionStrategy, networkPolicy.dashboardFrom, the metrics
# scraper's matchExpressions, the history collector's env and image) that the chart writes with
# `toYaml | nindent`: YAML_SAFE_TEXT's characters, and U+2028 and U+2029 too. Go's writer puts
# those raw inside a block scalar (any string with a newline) as the line break itself, and
# `nindent` indents only after "\n", so the next line loses its indentation: the manifest no
# longer parses, or parses to another value. Helm would also render a dashboardFrom entry it
# cannot write as `from:` with nothing, which a NetworkPolicy reads as every source.
FREE_FORM_TEXT = "^[^\u007f-\u009f\u2028\u2029\ufffe\uffff]*$"
FREE_FORM_REFUSED = (
    "DEL, the C1 controls (U+0080-U+009F, NEL included), U+2028, U+2029, U+FFFE and U+FFFF"
)
# A URI holding a password (scheme://user:password@host) anywhere in a value, by RFC 3986's
# userinfo (no '/', '?', '#' or '@' in it: `https://host:8080/users/@me` is a path); RE2 and
# Python read it alike (no \s). Such a value in env: would sit in a ConfigMap, readable by
# whoever reads the namespace's ConfigMaps. Linear in Python's engine too (RE2 always is): the
# scheme is bounded ({0,64}, as app/redact.py's; a longer run matches from its last 65
# characters) and the userinfo read to its first ':', so no start position rescans the value
# (`[A-Za-z0-9+.-]*` made a 128 KB env value take 48 s to render, 1 MiB hours).
URI_PASSWORD = r"[A-Za-z][A-Za-z0-9+.-]{0,64}://[^/?#@ :]*:[^/?#@ ]*@"
# A value that is a credential by its form, whatever its name: a PEM private key, a token with
# its issuer's prefix (GitHub, Hugging Face, AWS access key IDs, OpenAI-style sk-, Slack,
# GitLab), a JWT, or a URL whose query carries a token, password, secret, key or signature.
# No \b or \s: RE2 (Helm's) reads them as ASCII only, Python as Unicode.
_EDGE = "(^|[^A-Za-z0-9_])"
KNOWN_CREDENTIAL = (
    f"{PRIVATE_KEY}|{_EDGE}({'|'.join(TOKEN_FORMS)})|{JWT}"
    r"|[?&]([Aa]ccess_)?([Tt]oken|[Pp]ass(wor)?d|[Pp]wd|[Ss]ecret|[Aa]pi_?[Kk]ey|[Ss]ig)=[^&# ]"
)
# An HTTP Authorization value (`Bearer <token>`, `Basic <base64>`, in any case): a scheme and
# one credential-like word of 8 or more characters, nothing else (`basic mode` is no header).
AUTH_HEADER = (
    r"^[ \t]*([Bb][Ee][Aa][Rr][Ee][Rr]|[Bb][Aa][Ss][Ii][Cc])[ \t]+[-A-Za-z0-9._~+/=]{8,}[ \t]*$"
)
# Labels the chart sets itself: one given in `labels:` would replace it on some objects and
# not others (a RayJob's run label apart from its pods').
CHART_LABELS = (
    r"^(trainctl\.io/|helm\.sh/chart$"
    r"|app\.kubernetes\.io/(name|instance|version|part-of|managed-by|component)$)"
)
# Labels a scheduler integration reads (Kueue's queue, Volcano's, YuniKorn's, KAI's, KubeRay's
# scheduler and gang labels, a coscheduling pod group): given in `labels:` one would bypass the
# chart's checks of `scheduler:` (Kueue with an autoscaled data pool), and beside the chart's
# own it is a key twice in one mapping in Helm's output.
SCHEDULER_LABELS = (
    r"^(kueue\.x-k8s\.io|ray\.io|volcano\.sh|yunikorn\.apache\.org|kai\.scheduler"
    r"|scheduling\.x-k8s\.io)/"
)
# `ray start` flag names; KubeRay pastes the values unquoted into the head's shell command
# line (`ray start --head --num-cpus=1 # ... --block`), so a value holds only what a flag's
# value needs (numbers, addresses, paths, words): a space, quote, '#', '(' or glob there
# split the command, commented out the flags KubeRay appends after it, or failed the shell.
RAY_START_KEY = r"^[a-z][a-z0-9-]{0,62}$"
RAY_START_VALUE = r"^[A-Za-z0-9_.,:/=@%+-]*$"
RAY_START_VALUE_RULE = (
    "a `ray start` flag's value: letters, digits and _ . , : / = @ % + - only (KubeRay pastes "
    "it unquoted into the head's shell command, so spaces, quotes, '#' and other shell syntax "
    "would change the command)"
)
RAY_START_VALUE_MAX = 1024


def schema_definitions() -> dict[str, Any]:
    """The `definitions` the chart's maps refer to (`$ref: #/definitions/<name>`)."""
    key = {
        "type": "string",
        "pattern": QUALIFIED_NAME,
        "maxLength": QUALIFIED_NAME_MAX,
        # Said in a refusal instead of the pattern (app/k8s/values.py _refused_by_pattern).
        "description": QUALIFIED_NAME_SAID,
        # The prefix is a DNS subdomain: 253 characters at most (RE2 has no lookahead).
        "not": {"pattern": "^[^/]{254,}/", "description": "a prefix over 253 characters"},
    }
    label_value = {
        "type": "string",
        "pattern": LABEL_VALUE,
        "maxLength": LABEL_VALUE_MAX,
        "description": LABEL_VALUE_SAID,
    }
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
                "description": RAY_START_VALUE_RULE,
                "pattern": RAY_START_VALUE,
                "maxLength": RAY_START_VALUE_MAX,
            },
        },
        "resourceName": key,
        "freeForm": free_form(),
        # A label value of its own (a YuniKorn queue such as root.team_a travels as one).
        "labelValue": label_value,
        "tolerations": _tolerations(label_value),
        "nodeAffinity": _node_affinity(key, label_value),
    }


FREE_FORM_REF = "#/definitions/freeForm"


def free_form() -> dict[str, Any]:
    """Any YAML value whose text, keys and strings at every depth, is FREE_FORM_TEXT.

    Keywords of one type are ignored by values of another (draft 7), so one schema walks maps,
    lists and strings alike, and an error names the exact key it is about."""
    text = {"pattern": FREE_FORM_TEXT}
    return {
        "description": f"Passed through as YAML; no text in it may hold {FREE_FORM_REFUSED}.",
        **text,
        "propertyNames": text,
        "additionalProperties": {"$ref": FREE_FORM_REF},
        "items": {"$ref": FREE_FORM_REF},
    }


def bound_free_form(node: dict[str, Any]) -> dict[str, Any]:
    """`node` (an object or a list item schema) held to free_form() as well."""
    out = {k: v for k, v in node.items() if k != "allOf"}
    out["allOf"] = [{"$ref": FREE_FORM_REF}]
    return out


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
                # int64 in Kubernetes; Helm holds numbers as float64, exact up to 2^53.
                "tolerationSeconds": {"type": "integer", "maximum": 2**53 - 1},
            },
            "allOf": [{"not": rule} for rule in _REFUSED_TOLERATIONS],
        },
    }


def _node_affinity(key: dict[str, Any], label_value: dict[str, Any]) -> dict[str, Any]:
    """A pod's nodeAffinity, as Kubernetes validates it: what nodeSelector cannot say (a spot or
    an on-demand node, one of several instance types, a preferred zone). Held to the API
    server's rules here, since a pod it refuses is one KubeRay never makes, and the run waits."""
    requirement = {
        "type": "object",
        "additionalProperties": False,
        "required": ["key", "operator"],
        "properties": {
            "key": key,
            "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]},
            "values": {"type": "array", "maxItems": 100, "items": label_value},
        },
        "allOf": [{"not": rule} for rule in _REFUSED_REQUIREMENTS],
    }
    term = {
        "type": "object",
        "additionalProperties": False,
        "required": ["matchExpressions"],
        "properties": {
            "matchExpressions": {"type": "array", "minItems": 1, "maxItems": 20,
                                 "items": requirement},
        },
    }  # fmt: skip
    return {
        "type": "object",
        "additionalProperties": False,
        "description": "Kubernetes' nodeAffinity for the pool's Ray pods: required terms (any "
        "one holds) and preferred terms with a weight of 1 to 100.",
        "properties": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "type": "object",
                "additionalProperties": False,
                "required": ["nodeSelectorTerms"],
                "properties": {
                    "nodeSelectorTerms": {"type": "array", "minItems": 1, "maxItems": 20,
                                          "items": term},
                },
            },
            "preferredDuringSchedulingIgnoredDuringExecution": {
                "type": "array",
                "maxItems": 20,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["weight", "preference"],
                    "properties": {
                        "weight": {"type": "integer", "minimum": 1, "maximum": 100},
                        "preference": term,
                    },
                },
            },
        },
    }  # fmt: skip


_REFUSED_REQUIREMENTS: list[dict[str, Any]] = [
    {
        "properties": {"operator": {"enum": ["In", "NotIn"]}},
        "anyOf": [{"not": {"required": ["values"]}}, {"properties": {"values": {"maxItems": 0}}}],
        "description": "operator In and NotIn need values (Kubernetes refuses an empty list): "
        "list the label values to match",
    },
    {
        "required": ["values"],
        "properties": {"operator": {"enum": ["Exists", "DoesNotExist"]}, "values": {"minItems": 1}},
        "description": "operator Exists and DoesNotExist take no values (Kubernetes refuses "
        "them): remove values",
    },
    {
        "properties": {"operator": {"enum": ["Gt", "Lt"]}},
        "anyOf": [
            {"not": {"required": ["values"]}},
            {"properties": {"values": {"not": {"minItems": 1, "maxItems": 1}}}},
            {"properties": {"values": {"items": {"not": {"pattern": "^-?[0-9]{1,18}$"}}}}},
        ],
        "description": "operator Gt and Lt take exactly one value, a whole number (Kubernetes "
        "refuses others)",
    },
]


# The pod validation rules the API server applies to the pods KubeRay creates, after the
# RayJob itself was accepted: a run given one of these waits for pods that are never made.
_EXISTS = {"required": ["operator"], "properties": {"operator": {"const": "Exists"}}}
_REFUSED_TOLERATIONS: list[dict[str, Any]] = [
    {
        "required": ["operator", "value"],
        "properties": {"operator": {"const": "Exists"}, "value": {"minLength": 1}},
        "description": "a toleration with operator Exists takes no value (Kubernetes refuses "
        "one): remove value, or use operator Equal",
    },
    {
        "required": ["tolerationSeconds"],
        "not": {"required": ["effect"], "properties": {"effect": {"const": "NoExecute"}}},
        "description": "tolerationSeconds is for effect NoExecute only (Kubernetes refuses it "
        "with another effect or none): set effect: NoExecute, or remove tolerationSeconds",
    },
    {
        "anyOf": [{"not": {"required": ["key"]}}, {"properties": {"key": {"const": ""}}}],
        "not": _EXISTS,
        "description": "a toleration without a key matches every taint and needs operator: "
        "Exists (Kubernetes refuses Equal, the default, there)",
    },
]


def check_dns_label(value: str, what: str) -> None:
    """Refuse a name that is not a DNS-1123 label before it reaches a request URL."""
    if not re.fullmatch(DNS_LABEL[1:-1], value):
        raise ConfigError(
            f"{what} {value!r} is not a valid Kubernetes name: at most 63 lowercase letters, "
            "digits or '-', starting and ending with a letter or digit"
        )
