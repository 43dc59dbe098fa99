"""Hostile keys and values in a values file: both engines quote them or refuse them.

A key of `labels`, `nodeSelector`, `head.rayStartParams`, `runAnnotations`, `env` or a resource
map used to be pasted into the YAML unquoted: "x: y\\nhostNetwork: true" became a pod field.
Now the schema refuses keys Kubernetes would refuse (exit 2, naming the key), the templates
quote every key anyway, and values that are allowed come back byte for byte.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.k8s import render
from app.k8s.render import render_objects
from app.k8s.values import coalesce, default_values
from tests.contract.k8s_support import CHART, HelmFailed, helm_render
from tests.hostile.support import assert_refused, files_under, trainctl

# The injection family: YAML structure, document separators, anchors and aliases, comments,
# template syntax, flow collections, tags, directives, line breaks of every kind.
HOSTILE = [
    "evil\nhostNetwork: true",
    "a: b",
    "x:\n  hostPID: true",
    "{{ .Values }}",
    '{{- fail "x" }}',
    "&anchor key",
    "*alias",
    "---\nkind: Pod",
    "...",
    "# comment",
    "key # trailing comment",
    "key\n",
    "- item",
    "[a, b]",
    "{a: 1}",
    "!!python/object:os.system",
    "%YAML 1.2",
    "| block",
    "> folded",
    "? complex",
    '"quoted"',
    "'single'",
    "tab\there",
    "line\rbreak",
    "nul\x00byte",
    "sep\u2028line",
    "ключ",
    "@at",
    "`tick`",
    "trailing space ",
    "",
    "k" * 64,
    "UPPER.example.com/key",
]
IDS = [f"k{i}" for i in range(len(HOSTILE))]


def _pool_values(**extra: Any) -> dict[str, Any]:
    values = {
        "nodePools": {"cpu": {"gpusPerWorker": 0, "tolerations": []}},
        "networkPolicy": {"enabled": False},
    }
    return coalesce(values, extra)


# Where a user-given map reaches a template: (path in the values, builder).
MAPS = {
    "labels": lambda k, v: {"labels": {k: v}},
    "runAnnotations": lambda k, v: {"runAnnotations": {k: v}},
    "head.nodeSelector": lambda k, v: {"head": {"nodeSelector": {k: v}}},
    "pool.nodeSelector": lambda k, v: {"nodePools": {"cpu": {"nodeSelector": {k: v}}}},
    "head.rayStartParams": lambda k, v: {"head": {"rayStartParams": {k: v}}},
    "env": lambda k, v: {"env": {k: v}},
}


def _values_file(tmp_path: Path, values: dict[str, Any]) -> Path:
    path = tmp_path / "values.yaml"
    # JSON: the dict's exact meaning in any YAML reader (PyYAML would leave 1e3 unquoted).
    path.write_text(json.dumps(values), encoding="utf-8")
    return path


# A variable's name has no length limit (a label key's name part has 63): `k` x 64 is a
# plain variable, as lowercase names are (http_proxy).
VALID_FOR = {("env", "k" * 64)}
CASES = [
    pytest.param(field, key, id=f"{key_id}-{field}")
    for key, key_id in zip(HOSTILE, IDS, strict=True)
    for field in sorted(MAPS)
    if (field, key) not in VALID_FOR
]


@pytest.mark.parametrize(("field", "key"), CASES)
def test_hostile_key_is_refused_naming_it_and_nothing_is_written(
    tmp_path: Path, field: str, key: str
) -> None:
    values = _pool_values(**MAPS[field](key, "v"))
    out = tmp_path / "out"
    result = trainctl("render", "--values", str(_values_file(tmp_path, values)), "--out", str(out))
    assert_refused(result, 2, repr(key)[1:-1][:40])
    assert files_under(out) == []


# A sample of the family through Helm's own engine and schema: it refuses the same keys.
HELM_SAMPLE = [0, 1, 3, 5, 7, 9, 11, 15, 31]


@pytest.mark.parametrize("field", ["labels", "head.nodeSelector", "head.rayStartParams"])
@pytest.mark.parametrize("index", HELM_SAMPLE, ids=[IDS[i] for i in HELM_SAMPLE])
def test_helm_refuses_the_same_hostile_keys(field: str, index: int) -> None:
    with pytest.raises(HelmFailed):
        helm_render(_pool_values(**MAPS[field](HOSTILE[index], "v")))


def _labels_of_every_object(objects: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [o["metadata"]["labels"] for o in objects]


def _pod_specs(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (job,) = [o for o in objects if o["kind"] == "RayJob"]
    cluster = job["spec"]["rayClusterSpec"]
    return [cluster["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in cluster["workerGroupSpecs"]
    ]


POD_ESCAPES = ("hostNetwork", "hostPID", "hostIPC", "privileged")


def _assert_exact(objects: list[dict[str, Any]], key: str, value: str) -> None:
    """The hostile key is a label key on every object, verbatim, and nothing else appeared."""
    for labels in _labels_of_every_object(objects):
        assert labels[key] == value
        assert [k for k in labels if k not in _BASE_LABEL_KEYS] == [key]
    for spec in _pod_specs(objects):
        assert spec["nodeSelector"] == {key: value}
        assert not set(POD_ESCAPES) & set(spec)
    assert all(o["kind"] != "Pod" for o in objects)


_BASE_LABEL_KEYS = {
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/component",
    "helm.sh/chart",
    "trainctl.io/pool",
    "trainctl.io/run",
    "trainctl.io/run-tag",
}


@pytest.mark.parametrize("key", [k for k in HOSTILE if k and "\x00" not in k], ids=str)
def test_jinja_templates_quote_keys_even_past_the_schema(
    monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    # The schema is the first wall; the templates must hold on their own.
    monkeypatch.setattr(render, "validate", lambda values: None)
    values = coalesce(default_values(), _pool_values(labels={key: "v"}))
    values["head"]["nodeSelector"] = {key: "v"}
    values["nodePools"]["cpu"]["nodeSelector"] = {key: "v"}
    objects = render_objects(values, release="demo", namespace="ml")["cpu"]
    _assert_exact(objects, key, "v")


@pytest.fixture(scope="module")
def schemaless_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chart = tmp_path_factory.mktemp("chart") / "trainctl"
    shutil.copytree(CHART, chart)
    (chart / "values.schema.json").unlink()
    return chart


@pytest.mark.parametrize("index", [0, 1, 2, 3, 5, 6, 7, 9, 11, 14, 20], ids=str)
def test_helm_templates_quote_keys_even_past_the_schema(schemaless_chart: Path, index: int) -> None:
    import helm_python

    key = HOSTILE[index]
    values = _pool_values(labels={key: "v"})
    values["head"] = {"nodeSelector": {key: "v"}}
    values["nodePools"]["cpu"]["nodeSelector"] = {key: "v"}
    with helm_python.Chart.load(schemaless_chart) as chart:
        out = chart.render(values, name="demo", namespace="ml")
    objects = [
        doc
        for name, text in sorted(out.items())
        if name.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    pool = [o for o in objects if o["kind"] in ("RayJob", "ConfigMap")]
    _assert_exact(pool, key, "v")


# Values that are allowed (annotation values, env values, rayStartParams values without shell
# metacharacters) come back exactly, from both engines.
SAFE_VALUE_FIELDS = ["runAnnotations", "env"]


@pytest.mark.parametrize("field", SAFE_VALUE_FIELDS)
@pytest.mark.parametrize("value", [v for v in HOSTILE if "\x00" not in v], ids=str)
def test_hostile_values_come_back_verbatim_from_both_engines(field: str, value: str) -> None:
    key = "team.example.com/note" if field == "runAnnotations" else "NOTE"
    values = _pool_values(**MAPS[field](key, value))
    python = render_objects(
        coalesce(default_values(), copy.deepcopy(values)), release="demo", namespace="ml"
    )
    helm = helm_render(values)
    for objects in (python["cpu"], helm):
        (cm,) = [o for o in objects if o["kind"] == "ConfigMap"]
        if field == "env":
            assert cm["data"][key] == value
        else:
            assert cm["metadata"]["annotations"][key] == value
        assert not any(o["kind"] == "Pod" for o in objects)


@pytest.mark.parametrize(
    "value", ["1 #", "1'", '1"', "1 --temp-dir=/x", "1 (", "*", "$(id)", "1;id"]
)
def test_a_ray_start_value_holding_shell_syntax_is_refused_by_both_engines(
    tmp_path: Path, value: str
) -> None:
    """KubeRay pastes rayStartParams' values unquoted into the head's `ray start ... --block`
    shell command: `1 #` commented out the flags it appends (--block among them), a space
    added a flag, a quote failed the shell, all rendered with exit 0 (a red-team pass)."""
    values = _pool_values(head={"rayStartParams": {"num-cpus": value}})
    result = trainctl("render", "--values", str(_values_file(tmp_path, values)))
    assert_refused(result, 2, "head.rayStartParams.num-cpus", "letters, digits and _ . , : / = @")
    with pytest.raises(HelmFailed):
        helm_render(values)


@pytest.mark.parametrize("value", ["0", "0.0.0.0", "/tmp/ray", "127.0.0.1:6379", "true", "a=b,c"])
def test_ray_start_values_a_flag_takes_render_in_both_engines(value: str) -> None:
    values = _pool_values(head={"rayStartParams": {"temp-dir": value}})
    (job,) = [o for o in helm_render(values) if o["kind"] == "RayJob"]
    assert job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["temp-dir"] == value
    python = render_objects(
        coalesce(default_values(), copy.deepcopy(values)), release="demo", namespace="ml"
    )
    (job,) = [o for o in python["cpu"] if o["kind"] == "RayJob"]
    assert job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["temp-dir"] == value
