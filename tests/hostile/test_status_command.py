"""`trainctl status` on hostile run folders: links, FIFOs, huge, garbage, non-UTF-8 and deeply
nested records, unprintable names, a folder of 10,000 runs and a store that stops answering.
Each ends with exit 0 or 2 (naming every file that could not be read, after showing what could
be), in bounded time and lines, never with a traceback or a hang."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from app.run import status as run_status
from app.runfolder import folder as run_folder
from tests.hostile.support import assert_refused, trainctl

GOOD = {"status": "succeeded", "epochs_completed": 1, "epochs_target": 1}


def _run(storage: Path, name: str, summary: dict | None = None) -> Path:
    run_dir = storage / name
    run_dir.mkdir(parents=True)
    run_folder.write_summary(run_dir, summary or GOOD)
    return run_dir


def _bounded(text: str) -> None:
    assert "Traceback" not in text and "\x1b" not in text and "\x07" not in text, text[:2000]
    assert max(map(len, text.splitlines() or [""])) < 500, max(text.splitlines(), key=len)


RECORDS = ["summary.json", "progress.json", "metrics.jsonl", "attempts.jsonl"]


@pytest.mark.parametrize("name", RECORDS)
def test_a_fifo_at_a_record_is_refused_not_waited_on(tmp_path: Path, name: str) -> None:
    run_dir = _run(tmp_path, "r", {**GOOD, "status": "running"})
    (run_dir / name).unlink(missing_ok=True)
    os.mkfifo(run_dir / name)
    result = trainctl("status", str(run_dir))
    why = "a FIFO (named pipe), not a regular file"
    assert_refused(result, 2, f"{run_dir / name}: cannot be read ({why})")
    assert "run r" in result.out  # what could be read is still shown


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b'{"a": "' + b"x" * (17 << 20) + b'"}', "over the 16,777,216 allowed"),
        (b"\xff\xfe" + json.dumps(GOOD).encode(), "damaged ('utf-8' codec can't decode"),
        (b"[" * 100_000, "damaged (nested 100000 levels deep"),
        (b"not json", "damaged (Expecting value"),
        (b"[1, 2]", "damaged (not a JSON object)"),
        (json.dumps({**GOOD, "status": "\x1b[2Jowned"}).encode(), "is none of running"),
        (json.dumps({**GOOD, "status": ["x"]}).encode(), "damaged (status ['x'] is none of"),
        (json.dumps({**GOOD, "status": {"a": 1}}).encode(), "damaged (status {'a': 1} is none"),
    ],
    ids=["huge", "not-utf8", "deep", "not-json", "not-object", "unknown-status", "list", "object"],
)
def test_a_damaged_summary_is_named(tmp_path: Path, content: bytes, why: str) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "summary.json").write_bytes(content)
    result = trainctl("status", str(run_dir))
    assert_refused(result, 2, f"{run_dir / 'summary.json'}:", why)
    assert "status:          unknown" in result.out
    _bounded(result.text)


def test_garbage_fields_are_shown_bounded_redacted_and_never_raise(tmp_path: Path) -> None:
    summary = {
        "status": "failed", "run_name": "\x1b]0;x\x07" + "n" * 5000,
        "epochs_completed": 10**30, "epochs_target": True, "error": "boom\ns3://AKIA:secret@b/k",
        "best": {"metric": "__class__", "epoch": -1, "val_accuracy": float("inf")},
        "metrics": {"val_accuracy": "NaN"}, "promoted": "yes",
        "promotion": {"line": "kept v1: \x1b[31m s3://user:pw@host/b " + "z" * 100_000},
        "interruptions": [1, "x", {"cause": "\x1b", "step": "9" * 5000, "steps_lost": -1}],
        "accelerator_hours": {"kind": "gpu", "hours": 1e308, "per_worker": 1},
        "settings": {"checkpoint_metric": {"a": 1}},
    }  # fmt: skip
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps(summary))
    for args in ((), ("--json",)):
        result = trainctl("status", str(run_dir), *args)
        assert result.code == 0, result.text
        _bounded(result.text)
        assert "secret" not in result.text and "pw@" not in result.text
    record = json.loads(result.out)
    assert record["status"] == "failed" and record["epochs_completed"] is None
    assert record["best"] is None and record["last_epoch"] is None
    assert record["accelerator_hours"] is None and record["promotion"]["promoted"] is None
    assert record["interruptions"]["unreadable"] == 2 and record["metric"] == "val_accuracy"


def test_links_are_refused_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({**GOOD, "run_name": "not-this"}))
    run_dir = _run(tmp_path / "runs", "r")
    (run_dir / "summary.json").unlink()
    (run_dir / "summary.json").symlink_to(secret)
    result = trainctl("status", str(run_dir))
    assert_refused(result, 2, "summary.json: cannot be read (a symbolic link, not followed)")
    # A run folder that is itself a link, named directly or met in a listing.
    (tmp_path / "runs" / "planted").symlink_to(run_dir)
    result = trainctl("status", str(tmp_path / "runs" / "planted"))
    assert_refused(result, 2, "planted: is a symbolic link")
    result = trainctl("status", "--storage", str(tmp_path / "runs"))
    assert_refused(result, 2, "planted: is a symbolic link; trainctl never reads a run folder")


def test_a_storage_folder_reached_through_a_link_is_listed(tmp_path: Path) -> None:
    """The operator names the storage root (a volume mounted behind a link), as they name
    TRAIN_STORAGE_PATH, which `train` and `check` follow: `status --storage` refused it
    (a red-team pass). Links below it stay refused."""
    _run(tmp_path / "runs", "r")
    (tmp_path / "mounted").symlink_to(tmp_path / "runs")
    for given in ("mounted", "mounted/"):
        result = trainctl("status", "--storage", str(tmp_path / given))
        assert result.code == 0, result.text
        assert result.out.splitlines()[1].split()[:2] == ["r", "succeeded"], result.out
    assert trainctl("status", "r", "--storage", str(tmp_path / "mounted")).code == 0
    (tmp_path / "runs" / "planted").symlink_to(tmp_path / "runs" / "r")
    result = trainctl("status", "--storage", str(tmp_path / "mounted"))
    assert_refused(result, 2, "planted: is a symbolic link; trainctl never reads a run folder")


def test_unprintable_and_undecodable_names_are_shown_escaped(tmp_path: Path) -> None:
    storage = tmp_path / "runs"
    storage.mkdir()
    raw = os.fsencode(storage) + b"/r\xff\x1b[2J"
    os.mkdir(raw)
    run_folder.write_summary(Path(os.fsdecode(raw)), GOOD)
    result = trainctl("status", "--storage", str(storage))
    assert result.code == 0, result.text
    _bounded(result.text)
    assert "\\udcff\\x1b[2J" in result.out


def test_a_folder_of_ten_thousand_runs_is_listed_within_bounds(tmp_path: Path) -> None:
    storage = tmp_path / "runs"
    for index in range(10_000):
        (storage / f"r{index:05d}").mkdir(parents=True)
    for index in range(0, 10_000, 100):
        run_folder.write_summary(storage / f"r{index:05d}", GOOD)
    result = trainctl("status", "--storage", str(storage))
    assert result.code == 0, result.text
    assert len(result.out.splitlines()) < 100  # --limit's default, not 10,000 rows
    assert "more folders not read: --limit 50 reached" in result.out
    # Past the deadline the listing stops and says how far it got
    # (while listing the names or while reading the runs, as the machine's load has it)
    listing = run_status.list_runs(storage, limit=10_000, deadline_s=0.05)
    assert listing.timed_out and len(listing.runs) < 100, listing.problems
    said = "\n".join(run_status.listing_notes(listing, 10_000) + listing.problems)
    assert "(stopped after 0.05 s: " in said or "runs: listing took over 0.05 s" in said, said


def test_a_store_that_stops_answering_ends_the_listing_at_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that never returns (a hung network volume: it cannot be made here, so the
    reader blocks on an event instead) is left behind at the deadline."""
    storage = tmp_path / "runs"
    _run(storage, "a")
    _run(storage, "b")
    release = threading.Event()

    def hung(run_dir: object, now: object = None) -> object:
        release.wait(60)
        return None

    monkeypatch.setattr(run_status, "read_run", hung)
    started = time.monotonic()
    try:
        listing = run_status.list_runs(storage, limit=50, deadline_s=0.5)
    finally:
        release.set()
    assert time.monotonic() - started < 30  # far above the deadline: it ended, not hung
    assert listing.timed_out and listing.runs == [] and listing.not_read == 2


