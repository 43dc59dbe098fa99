"""Fuzzing the two parsers every user feeds: values files and ./.env, for a bounded time.

Whatever the text, the outcome is either a clean refusal (ConfigError, exit 2) or objects that
hold exactly what was given: never another exception, never a key or field that was not there.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import helm_python
import pytest
import yaml
from helm_python.errors import HelmError
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from app.envfile import check_env_file
from app.errors import ConfigError
from app.k8s.render import load_values, render_objects

FUZZ = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same examples every run: a failure here is reproducible
    # derandomize=True already implies no example database (Hypothesis >= 6.100 sets it to
    # None); said here too, so a .hypothesis/ folder left by another run can never replay a
    # failure into this one nor be written into the checkout.
    database=None,
)
# Text rich in what YAML and templates treat specially, YAML 1.1's line breaks included
# (\r, \x85 NEL, \u2028 LS, \u2029 PS).
SPECIAL = st.sampled_from(
    [*list(":-#&*!|>'\"%@`{}[],?\n\r\t ./\\"), "---", "{{", "}}", "\x85", "\u2028", "\u2029"]
)
HOSTILE_TEXT = st.lists(st.one_of(SPECIAL, st.text(max_size=4)), max_size=8).map("".join)
# Hostile labels are nearly always refused (Kubernetes names), which would leave the note
# rendered in too few examples: half the label maps are valid ones.
LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9_.]{0,10}[a-z0-9])?", fullmatch=True)
LABELS = st.one_of(
    st.dictionaries(LABEL, LABEL, max_size=3),
    st.dictionaries(HOSTILE_TEXT, HOSTILE_TEXT, max_size=3),
)


def _helm_reads(text: str) -> dict | None:
    """What `helm template -f` takes from this text: Helm's own values reader (its Go SDK)."""
    try:
        return helm_python.values_from_yaml(text)
    except HelmError:
        return None


@FUZZ
@given(labels=LABELS, note=HOSTILE_TEXT)
# YAML 1.1's line breaks, alone, doubled, between text and at either end.
@example(labels={}, note="\x85")
@example(labels={}, note="a\x85\x85b")
@example(labels={}, note=" \x85")
@example(labels={}, note="\x85 ")
@example(labels={}, note="\u2028\u2029")
@example(labels={}, note="a\u2029\u2029b")
@example(labels={}, note="\r\n")
@example(labels={"a": "\x85"}, note="\x85\n")
def test_values_file_fuzz_refuses_or_renders_exactly(
    tmp_path: Path, labels: dict[str, str], note: str
) -> None:
    user = {
        "nodePools": {"cpu": {"gpusPerWorker": 0, "tolerations": [], "nodeSelector": labels}},
        "labels": labels,
        "runAnnotations": {"example.com/note": note},
    }
    path = tmp_path / "values.yaml"
    text = yaml.safe_dump(user, allow_unicode=True)
    path.write_text(text, encoding="utf-8")
    # The oracle is what the file means, as Helm reads it, not `user`: PyYAML's dumper writes
    # U+0085 (NEL) raw inside a quoted scalar, where YAML 1.1 (go-yaml v2, and PyYAML's own
    # loader) reads a line break and folds it: note="\x85" is written as `'<NEL>  '`, which
    # means " ". That is the only character whose meaning the dumper changes (\r is escaped,
    # U+2028/U+2029 survive folding), which the assertion below holds it to.
    meant = _helm_reads(text)
    assert meant == user or "\x85" in text, (user, meant)
    try:
        values = load_values([path])
        objects = render_objects(values, release="demo", namespace="ml")["cpu"]
    except ConfigError:
        event("refused")  # --hypothesis-show-statistics: how many rendered
        return
    event("rendered")
    assert meant is not None, f"Helm refuses this file, trainctl renders it: {text!r}"
    labels, note = meant["labels"], meant["runAnnotations"]["example.com/note"]
    assert meant["nodePools"]["cpu"]["nodeSelector"] == labels
    for obj in objects:
        assert labels.items() <= obj["metadata"]["labels"].items()
    (job,) = [o for o in objects if o["kind"] == "RayJob"]
    assert job["metadata"]["annotations"]["example.com/note"] == note
    workers = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert [w["template"]["spec"].get("nodeSelector", {}) for w in workers] == [labels]
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(workers[0]["template"]["spec"])


@FUZZ
@given(raw=st.binary(max_size=200))
def test_values_file_fuzz_bytes_never_escape_as_a_traceback(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "values.yaml"
    path.write_bytes(raw)
    with contextlib.suppress(ConfigError):
        load_values([path])


KNOWN = {"TRAIN_EPOCHS", "TRAIN_MODEL", "TRAIN_SEED"}
DOTENV_LINE = st.one_of(
    st.builds(
        lambda k, v: f"{k}={v}", st.sampled_from([*sorted(KNOWN), "TRAIN_X", "OTHER"]), HOSTILE_TEXT
    ),
    HOSTILE_TEXT,
)


@FUZZ
@given(lines=st.lists(DOTENV_LINE, max_size=6))
def test_dotenv_fuzz_only_ever_lists_problems(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / ".env"
    path.write_text("\n".join(lines), encoding="utf-8")
    problems = check_env_file(path, KNOWN)
    assert all(isinstance(p, str) and p.startswith(f"{path}:") for p in problems)


@FUZZ
@given(raw=st.binary(max_size=120))
def test_dotenv_fuzz_bytes_settings_load_or_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw: bytes
) -> None:
    from app.settings.env import load_settings

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_bytes(raw)
    try:
        settings = load_settings()
    except ConfigError as err:
        assert err.problems and all(isinstance(p, str) for p in err.problems)
        return
    assert "\n" not in settings.run_name
    assert not any(k.startswith("TRAIN_") for k in os.environ)  # .env never leaks into env
