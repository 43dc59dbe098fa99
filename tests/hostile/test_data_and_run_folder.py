"""Hostile data and a tampered run folder: refused before Ray starts, or set aside with a reason.

Data cases run `trainctl check --skip-cluster` in-process (the same dataset checks `train` runs
before Ray); warm-start cases run `train` itself with Ray's start replaced by a failure, so a case
that wrongly passes preflight fails loudly instead of starting a cluster.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from app import preflight
from app.data.kinds import dataset_kind
from app.data.schema import inspect_dataset
from app.run import driver as run
from app.run import resume
from app.runfolder import checkpoint_names, checkpoints
from app.runfolder import folder as run_folder
from app.runfolder.class_names import MAX_CLASSES
from app.runfolder.folder import read_summary
from app.runfolder.summary import build_summary, plot_curves
from app.storage.reading import sha256_of
from tests import parquet_support as data
from tests.hostile.support import assert_refused, files_under, trainctl

BASE = {"TRAIN_DATASET": "parquet", "TRAIN_MODEL": "cnn", "TRAIN_GLOBAL_BATCH_SIZE": "64"}


def _settings_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **extra: str) -> None:
    env = {**BASE, "TRAIN_DATA_PATH": str(tmp_path / "data"), **extra}
    env["TRAIN_STORAGE_PATH"] = str(tmp_path / "runs")
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def _huge_label(value: int) -> Callable[[Path], None]:
    def build(root: Path) -> None:
        data.good(root)
        data.write(root / "train" / "part-1.parquet", data.images(4), [0, 1, 2, value])
        data.write(root / "valid" / "part-0.parquet", data.images(8), data.labels(8))

    return build


DATA_CASES = [
    ("label-2**31", _huge_label(2**31), {}, f"at most {MAX_CLASSES} classes"),
    ("label-int64-max", _huge_label(2**63 - 1), {}, "is too large"),
    ("label-just-over-max", _huge_label(MAX_CLASSES), {}, "is too large"),
    ("more-workers-than-train-rows", data.good, {"TRAIN_NUM_WORKERS": "30"}, "train has 24 rows"),
    ("more-workers-than-valid-rows", data.good, {"TRAIN_NUM_WORKERS": "9"}, "valid 8"),
    ("elastic-max-over-rows", data.good, {"TRAIN_NUM_WORKERS": "2-40"}, "40 workers need"),
    ("wrong-columns", data.wrong_columns, {}, "missing column image, label"),
    ("negative-label", data.negative_label, {}, "label -1 is negative"),
    ("string-labels", data.string_labels, {}, "column label is string"),
    ("single-class", data.single_class, {}, "at least 2 classes"),
    ("mixed-shapes", data.mixed_shapes, {}, "mixed shapes"),
    ("float-pixels", data.float_pixels, {}, "pixels are float"),
    ("empty", data.empty, {}, "no rows"),
    ("no-parquet", data.no_parquet_files, {}, "no .parquet files"),
    ("not-parquet", data.not_parquet, {}, "not a readable Parquet file"),
    ("valid-missing", data.valid_missing, {}, "valid: folder not found"),
]


@pytest.mark.parametrize(
    ("build", "extra", "needle"), [c[1:] for c in DATA_CASES], ids=[c[0] for c in DATA_CASES]
)
def test_hostile_data_is_refused_before_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, build, extra, needle
) -> None:
    build(tmp_path / "data")
    _settings_env(monkeypatch, tmp_path, **extra)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, needle)
    assert files_under(tmp_path / "runs") == []


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(settings: object) -> None:
        raise AssertionError("preflight let this through: Ray would start")

    monkeypatch.setattr(preflight, "connect_ray", refuse)


def _warm_start_file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "warm.pt"
    if kind == "not-torch":
        path.write_text("not a checkpoint")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "pickled-code":
        torch.save({"weight": Path("needs unpickling code")}, path)  # weights_only refuses
    elif kind == "folder-without-model":
        path = tmp_path / "ckpt"
        path.mkdir()
    return path


@pytest.mark.parametrize("command", [("train",), ("check", "--skip-cluster")])
@pytest.mark.parametrize(
    "kind", ["not-torch", "empty", "pickled-code", "folder-without-model", "missing"]
)
def test_warm_start_that_cannot_be_read_is_refused_before_ray(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    no_ray: None,
    kind: str,
    command: tuple[str, ...],
) -> None:
    """`check` and `train` run one preflight: a warm-start problem stops both, the same way."""
    data.good(tmp_path / "data")
    path = _warm_start_file(tmp_path, kind)
    _settings_env(monkeypatch, tmp_path, TRAIN_WARM_START=str(path), TRAIN_RUN_NAME="w")
    result = trainctl(*command)
    assert_refused(result, 2, f"TRAIN_WARM_START={path}")
    if command[0] == "check":
        assert f"FAIL  warm_start: TRAIN_WARM_START={path}" in result.out
    assert not (tmp_path / "runs" / "w").exists()


@pytest.mark.parametrize(
    "kind", ["not-torch", "empty", "pickled-code", "folder-without-model", "missing"]
)
def test_a_refused_warm_start_says_what_it_takes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_ray: None, kind: str
) -> None:
    """Whatever is wrong with the source, the refusal names what TRAIN_WARM_START takes."""
    data.good(tmp_path / "data")
    path = _warm_start_file(tmp_path, kind)
    _settings_env(monkeypatch, tmp_path, TRAIN_WARM_START=str(path), TRAIN_RUN_NAME="w")
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, f"TRAIN_WARM_START={path}", "champion:<model-name>", "state-dict")


def test_train_with_more_workers_than_rows_is_refused_before_training(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The issue's fake success: 0 rows per worker used to "succeed" with loss 0.0000.

    The check follows the cluster's capacity check (a cluster that can never hold the workers is
    the first thing to fix), so both are stood in for by what a big enough cluster answers.
    """

    def never(*args: object) -> None:
        raise AssertionError("training started")

    monkeypatch.setattr(preflight, "connect_ray", lambda settings: None)
    monkeypatch.setattr(preflight, "check_capacity", lambda settings, pool_cpus: None)
    monkeypatch.setattr(run, "_fit", never)
    data.good(tmp_path / "data")
    _settings_env(monkeypatch, tmp_path, TRAIN_NUM_WORKERS="30", TRAIN_RUN_NAME="r")
    assert_refused(trainctl("train"), 2, "30 workers need at least one row", "train has 24 rows")


