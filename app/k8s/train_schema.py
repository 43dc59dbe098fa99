"""The `train:` section of the chart's values.schema.json, generated from TrainSettings.

Settings are declared once, in app/settings/ (TrainSettings). The chart's schema embeds the
JSON schema of the settings a user may set (`definitions.train`);
`python -m app.k8s.train_schema --write` regenerates it in the chart and in the packaged copy,
and a contract test fails when the committed schema and the settings model disagree.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from app.k8s import k8s_bounds, names
from app.settings import TrainSettings

# Set by the chart per pool (from the pool, the storage mount and the RayJob name), so a value
# in `train:` could only contradict them.
DERIVED = (
    "num_workers",
    "use_gpu",
    "accelerator_type",
    "run_name",
    "storage_path",
    "data_path",
    "storage_endpoint",
    "ray_address",
    # `trainctl tune`'s settings come from the chart's `tune:` section (its space is a file
    # the chart writes), not from `train:`.
    "tune_space",
    "tune_samples",
    "tune_concurrent",
    "tune_scheduler",
    "tune_grace_period",
    "tune_reduction_factor",
    # Files on the head, from the Secret `signing.secretName` names (a key in a values file
    # would sit in Git).
    "signing_key",
    "verify_key",
)

# Keys of pydantic's JSON schema that carry no constraint the chart needs to repeat.
_DROP = ("default", "title", "format")
# Helm reads every number of a values file as a float64, which holds integers exactly only up
# to 2^53: a larger seed would reach the pod rounded (and `trainctl render` would disagree).
# The chart stops there; TRAIN_* environment variables still take the setting's full range.
HELM_EXACT_MAX = 2**53 - 1
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def settable_fields() -> list[str]:
    return [name for name in TrainSettings.model_fields if name not in DERIVED]


def train_schema() -> dict[str, Any]:
    """A draft-07 object schema: one property per settable field, nothing else allowed."""
    source = TrainSettings.model_json_schema()["properties"]
    properties = {}
    for name in settable_fields():
        prop = {k: v for k, v in source[name].items() if k not in _DROP}
        if "anyOf" in prop:  # Optional[X]: an empty string already means "unset" in settings
            options = [o for o in prop.pop("anyOf") if o.get("type") != "null"]
            prop.update({k: v for k, v in options[0].items() if k not in _DROP})
        if prop.get("type") == "integer" and prop.get("maximum", 0) > HELM_EXACT_MAX:
            prop["maximum"] = HELM_EXACT_MAX
        properties[name] = dict(sorted(prop.items()))
    return {
        "type": "object",
        "description": "TRAIN_* settings by TrainSettings field name (see docs/settings.md).",
        "additionalProperties": False,
        "properties": properties,
    }


def tune_space_schema(train: dict[str, Any]) -> dict[str, Any]:
    """The chart's `tune.space`: the settings a trial may vary, each value held to its
    setting's schema in `train` (train_schema's), so that Helm, which cannot run the settings
    model, refuses what `trainctl tune` would refuse before pods are scheduled. What a schema
    cannot say (a range's low above its high) is a rule of both engines (app/k8s/rules.py)."""
    from app.settings.tune_space import KINDS, MAX_VALUES, RANGES, VARIABLE

    keys = {}
    for key in VARIABLE:
        setting = train["properties"][key]
        numeric = setting.get("type") in ("integer", "number")
        kinds = {}
        for kind in KINDS if numeric else ("choice", "grid"):
            if kind in RANGES:
                # Bounds only: an integer setting's range may be given in floats (its ends are
                # rounded inward), as in a TRAIN_TUNE_SPACE file.
                end = {k: v for k, v in setting.items() if k in _BOUNDS}
                end["type"] = "number"
                if kind == "loguniform":
                    end["exclusiveMinimum"] = max(0, end.get("exclusiveMinimum", 0))
                kinds[kind] = {"type": "array", "minItems": 2, "maxItems": 2, "items": end}
            else:
                kinds[kind] = {
                    "type": "array", "minItems": 1, "maxItems": MAX_VALUES,
                    "items": {"$ref": f"#/definitions/train/properties/{key}"},
                }  # fmt: skip
        keys[key] = {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "additionalProperties": False,
            "properties": kinds,
            "description": f"One distribution of {key}: {', '.join(kinds)}.",
        }
    return {
        "type": "object",
        "description": f"Setting -> one distribution; a trial may vary: {', '.join(VARIABLE)}.",
        "propertyNames": {"enum": list(VARIABLE)},
        "properties": keys,
    }


def bound_maps(schema: dict[str, Any]) -> dict[str, Any]:
    """Every user-given map key (and label value) held to Kubernetes' rules.

    The templates quote keys too, but a key Kubernetes would refuse should fail at render
    time, naming the key, not at `kubectl apply`.
    """
    schema["definitions"].update(names.schema_definitions())
    props = schema["properties"]
    for name, ref in (("labels", "labels"), ("runAnnotations", "annotations")):
        props[name] = {"description": props[name].get("description", ""), "$ref": _ref(ref)}
        if not props[name]["description"]:
            del props[name]["description"]
    _bound_labels(props)
    _bound_env(props)
    _bound_free_form(props)
    credential_names = schema["definitions"]["plainEnvName"]["allOf"][1]["not"]["pattern"]
    _bound_collector_env(props, credential_names)
    # IRSA or GKE Workload Identity annotations on the created ServiceAccount.
    props["serviceAccount"]["properties"]["annotations"] = {"$ref": _ref("annotations")}
    for kind in ("requests", "limits"):
        resources = schema["definitions"]["resources"]["properties"][kind]
        resources["propertyNames"] = {"$ref": _ref("resourceName")}
    return k8s_bounds.bound_names(schema)


def _bound_labels(props: dict[str, Any]) -> None:
    """Labels: the chart's own and a scheduler's are refused (the chart sets those)."""
    own = {"not": {"pattern": names.CHART_LABELS, "description": "a label the chart sets itself"}}
    scheduler = {
        "not": {
            "pattern": names.SCHEDULER_LABELS,
            "description": "a label a scheduler reads: set it with scheduler.name and "
            "scheduler.queue, which the chart checks",
        }
    }
    props["labels"]["allOf"] = [
        {"$ref": props["labels"].pop("$ref")},
        {"propertyNames": own},
        {"propertyNames": scheduler},
    ]
    props["head"]["properties"]["rayStartParams"] = {"$ref": _ref("rayStartParams")}
    # The PodMonitor's labels and the scraper's selectors are Kubernetes labels too: a key
    # the API server refuses (or one YAML cannot hold unquoted) fails at render.
    metrics = props["metrics"]["properties"]
    metrics["podMonitor"]["properties"]["labels"] = {"$ref": _ref("labels")}
    for selector in ("namespaceSelector", "podSelector"):
        metrics["scraper"]["properties"][selector]["properties"]["matchLabels"] = {
            "$ref": _ref("labels")
        }


def _bound_env(props: dict[str, Any]) -> None:
    """env: and the job's runtime_env env_vars, which reach the entrypoint and every worker as
    env: does, so they are held to env:'s rules: a TRAIN_* there would override the settings
    both engines checked, and a credential would sit in the RayJob's text (secretEnv: keeps it
    in a Secret)."""
    props["env"]["additionalProperties"] = {
        "type": "string",
        "pattern": "^[^\\x00]*$",
        "allOf": [
            {
                "not": {
                    "pattern": names.URI_PASSWORD,
                    "description": "a URI with a password in it (user:password@) would sit in "
                    "plain text in a ConfigMap or the RayJob: give the variable in secretEnv: "
                    "(a Secret)",
                }
            },
            {
                "not": {
                    "pattern": names.KNOWN_CREDENTIAL,
                    "description": "a credential by its form (a private key, a token with its "
                    "issuer's prefix, a JWT, a URL with a token or password in its query) would "
                    "sit in plain text in a ConfigMap or the RayJob: give the variable in "
                    "secretEnv: (a Secret)",
                }
            },
            {
                "not": {
                    "pattern": names.AUTH_HEADER,
                    "description": "an Authorization header's credentials would sit in plain "
                    "text in a ConfigMap or the RayJob: give the variable in secretEnv: "
                    "(a Secret)",
                }
            },
        ],
    }
    props["rayJob"]["properties"]["runtimeEnv"] = {
        "type": "object",
        "description": "Extra Ray runtime environment for the job; its env_vars follow env's "
        "rules (TRAIN_* settings go in train:, credentials in secretEnv:).",
        "properties": {"env_vars": {k: v for k, v in props["env"].items() if k != "description"}},
    }


def _bound_free_form(props: dict[str, Any]) -> None:
    """Free-form values the chart writes with toYaml: their text may not break the manifest."""
    job = props["rayJob"]["properties"]
    job["deletionStrategy"] = names.bound_free_form(job["deletionStrategy"])
    metrics = props["metrics"]["properties"]
    collector = job["historyServerOptions"]["properties"]["collectorOptions"]["properties"]
    collector["env"]["items"] = names.bound_free_form(collector["env"]["items"])
    collector["image"]["pattern"] = names.FREE_FORM_TEXT
    collector["image"]["description"] = (
        f"Written by toYaml: text holding {names.FREE_FORM_REFUSED} is refused."
    )
    dashboard = props["networkPolicy"]["properties"]["dashboardFrom"]
    dashboard["items"] = names.bound_free_form(dashboard["items"])
    for selector in ("namespaceSelector", "podSelector"):
        expressions = metrics["scraper"]["properties"][selector]["properties"]["matchExpressions"]
        expressions["items"] = names.bound_free_form(expressions["items"])


def _bound_collector_env(props: dict[str, Any], credential_names: str) -> None:
    """The history server collector's variables sit in the RayJob's text, passed through as
    is: a credential given there in plain text, by its name or by its form, is refused as in
    env: (a red-team pass), and goes in valueFrom, which reads it from a Secret."""
    secret = "give it with valueFrom: {secretKeyRef: {name: ..., key: ...}}, kept in a Secret"
    job = props["rayJob"]["properties"]
    collector = job["historyServerOptions"]["properties"]["collectorOptions"]["properties"]
    items = collector["env"]["items"]
    items["allOf"].append(
        {
            "not": {
                "required": ["name", "value"],
                "properties": {"name": {"pattern": credential_names}},
                "description": "a credential-like name (a token, password, secret or key) "
                f"with its value in plain text would sit in the RayJob: {secret}",
            }
        }
    )
    value = copy.deepcopy(props["env"]["additionalProperties"])
    for rule in value["allOf"]:
        said = rule["not"]["description"]
        rule["not"]["description"] = said.replace(
            "give the variable in secretEnv: (a Secret)", secret
        )
    items.setdefault("properties", {})["value"] = value


def _ref(name: str) -> str:
    return f"#/definitions/{name}"


def _write(schema_path: Path) -> None:
    schema = json.loads(schema_path.read_text())
    schema["definitions"]["train"] = train_schema()
    tune = schema["properties"]["tune"]
    tune["properties"]["space"] = tune_space_schema(schema["definitions"]["train"])
    # An enabled sweep with nothing to vary would train one trial over and over.
    tune["if"] = {"properties": {"enabled": {"const": True}}, "required": ["enabled"]}
    tune["then"] = {
        "properties": {
            "space": {
                "minProperties": 1,
                "description": "tune.enabled is true: name what the trials vary, e.g. "
                "lr: {loguniform: [1.0e-4, 1.0e-1]}",
            }
        }
    }
    bound_maps(schema)
    # ASCII: the annotation pattern's control characters stay visible as \u escapes.
    schema_path.write_text(json.dumps(schema, indent=2, ensure_ascii=True) + "\n")


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print(json.dumps(train_schema(), indent=2))
        return 0
    from app.k8s.values import CHART_DIR, PACKAGED_DIR

    for folder in (CHART_DIR, PACKAGED_DIR):
        _write(folder / "values.schema.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
