"""`signing.secretName`: the export-signing key pair reaches the head, where the driver signs
exports and checks what it loads, as files of their own; no worker mounts the private key.
Both engines (the parity test holds them equal over generated values too)."""

from __future__ import annotations

import json
from pathlib import Path

from app.k8s.render import load_values, render_objects
from tests.contract.k8s_support import config_data, containers, helm_render, of_kind, rayjob_groups

VALUES = {"nodePools": {"l4": {"gpusPerWorker": 1}}, "signing": {"secretName": "team-signing"}}
KEYS = {
    "TRAIN_SIGNING_KEY": "/etc/trainctl/signing/signing.pem",
    "TRAIN_VERIFY_KEY": "/etc/trainctl/signing/verify.pem",
}


def _both(values: dict, tmp_path: Path) -> dict[str, list[dict]]:
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    rendered = render_objects(load_values([path]), release="train", namespace="ml")
    return {
        "helm": helm_render(values, release="train", namespace="ml"),
        "trainctl render": [obj for objects in rendered.values() for obj in objects],
    }


def test_the_head_mounts_each_key_as_a_file_and_the_configmap_names_them(tmp_path: Path) -> None:
    for engine, objects in _both(VALUES, tmp_path).items():
        (job,) = of_kind(objects, "RayJob")
        data = config_data(objects, job["metadata"]["name"])
        assert {k: data.get(k) for k in KEYS} == KEYS, engine
        head, groups = rayjob_groups(job)
        volume = next(v for v in head["template"]["spec"]["volumes"] if v["name"] == "signing-keys")
        assert volume["secret"]["secretName"] == "team-signing", engine
        assert volume["secret"]["defaultMode"] == 0o440, engine
        (container,) = containers(head["template"])
        mounts = [m for m in container["volumeMounts"] if m["name"] == "signing-keys"]
        assert sorted((m["mountPath"], m["subPath"], m["readOnly"]) for m in mounts) == sorted(
            (path, Path(path).name, True) for path in KEYS.values()
        ), engine
        for group in groups:  # the GPU workers train; they never sign
            assert all(v["name"] != "signing-keys" for v in group["template"]["spec"]["volumes"])


def test_without_a_secret_nothing_is_mounted_or_set(tmp_path: Path) -> None:
    for engine, objects in _both({"nodePools": {"l4": {"gpusPerWorker": 1}}}, tmp_path).items():
        (job,) = of_kind(objects, "RayJob")
        assert not set(KEYS) & set(config_data(objects, job["metadata"]["name"])), engine
        assert "signing-keys" not in json.dumps(job), engine