@pytest.mark.parametrize("command", ["status", "logs"])
def test_names_the_system_refuses_are_bad_input(tmp_path: Path, command: str) -> None:
    too_long = str(tmp_path / ("a" * 5000))
    result = trainctl(command, too_long)
    assert_refused(result, 2, "File name too long")
    _bounded(result.text)
    result = trainctl(command, f"{tmp_path}/x\x00y")
    assert result.code == 2 and "Traceback" not in result.text, result.text
    assert "internal error" not in result.text, result.text


def test_a_run_name_under_storage_is_one_name(tmp_path: Path) -> None:
    _run(tmp_path / "runs", "r")
    for name in ("..", "."):
        result = trainctl("status", name, "--storage", str(tmp_path / "runs"))
        assert_refused(result, 2, f"run name {name!r}: give a run folder's name under --storage")


def test_deep_trees_in_a_run_folder_are_not_walked(tmp_path: Path) -> None:
    """Folders nested 400 deep beside the records, in logs/ and as a storage entry: nothing
    descends them, so neither command recurses or stalls."""
    storage = tmp_path / "runs"
    run_dir = _run(storage, "r")
    attempt = run_dir / "logs" / "attempt-1"
    attempt.mkdir(parents=True)
    (attempt / "driver.log").write_text("driver line\n")
    for top in (run_dir / "deep", attempt / "deep", storage / "deep"):
        fd = os.open(top.parent, os.O_RDONLY)
        try:  # relative to an fd: the full path would pass PATH_MAX
            name = top.name
            for _ in range(400):
                os.mkdir(name, dir_fd=fd)
                inner = os.open(name, os.O_RDONLY, dir_fd=fd)
                os.close(fd)
                fd, name = inner, "d"
        finally:
            os.close(fd)
    assert trainctl("status", str(run_dir)).code == 0
    result = trainctl("status", "--storage", str(storage))
    assert result.code == 0 and "(1 folder without run records skipped)" in result.out
    result = trainctl("logs", str(run_dir))
    assert result.code == 0 and result.out.splitlines()[1:] == ["driver line"], result.text


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    """Every key path in a JSON document (the first two items of each list)."""
    found: list[tuple] = []
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value[:2])
        if isinstance(value, list)
        else ()
    )
    for key, inner in items:
        found.append((*prefix, key))
        found.extend(_paths(inner, (*prefix, key)))
    return found