# --- a bad image deep in a Parquet file is named by file and row --------------------------------
def _png(value: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((8, 8), value, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _write_png_split(folder: Path, images: list[bytes], name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"image": images, "label": data.labels(len(images))})
    pq.write_table(table, folder / name)


def test_corrupt_image_deep_in_a_file_is_named_with_file_and_row(tmp_path: Path) -> None:
    for split, rows in data.ROWS.items():
        for part in ("part-0.parquet", "part-1.parquet"):
            _write_png_split(tmp_path / split, [_png(i) for i in range(rows)], part)
    info = inspect_dataset(tmp_path)
    # Damaged after preflight (or in rows it never decoded): only a worker meets it.
    images = [_png(i) for i in range(data.ROWS["train"])]
    images[17] = b"\x89PNG\r\n\x1a\n but truncated"
    _write_png_split(tmp_path / "train", images, "part-1.parquet")
    found = dataset_kind("parquet").locate_bad_image(info)
    assert found is not None
    assert found.startswith(f"{tmp_path / 'train' / 'part-1.parquet'}: row 17: "), found
    assert "PNG" in found


def test_a_run_that_failed_on_its_data_starts_again_only_once_it_is_fixed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A red-team pass: a bad image past preflight's sample failed the run (exit 1) after it
    trained to it, and a KubeRay backoffLimit retry, which `check` passed again, trained to it
    again. The driver records where the data is bad (tests/cluster/test_train.py makes that
    record for real); the run's next start looks there first."""
    broken = data.bad_image_past_the_sample(tmp_path / "data")
    _settings_env(monkeypatch, tmp_path, TRAIN_RUN_NAME="r")
    assert "ok    dataset: " in trainctl("check", "--skip-cluster").out  # the sample passes
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    where = f"{broken}: row 15: not a readable image"
    record = {"status": "failed", "error": f"bad image in {where}", "bad_data": where}
    (run_dir / "summary.json").write_text(json.dumps(record))
    still = f"the run's last attempt failed on its data, and it is still bad: {broken}: row 15"
    assert_refused(trainctl("check", "--skip-cluster"), 2, f"FAIL  dataset: {still}")

    def never(*args: object) -> None:
        raise AssertionError("Ray started")

    monkeypatch.setattr(preflight, "connect_ray", never)
    assert_refused(trainctl("train"), 2, still)
    assert not (run_dir / "logs").exists()  # no attempt began

    # Another failure's record is not searched: the sample's verdict stands.
    (run_dir / "summary.json").write_text(json.dumps({**record, "bad_data": None}))
    assert "ok    dataset: " in trainctl("check", "--skip-cluster").out
    # Fixed (the bad file taken out): the run may start again.
    (run_dir / "summary.json").write_text(json.dumps(record))
    broken.unlink()
    assert "ok    dataset: " in trainctl("check", "--skip-cluster").out


def test_a_file_its_reader_refuses_is_named_in_one_line(tmp_path: Path) -> None:
    damaged = data.damaged_page_past_the_sample(tmp_path)
    found = dataset_kind("parquet").locate_bad_image(inspect_dataset(tmp_path))
    assert found is not None
    assert found.startswith(f"{damaged}: not a readable Parquet file ("), found
    assert "\n" not in found  # Arrow's reasons span lines


# --- checkpoints: tampering is caught, with a reason --------------------------------------------
def _checkpoint(run_dir: Path, epoch: int, model: torch.nn.Module | None = None) -> Path:
    model = model or torch.nn.Linear(4, 3)
    folder = run_dir / checkpoint_names.dir_name(epoch)
    checkpoints.write_checkpoint(
        folder,
        model_state=model.state_dict(),
        train_state={"optimizer": {}, "epoch": epoch, "step": 1},
        epoch=epoch,
        metrics={"val_accuracy": 0.5, "val_loss": 0.5},
    )
    return folder


def _edit_meta(folder: Path, change: Callable[[dict], None], *, reseal: bool) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    change(meta)
    if reseal:  # a careful forger recomputes the digest too
        meta["meta_sha256"] = checkpoints._meta_digest(meta)
    (folder / "meta.json").write_text(json.dumps(meta))


TAMPER = [
    ("epoch-999", lambda f: _edit_meta(f, lambda m: m.update(epoch=999), reseal=False), "checksum"),
    (
        "epoch-999-resealed",
        lambda f: _edit_meta(f, lambda m: m.update(epoch=999), reseal=True),
        "folder is named for 1",
    ),
    (
        "metric-edited",
        lambda f: _edit_meta(f, lambda m: m["metrics"].update(val_accuracy=1.0), reseal=False),
        "checksum",
    ),
    (
        "digest-removed",
        lambda f: _edit_meta(f, lambda m: m.pop("meta_sha256"), reseal=False),
        "checksum",
    ),
    (
        "file-list-escapes",
        lambda f: _edit_meta(f, lambda m: m["files"].update({"../../x": "0"}), reseal=True),
        "lists",
    ),
    (
        "file-list-shrunk",
        lambda f: _edit_meta(f, lambda m: m["files"].pop("model.pt"), reseal=True),
        "lists",
    ),
    ("meta-is-a-list", lambda f: (f / "meta.json").write_text("[1, 2]"), "unreadable"),
    ("meta-is-null", lambda f: (f / "meta.json").write_text("null"), "unreadable"),
    ("meta-not-utf8", lambda f: (f / "meta.json").write_bytes(b"\xff\xfe{"), "unreadable"),
    (
        "metric-not-a-number",
        lambda f: _edit_meta(f, lambda m: m["metrics"].update(val_accuracy="high"), reseal=True),
        "unreadable",
    ),
    (  # a metric no float holds: OverflowError escaped every reader of checkpoints
        "metric-past-a-float",
        lambda f: _edit_meta(f, lambda m: m["metrics"].update(val_loss=10**400), reseal=True),
        "unreadable",
    ),
    (
        "meta-is-a-folder",
        lambda f: ((f / "meta.json").unlink(), (f / "meta.json").mkdir()),
        "missing",
    ),
]


@pytest.mark.parametrize(("damage", "reason"), [t[1:] for t in TAMPER], ids=[t[0] for t in TAMPER])
def test_tampered_checkpoint_is_refused_with_a_reason(tmp_path: Path, damage, reason) -> None:
    folder = _checkpoint(tmp_path, 1)
    damage(folder)
    with pytest.raises(ValueError, match=reason):
        checkpoints.verify(folder)


def test_folder_renamed_to_a_later_epoch_is_refused(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path, 1)
    folder.rename(tmp_path / checkpoint_names.dir_name(999))
    with pytest.raises(ValueError, match="says epoch 1 but the folder is named for 999"):
        checkpoints.verify(tmp_path / checkpoint_names.dir_name(999))


def _expected(model: torch.nn.Module) -> dict:
    return {k: v.shape for k, v in model.state_dict().items()}


def test_train_state_epoch_must_agree(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path, 2)
    torch.save({"optimizer": {}, "epoch": 999, "step": 1}, folder / "train_state.pt")
    meta = json.loads((folder / "meta.json").read_text())
    meta["files"]["train_state.pt"] = sha256_of(folder / "train_state.pt")
    meta["meta_sha256"] = checkpoints._meta_digest(meta)
    (folder / "meta.json").write_text(json.dumps(meta))
    ref = checkpoints.verify(folder)
    problem = checkpoints.resume_problem(ref, _expected(torch.nn.Linear(4, 3)))
    assert problem is not None and "holds epoch 999" in problem


@pytest.mark.parametrize(
    ("model", "needle"),
    [
        (torch.nn.Linear(4, 5), "weight is (5, 4) not (3, 4)"),
        (torch.nn.Sequential(torch.nn.Linear(4, 3)), "missing ['bias', 'weight']"),
        (torch.nn.Linear(4, 3, bias=False), "missing ['bias']"),
    ],
)
def test_checkpoint_of_another_model_does_not_fit(
    tmp_path: Path, model: torch.nn.Module, needle: str
) -> None:
    ref = checkpoints.verify(_checkpoint(tmp_path, 1, model))
    problem = checkpoints.resume_problem(ref, _expected(torch.nn.Linear(4, 3)))
    assert problem is not None and needle in problem


def test_driver_sets_aside_a_checkpoint_of_another_model_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A checksum-valid checkpoint of another model was retried forever; now it is set aside."""
    from app.settings.env import load_settings

    data.good(tmp_path / "data")
    _settings_env(monkeypatch, tmp_path, TRAIN_RUN_NAME="r")
    settings = load_settings()
    info = inspect_dataset(tmp_path / "data")
    _checkpoint(settings.run_dir, 1, torch.nn.Linear(4, 3))  # not the cnn this run trains
    said: list[str] = []
    assert resume.usable_checkpoint(settings, info, said.append) is None
    assert "do not fit this model" in said[0]
    moved = settings.run_dir / "corrupt_checkpoint_epoch_0001"
    assert "do not fit this model" in (moved / checkpoints.REASON_FILE).read_text()
    assert not (settings.run_dir / "checkpoint_epoch_0001").exists()


def test_a_runs_own_checkpoint_that_the_changed_data_does_not_fit_is_refused_not_set_aside(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Parquet labels without names gained a class (or its images another size): the run's
    healthy checkpoint was set aside as corrupt, and the run started over and replaced its
    history with exit 0 (a red-team pass). A run that recorded its settings owns its
    checkpoints: one that no longer fits says the data changed. Exit 2, nothing moved."""
    import dataclasses

    from app.errors import ConfigError
    from app.runfolder.folder import write_summary
    from app.settings.env import load_settings
    from app.training.model import build_model

    data.good(tmp_path / "data")
    _settings_env(monkeypatch, tmp_path, TRAIN_RUN_NAME="r")
    settings = load_settings()
    now = inspect_dataset(tmp_path / "data")
    before = dataclasses.replace(now, num_classes=now.num_classes - 1)  # as it was trained
    _checkpoint(settings.run_dir, 1, build_model(settings.model, before))
    write_summary(settings.run_dir, {"status": "succeeded", "settings": settings.redacted()})
    with pytest.raises(ConfigError) as refused:
        resume.usable_checkpoint(settings, now, print)
    said = str(refused.value)
    assert "run r, checkpoint checkpoint_epoch_0001: its weights do not fit this model" in said
    assert f"(now {now.num_classes} classes at input " in said and "TRAIN_RUN_NAME" in said
    assert (settings.run_dir / "checkpoint_epoch_0001").is_dir()
    assert not list(settings.run_dir.glob("corrupt_*"))


def test_a_rerun_is_held_to_the_data_its_last_worker_group_trained_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A Parquet set rewritten at 48 px resumed a run trained at 32 px (the cnn's weights fit
    any size), its history half one and half the other; rows added to a folder resumed
    without a word (a red-team pass). Each worker group's start records its data."""
    import dataclasses

    from app.errors import ConfigError
    from app.settings.env import load_settings
    from app.training.model import build_model

    data.good(tmp_path / "data")
    _settings_env(monkeypatch, tmp_path, TRAIN_RUN_NAME="r")
    settings = load_settings()
    info = inspect_dataset(tmp_path / "data")
    _checkpoint(settings.run_dir, 1, build_model(settings.model, info))
    damaged = _checkpoint(settings.run_dir, 0, build_model(settings.model, info))
    (damaged / "model.pt").write_bytes(b"truncated")  # set aside by a resume: not before this
    run_folder.start_attempt(
        settings.run_dir, invocation="i", start_epoch=1, world_size=1, restored_from=None,
        data=dataclasses.replace(info, height=info.height * 2).trained_on(),
    )  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        resume.usable_checkpoint(settings, info, print)
    said = str(refused.value)
    assert f"run r trained on {info.num_classes} classes at input " in said, said
    assert f"x{info.height * 2}x{info.width} (its last start), and this rerun would" in said
    assert not list(settings.run_dir.glob("corrupt_*"))
    assert (settings.run_dir / "checkpoint_epoch_0000").is_dir()  # not set aside either
    # `check` says so too: it said ok, and `train` then refused (a red-team pass).
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "FAIL  dataset", f"x{info.height * 2}x{info.width} (its last start)")
    assert (settings.run_dir / "checkpoint_epoch_0000").is_dir()  # `check` moves nothing
    run_folder.start_attempt(
        settings.run_dir, invocation="j", start_epoch=1, world_size=1, restored_from=None,
        data=dataclasses.replace(info, train_rows=info.train_rows + 400).trained_on(),
    )  # fmt: skip
    lines: list[str] = []
    assert resume.usable_checkpoint(settings, info, lines.append) is not None
    assert lines[1].startswith("checkpoint checkpoint_epoch_0000 is unusable")  # now, after
    assert lines[:1] == [
        f"the data changed since the run's last start (train {info.train_rows + 400:,} rows "
        f"then, {info.train_rows:,} now): the epochs trained so far saw the old rows, and a "
        "resume inside an epoch skips the first batches of the new order, which are other "
        "rows now"
    ], lines


