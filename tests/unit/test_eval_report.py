"""The eval folder's files (app/evaluation/report.py): names, the confusion plot at any class
count, mistakes.csv, and the folder replaced whole."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.errors import ConfigError
from app.evaluation.report import (
    CONFUSION_PNG,
    METRICS_FILE,
    MISTAKES_FILE,
    checked_name,
    confusion_png,
    default_name,
    mistakes_csv,
    write_folder,
)
from tests.support import python_on_a_full_disk


@pytest.mark.parametrize("name", ["valid", "test-2026.04", "a_b", "X" * 64])
def test_safe_names_pass(name: str) -> None:
    assert checked_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "-x", "a b", "é", "x" * 65])
def test_other_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="--name"):
        checked_name(name)


@pytest.mark.parametrize(
    ("folder", "split", "expected"),
    [
        # Another data folder named like the run's own records: named with its parent.
        (Path("/data/pets/valid"), None, "pets-valid"),
        (Path("/data/new data/test"), None, "new-data-test"),
        (Path("/test"), None, "data-test"),
        (Path("/data/champion-v3-test"), None, "data-champion-v3-test"),
        (Path("/data/digits/test"), "test", "test"),
        (Path("/data/holdout 2026"), None, "holdout-2026"),
        (Path("/data/.hidden"), None, "hidden"),
        (Path("/data/ß"), None, "data"),
        (Path("/data/digits/valid"), "valid", "valid"),
    ],
)
def test_default_names_are_safe(folder: Path, split: str | None, expected: str) -> None:
    assert default_name(folder, split) == expected
    assert checked_name(default_name(folder, split))


def _image(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data))


def test_the_matrix_is_drawn_up_to_fifty_classes_and_pairs_beyond() -> None:
    names = [f"class-{i}" for i in range(50)]
    matrix = np.eye(50, dtype=int) * 3
    matrix[0, 1] = 2
    small = _image(
        confusion_png({"classes": names, "matrix": matrix.tolist(), "most_confused": []})
    )
    pairs = [
        {"true": "a", "predicted": "b", "count": 5},
        {"true": "c", "predicted": "a", "count": 2},
    ]
    many = [f"c{i}" for i in range(51)]
    big = _image(confusion_png({"classes": many, "matrix": None, "most_confused": pairs}))
    assert small.format == big.format == "PNG"
    assert small.size[0] > 1500  # 50 names on an axis get room
    assert big.size[1] < small.size[1]  # a bar per pair, not a 51 x 51 grid


def test_mistakes_csv_keeps_odd_names_in_their_cells() -> None:
    rows = [("a,b/1.png", None, 'say "cat"', "dog\nx", 0.9), ("part-0.parquet", 7, "1", "2", 0.5)]
    parsed = list(csv.reader(io.StringIO(mistakes_csv(rows).decode())))
    assert parsed == [
        ["file", "row", "true_class", "predicted_class", "confidence"],
        ["a,b/1.png", "", 'say "cat"', "dog\nx", "0.900000"],
        ["part-0.parquet", "7", "1", "2", "0.500000"],
    ]


def test_mistakes_csv_writes_cells_a_spreadsheet_would_run_as_text() -> None:
    rows = [("=2+3/x.png", None, "=2+3", "@SUM(1)", 0.99), ("\tcmd", 3, "+1", "cat", 0.5)]
    parsed = list(csv.reader(io.StringIO(mistakes_csv(rows).decode())))
    assert parsed[1:] == [
        ["'=2+3/x.png", "", "'=2+3", "'@SUM(1)", "0.990000"],
        ["'\tcmd", "3", "'+1", "cat", "0.500000"],
    ]


def test_an_evaluation_replaces_the_earlier_one_whole(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    folder = run / "eval" / "test"
    write_folder(folder, {MISTAKES_FILE: b"old", CONFUSION_PNG: b"x", METRICS_FILE: b"{}"}, run)
    write_folder(folder, {MISTAKES_FILE: b"new", METRICS_FILE: b"{}"}, run)
    assert sorted(p.name for p in folder.iterdir()) == [METRICS_FILE, MISTAKES_FILE]
    assert (folder / MISTAKES_FILE).read_bytes() == b"new"
    assert [p.name for p in (run / "eval").iterdir()] == ["test"]  # no staging folder left


REFUSED_WRITE = """
import sys
from pathlib import Path
from app.errors import RunFailed
from app.evaluation.report import write_folder
run = Path(sys.argv[1])
try:
    write_folder(run / "eval" / "big", {"mistakes.csv": b"x" * 5000, "metrics.json": b"{}"}, run)
except RunFailed as err:
    print(err)