def _real_summary(tmp_path: Path) -> tuple[Path, dict]:
    """A run folder and the summary.json its driver wrote: a finished, promoted run."""
    import time as clock

    from app.promotion.step import promote_run
    from app.run import driver
    from tests.promotion_support import INFO, make_run, settings_for

    run_dir = make_run(tmp_path / "runs", "r", 0.9)
    run_folder.record_epoch(run_dir, {"epoch": 1, "val_accuracy": 0.9, "run_time_s": 3.0})
    settings = settings_for(tmp_path / "runs", "r")
    summary, _ = driver._finish(settings, "succeeded", clock.monotonic(), "", None)
    promote_run(settings, INFO, summary)
    return run_dir, json.loads((run_dir / "summary.json").read_text())


def _with(record: dict, path: tuple, value: object) -> dict:
    """A copy of `record` with the field at `path` set to `value`."""
    changed = json.loads(json.dumps(record))
    inner = changed
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    return changed


def test_any_field_of_a_real_summary_of_another_type_never_raises(tmp_path: Path) -> None:
    """A summary.json the driver wrote (a finished, promoted run), each of its fields in turn
    made a list, an object or null: `status` as a list was an internal error (exit 1)."""
    run_dir, real = _real_summary(tmp_path)
    assert {"status", "best", "promotion", "accelerator_hours", "settings"} <= set(real)
    for path in _paths(real):
        for odd in (["x"], {"a": [1]}, None):
            (run_dir / "summary.json").write_text(json.dumps(_with(real, path, odd)))
            result = trainctl("status", str(run_dir), "--json")
            assert result.code in (0, 2) and "internal error" not in result.text, (path, odd)
            assert "Traceback" not in result.text, (path, odd)


