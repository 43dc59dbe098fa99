"""Bad input, table-driven, through the real `trainctl train`: one clear message, a defined exit
code, never a traceback, and nothing written to the run folder but that message.

Exit 2 is everything found before training starts (settings, storage, data, cluster capacity);
exit 1 is what only running finds (a download that fails). Most cases stop before Ray starts.
Every case runs through the CLI's entry point in this process (app.cli.run, what `main` exits
with): the same code without a Python, torch and Ray start each. The cases that reach the cluster
find this process already joined to it as a driver (`ray_session`), as `trainctl train` would
have joined it, and are refused by the capacity check that follows.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.runfolder.folder import REFUSED_KEY
from tests import parquet_support as data
from tests.hostile.support import trainctl_with
from tests.support import explain, trainctl_env

# One group: `outcomes` runs every case of the table, so a worker that got any of them ran all.
pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.xdist_group("bad-input")]

RUN = "bad"
BASE = {
    "dataset": "parquet",
    "model": "cnn",
    "epochs": "1",
    "num_workers": "2",
    "global_batch_size": "16",
    "run_name": RUN,
    "max_failures": "0",
}
OLD_SUMMARY = {"status": "succeeded", "run_name": RUN, "epochs_completed": 1}
NO_NETWORK = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}


@dataclass(frozen=True)
class Case:
    id: str
    settings: dict[str, str]  # TRAIN_* by field name; "{tmp}" is the case's own folder
    message: str  # must appear in the single problem line
    code: int = 2
    data: Callable[[Path], None] | None = None  # writes the dataset into {tmp}/data
    cluster: bool = False  # joins the shared Ray cluster (TRAIN_RAY_ADDRESS)
    existing_run: bool = False  # a run folder with a summary is there before
    extra_env: dict[str, str] = field(default_factory=dict)
    lines: int = 1  # problem lines; a run-time failure adds one saying how to fix it


CASES = [
    # --- settings: wrong types, zero and negative counts, unknown names ---------------------
    Case("epochs-not-a-number", {"epochs": "ten"}, "TRAIN_EPOCHS='ten'"),
    Case("epochs-zero", {"epochs": "0"}, "TRAIN_EPOCHS='0'"),
    Case("epochs-negative", {"epochs": "-3"}, "TRAIN_EPOCHS='-3'"),
    Case("batch-zero", {"global_batch_size": "0"}, "TRAIN_GLOBAL_BATCH_SIZE='0'"),
    Case("batch-fraction", {"global_batch_size": "12.5"}, "TRAIN_GLOBAL_BATCH_SIZE='12.5'"),
    Case("workers-zero", {"num_workers": "0"}, "TRAIN_NUM_WORKERS='0'"),
    Case("workers-negative", {"num_workers": "-2"}, "TRAIN_NUM_WORKERS='-2'"),
    Case("workers-word", {"num_workers": "two"}, "TRAIN_NUM_WORKERS='two'"),
    Case("workers-range-backwards", {"num_workers": "8-2"}, "MIN <= MAX"),
    Case("cpus-per-worker-zero", {"cpus_per_worker": "0"}, "TRAIN_CPUS_PER_WORKER='0'"),
    Case("lr-negative", {"lr": "-0.1"}, "TRAIN_LR='-0.1'"),
    Case("lr-word", {"lr": "fast"}, "TRAIN_LR='fast'"),
    Case("use-gpu-not-boolean", {"use_gpu": "maybe"}, "TRAIN_USE_GPU='maybe'"),
    Case("unknown-dataset", {"dataset": "imagenet"}, "TRAIN_DATASET='imagenet'"),
    Case("unknown-model", {"model": "gpt"}, "TRAIN_MODEL='gpt'"),
    Case("unknown-amp", {"amp": "fp8"}, "TRAIN_AMP='fp8'"),
    Case("fp16-without-gpu", {"amp": "fp16"}, "TRAIN_AMP=fp16 needs TRAIN_USE_GPU=true"),
    Case("run-name-not-dns", {"run_name": "My_Run"}, "TRAIN_RUN_NAME='My_Run'"),
    Case("max-failures-below-minus-one", {"max_failures": "-5"}, "TRAIN_MAX_FAILURES='-5'"),
    Case("keep-zero-checkpoints", {"checkpoints_to_keep": "0"}, "TRAIN_CHECKPOINTS_TO_KEEP='0'"),
    Case("unknown-metric", {"checkpoint_metric": "f1"}, "TRAIN_CHECKPOINT_METRIC='f1'"),
    Case("weight-decay-above-one", {"weight_decay": "2"}, "TRAIN_WEIGHT_DECAY='2'"),
    Case("seed-negative", {"seed": "-1"}, "TRAIN_SEED='-1'"),
    Case(
        "batch-smaller-than-workers",
        {"global_batch_size": "3", "num_workers": "4"},
        "TRAIN_GLOBAL_BATCH_SIZE=3 is smaller than the 4 workers",
    ),
    Case("misspelled-variable", {"epocs": "3"}, "did you mean TRAIN_EPOCHS?"),
    # --- storage and files ----------------------------------------------------------------------
    Case(
        "storage-under-a-file",
        {"storage_path": "{tmp}/a-file/runs"},
        "TRAIN_STORAGE_PATH={tmp}/a-file/runs: cannot create the folder",
    ),
    Case(
        "storage-is-a-file",
        {"storage_path": "{tmp}/a-file"},
        "TRAIN_STORAGE_PATH={tmp}/a-file: exists but is not a folder",
    ),
    Case(
        "storage-missing-and-uncreatable",
        {"storage_path": "/proc/trainctl-runs"},
        "TRAIN_STORAGE_PATH=/proc/trainctl-runs: cannot create the folder",
    ),
    Case("storage-unwritable", {"storage_path": "/proc/self"}, "/proc/self: not writable"),
    Case(
        "warm-start-missing",
        {"warm_start": "{tmp}/nowhere/model.pt"},
        "TRAIN_WARM_START={tmp}/nowhere/model.pt: no such checkpoint or file",
        data=data.good,
    ),
    # --- data -------------------------------------------------------------------------------------
    Case("parquet-folder-missing", {}, "{tmp}/data: folder not found"),
    Case("parquet-wrong-columns", {}, "missing column image, label", data=data.wrong_columns),
    Case(
        "labels-outside-train-range",
        {},
        "label 9 never occurs in train",
        data=data.valid_label_unseen_in_train,
    ),
    Case("label-negative", {}, "label -1 is negative", data=data.negative_label),
    Case("labels-are-strings", {}, "column label is string", data=data.string_labels),
    Case("one-class-only", {}, "training needs at least 2 classes", data=data.single_class),
    Case("mixed-image-shapes", {}, "images have mixed shapes", data=data.mixed_shapes),
    Case("float-pixels", {}, "pixels are float", data=data.float_pixels),
    Case("empty-dataset", {}, "no rows", data=data.empty),
    Case("no-parquet-files", {}, "no .parquet files", data=data.no_parquet_files),
    Case("not-parquet", {}, "not a readable Parquet file", data=data.not_parquet),
    Case("valid-split-missing", {}, "{tmp}/data/valid: folder not found", data=data.valid_missing),
    Case("vit-on-non-square", {"model": "vit"}, "vit needs square images", data=data.non_square),
    Case(
        "vit-patch-not-a-divisor",
        {"model": "vit", "vit_patch": "3"},
        "TRAIN_VIT_PATCH=3 does not divide the 8px images",
        data=data.good,
    ),
    Case(
        "data-path-under-a-file",
        {"dataset": "synthetic", "data_path": "{tmp}/a-file/data"},
        "cannot create the output folder",
    ),
    Case(
        "bad-data-in-an-existing-run",
        {},
        "missing column image, label",
        data=data.wrong_columns,
        existing_run=True,
    ),
    # --- found only at run time -------------------------------------------------------------------
    Case(
        "download-fails",
        {"dataset": "fashion_mnist"},
        "could not download fashion_mnist",
        code=1,
        extra_env=NO_NETWORK,
        lines=2,
    ),
    # --- the cluster can never hold the request ---------------------------------------------------
    Case(
        "more-workers-than-cpus",
        {"num_workers": "40", "global_batch_size": "64"},
        "TRAIN_NUM_WORKERS=40 x TRAIN_CPUS_PER_WORKER=1 needs 40 CPUs",
        data=data.good,
        cluster=True,
    ),
    Case(
        "elastic-minimum-too-large",
        {"num_workers": "30-40", "global_batch_size": "64"},
        "needs 30 CPUs",
        data=data.good,
        cluster=True,
    ),
    Case("gpus-missing", {"use_gpu": "true"}, "needs 2 GPUs", data=data.good, cluster=True),
    Case(
        "accelerator-type-missing",
        {"accelerator_type": "H100"},
        "TRAIN_ACCELERATOR_TYPE=H100: no node of that type",
        data=data.good,
        cluster=True,
    ),
    Case(
        "too-many-workers-in-an-existing-run",
        {"num_workers": "40", "global_batch_size": "64"},
        "needs 40 CPUs",
        data=data.good,
        cluster=True,
        existing_run=True,
    ),
]


@dataclass
class Outcome:
    result: subprocess.CompletedProcess[str]
    tmp: Path
    run_before: dict[str, bytes] | None  # the run folder's files, when there was one


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _run_case(case: Case, tmp: Path, address: str, base: dict[str, str]) -> Outcome:
    (tmp / "a-file").write_text("a regular file, not a folder\n")
    settings = {**BASE, "data_path": "{tmp}/data", "storage_path": "{tmp}/runs", **case.settings}
    settings = {key: value.replace("{tmp}", str(tmp)) for key, value in settings.items()}
    if case.cluster:
        settings["ray_address"] = address
        # The session cluster has all its nodes before any test: waiting for more only costs time.
        settings.setdefault("capacity_wait_s", "1")
    else:
        # Refused before Ray starts: should one ever get past its checks, it meets a closed
        # port (a refusal naming it) instead of starting a Ray cluster inside pytest.
        settings.update(ray_address="127.0.0.1:9", ray_connect_timeout="1")
    if case.data:
        case.data(tmp / "data")
    run_before = None
    if case.existing_run:
        run_dir = tmp / "runs" / RUN
        run_dir.mkdir(parents=True)
        (run_dir / "summary.json").write_text(json.dumps(OLD_SUMMARY))
        (run_dir / "metrics.jsonl").write_text('{"epoch": 1, "val_accuracy": 0.5}\n')
        run_before = _files(run_dir)
    env = {**trainctl_env(base, **settings), **case.extra_env}
    # Without a Python and torch start each (about 3 s of a core, 52 times); the environment,
    # proxies included, is the process's while it runs, so the cases run one at a time.
    return Outcome(trainctl_with(env, tmp, "train"), tmp, run_before)


@pytest.fixture(scope="module")
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Outcome]:
    """Every selected case, run once for the module."""
    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if item.module is not None
        and item.module.__name__ == __name__
        and hasattr(item, "callspec")
    ]
    address = ""
    if any(case.cluster for case in selected):
        address = request.getfixturevalue("ray_cluster").address
        request.getfixturevalue("ray_session")
    base = dict(os.environ)
    return {
        case.id: _run_case(case, tmp_path_factory.mktemp(case.id), address, base)
        for case in selected
    }


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_refused_with_one_clear_message(
    case: Case, outcomes: dict[str, Outcome]
) -> None:
    outcome = outcomes[case.id]
    result, tmp = outcome.result, outcome.tmp
    why = explain(result)
    assert result.returncode == case.code, why
    assert "Traceback" not in result.stdout + result.stderr, why
    label = "invalid input" if case.code == 2 else "failed"
    assert f"trainctl: {label}:" in result.stderr, why
    problems = [line for line in result.stderr.splitlines() if line.startswith("  - ")]
    assert len(problems) == case.lines, why
    assert case.message.replace("{tmp}", str(tmp)) in problems[0], why

    run_dir = tmp / "runs" / RUN
    if outcome.run_before is None:
        assert not run_dir.exists(), sorted(_files(run_dir))
        storage = tmp / "runs"
        assert not storage.exists() or not any(storage.iterdir()), sorted(_files(storage))
        return
    # An existing run folder: untouched, except that summary.json now tells why the start was
    # refused, beside the run's own record (a succeeded run stays succeeded).
    after = _files(run_dir)
    assert set(after) == set(outcome.run_before), sorted(after)
    changed = {name for name in after if after[name] != outcome.run_before[name]}
    assert changed == {"summary.json"}, changed
    summary = json.loads(after["summary.json"])
    refused = summary.pop(REFUSED_KEY)
    assert case.message in refused["error"], refused
    assert summary == OLD_SUMMARY