"""


def test_a_write_the_machine_refuses_is_a_failure_that_leaves_nothing(tmp_path: Path) -> None:
    """A full disk under `evaluate` was "internal error: OSError ... please report it" (a
    red-team pass)."""
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    result = python_on_a_full_disk(REFUSED_WRITE, 1000, str(run))
    assert result.returncode == 0, result.stderr
    said = f"{run}/eval/big: could not be written (File too large); the scores were not kept"
    assert result.stdout.startswith(said), result.stdout
    assert list((run / "eval").iterdir()) == []  # no staging folder, no half a report


def test_class_names_the_font_cannot_draw_cost_no_warning_lines() -> None:
    """Each CJK glyph printed a matplotlib UserWarning during train and evaluate."""
    import warnings

    names = ["三角", "四角", "big circle"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        png = confusion_png({"classes": names, "matrix": [[2, 0, 0], [0, 1, 1], [1, 0, 3]],
                             "most_confused": []})  # fmt: skip
    assert png.startswith(b"\x89PNG")
    assert not [w for w in caught if "Glyph" in str(w.message)], [str(w.message) for w in caught]


@pytest.mark.parametrize(
    ("name", "same", "expected"),
    [
        (None, True, None),
        (None, None, None),
        (None, False, "valid-changed"),
        ("mine", False, "mine"),
    ],
)
def test_a_split_whose_files_changed_is_scored_beside_the_runs_record(
    tmp_path: Path, name: str | None, same: bool | None, expected: str | None
) -> None:
    """`evaluate --split valid` after the split's files changed replaced eval/valid/, the
    record the run's promotion was judged on and summary.json points to, with a score of
    other files, saying so nowhere but metrics.json (found by a red-team pass)."""
    from app.evaluation.data import ImageFiles
    from app.evaluation.evaluate import split_eval_name
    from app.storage.location import parse_location

    source = ImageFiles(parse_location(str(tmp_path)), rows=3, split="valid", same_data=same)
    chosen, note = split_eval_name(name, source)
    assert chosen == expected
    if expected == "valid-changed":
        assert note == (
            "the valid split's files changed since the run trained (their names, sizes or "
            "modification times): scored into eval/valid-changed/, the run's own eval/valid/ "
            "kept"
        )
    else:
        assert note is None


def test_a_file_written_again_to_the_same_size_is_a_change_of_the_data(tmp_path: Path) -> None:
    """The fingerprint covered names and sizes only: three validation images replaced by
    others of the same size read as the files trained on, and `--split valid` replaced the
    run's own eval/valid/ with their figures (a red-team pass). A card written before the
    times were fingerprinted is still read by names and sizes."""
    import dataclasses
    import os

    from app.evaluation.data import ImageFiles, _with_fingerprint
    from app.export.build import data_fingerprint
    from app.storage.location import parse_location
    from tests.promotion_support import INFO

    data = tmp_path / "data"
    for split in ("train", "valid"):
        (data / split).mkdir(parents=True)
        (data / split / "a.png").write_bytes(b"one image")
    root = parse_location(str(data))
    recorded = data_fingerprint(dataclasses.replace(INFO, path=root))
    source = ImageFiles(parse_location(str(data / "valid")), rows=1, split="valid")
    assert _with_fingerprint(source, root, recorded).same_data is True

    image = data / "valid" / "a.png"
    stat = image.stat()
    image.write_bytes(b"two image")  # another image, the same size
    os.utime(image, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    now = data_fingerprint(dataclasses.replace(INFO, path=root))
    assert now["files_sha256"] == recorded["files_sha256"]
    assert now["stamps_sha256"] != recorded["stamps_sha256"]
    assert _with_fingerprint(source, root, recorded).same_data is False
    older = {k: v for k, v in recorded.items() if k != "stamps_sha256"}
    assert _with_fingerprint(source, root, older).same_data is True


def test_the_summary_line_counts_the_files_passed_over_by_name(tmp_path: Path) -> None:
    """A .gif, an .svg or a hidden file in DATA was left out of an evaluation without a word
    on the line (only metrics.json counted it), while `predict` says it (a red-team pass)."""
    from app.evaluation.evaluate import EvalReport
    from app.storage.location import parse_location

    metrics = {
        "run_name": "r", "rows": 10, "accuracy": 0.5, "correct": 5, "macro": {"f1": 0.5},
        "expected_calibration_error": 0.1, "skipped": {"count": 0},
        "data": {"location": str(tmp_path), "files_skipped_by_name": 3},
    }  # fmt: skip
    line = EvalReport(parse_location(str(tmp_path / "eval")), metrics).line()
    assert "3 other file(s) not read: not images by name, hidden, or outside the class folders" in (
        line
    )
    metrics["data"]["files_skipped_by_name"] = 0
    assert "not read" not in EvalReport(parse_location(str(tmp_path)), metrics).line()