def test_another_model_under_a_trained_runs_name_is_refused_before_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """TRAIN_MODEL changed under an existing TRAIN_RUN_NAME: its (healthy) checkpoints were set
    aside as corrupt and the new model's epochs replaced the run's history, exit 0 (a
    red-team pass). The run's summary says which model its checkpoints are of: exit 2, nothing
    moved. A checkpoint that fits no recorded model stays set aside, as above."""
    from app.errors import ConfigError
    from app.runfolder.folder import write_summary
    from app.settings.env import load_settings

    data.good(tmp_path / "data")
    _settings_env(monkeypatch, tmp_path, TRAIN_RUN_NAME="r", TRAIN_MODEL="resnet18")
    settings = load_settings()
    info = inspect_dataset(tmp_path / "data")
    _checkpoint(settings.run_dir, 1, torch.nn.Linear(4, 3))  # the model it was trained with
    recorded = {**settings.redacted(), "model": "cnn", "lr": 0.01}
    write_summary(settings.run_dir, {"status": "succeeded", "settings": recorded})
    with pytest.raises(ConfigError) as refused:
        resume.usable_checkpoint(settings, info, print)
    said = str(refused.value)
    assert "run r was trained with TRAIN_MODEL=cnn (now resnet18)" in said, said
    assert "give the new model a run of its own (TRAIN_RUN_NAME)" in said
    assert (settings.run_dir / "checkpoint_epoch_0001").is_dir()  # nothing set aside
    assert not list(settings.run_dir.glob("corrupt_*"))
    # The settings a resumed run changes are named (`TRAIN_LR=0.05` was taken without a word).
    assert resume.changed_since(settings) == [
        "TRAIN_MODEL=cnn (now resnet18)",
        f"TRAIN_LR=0.01 (now {settings.lr:g})",
    ]
    # Refused whether or not the shapes fit (cnn at another TRAIN_IMAGE_SIZE would load),
    # and before anything is set aside.
    same_model = {**settings.redacted(), "image_size": 64}
    write_summary(settings.run_dir, {"status": "succeeded", "settings": same_model})
    with pytest.raises(ConfigError, match=r"TRAIN_IMAGE_SIZE=64 \(now "):
        resume.usable_checkpoint(settings, info, print)
    assert not list(settings.run_dir.glob("corrupt_*"))
    # `check` and `train`'s preflight say so, before Ray (`check` said ok: a red-team pass);
    # the refused start is recorded, for `status`.
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "FAIL  dataset", "run r was trained with TRAIN_IMAGE_SIZE=64 (now")
    assert_refused(trainctl("train"), 2, "run r was trained with TRAIN_IMAGE_SIZE=64 (now")
    refused = (read_summary(settings.run_dir) or {})[run_folder.REFUSED_KEY]
    assert "run r was trained with" in refused["error"], refused


