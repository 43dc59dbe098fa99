"""`trainctl predict`'s choice of path, and its output file, Parquet and CSV (no Ray)."""

from __future__ import annotations

import csv
import hashlib
import io
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from app.evaluation.batch_predict import FEW, encode, takes_batch_path
from app.export.predict import Prediction

FOUND = [
    (Prediction("/d/a.png", [("cat", 0, 0.75), ("dog", 1, 0.25)]), ""),
    (Prediction("/d/b,1.png", []), "/d/b,1.png: not an image format Pillow reads"),
    (Prediction("/d/c.png", [("dog", 1, 0.5), ("cat", 0, 0.5)]), ""),
]


def test_few_files_stay_in_process_and_the_rest_go_to_ray(tmp_path: Path) -> None:
    files = [str(tmp_path / f"{i}.png") for i in range(FEW)]
    assert not takes_batch_path(files, None)
    assert takes_batch_path([*files, "one-more.png"], None)
    assert takes_batch_path(files[:1], "out.csv")
    assert takes_batch_path(files[:1], None, pool=True)  # --gpus or --actors
    assert takes_batch_path([str(tmp_path)], None)  # a folder
    assert takes_batch_path(["s3://bucket/images"], None)  # a prefix (or an object)


def test_parquet_holds_lists_of_classes_and_probabilities() -> None:
    table = pq.read_table(io.BytesIO(encode(FOUND, Path("p.parquet"), k=2)))
    assert table.column_names == ["image", "classes", "probabilities", "error"]
    assert table.to_pylist() == [
        {"image": "/d/a.png", "classes": ["cat", "dog"], "probabilities": [0.75, 0.25],
         "error": None},
        {"image": "/d/b,1.png", "classes": [], "probabilities": [],
         "error": "/d/b,1.png: not an image format Pillow reads"},
        {"image": "/d/c.png", "classes": ["dog", "cat"], "probabilities": [0.5, 0.5],
         "error": None},
    ]  # fmt: skip


def test_parquet_names_the_model_that_scored_it(tmp_path: Path) -> None:
    """A scored file could not be traced to its model (found by a red-team pass): its schema
    metadata names the card's sha256, as a champion pointer and an evaluation do."""
    from app.evaluation.batch_predict import provenance
    from app.export.card import CARD_FILE, verified
    from tests.promotion_support import exported_run

    exported_run(tmp_path / "runs")
    folder = tmp_path / "runs" / "r" / "export"
    export = verified(folder)
    data = encode(FOUND, Path("p.parquet"), k=2, provenance=provenance(export))
    said = pq.read_schema(io.BytesIO(data)).metadata
    card = hashlib.sha256((folder / CARD_FILE).read_bytes()).hexdigest()
    assert said[b"trainctl.model_card_sha256"] == card.encode()
    assert said[b"trainctl.architecture"] == export.card["architecture"].encode()
    assert said[b"trainctl.run_name"] == export.card["run_name"].encode()


@pytest.mark.parametrize("name", ["p.csv", "P.CSV"])
def test_csv_holds_one_column_pair_per_rank(name: str) -> None:
    rows = list(csv.reader(io.StringIO(encode(FOUND, Path(name), k=2).decode())))
    assert rows == [
        ["image", "class_1", "probability_1", "class_2", "probability_2", "error"],
        ["/d/a.png", "cat", "0.750000", "dog", "0.250000", ""],
        ["/d/b,1.png", "", "", "", "", "/d/b,1.png: not an image format Pillow reads"],
        ["/d/c.png", "dog", "0.500000", "cat", "0.500000", ""],
    ]


def test_a_csv_of_skipped_images_only_keeps_every_column() -> None:
    """Its header was `image,error`: a reader expecting class_1 broke (a red-team pass)."""
    found = [(Prediction("/d/b.png", []), "/d/b.png: not an image format Pillow reads")]
    rows = list(csv.reader(io.StringIO(encode(found, Path("p.csv"), k=2).decode())))
    assert rows[0] == ["image", "class_1", "probability_1", "class_2", "probability_2", "error"]
    assert rows[1] == ["/d/b.png", "", "", "", "", "/d/b.png: not an image format Pillow reads"]


