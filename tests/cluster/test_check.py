"""`trainctl check`, the RayJob's first step: every check passes on a good setup, and each one
fails on its own problem with exit 2, the check named, the others still reported.

Real CLI, real files, the shared multi-node cluster (the good setup and the cluster's own
failures; the other failures skip the cluster check). A wrong installed
version is a real distribution record (a dist-info folder) earlier on the path, as a stray
install would be.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest

from tests import parquet_support as data
from tests.hostile.support import trainctl_with
from tests.support import explain, run_trainctl, trainctl_env

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CHECKS = (
    "settings", "storage", "tracking", "dataset", "steps", "classes", "stopping", "gate",
    "signing",
    "warm_start", "weights", "versions", "promotion", "cluster",
)  # fmt: skip
# The test data is tiny (24 train rows, 4 classes): these two say so in every case, as warnings.
WARNED = ("steps", "classes")
BASE = {
    "dataset": "parquet",
    "model": "cnn",
    "num_workers": "2",
    "global_batch_size": "16",
    "accelerator_type": "A100",
}


def _stray_torch(tmp: Path) -> dict[str, str]:
    """A torch 9.9.9 distribution record ahead of the real one on the path."""
    record = tmp / "stray" / "torch-9.9.9.dist-info"
    record.mkdir(parents=True)
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 9.9.9\n")
    return {"PYTHONPATH": str(tmp / "stray")}


@dataclass(frozen=True)
class Failure:
    id: str
    check: str  # the one check that must fail
    message: str
    settings: dict[str, str] = field(default_factory=dict)
    data: Callable[[Path], None] = data.good
    env: Callable[[Path], dict[str, str]] | None = None


STORAGE_FILE = {"storage_path": "{tmp}/a-file"}
TOO_MANY = {"num_workers": "40", "global_batch_size": "64"}
FAILURES = [
    Failure("storage-not-a-folder", "storage", "exists but is not a folder", STORAGE_FILE),
    Failure("storage-unwritable", "storage", "not writable", {"storage_path": "/proc/self"}),
    Failure("dataset-schema", "dataset", "missing column image, label", data=data.wrong_columns),
    Failure("dataset-no-rows", "dataset", "no rows; the train split needs", data=data.empty),
    Failure(
        "dataset-labels",
        "dataset",
        "label 9 never occurs in train",
        data=data.valid_label_unseen_in_train,
    ),
    Failure("dataset-model-fit", "dataset", "vit needs square", {"model": "vit"}, data.non_square),
    Failure(
        "warm-start-missing",
        "warm_start",
        "TRAIN_WARM_START={tmp}/no-such.pt: no such checkpoint or file",
        {"warm_start": "{tmp}/no-such.pt"},
    ),
    Failure(
        "weights-missing",
        "weights",
        "TRAIN_WEIGHTS={tmp}/no-such.pt: no such file",
        {"weights": "{tmp}/no-such.pt"},
    ),
    Failure("cluster-workers", "cluster", "needs 40 CPUs; the Ray cluster has", TOO_MANY),
    Failure("cluster-gpus", "cluster", "needs 2 GPUs; the Ray cluster has 0", {"use_gpu": "true"}),
    Failure(
        "cluster-accelerator",
        "cluster",
        "H100: no node of that type in the Ray cluster (types present: A100)",
        {"accelerator_type": "H100"},
    ),
    Failure(
        "tracking-sqlite",
        "tracking",
        "MLFLOW_TRACKING_URI=sqlite:///{tmp}/mlflow.db: sqlite:// is a database store",
        env=lambda tmp: {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db"},
    ),
    Failure(
        "versions-torch",
        "versions",
        "torch 9.9.9 is installed but trainctl is pinned to torch==",
        env=_stray_torch,
    ),
]


Result = tuple[subprocess.CompletedProcess[str], Path]


def _check(failure: Failure, tmp: Path, address: str, base: dict[str, str]) -> Result:
    (tmp / "a-file").write_text("a regular file, not a folder\n")
    failure.data(tmp / "data")
    settings = {
        **BASE,
        "data_path": str(tmp / "data"),
        "storage_path": str(tmp / "runs"),
        "ray_address": address,
        "capacity_wait_s": "1",  # the session cluster is complete: no nodes are still joining
        **{k: v.replace("{tmp}", str(tmp)) for k, v in failure.settings.items()},
    }
    env = {**trainctl_env(base, **settings), **(failure.env(tmp) if failure.env else {})}
    if _as_process(failure):
        return run_trainctl("check", env=env, cwd=tmp, timeout=240), tmp
    if failure.check == "cluster":  # this process is joined to the cluster (`ray_session`)
        return trainctl_with(env, tmp, "check"), tmp
    return trainctl_with(env, tmp, "check", "--skip-cluster"), tmp


def _as_process(failure: Failure) -> bool:
    """The good setup (`trainctl check` whole, as the RayJob runs it, joining the cluster) and
    a stray install (which needs its own interpreter's path) run as processes. The failures go
    through the CLI's entry point in this process: the same checks without a Python and torch
    start each; the cluster's own failures with this process joined to the cluster as a driver,
    the others with --skip-cluster."""
    return failure.check in ("", "versions")


def _verdicts(result: subprocess.CompletedProcess[str]) -> dict[str, tuple[str, str]]:
    """check name -> (ok | WARN | FAIL, detail), from the lines `trainctl check` prints (a
    check with several problems prints a FAIL line for each: their details joined)."""
    lines = re.findall(r"^(ok|WARN|FAIL)\s+(\w+): (.*)$", result.stdout, flags=re.MULTILINE)
    verdicts: dict[str, tuple[str, str]] = {}
    for verdict, name, detail in lines:
        said = verdicts.get(name)
        verdicts[name] = (verdict, f"{said[1]}; {detail}" if said else detail)
    return verdicts


@pytest.fixture(scope="module")
def outcomes(
    ray_cluster: object, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[Result]]]:
    """The process cases on a pool while the others run here, one after another."""
    address = ray_cluster.address  # type: ignore[attr-defined]
    good = Failure("all-good", "", "")
    base = dict(os.environ)  # read here, on pytest's thread, not on the pool's
    with ThreadPoolExecutor(max_workers=3) as pool:
        outcomes = {
            case.id: pool.submit(_check, case, tmp_path_factory.mktemp(case.id), address, base)
            for case in [good, *FAILURES]
            if _as_process(case)
        }
        # The rest one after another on this thread (they set the process's environment).
        for case in FAILURES:
            if not _as_process(case):
                done: Future[Result] = Future()
                done.set_result(_check(case, tmp_path_factory.mktemp(case.id), address, base))
                outcomes[case.id] = done
        yield outcomes


def test_every_check_passes_and_says_what_it_found(outcomes: dict[str, Future[Result]]) -> None:
    result, tmp = outcomes["all-good"].result()
    assert result.returncode == 0, explain(result)
    verdicts = _verdicts(result)
    expected = {name: "WARN" if name in WARNED else "ok" for name in CHECKS}
    assert {name: verdict for name, (verdict, _) in verdicts.items()} == expected, explain(result)
    assert verdicts["steps"][1] == (
        "24 train rows at TRAIN_GLOBAL_BATCH_SIZE=16 give 2 optimizer steps per epoch; at least "
        "10 is typical: lower TRAIN_GLOBAL_BATCH_SIZE (e.g. 2)"
    ), explain(result)
    assert verdicts["classes"][1].startswith(
        "images per class, train/valid: 0 6/2, 1 6/2, 2 6/2, 3 6/2; 4 classes under 10 images "
        "in train/"
    ), explain(result)
    assert re.search(
        r"writable \(made by the first run\), [\d.]+ (B|KiB|MiB|GiB|TiB) free$",
        verdicts["storage"][1],
    )
    assert "24 train / 8 valid rows, 8x8x1 images" in verdicts["dataset"][1]
    assert "4 classes" in verdicts["dataset"][1]
    versions = verdicts["versions"][1]
    for name in ("ray", "torch", "torchvision"):
        assert f"{name} {metadata.version(name)}" in versions
    assert re.match(r"\d+ node\(s\), \d+ CPUs, 0 GPUs \(Ray 2\.60\.0\)", verdicts["cluster"][1])
    # The storage probe leaves nothing behind: check makes no folder, and writes no run folder.
    assert not (tmp / "runs").exists()
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("failure", FAILURES, ids=[f.id for f in FAILURES])
def test_each_check_fails_on_its_own_problem(
    failure: Failure, outcomes: dict[str, Future[Result]]
) -> None:
    result, tmp = outcomes[failure.id].result()
    why = explain(result)
    assert result.returncode == 2, why
    assert "Traceback" not in result.stdout + result.stderr, why
    verdicts = _verdicts(result)
    failed = {name for name, (verdict, _) in verdicts.items() if verdict == "FAIL"}
    assert failed == {failure.check}, why
    message = failure.message.replace("{tmp}", str(tmp))
    assert message in verdicts[failure.check][1], why
    # The other checks still ran and said so: one problem never hides another.
    with_cluster = failure.check in ("cluster", "versions")
    expected = set(CHECKS) if with_cluster else set(CHECKS) - {"cluster"}
    assert set(verdicts) == expected, why
    # Said once, on its FAIL line; stderr names the check that failed, not the problem again.
    assert (result.stdout + result.stderr).count(message) == 1, why
    assert "trainctl: invalid input:" in result.stderr, why
    assert f"in check(s) {failure.check}: the FAIL lines on stdout say each" in result.stderr, why


def test_skip_cluster_checks_everything_else_without_ray(tmp_path: Path) -> None:
    data.good(tmp_path / "data")
    env = trainctl_env(
        **BASE, data_path=str(tmp_path / "data"), storage_path=str(tmp_path / "runs")
    )
    result = run_trainctl("check", "--skip-cluster", env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, explain(result)
    assert set(_verdicts(result)) == set(CHECKS) - {"cluster"}, explain(result)
    assert not (tmp_path / "runs").exists()  # nothing made, the write probe cleaned up


def test_bad_settings_stop_check_before_any_other_check(tmp_path: Path) -> None:
    env = trainctl_env(**BASE, epochs="0", storage_path=str(tmp_path / "runs"))
    result = run_trainctl("check", env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 2, explain(result)
    assert "TRAIN_EPOCHS='0'" in result.stderr and _verdicts(result) == {}, explain(result)
    assert not (tmp_path / "runs").exists()
