"""Values reach `trainctl render` as they reach `helm template`: the same -f files read the same
way, merged the same way, and the same --set/--set-string/--set-json expressions parsed alike.

Helm's side is Helm's own code (the helm-python-sdk wheel embeds the Go SDK): its values reader
(`values_from_yaml`), its strvals parsers and its chart renderer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from helm_python.errors import HelmError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.errors import ConfigError
from app.k8s import strvals, values_yaml
from app.k8s.render import load_values
from app.k8s.values import read_set_file, user_values
from tests.contract.k8s_support import EXAMPLES, by_key, helm_template, normalized
from tests.hostile.support import trainctl

# Scalars where YAML 1.1 (PyYAML), YAML 1.2 and go-yaml v2 (Helm) disagree, and odd documents.
DOCUMENTS = [
    "a: 3e-4", "a: 1e3", "a: 1.5E+3", "a: -.5e-2", "a: 12.", "a: .5", "a: +.5", "a: .5_0",
    "a: y", "a: n", "a: yes", "a: No", "a: on", "a: OFF", "a: True", "a: tRue", "a: 'yes'",
    "a: 2001-12-14", "a: 2001-12-14T21:59:43.10-05:00", "a: 1:20", "a: 190:20:30",
    "a: 0x1F", "a: -0x10", "a: 0o17", "a: 0o8", "a: 017", "a: 08", "a: 00", "a: 0", "a: -0",
    "a: 0b101", "a: 0B11", "a: 1_000", "a: 1__0", "a: _1", "a: 1_0.5", "a: 0.1e1_0",
    "a: 1e400", "a: 1e-400", "a: 1e", "a: 0x", "a: -", "a: .", "a: 1.2.3", "a: '1e3'",
    "a: 99999999999999999999999", "a: .inf", "a: -.Inf", "a: .nan", "a: !!float .inf",
    "a: ~", "a: NULL", "a: =", "a: <<", "a: !!str yes", "a: !!int '3'", "a: !!int x",
    "a: !!float 1", "a: !!bool yes", "a: !!null x", "a: !!timestamp 2001-01-01",
    "a: !!binary aGVsbG8=", "a: !!binary /w==", "a: !!set {x}", "a: !foo x", "a: !foo [1, y]",
    "a: !!python/object:os.system x", "a: !!python/object/apply:os.system ['true']",
    "1: x", "true: x", "y: x", "1.5: x\n1e6: y\n100000: z\n0.1: w\n1e-5: v", "~: x",
    "? [1,2]\n: x", "? |\n  x\n: 1", "a: &x 1\nb: *x", "a: &x {b: 1}\nc:\n  <<: *x\n  d: 2",
    "a: 1\na: 2", "a: 1\n---\nb: 2", "---\na: 1\n", "", "- 1", "a: [1, y, 2001-01-01]",
    # UTF-16 surrogates escaped, as Python's json.dump and `jq -a` write an emoji: go-yaml
    # refuses them; trainctl read them and then wrote YAML it could not read back (a red-team
    # pass: an internal error). The character itself, and \U escapes, are read by both.
    '{"a": "\\ud83d\\ude00"}', 'a: "\\ud800"', '"\\udc00": x', 'a: "\\U0001F600"',
    "a: \U0001F600",
]  # fmt: skip
# YAML 1.1's line breaks, raw in every kind of scalar and between keys: both readers fold NEL
# (and \r, \r\n) in a flow scalar into a space but keep U+2028/U+2029 (PyYAML's dumper writes
# NEL raw in a quoted scalar: `'\x85  '` means " "), and the escapes \N \L \P mean the character.
LINE_BREAK_DOCUMENTS = [
    doc.replace("@", brk)
    for brk in ("\x85", "\u2028", "\u2029", "\r", "\r\n")
    for doc in (
        "a: x@y", "a: x@  y", "a: 'x@  y'", "a: 'x@@  y'", "a: ' @  '", 'a: "x@  y"',
        'a: "x\\@  y"', "a: |\n  x@  y\n", "a: >\n  x@\n  y\n", "a: |-\n  x@@  y@",
        "a: x@b: y", "a: [x@ y]", "a: {k: x@ y}", "a: x # c@b: y", "a:@  b: y", "@a: x",
    )
] + ['a: "x\\Ny"', 'a: "x\\Ly"', 'a: "x\\Py"', 'a: "\\N "', 'a: "x\\r\\ny"']  # fmt: skip


def _helm_reads(text: str) -> Any:
    try:
        return helm_python.values_from_yaml(text)
    except HelmError:
        return "refused"


def _trainctl_reads(text: str) -> Any:
    try:
        data = values_yaml.load(text)
    except yaml.YAMLError:
        return "refused"
    if data is not None and not isinstance(data, dict):
        return "refused"
    # Through JSON, as Helm's values are: ints beyond 2^53 compare as Go's float64 does.
    return json.loads(
        json.dumps(data or {}), parse_int=lambda s: float(s) if len(s) > 15 else int(s)
    )


@pytest.mark.parametrize("text", DOCUMENTS + LINE_BREAK_DOCUMENTS)
def test_values_files_are_read_as_helm_reads_them(text: str) -> None:
    helm = _helm_reads(text)
    if isinstance(helm, dict):
        helm = json.loads(json.dumps(helm), parse_int=lambda s: float(s) if len(s) > 15 else int(s))
    assert _trainctl_reads(text) == helm


SET_EXPRESSIONS = [
    "a=1,b.c=two,ports={80,443}", "a=0.5", "a=true,b=FALSE,c=null,d=007,e=0,f=-3,g=+4",
    "a\\.b=c", "a=x\\,y", "a[0].b=c", "a[1]=x", "a=", "a", "a.b", "a=b=c", "a={}",
    "a={x,{y}}", "name={a, b}", "a[0]=1,a[2]=3", "a.b=1,a=2", "a=2,a.b=1", "a[-1]=1",
    "a[99999999]=1", "x=1e3", "x=9223372036854775808", "a[0]", "a[0].b=", "a[]=1", "a[x]=1",
    "a[0][1]=2", "a[0][1]=2,a[0][0]=1", "a.b.c=1,a.b.d=2", ",", "a,b", "a=1,", ".a=1",
    "a..b=1", "a=\\", "a[0", "a={1,2", "a={1,2},b=3", "a= x ", "a=null,a.b=1", "a=1_0",
    "a=0x10", "a=\u0663", "a=-0", "a=b,c", "train.epochs=5", "a." + ".".join("b" * 31) + "=1",
]  # fmt: skip
JSON_EXPRESSIONS = [
    'a={"b":[1,2]}', "a=1.5,b=2", "a.b=null", "a=[1", 'a[0]={"x":1}', "a=", "a= ,b=1",
    "a=1 x", 'a="s",b=true', "a=NaN", 'a={"x":1}  ,b=[]', "a=01", 'a.b[1]="x"', "a=truex",
    # Go's encoding/json: every number a float64 (rounded past 2^53, refused past its range),
    # a number read on past `.` or `e`, lone surrogate escapes as U+FFFD.
    "a=9007199254740993", "a=-9223372036854775808", 'a={"b":123456789012345678901234567890}',
    "a=1e400", "a=[1e309]", "a=-1e400", "a=1e-400", "a=1.", "a=1e", "a=1.5e+", "a=0.0E[0]",
    "=0.0E[65536][0]", "a=1.5.5", "a=1E5x", 'a="\\ud800"', 'a={"\\udc00x":"\\ud83d"}',
    'a="\\ud83d\\ude00"', 'a="\\u0000"',
]  # fmt: skip
HELM_PARSERS = {
    "set": helm_python.parse_set_string,
    "string": helm_python.parse_set_string_values,
    "json": helm_python.parse_set_json,
    "file": helm_python.parse_set_file,
}


def _as_go(value: Any) -> Any:
    """Parsed values as Go holds them: a whole number beyond 2^53 is a float64 (Helm's SDK
    prints 9007199254740992, Python reads an int back; the float is the value)."""
    return json.loads(
        json.dumps(value), parse_int=lambda s: float(s) if len(s.lstrip("-")) > 15 else int(s)
    )


def _both(expression: str, mode: str) -> tuple[Any, Any]:
    try:
        helm = _as_go(HELM_PARSERS[mode](expression))
    except HelmError:
        helm = "refused"
    ours: Any = {}
    reader = (lambda path: read_set_file(path, expression)) if mode == "file" else None
    try:
        strvals.parse_into(expression, ours, mode, reader)
    except (strvals.StrvalsError, ConfigError):
        ours = "refused"
    return _as_go(ours), helm


@pytest.mark.parametrize(
    ("mode", "expression"),
    [("set", e) for e in SET_EXPRESSIONS]
    + [("string", e) for e in SET_EXPRESSIONS]
    + [("json", e) for e in JSON_EXPRESSIONS],
)
def test_set_expressions_parse_as_helm_parses_them(mode: str, expression: str) -> None:
    ours, helm = _both(expression, mode)
    assert ours == helm


# Random expressions from the characters strvals gives a meaning to.
EXPRESSION = st.text(alphabet="ab0-1.,=[]{}\\ ", max_size=14)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(expression=EXPRESSION, mode=st.sampled_from(["set", "string"]))
def test_random_set_expressions_parse_alike(expression: str, mode: str) -> None:
    ours, helm = _both(expression, mode)
    assert ours == helm, expression


# Pieces strvals and Go give a meaning to (escapes, indexes at and past Helm's cap, nested lists,
# empty keys, what --set types and what it leaves text, JSON's edges, non-ASCII keys), glued
# at random: every expression both accept must parse alike, and what one refuses the other must.
TOKENS = st.sampled_from(
    ["a", "b", "é", "ß", "\u0663", "\u00a0", "\u2028", "0", "1", "9", "-", "+", ".", ",", "=",
     "[", "]", "{", "}", "\\", "\\,", "\\=", "\\.", " ", "\t", "e", "E", "x", '"', ":",
     "true", "False", "NULL", "null", "~", "0x10", "1e3", "1.5", "007", "-0", "65536", "65537",
     "9223372036854775808", "9007199254740993", "[0]", "[1]", "[65536]", "[65537]", "[-1]",
     "{}", "[]", "NaN", "1e400", '"\\ud800"', "[[0]]", "a.b", "a[0].b"]
)  # fmt: skip
EXPRESSIONS = st.lists(TOKENS, min_size=1, max_size=8).map("".join)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(expression=EXPRESSIONS, mode=st.sampled_from(["set", "string", "json"]))
def test_random_token_expressions_parse_alike_in_every_mode(expression: str, mode: str) -> None:
    ours, helm = _both(expression, mode)
    assert ours == helm, (mode, expression)


# --set-file: each value a path, read as Helm reads it, from regular files.
FILES = {"f1": "hello\nworld\n", "f2": "42", "f3": "", "f,4": "comma", "é": "ünï\u2028"}
FILE_EXPRESSIONS = [
    "a=f1", "a={f1,f2}", "a.b[1]=f2,c=f3", "a=", "a", "a=missing", "a={}", "a={f1", "a= f1",
    "a[0]=f1,a[2]=f2", "a=f\\,4", "a=é,b.c=f2", "a=f1,a.b=f2", "a.b=f2,a=f1", "a={f1,missing}",
    "a=.", "a=/",
]  # fmt: skip


@pytest.fixture
def set_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # both parsers read paths from the working folder
    return tmp_path


@pytest.mark.parametrize("expression", FILE_EXPRESSIONS)
def test_set_file_expressions_read_as_helm_reads_them(set_files: Path, expression: str) -> None:
    ours, helm = _both(expression, "file")
    assert ours == helm


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(expression=st.lists(st.sampled_from(["a", "b", "f1", "f2", "é", ",", "=", ".", "[0]",
                                             "[1]", "{", "}", "\\", "missing"]),
                           min_size=1, max_size=7).map("".join))  # fmt: skip
def test_random_set_file_expressions_parse_alike(set_files: Path, expression: str) -> None:
    ours, helm = _both(expression, "file")
    assert ours == helm, expression


def _cli_objects(*args: str) -> dict:
    result = trainctl("render", "--release", "train", "-n", "ml", *args)
    assert result.code == 0, result.text
    return by_key([doc for doc in yaml.safe_load_all(result.out) if doc])


def test_render_with_files_and_sets_equals_helm_template(tmp_path: Path) -> None:
    base = EXAMPLES / "values-three-pools.yaml"
    override = tmp_path / "b.yaml"
    override.write_text(
        "train:\n  lr: 3e-4\n  epochs: 1e1\nnodePools:\n  l4:\n    enabled: off\n"
        "  t4:\n    replicas: 0x2\npoolDefaults:\n  tolerations: null\n"
        "runAnnotations:\n  x.io/day: 2024-05-01\n"
    )
    sets = {
        "set_values": ("train.epochs=5,nodePools.a100.replicas=3", "labels.team=ml"),
        "set_string": ("labels.cost=1234",),
        "set_json": ('rayJob.runtimeEnv={"env_vars":{"A":"1"}}',),  # no runtimeEnv in the files
    }
    args = ["-f", str(base), "-f", str(override)]
    for flag, key in (("--set", "set_values"), ("--set-string", "set_string")):
        args += [part for value in sets[key] for part in (flag, value)]
    args += ["--set-json", sets["set_json"][0]]
    ours = _cli_objects(*args)
    helm = by_key(helm_template([base, override], release="train", namespace="ml", **sets))
    assert sorted(ours) == sorted(helm)
    for key, obj in helm.items():
        assert normalized(obj) == normalized(ours[key]), key
    (config,) = [o for k, o in ours.items() if k[0] == "ConfigMap" and "a100" in k[1]]
    assert config["data"]["TRAIN_EPOCHS"] == "5" and config["data"]["TRAIN_LR"] == "0.0003"
    assert not any("-l4-" in name for _, name in ours)  # `enabled: off` is false, in both


def test_set_json_replaces_the_map_it_lands_on(tmp_path: Path) -> None:
    """pkg/strvals sets a --set-json value whole: a map there is replaced, not merged into."""
    path = tmp_path / "v.yaml"
    path.write_text("rayJob:\n  runtimeEnv: {env_vars: {A: '1', B: '2'}}\n")
    values = load_values([path], set_json=('rayJob.runtimeEnv={"env_vars":{"C":"3"}}',))
    assert values["rayJob"]["runtimeEnv"] == {"env_vars": {"C": "3"}}
    # --set merges into it (and reads 3 as a number, which env_vars refuses: user_values is
    # the merge alone, before the schema).
    values = user_values([path], set_values=("rayJob.runtimeEnv.env_vars.C=3",))
    assert values["rayJob"]["runtimeEnv"] == {"env_vars": {"A": "1", "B": "2", "C": 3}}
    values = load_values([path], set_string=("rayJob.runtimeEnv.env_vars.C=3",))
    assert values["rayJob"]["runtimeEnv"] == {"env_vars": {"A": "1", "B": "2", "C": "3"}}


def test_merge_follows_helm_maps_deep_lists_whole_null_deletes(tmp_path: Path) -> None:
    first, second = tmp_path / "1.yaml", tmp_path / "2.yaml"
    first.write_text(
        "nodePools:\n  cpu:\n    gpusPerWorker: 0\n    tolerations: [{key: a, operator: Exists}]\n"
        "    nodeSelector: {x.io/a: b}\n"
    )
    second.write_text(
        "nodePools:\n  cpu:\n    tolerations: [{key: b, operator: Exists}]\n"
        "    nodeSelector: {x.io/c: d}\npoolDefaults:\n  tolerations: null\n"
    )
    ours = _cli_objects("-f", str(first), "-f", str(second))
    helm = by_key(helm_template([first, second], release="train", namespace="ml"))
    assert sorted(ours) == sorted(helm)
    for key, obj in helm.items():
        assert normalized(obj) == normalized(ours[key]), key
    (job,) = [o for k, o in ours.items() if k[0] == "RayJob"]
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["tolerations"] == [{"key": "b", "operator": "Exists"}]
    assert worker["nodeSelector"] == {"x.io/a": "b", "x.io/c": "d"}


def test_no_enabled_pool_renders_nothing_in_either_engine(tmp_path: Path) -> None:
    for text in (
        "nodePools: {}\n",
        "nodePools:\n  a: {enabled: false}\nschedule: {enabled: true}\n",
    ):
        path = tmp_path / "v.yaml"
        path.write_text(text)
        assert helm_template([path]) == []
        result = trainctl("render", "-f", str(path))
        assert result.code == 0 and result.out == "", result.text
        assert "no node pool is enabled" in result.err


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-n", "0"]))