def _numbers(value: object, prefix: tuple = ()) -> list[tuple]:
    """The paths of every number (not a bool) in a JSON value."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [prefix]
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    return [path for key, inner in items for path in _numbers(inner, (*prefix, key))]


def test_a_number_too_large_for_a_float_anywhere_in_a_run_folder_never_raises(
    tmp_path: Path,
) -> None:
    """JSON holds integers of any size; Python reads 1 followed by 400 zeros as an int that no
    float holds, and math.isfinite raises on it. A summary whose time to a threshold took such
    a figure made `status` an internal error (exit 1), as did the epoch records' run clock."""
    huge = 10**400
    run_dir, real = _real_summary(tmp_path)
    real["time_to_threshold"] = [
        {"threshold": "val_accuracy>=0.5", "settings": ["TRAIN_STOP_AT"], "epoch": 1,
         "run_time_s": 3.0, "accelerator_hours": 0.001}
    ]  # fmt: skip
    numbers = _numbers(real)
    assert ("time_to_threshold", 0, "run_time_s") in numbers and len(numbers) > 10
    for path in numbers:
        (run_dir / "summary.json").write_text(json.dumps(_with(real, path, huge)))
        for args in ((), ("--json",)):
            result = trainctl("status", str(run_dir), *args)
            assert result.code == 0 and "internal error" not in result.text, (path, result.text)
    (run_dir / "summary.json").write_text(json.dumps(real))
    epoch = {"epoch": 1, "val_accuracy": huge, "train_loss": huge, "run_time_s": huge,
             "worker_time_s": huge, "epoch_time_s": huge, "lr": huge}  # fmt: skip
    (run_dir / "metrics.jsonl").write_text(json.dumps(epoch) + "\n")
    for args in ((), ("--json",)):
        result = trainctl("status", str(run_dir), *args)
        assert result.code == 0 and "internal error" not in result.text, result.text


def test_figures_no_run_can_have_are_damaged_lines_not_shown(tmp_path: Path) -> None:
    """A running run's epochs come from metrics.jsonl, which many hands write: an accuracy of
    1e308 or a negative loss was shown as the run's figure (a red-team pass). Such a line is
    damaged: said with its line number, and the epochs before it shown; a diverged run's NaN
    loss is still a figure."""
    run_dir = tmp_path / "runs" / "live"
    run_dir.mkdir(parents=True)
    lines = [
        {"epoch": 1, "train_loss": float("nan"), "val_loss": 0.9, "val_accuracy": 0.61},
        {"epoch": 2, "train_loss": 0.5, "val_loss": 0.8, "val_accuracy": 1e308},
        {"epoch": 3, "train_loss": -2.0, "val_loss": 0.7, "val_accuracy": 0.7},
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = trainctl("status", str(run_dir), "--json")
    assert "1e+308" not in result.out and "-2.0" not in result.out, result.out
    assert f"skipped 2 unreadable line(s) in {run_dir / 'metrics.jsonl'} (line 2, 3)" in result.err
    shown = json.loads(result.out)
    assert json.dumps(shown).count("0.61") >= 1, shown
    # The line a live writer is appending is no damage; a last line without its newline that
    # is whole is read.
    with (run_dir / "metrics.jsonl").open("a") as metrics:
        metrics.write(
            json.dumps({"epoch": 4, "train_loss": 0.4, "val_loss": 0.6, "val_accuracy": 0.8})
        )
    result = trainctl("status", str(run_dir), "--json")
    assert '"val_accuracy": 0.8' in result.out, result.text
    with (run_dir / "metrics.jsonl").open("a") as metrics:
        metrics.write('\n{"epoch": 5, "train_lo')
    result = trainctl("status", str(run_dir), "--json")
    assert "line 5" not in result.err and '"epochs_completed": 4' in result.out, result.text


def test_a_runs_export_or_the_champions_folder_is_named_not_listed_as_empty(
    tmp_path: Path,
) -> None:
    """`status runs/r/export` and `status runs/champions` said `No run folders in ...` with
    exit 0 (a red-team pass): each is named for what it is, with the folder to give."""
    storage = tmp_path / "runs"
    run_dir = _run(storage, "r")
    (run_dir / "export").mkdir()
    (run_dir / "export" / "model_card.json").write_text("{}")
    (storage / "champions").mkdir()
    (storage / "champions" / "digits-cnn.json").write_text("{}")
    result = trainctl("status", str(run_dir / "export"))
    assert_refused(
        result, 2, "a run's export, not a run folder", f"give the run's folder, {run_dir}"
    )
    result = trainctl("status", str(storage / "champions"))
    assert_refused(result, 2, "the champions' pointers", f"trainctl status --storage {storage}")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = trainctl("status", str(empty))
    assert result.code == 0 and f"No run folders in {empty}." in result.out, result.text
