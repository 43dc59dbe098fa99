"""The settings are checked without torch, Ray or the run's code, so `trainctl render` and
`submit` hold chart values to them before anything reaches a cluster; the names they check
against are the installed torchvision's own."""

from __future__ import annotations

import json
import subprocess
import sys

from app.settings import torchvision_names
from app.training import zoo

HEAVY_PACKAGES = ("torch", "torchvision", "ray")
RUN_CODE = ("app.training", "app.promotion", "app.export", "app.tracking", "app.preflight")


def test_committed_names_are_the_installed_torchvisions() -> None:
    classifiers, weights = zoo.torchvision_names()
    regenerate = "run `python -m app.training.zoo --write` after changing torchvision's pin"
    assert classifiers == torchvision_names.CLASSIFIERS, regenerate
    assert weights == torchvision_names.WEIGHTS, regenerate


def _heavy_modules_after(code: str) -> list[str]:
    """What `code` loaded, in a fresh interpreter, of torch, Ray and the run's own code."""
    program = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=120
    )
    loaded = json.loads(proc.stdout.splitlines()[-1])
    return [
        name
        for name in loaded
        if name.split(".")[0] in HEAVY_PACKAGES or name.startswith(tuple(p + "." for p in RUN_CODE))
        or name in RUN_CODE
    ]  # fmt: skip


SETTINGS_CHECKS = """
from app.settings.env import check_env
good = {'TRAIN_MODEL': 'resnet50', 'TRAIN_WEIGHTS': 'ResNet50_Weights.IMAGENET1K_V2',
        'TRAIN_PROMOTE_IF': 'beats_champion and val_accuracy>=0.9', 'TRAIN_CHECKPOINT_EVERY': '500'}
assert check_env(good)[1] == [], check_env(good)
for bad in ('TRAIN_MODEL', 'resnet1800'), ('TRAIN_WEIGHTS', 'ResNet50_Weights.IMAGENET9K'), (
    'TRAIN_PROMOTE_IF', 'val_acc>=0.9'):
    (name, line), = check_env(dict([bad]))[1]
    assert name == bad[0] and 'did you mean' in line, line
"""


def test_checking_every_kind_of_name_imports_no_torch_ray_or_run_code() -> None:
    assert _heavy_modules_after(SETTINGS_CHECKS) == []


def test_render_checks_train_values_without_torch_ray_or_run_code() -> None:
    code = (
        "from app.errors import ConfigError\n"
        "from app.k8s.render import load_values, render_objects\n"
        "values = load_values(set_values=('nodePools.cpu.gpusPerWorker=0',\n"
        "    'train.model=resnet50,train.weights=DEFAULT', 'train.checkpoint_every=500'))\n"
        "render_objects(values, release='demo', namespace='ml')\n"
        "values['train']['promote_if'] = 'val_acc>=0.9'\n"
        "try:\n"
        "    render_objects(values, release='demo', namespace='ml')\n"
        "except ConfigError as err:\n"
        "    assert 'did you mean val_accuracy' in str(err), err\n"
        "else:\n"
        "    raise AssertionError('rendered')\n"
    )
    assert _heavy_modules_after(code) == []


def test_status_and_logs_of_a_run_folder_import_no_torch_or_ray(tmp_path) -> None:
    """`trainctl status` loaded torch (through the checkpoint module) to read JSON: about two
    seconds of a terminal's wait, and of `watch trainctl status`'s every round."""
    from app.runfolder import folder as run_folder

    run_dir = tmp_path / "runs" / "r"
    run_folder.write_summary(run_dir, {"status": "succeeded", "run_name": "r"})
    (run_dir / "checkpoint_epoch_0001").mkdir()
    (run_dir / "logs" / "attempt-1").mkdir(parents=True)
    (run_dir / "logs" / "attempt-1" / "driver.log").write_text("epoch 1/1\n")
    code = (
        "from app.cli import run\n"
        f"assert run(['status', {str(run_dir)!r}]) == 0\n"
        f"assert run(['status', {str(run_dir.parent)!r}]) == 0\n"
        f"assert run(['logs', {str(run_dir)!r}, '--driver']) == 0\n"
    )
    # The run's own code is theirs to read (the champion pointer, the model card): not torch.
    loaded = _heavy_modules_after(code)
    assert [name for name in loaded if name.split(".")[0] in HEAVY_PACKAGES] == []
