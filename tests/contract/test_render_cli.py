"""`trainctl render` as a user runs it, and the one-source rules behind it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import helm_python
import yaml

from app.k8s import values as chart_values
from app.k8s.render import load_values
from app.k8s.train_schema import DERIVED, train_schema
from app.settings import TrainSettings
from tests.contract.k8s_support import CHART, EXAMPLES, helm_template
from tests.hostile.support import trainctl

TRAINCTL = [sys.executable, "-m", "app"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TRAINCTL, *args], capture_output=True, text=True, check=False)


def test_render_writes_a_kustomization_per_pool(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _run("render", "--values", str(EXAMPLES / "values-cpu.yaml"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "kubectl apply -k" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["pool-a", "pool-b"]
    kustomization = yaml.safe_load((out / "pool-a" / "kustomization.yaml").read_text())
    assert "rayjob.yaml" in kustomization["resources"]
    job = yaml.safe_load((out / "pool-a" / "rayjob.yaml").read_text())
    assert job["metadata"]["namespace"] == "default"
    assert job["metadata"]["name"].startswith("trainctl-pool-a-")


def test_render_without_out_prints_one_stream_for_kubectl(tmp_path: Path) -> None:
    values = EXAMPLES / "values-cpu.yaml"
    override = tmp_path / "b.yaml"
    override.write_text("train: {epochs: 2}\n")
    proc = subprocess.run(
        [*TRAINCTL, "render", "-f", "-", "-f", str(override), "--set", "train.seed=9"],
        input=values.read_text(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    docs = [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
    assert proc.stdout.startswith("---\n# Source: trainctl/")
    kinds = [doc["kind"] for doc in docs]
    assert kinds.count("RayJob") == 2 and kinds.count("Secret") == 1  # shared objects once
    for config in (doc for doc in docs if doc["kind"] == "ConfigMap"):
        assert (config["data"]["TRAIN_EPOCHS"], config["data"]["TRAIN_SEED"]) == ("2", "9")


# Env values (a ConfigMap's data) meaning YAML 1.1's line breaks, U+0085 (NEL) above all:
# PyYAML writes it raw in a single-quoted scalar, where kubectl's go-yaml reads a space.
BREAKS = {"NEL": "a\x85b", "EDGE": "\x85 ", "LS": "a\u2028b", "PS": "\u2029", "CRLF": "a\r\nb"}
BREAKS["LONG"] = "x" * 120 + "\x85" + "y" * 120  # folded over lines by the dumper's width


def test_rendered_text_reads_back_as_helm_renders_it(tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    env = "".join(f"  {key}: {json.dumps(value)}\n" for key, value in BREAKS.items())
    path.write_text(f"nodePools:\n  cpu: {{gpusPerWorker: 0, tolerations: []}}\nenv:\n{env}")
    (helm,) = [o for o in helm_template([path], namespace="ml") if o["kind"] == "ConfigMap"]
    assert BREAKS.items() <= helm["data"].items()
    args = ("render", "--release", "demo", "-n", "ml", "-f", str(path))
    result = trainctl(*args)
    assert result.code == 0, result.text
    # Read back by Go's YAML reader (Helm's, as kubectl's), one document at a time.
    docs = [helm_python.values_from_yaml(d) for d in re.split(r"(?m)^---$", result.out)]
    (printed,) = [d for d in docs if d.get("kind") == "ConfigMap"]
    assert printed["data"] == helm["data"]
    assert trainctl(*args, "--out", str(tmp_path / "o")).code == 0
    written = (tmp_path / "o" / "cpu" / "configmap.yaml").read_text(encoding="utf-8")
    assert helm_python.values_from_yaml(written)["data"] == helm["data"]


def test_bad_values_exit_2_with_the_key_and_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  epochs: 0\n  lern_rate: 0.1\nnodePools:\n  a: {replicas: two}\n")
    proc = _run("render", "--values", str(bad), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "train.epochs" in proc.stderr and "lern_rate" in proc.stderr
    assert "nodePools.a.replicas" in proc.stderr
    assert "settable TRAIN_* keys" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_unreadable_or_non_mapping_values_exit_2(tmp_path: Path) -> None:
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("train: [\n")
    for path, words in ((listing, "must hold a mapping"), (broken, "not valid YAML")):
        proc = _run("render", "--values", str(path), "--out", str(tmp_path / "o"))
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr


def test_null_removes_a_default_like_helm(tmp_path: Path) -> None:
    path = tmp_path / "v.yaml"
    path.write_text("poolDefaults:\n  tolerations: null\n")
    assert "tolerations" not in load_values([path])["poolDefaults"]
    assert load_values()["poolDefaults"]["tolerations"]


def test_packaged_chart_files_equal_the_chart() -> None:
    for name in chart_values.SYNCED_FILES:
        packaged = (chart_values.PACKAGED_DIR / name).read_bytes()
        assert packaged == (CHART / name).read_bytes(), f"{name}: run `make manifests`"


def test_train_schema_is_generated_from_the_settings_model() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["definitions"]["train"] == train_schema()
    keys = set(schema["definitions"]["train"]["properties"])
    assert keys <= set(TrainSettings.model_fields)
    assert keys | set(DERIVED) == set(TrainSettings.model_fields)  # a new setting shows up here


def test_values_yaml_train_keys_are_settings() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    example = yaml.safe_load((EXAMPLES / "values-three-pools.yaml").read_text())
    for train in [
        values["train"],
        example["train"],
        *(p.get("train", {}) for p in example["nodePools"].values()),
    ]:
        assert set(train) <= set(TrainSettings.model_fields) - set(DERIVED)