def test_csv_cells_a_spreadsheet_would_run_are_written_as_text_and_parquet_keeps_them() -> None:
    """Class names are folder names and images are file names, from whoever wrote the folder:
    `=2+3` or `@SUM(1)` in a CSV is run by a spreadsheet that opens it."""
    found = [(Prediction("=HYPERLINK(x).png", [("@SUM(1)", 0, 0.75), ("-cat", 1, 0.25)]), "")]
    rows = list(csv.reader(io.StringIO(encode(found, Path("p.csv"), k=2).decode())))
    assert rows[1] == ["'=HYPERLINK(x).png", "'@SUM(1)", "0.750000", "'-cat", "0.250000", ""]
    table = pq.read_table(io.BytesIO(encode(found, Path("p.parquet"), k=2)))
    assert table.to_pylist()[0]["image"] == "=HYPERLINK(x).png"
    assert table.to_pylist()[0]["classes"] == ["@SUM(1)", "-cat"]


def test_scoring_says_its_progress_as_batches_come() -> None:
    """3,000 files were scored with nothing on the terminal for most of a minute (found by a
    red-team pass): every PROGRESS_EVERY_S, how many rows are scored, of how many, how fast."""
    import numpy as np

    from app.evaluation.scoring import with_progress

    batches = [{"top_index": np.zeros((n, 2), np.int64)} for n in (256, 256, 88)]
    said: list[str] = []
    passed = list(with_progress(iter(batches), 600, "images", said.append, every_s=0.0))
    assert passed == batches  # every batch on, unchanged, in order
    assert [line.split(",")[0] for line in said] == [
        "trainctl: scored 256 of 600 images (43%)",
        "trainctl: scored 512 of 600 images (85%)",
        "trainctl: scored 600 of 600 images (100%)",
    ]
    assert all(line.endswith("/s") for line in said)
    said.clear()
    list(with_progress(iter(batches), None, "rows", said.append, every_s=0.0))
    assert said[-1].startswith("trainctl: scored 600 rows, ")
    said.clear()  # a scoring shorter than the period says nothing
    list(with_progress(iter(batches), 600, "images", said.append, every_s=3600.0))
    assert said == []


def test_scoring_says_its_progress_while_a_batch_is_awaited_and_rates_below_one() -> None:
    """10 images of 9000x9000 printed nothing until the whole batch was scored, then `0/s`
    (a red-team pass)."""
    import threading

    import numpy as np

    from app.evaluation.scoring import _rate, with_progress

    said: list[str] = []
    spoke = threading.Event()

    def slow() -> object:
        # The first batch comes only once the wait has been said: no clock in the test.
        assert spoke.wait(120), "no progress line while the first batch was awaited"
        yield {"top_index": np.zeros((10, 2), np.int64)}

    def say(line: str) -> None:
        said.append(line)
        spoke.set()

    assert len(list(with_progress(slow(), 10, "images", say, every_s=1.0))) == 1
    assert said[0].startswith("trainctl: scored 0 of 10 images (0%), none yet after "), said
    assert (_rate(0.26), _rate(3.333), _rate(12.4), _rate(1234.5)) == (
        "0.26/s", "3.3/s", "12/s", "1,234/s",
    )  # fmt: skip


def test_the_progress_thread_ends_with_a_scoring_that_fails() -> None:
    """A failure while batches were gathered (--strict, a bad row) left the generator held by
    the failing frame, and its thread printing `scored ...` lines after the error (a review)."""
    import contextlib
    import threading

    import numpy as np
    import pytest

    from app.evaluation.scoring import with_progress

    def alive() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "trainctl-progress"]

    batches = iter([{"top_index": np.zeros((1, 2), np.int64)}] * 3)
    with (
        pytest.raises(ValueError),
        contextlib.closing(
            with_progress(batches, 3, "images", lambda line: None, every_s=1.0)
        ) as said,
    ):
        next(said)
        assert alive()
        raise ValueError("a row --strict refuses")
    for thread in alive():
        thread.join(timeout=30)
    assert not alive()
