"""Issue 34 on the real cluster: `trainctl evaluate` and `trainctl predict --out` score the
shared finished run's export (tests/cluster/conftest.py: digits, cnn, two workers) with Ray
Data batch inference on the local multi-node cluster: over an image folder this test writes
(the run's validation rows as PNG files, a corrupt file and a decompression bomb among them),
locally and in the moto bucket, and over the run's own validation split, where the count of
hits must be exactly the one training recorded for the exported checkpoint.

No training here. The commands run in this process (app.cli.run), joined to the cluster as a
driver (`ray_session`), so each costs its actor pool's start and no Python or Ray start.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from tests.folder_support import png_claiming
from tests.hostile.support import Result, trainctl
from tests.s3_support import S3Server
from tests.support import REPO, FinishedRun, explain, trainctl_env

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

PNG = b"\x89PNG\r\n\x1a\n"
BAD = ("3/corrupt.png", "5/bomb.png")  # relative to the image folder


@pytest.fixture(scope="module")
def images(finished_run: FinishedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's validation rows as 8x8 grayscale PNG files, one folder per class ("0".."9"),
    with a file that is not an image and a PNG declaring 1.6 billion pixels among them."""
    from app.data.images import to_images
    from app.data.schema import inspect_dataset, parquet_files

    data = finished_run.tmp / "data" / "digits"
    info = inspect_dataset(data)
    root = tmp_path_factory.mktemp("eval-images") / "test"
    for file in parquet_files(data / "valid"):
        table = pq.read_table(file)
        pixels = to_images(table.column("image"), info.image_format)
        for index, (image, label) in enumerate(
            zip(pixels, table.column("label").to_pylist(), strict=True)
        ):
            (root / str(label)).mkdir(parents=True, exist_ok=True)
            Image.fromarray(image[:, :, 0], "L").save(
                root / str(label) / f"{file.stem}-{index:04d}.png"
            )
    (root / BAD[0]).write_bytes(b"not a png at all")
    (root / BAD[1]).write_bytes(png_claiming(40_000, 40_000))
    return root


@pytest.fixture(scope="module")
def quiet_driver(ray_session: None) -> Iterator[None]:
    import ray.data

    context = ray.data.DataContext.get_current()
    saved, context.enable_progress_bars = context.enable_progress_bars, False
    yield
    context.enable_progress_bars = saved


def evaluate(*args: str) -> Result:
    return trainctl("evaluate", *args)


def recorded(finished_run: FinishedRun) -> tuple[float, int]:
    card = json.loads((finished_run.run_dir / "export" / "model_card.json").read_text())
    return card["checkpoint"]["metrics"]["val_accuracy"], card["data"]["valid_rows"]


def test_split_valid_reproduces_the_recorded_val_accuracy_exactly(
    finished_run: FinishedRun, quiet_driver: None
) -> None:
    folder = finished_run.run_dir / "eval" / "valid"
    # What the run's end wrote there, scored in its driver (a split this small), before the
    # actor pool of `trainctl evaluate` rewrites the folder.
    run_end = json.loads((folder / "metrics.json").read_text())
    run_end_confusion = json.loads((folder / "confusion.json").read_text())
    result = evaluate(str(finished_run.run_dir), "--split", "valid", "--json")
    assert result.code == 0, result.text
    metrics = json.loads(result.out)
    val_accuracy, valid_rows = recorded(finished_run)
    assert metrics["rows"] == valid_rows  # every validation row, none dropped
    assert metrics["accuracy"] == val_accuracy  # the same count over the same rows
    assert metrics["correct"] == round(val_accuracy * valid_rows)
    assert metrics["recorded"]["val_accuracy"] == val_accuracy
    assert metrics["data"]["same_files_as_training"] is True
    assert metrics["data"]["layout"] == "parquet" and metrics["precision"] == "float32"
    assert json.loads((folder / "metrics.json").read_text())["accuracy"] == val_accuracy
    for row in _mistakes(folder):
        assert row["file"].endswith(".parquet") and row["row"].isdigit()
    # The run's end and the actor pool: the same rows through the same Scorer, the same figures.
    assert (run_end["scored_in"], metrics["scored_in"]) == ("this process", "an actor pool")
    for key in ("rows", "correct", "accuracy", "top5_accuracy", "per_class", "macro", "weighted"):
        assert run_end[key] == metrics[key], key
    assert run_end["expected_calibration_error"] == pytest.approx(
        metrics["expected_calibration_error"], abs=1e-9
    )
    assert json.loads((folder / "confusion.json").read_text()) == run_end_confusion


