"""`trainctl render`: the chart's objects from the same values, without Helm.

The jinja2 templates next to this module mirror the chart's Go templates one for one, and the
chart's helpers are mirrored by the macros in templates/_macros.j2; what needs more than a
template (merged pools, worker counts, names, the content hash) is computed here in Python,
and tests/contract/test_render_parity.py holds both engines to the same objects on several
values files. Shared objects (claim, auth Secret, ServiceAccount) appear in every
pool's list, so each pool's folder applies on its own with `kubectl apply -k`.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import secrets
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jinja2 import Environment, FileSystemLoader

from app.errors import ConfigError
from app.k8s import canonical, rules, train_values
from app.k8s.values import (
    chart_metadata,
    coalesce,
    default_values,
    enabled_pools,
    merged_train,
    user_values,
    validate,
)

TEMPLATES = Path(__file__).resolve().parent / "templates"
MANAGED_BY = "trainctl"
DNS_1123 = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def load_values(
    values_files: Sequence[Path] = (), notes: list[str] | None = None, **sets: Sequence[str]
) -> dict[str, Any]:
    """As `helm template -f ... --set ...`: the user's values over the chart's, schema-checked.

    `sets`: user_values' set_json, set_values, set_string and set_file (--set-json, --set,
    --set-string, --set-file). `notes`: WARNING lines for what the files say that Helm reads
    in a way that surprises (app/k8s/values_yaml.py), for the caller to print."""
    read: list[str] = []
    user = user_values(values_files, notes=read, **sets)
    values = coalesce(default_values(), user)
    try:
        validate(values)
    except ConfigError as err:  # a refusal may come of such a reading (`yes:` as "true")
        # Said after the problems as what may explain them, not as problems of their own.
        why = [note.replace("WARNING: ", "which may explain it: ", 1) for note in read]
        raise ConfigError([*err.problems, *why]) from None
    if notes is not None:
        notes.extend(read)
    return values


@cache  # one per process: jinja2 compiles each template once per Environment
def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["str"] = canonical.scalar
    env.filters["q"] = quote
    env.filters["tojson"] = canonical.go_json
    env.filters["fromjson"] = json.loads  # sprig's fromJson, for helpers that return a map
    env.filters["sha256"] = lambda text: hashlib.sha256(str(text).encode()).hexdigest()  # sprig
    # ASCII only: PyYAML folds U+2028 inside a quoted scalar into a space, and `indent` would
    # split lines there; escaped, every string parses back as it was given.
    env.filters["toyaml"] = lambda value: yaml.safe_dump(
        value, default_flow_style=False, sort_keys=True, allow_unicode=False
    ).rstrip("\n")
    return env


def quote(value: Any) -> str:
    """A YAML double-quoted scalar that parses back to exactly str(value), as Go's %q does.

    A JSON string is one, once characters YAML reads as line breaks (U+0085, U+2028, U+2029)
    or refuses (other non-printables) are escaped too: `indent` would split a line on them.
    """
    text = json.dumps(str(value), ensure_ascii=False)
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _base_context(values: dict[str, Any], release: str, namespace: str) -> dict[str, Any]:
    """What Helm hands its templates (.Values, .Release, .Chart), and nothing computed: the
    chart's helpers ("trainctl.image", "trainctl.storageRoot", ...) are mirrored by the macros
    of templates/_macros.j2, so a new value or helper needs no edit here."""
    return {
        "v": values,
        "release": release,
        "namespace": namespace,
        "managed_by": MANAGED_BY,  # .Release.Service
        "chart": chart_metadata(),
    }


# libyaml's parser where PyYAML has it (its wheels do), with the same safe constructors and
# resolvers: the rendered text is trainctl's own, and parsing it was most of a render's time.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse(text: str, template: str) -> list[dict[str, Any]]:
    try:
        return [doc for doc in yaml.load_all(text, Loader=_LOADER) if doc]
    except yaml.YAMLError as err:  # a template bug, not bad input: say where
        raise RuntimeError(f"{template} rendered invalid YAML: {err}\n{text}") from err


def _render(env: Environment, template: str, **context: Any) -> list[dict[str, Any]]:
    return _parse(env.get_template(template).render(**context), template)


def _check_inputs(values: dict[str, Any], release: str, namespace: str) -> None:
    problems = []
    if not re.fullmatch(DNS_1123[1:-1], release) or len(release) > 53:
        problems.append(f"release name {release!r} must be a DNS-1123 label of at most 53 chars")
    if not re.fullmatch(DNS_1123[1:-1], namespace) or len(namespace) > 63:
        problems.append(f"namespace {namespace!r} must be a DNS-1123 label")
    if problems:
        raise ConfigError(problems)
    validate(values)
    problems = rules.values_problems(values)
    if problems:
        raise ConfigError(problems)


def _pool_objects(
    env: Environment, base: dict[str, Any], pool: str, p: dict[str, Any]
) -> list[dict[str, Any]]:
    gpus = int(p["gpusPerWorker"])
    ctx = dict(base, pool=pool, p=p, train=merged_train(base["v"], p), gpus=gpus)
    ctx["workers"] = int(p["replicas"]) * gpus if gpus > 0 else int(p["replicas"])
    draft = dict(ctx, name="")
    job = _render(env, "rayjob.yaml.j2", c=draft)[0]
    config = _render(env, "configmap.yaml.j2", c=draft)[0]
    hashed = canonical.content_hash(job["spec"], config["data"], _labelled_scheduler(env, draft))
    name = f"{base['release']}-{pool}-{hashed}"
    problem = rules.name_problem(name, base["release"], pool)
    if problem:
        raise ConfigError(problem)
    ctx["name"] = name
    objects = _render(env, "configmap.yaml.j2", c=ctx)
    if base["v"]["networkPolicy"].get("enabled"):
        objects += _render(env, "networkpolicy.yaml.j2", c=ctx)
    objects += _render(env, "podgroup.yaml.j2", c=ctx)  # nothing but with scheduler-plugins
    objects += _render(env, "rayjob.yaml.j2", c=ctx)
    return objects


def _labelled_scheduler(env: Environment, c: dict[str, Any]) -> dict[str, str] | None:
    """Kueue's queue and priority class, which the run name's hash covers (the chart's
    "trainctl.runName" says why); None with any other scheduler."""
    scheduler = json.loads(env.get_template("_macros.j2").module.scheduler(c))
    if scheduler.get("name") != "kueue":
        return None
    return {
        "name": scheduler["name"],
        "queue": scheduler.get("queue") or "",
        "priorityClass": scheduler.get("priorityClass") or "",
    }


def _shared_objects(env: Environment, base: dict[str, Any]) -> list[dict[str, Any]]:
    values = base["v"]
    objects = []
    if values["storage"]["type"] == "pvc" and not values["storage"].get("existingClaim"):
        objects += _render(env, "shared.yaml.j2", c=base, kind="PersistentVolumeClaim")
    if values["rayAuth"].get("enabled") and not values["rayAuth"].get("existingSecret"):
        token = base64.b64encode(secrets.token_urlsafe(36).encode()).decode()
        objects += _render(env, "shared.yaml.j2", c=base, kind="Secret", token=token)
    metrics = values.get("metrics") or {}
    if metrics.get("enabled") and (metrics.get("podMonitor") or {}).get("enabled"):
        objects += _render(env, "shared.yaml.j2", c=base, kind="PodMonitor")
    if (values.get("serviceAccount") or {}).get("create"):
        objects += _render(env, "shared.yaml.j2", c=base, kind="ServiceAccount")
    return objects


def render_objects(
    values: dict[str, Any], *, release: str, namespace: str
) -> dict[str, list[dict]]:
    """Pool name -> every object that pool's RayJob needs, as parsed dicts.

    Each pool's TRAIN_* variables are held to the settings model first (app/k8s/train_values.py):
    a value `trainctl train` would refuse is a ConfigError here, naming the pool and the key.

    The created auth Secret carries a fresh random token on every call (Helm does the same
    offline); it is marked `trainctl.io/create-only`: create it if absent, never overwrite it.
    """
    _check_inputs(values, release, namespace)
    env = _env()
    base = _base_context(values, release, namespace)
    shared = _shared_objects(env, base)
    pools = enabled_pools(values)
    objects = {pool: _pool_objects(env, base, pool, p) for pool, p in pools.items()}
    problems = train_values.problems(
        {pool: _config_data(listed) for pool, listed in objects.items()}, values
    )
    if problems:
        raise ConfigError(problems)
    # Copies per pool: callers may change one pool's objects without touching another's.
    return {pool: copy.deepcopy(shared) + listed for pool, listed in objects.items()}


def _config_data(objects: list[dict[str, Any]]) -> dict[str, str]:
    """The pool's ConfigMap's variables: exactly what its pods read their settings from."""
    (config,) = [obj for obj in objects if obj["kind"] == "ConfigMap"]
    return config.get("data") or {}


def render_schedule_objects(
    values: dict[str, Any], *, release: str, namespace: str
) -> list[dict[str, Any]]:
    """The scheduled-retraining objects (CronJobs and their RBAC); empty unless enabled."""
    _check_inputs(values, release, namespace)
    schedule = values.get("schedule") or {}
    pools = enabled_pools(values)
    if not schedule.get("enabled") or not pools:  # no pool: nothing to run, as in the chart
        return []
    wanted = schedule.get("pools") or sorted(pools)
    base = _base_context(values, release, namespace)
    stored = {k: v for k, v in values.items() if k != "runTag"}
    return _render(
        _env(),
        "schedule.yaml.j2",
        c=base,
        sa=f"{release}-submit",
        values_json=canonical.go_json(stored),
        pools=[pool for pool in wanted if pool in pools],
    )