# --- run records: damaged lines are skipped with one warning ------------------------------------
GOOD = '{"epoch": 1, "train_loss": 1.0, "val_loss": 1.0, "val_accuracy": 0.5}'
GARBAGE = [
    "not json",
    '{"epoch": 2, "train_loss": 0.5',
    "[1, 2, 3]",
    '"a string"',
    "42",
    "null",
    '{"epoch": "two", "train_loss": 0.5}',
    '{"epoch": true, "train_loss": 0.5}',
    '{"epoch": 2.5, "train_loss": 0.5}',
    '{"epoch": 2, "train_loss": "low"}',
    '{"train_loss": 0.5}',
    "\x00\x00\x00",
]


@pytest.mark.parametrize("line", GARBAGE, ids=lambda v: repr(v)[:24])
def test_damaged_metrics_line_is_skipped_and_summary_still_builds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    (tmp_path / run_folder.METRICS_FILE).write_text(f"{GOOD}\n{line}\n")
    records = run_folder.epochs(tmp_path)
    assert [r["epoch"] for r in records] == [1]
    run_folder.epochs(tmp_path)  # a second read says nothing new
    err = capsys.readouterr().err
    assert err.count("skipped 1 unreadable line(s)") == 1 and "line 2" in err
    summary = build_summary(
        tmp_path, status="succeeded", run_name="r", target_epochs=1, settings={},
        duration_s=1.0, failures=0, restored_from=None,
    )  # fmt: skip
    assert summary["metrics"]["val_accuracy"] == 0.5
    assert plot_curves(tmp_path) is not None


def test_non_utf8_metrics_file_is_read_around(tmp_path: Path) -> None:
    (tmp_path / run_folder.METRICS_FILE).write_bytes(GOOD.encode() + b"\n\xff\xfe\xfd\n")
    assert [r["epoch"] for r in run_folder.epochs(tmp_path)] == [1]


def test_damaged_attempts_lines_are_skipped(tmp_path: Path) -> None:
    (tmp_path / run_folder.ATTEMPTS_FILE).write_text('{"invocation": "a"}\n[]\nnope\n')
    assert run_folder.attempts(tmp_path, "a") == [{"invocation": "a"}]


@pytest.mark.parametrize("content", [b"[]", b"null", b"\xff\xfe", b'"running"', b"{"])
def test_damaged_summary_is_ignored(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "summary.json").write_bytes(content)
    assert read_summary(tmp_path) is None