def test_the_runs_own_pipeline_is_evaluated_as_a_run_end_will(
    finished_run: FinishedRun, quiet_driver: None
) -> None:
    """`evaluate()` on the validation Dataset training itself builds (no file names, no
    error column), scored in this process: what the end of a run calls for its best
    checkpoint on a split this small."""
    from app.data.kinds import build_datasets, dataset_kind
    from app.data.schema import inspect_dataset
    from app.evaluation.evaluate import evaluate as evaluate_rows
    from app.evaluation.evaluate import run_export
    from app.evaluation.scoring import ScoringOptions
    from app.settings import TrainSettings

    run_dir = finished_run.run_dir
    settings = TrainSettings(
        _env_file=None, dataset="digits", model="cnn", data_path=finished_run.tmp / "data",
        storage_path=run_dir.parent, run_name=run_dir.name,
    )  # fmt: skip
    info = inspect_dataset(dataset_kind(settings.dataset).location(settings.data_path))
    rows = build_datasets(settings, info)["valid"]
    data = {"location": f"{info.path}/valid", "layout": info.layout, "split": "valid"}
    report = evaluate_rows(
        run_export(run_dir), rows, run_dir / "eval" / "run-end", run_dir=run_dir, data=data,
        options=ScoringOptions(in_process=True),
    )  # fmt: skip
    val_accuracy, valid_rows = recorded(finished_run)
    assert (report.metrics["rows"], report.metrics["accuracy"]) == (valid_rows, val_accuracy)
    assert report.metrics["recorded"]["val_accuracy"] == val_accuracy
    assert "(same)" in report.line()
    assert (run_dir / "eval" / "run-end" / "metrics.json").is_file()
    for row in _mistakes(run_dir / "eval" / "run-end"):  # rows numbered in the stream's order
        assert row["file"] == "" and row["row"].isdigit()


def test_an_image_folder_is_scored_on_the_cluster_skipping_what_cannot_be_read(
    finished_run: FinishedRun, images: Path, quiet_driver: None
) -> None:
    result = evaluate(str(finished_run.run_dir), str(images), "--max-mistakes", "5")
    assert result.code == 0, result.text
    # Named with its parent: a folder named test/ that is not the run's own split does not
    # take eval/test/, the run-end record of that split.
    folder = finished_run.run_dir / "eval" / f"{images.parent.name}-test"
    assert result.out.startswith("trainctl: evaluated digits-cnn on the data at")
    assert str(folder) in result.out and "2 skipped" in result.out
    assert "skipped 2 file(s) that cannot be used (listed in metrics.json; --strict stops at " \
        "the first file)" in result.err, result.err  # fmt: skip
    metrics = json.loads((folder / "metrics.json").read_text())
    val_accuracy, valid_rows = recorded(finished_run)
    # The PNG files hold the validation rows' pixels, prepared by the same code: same count.
    assert (metrics["rows"], metrics["accuracy"]) == (valid_rows, val_accuracy)
    assert metrics["skipped"]["count"] == 2
    reasons = sorted(item["reason"] for item in metrics["skipped"]["first"])
    assert str(images / BAD[0]) in reasons[0] and "not an image format" in reasons[0]
    assert str(images / BAD[1]) in reasons[1] and "pixels" in reasons[1]
    assert str(images / BAD[0]) in result.err  # and on stderr
    assert {row["class"] for row in metrics["per_class"]} == {str(i) for i in range(10)}
    assert sum(row["support"] for row in metrics["per_class"]) == valid_rows
    assert "top5_accuracy" in metrics and metrics["top5_accuracy"] >= metrics["accuracy"]
    assert 0 <= metrics["expected_calibration_error"] <= 1

    confusion = json.loads((folder / "confusion.json").read_text())
    matrix = np.array(confusion["matrix"])
    assert matrix.sum() == valid_rows and np.trace(matrix) == metrics["correct"]
    assert (folder / "confusion.png").read_bytes().startswith(PNG)
    mistakes = _mistakes(folder)
    assert 0 < len(mistakes) <= 5
    confidences = [float(row["confidence"]) for row in mistakes]
    assert confidences == sorted(confidences, reverse=True)
    for row in mistakes:
        assert row["true_class"] != row["predicted_class"]
        assert (images / row["file"]).is_file() and row["file"].split("/")[0] == row["true_class"]

    strict = evaluate(str(finished_run.run_dir), str(images), "--strict", "--name", "strict")
    assert strict.code == 2, strict.text
    assert any(str(images / bad) in strict.err for bad in BAD), strict.text
    assert not (finished_run.run_dir / "eval" / "strict").exists()


def test_parquet_rows_that_cannot_be_read_are_skipped_and_named_by_file_and_row(
    finished_run: FinishedRun, images: Path, quiet_driver: None, tmp_path: Path
) -> None:
    """The same PNG files as Parquet rows of encoded images: the first row truncated (the one
    the format is read from, which refused the whole folder) and one of another size. Both
    are skipped and counted, each named by its own row in its file; the rest score as the
    files did."""
    files = sorted(p for p in images.rglob("*.png") if p.relative_to(images).as_posix() not in BAD)
    blobs = [p.read_bytes() for p in files]
    blobs[0] = blobs[0][:40]
    other = io.BytesIO()
    Image.new("L", (9, 9)).save(other, format="PNG")
    blobs[7] = other.getvalue()
    data = tmp_path / "rows"
    data.mkdir()
    table = pa.table(
        {"image": pa.array(blobs, pa.binary()), "label": [int(p.parent.name) for p in files]}
    )
    pq.write_table(table, data / "part-0.parquet", row_group_size=64)

    result = evaluate(str(finished_run.run_dir), str(data), "--name", "rows")
    assert result.code == 0, result.text
    assert "skipped 2 row(s) that cannot be used" in result.err, result.err
    metrics = json.loads((finished_run.run_dir / "eval" / "rows" / "metrics.json").read_text())
    assert (metrics["rows"], metrics["skipped"]["count"]) == (len(files) - 2, 2)
    where = f"{data / 'part-0.parquet'}: "
    first, second = (item["reason"] for item in metrics["skipped"]["first"])
    assert first.startswith(f"{where}row 0: not a decodable PNG/JPEG image ("), first
    assert second == (
        f"{where}row 7: 9x9 (width x height) where the other images are 8x8; images must all "
        "be one size"
    )
    assert [(i["row"], i["file"]) for i in metrics["skipped"]["first"]] == [
        (0, "part-0.parquet"),
        (7, "part-0.parquet"),
    ]


def test_gpus_are_refused_where_the_cluster_has_none(
    finished_run: FinishedRun, images: Path, quiet_driver: None
) -> None:
    result = evaluate(str(finished_run.run_dir), str(images), "--gpus", "--name", "gpu")
    assert result.code == 2, result.text
    assert "--gpus: the Ray cluster has no GPU (it has 5 CPUs, 0 GPUs" in result.err
    assert "accelerator types A100" in result.err
    assert not (finished_run.run_dir / "eval" / "gpu").exists()


def test_evaluate_and_predict_in_the_bucket(
    finished_run: FinishedRun,
    images: Path,
    s3_server: S3Server,
    quiet_driver: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The data and the run's export in the bucket: the eval folder is written there. Then
    `predict` over the local folder and the bucket prefix together, to Parquet in the bucket:
    one row per file, each as the single-process path answers it."""
    bucket = s3_server.bucket("trainctl-eval")
    bucket.upload(images, "data/test")
    bucket.upload(finished_run.run_dir / "export", "runs/digits-cnn/export")
    monkeypatch.setenv("TRAIN_STORAGE_ENDPOINT", bucket.endpoint)
    run = bucket.uri("runs/digits-cnn")
    result = evaluate(run, bucket.uri("data/test"), "--name", "bucket")
    assert result.code == 0, result.text
    metrics = json.loads(bucket.read("runs/digits-cnn/eval/bucket/metrics.json"))
    val_accuracy, valid_rows = recorded(finished_run)
    assert (metrics["rows"], metrics["accuracy"]) == (valid_rows, val_accuracy)
    assert metrics["skipped"]["count"] == 2
    assert bucket.read("runs/digits-cnn/eval/bucket/confusion.png").startswith(PNG)
    assert set(bucket.keys("runs/digits-cnn/eval/bucket")) == {
        "metrics.json", "confusion.json", "confusion.png", "mistakes.csv"
    }  # fmt: skip

    out = bucket.uri("predictions/test.parquet")
    result = trainctl("predict", run, str(images), bucket.uri("data/test"), "--out", out)
    assert result.code == 0, result.text
    assert f"predicted {2 * valid_rows:,} images, 4 skipped" in result.out
    table = pq.read_table(io.BytesIO(bucket.read("predictions/test.parquet"))).to_pylist()
    local = sorted(str(p) for p in images.rglob("*.png"))
    remote = sorted(bucket.uri(f"data/test/{p.relative_to(images)}") for p in images.rglob("*.png"))
    assert [row["image"] for row in table] == sorted(local + remote)  # one row per file
    bad = {str(images / b) for b in BAD} | {bucket.uri(f"data/test/{b}") for b in BAD}
    by_image = {row["image"]: row for row in table}
    for image, row in by_image.items():
        if image in bad:
            assert row["error"] and row["classes"] == [], row
            continue
        assert row["error"] is None and len(row["classes"]) == 3
        assert row["probabilities"] == sorted(row["probabilities"], reverse=True)
    for name in local[:20]:  # the same file, in the bucket and here: the same answer
        remote_row = by_image[bucket.uri(f"data/test/{Path(name).relative_to(images)}")]
        assert by_image[name]["classes"] == remote_row["classes"]
    sample = [name for name in local if name not in bad][:4]
    few = trainctl("predict", str(finished_run.run_dir), *sample, "--json")
    assert few.code == 0, few.text
    for name, single in zip(sample, json.loads(few.out)["predictions"], strict=True):
        assert [t["class"] for t in single["top"]] == by_image[name]["classes"]
        np.testing.assert_allclose(
            [t["probability"] for t in single["top"]], by_image[name]["probabilities"], atol=1e-5
        )


def test_predict_out_names_each_row_by_its_own_path_and_replaces_only_with_overwrite(
    finished_run: FinishedRun, images: Path, tmp_path: Path, quiet_driver: None
) -> None:
    """A link's row was named by its target's path: the target was listed twice and the link
    not at all, so a join of predictions back to their files broke (found by a red-team pass).
    The link is read as its target, inside the folder, without following links. Then a batch
    where nothing can be scored is a failed run (exit 1), not an empty success, each reason in
    the file it replaced (--overwrite; the refusal without it: tests/hostile)."""
    data = tmp_path / "imgs"
    (data / "0").mkdir(parents=True)
    for source in sorted((images / "0").glob("*.png"))[:2]:
        shutil.copy(source, data / "0" / source.name)
    first, second = sorted(p.name for p in (data / "0").iterdir())
    (data / "0" / "link.png").symlink_to(first)
    out = tmp_path / "p.csv"
    out.write_text("yesterday's\n")
    run = str(finished_run.run_dir)

    # A file named again beside its folder is one image, one row (it was scored and counted
    # twice: a red-team pass).
    again = str(data / "." / "0" / first)
    replaced = trainctl("predict", run, str(data), again, "--out", str(out), "--overwrite")
    assert replaced.code == 0, replaced.text
    assert "predicted 3 images" in replaced.out, replaced.text
    assert "(1 image(s) named more than once (by two arguments) were scored once)" in (
        replaced.out
    ), replaced.text
    assert out.read_text().startswith("image,"), out.read_text()[:200]
    rows = {row["image"]: row for row in csv.DictReader(out.open())}
    assert sorted(rows) == sorted(str(data / "0" / n) for n in (first, second, "link.png"))
    same = [k for k in rows[str(data / "0" / first)] if k != "image"]
    link = rows[str(data / "0" / "link.png")]
    assert [link[k] for k in same] == [rows[str(data / "0" / first)][k] for k in same]
    # Without --out, stdout holds the predictions alone, and a file passed over is counted
    # aside: a FIFO named like an image was dropped without a word (a red-team pass).
    os.mkfifo(data / "0" / "stream.png")
    shown = trainctl("predict", run, str(data), again)
    assert shown.code == 0, shown.text
    assert len(shown.out.splitlines()) == 3, shown.text
    assert "trainctl: 1 image(s) named more than once (by two arguments) were scored once" in (
        shown.err
    ), shown.text
    assert "trainctl: 1 other file(s) not read: not images by name, hidden, or not regular " in (
        shown.err
    ), shown.text
    (data / "0" / "stream.png").unlink()

    for name in (first, second):
        (data / "0" / name).write_bytes(b"not an image")
    failed = trainctl("predict", run, str(data), "--out", str(out), "--overwrite")
    assert failed.code == 1, failed.text
    assert "no image could be scored: all 3 were skipped" in failed.err, failed.text
    said = next(line for line in failed.err.splitlines() if "no image could be scored" in line)
    for path in (data / "0").iterdir():  # the first image named once (a link: then its target)
        assert f"{path}: {path}:" not in said, said
    assert "predicted 0 images" not in failed.text  # no success line beside the failure
    assert "not an image format Pillow reads" in out.read_text()  # each reason, in the file


def _mistakes(folder: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((folder / "mistakes.csv").read_text())))


def test_sigterm_once_joined_to_ray_stops_a_command_with_143_and_its_own_word(
    ray_cluster: object,
) -> None:
    """ray.init swaps in Ray's SIGTERM handlers (`sys.exit(15)`, and a C one that prints a
    stack trace): `predict` and `evaluate` stopped by SIGTERM while scoring ended with exit 15
    and Ray's trace (a red-team pass). Joined as they join, a command keeps its own handler."""
    script = (
        "import os, signal, sys, time\n"
        "import click\n"
        "from app.cli_exit import run_command\n"
        "from app.evaluation.scoring import connect\n"
        "@click.group()\n"
        "def cli() -> None: ...\n"
        "@cli.command()\n"
        "def score() -> None:\n"
        "    connect()\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(120)\n"
        "sys.exit(run_command(cli, ['score']))\n"
    )
    env = trainctl_env(ray_address=ray_cluster.address)  # type: ignore[attr-defined]
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 143, explain(done)
    assert "trainctl: stopped by SIGTERM" in done.stderr, explain(done)
    assert "SIGTERM received" not in done.stderr, explain(done)
