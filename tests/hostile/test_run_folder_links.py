"""A run folder on a shared volume, tampered with by another job: links planted where trainctl
writes or reads, and records nested deep enough to crash a JSON parser.

Every case checks both sides: trainctl refuses (exit 2 naming the link, or the item set aside
or ignored with a message), and the link's target is left exactly as it was, unread.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from app import preflight
from app.data.schema import inspect_dataset
from app.runfolder import checkpoint_names, checkpoints
from app.runfolder import folder as run_folder
from app.runfolder import log_capture as run_logs
from app.runfolder.summary import build_summary
from app.settings.env import load_settings
from app.storage import safe_fs
from app.storage.location import write_atomic
from app.training.model import build_model
from tests import parquet_support as data
from tests.hostile.support import assert_refused, trainctl

SECRET = "root:x:0:0:planted target\n"
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """What a planted link points at: a file and a folder outside the run folder."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "passwd").write_text(SECRET)
    return folder


def _unchanged(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["passwd"]
    assert (outside / "passwd").read_text() == SECRET


def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **extra: str) -> Path:
    """Settings for `trainctl train` on a small Parquet dataset; Ray's start refused."""

    def refuse(settings: object) -> None:
        raise AssertionError("the run folder's links were not refused before Ray")

    monkeypatch.setattr(preflight, "connect_ray", refuse)
    data.good(tmp_path / "data")
    env = {
        "TRAIN_DATASET": "parquet", "TRAIN_MODEL": "cnn", "TRAIN_GLOBAL_BATCH_SIZE": "64",
        "TRAIN_DATA_PATH": str(tmp_path / "data"), "TRAIN_STORAGE_PATH": str(tmp_path / "runs"),
        "TRAIN_RUN_NAME": "r", "TRAIN_EPOCHS": "1", **extra,
    }  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    return run_dir


def _checkpoint(run_dir: Path, epoch: int, model: torch.nn.Module | None = None) -> Path:
    folder = run_dir / checkpoint_names.dir_name(epoch)
    checkpoints.write_checkpoint(
        folder,
        model_state=(model or torch.nn.Linear(4, 3)).state_dict(),
        train_state={"optimizer": {}, "scaler": {}, "epoch": epoch, "step": 1},
        epoch=epoch,
        metrics={"val_accuracy": 0.5, "val_loss": 0.5},
    )
    return folder


# --- the driver refuses a linked run folder entry before Ray starts ----------------------------
LINKED = [
    ("checkpoint-folder", "checkpoint_epoch_0001", "dir"),
    ("corrupt-target", "corrupt_checkpoint_epoch_0001", "dir"),
    ("logs-folder", "logs", "dir"),
    ("attempt-folder", "logs/attempt-1", "dir"),
    ("driver-log", "logs/attempt-1/driver.log", "file"),
    ("summary", "summary.json", "file"),
    ("metrics", "metrics.jsonl", "file"),
    ("attempts", "attempts.jsonl", "file"),
    ("curves", "curves.png", "file"),
    ("classes", "classes.json", "file"),
    # Found only after training before: the run lost its export to the link.
    ("export-folder", "export", "dir"),
    ("export-card", "export/model_card.json", "file"),
    ("export-weights", "export/weights.pt", "file"),
]


@pytest.mark.parametrize(("name", "kind"), [c[1:] for c in LINKED], ids=[c[0] for c in LINKED])
def test_train_refuses_a_linked_run_folder_entry_before_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, outside: Path, name: str, kind: str
) -> None:
    run_dir = _env(monkeypatch, tmp_path)
    (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
    (run_dir / name).symlink_to(outside if kind == "dir" else outside / "passwd")
    result = trainctl("train")
    assert_refused(result, 2, f"{run_dir / name}: is a symbolic link (to {outside}")
    assert "root:x" not in result.text
    _unchanged(outside)
    assert (run_dir / name).is_symlink()  # left for a person to look at, not replaced


def test_setting_aside_never_writes_through_a_planted_reason_file(
    tmp_path: Path, outside: Path
) -> None:
    folder = _checkpoint(tmp_path, 1)
    (folder / "model.pt").write_bytes(b"truncated")
    (folder / checkpoints.REASON_FILE).symlink_to(outside / "passwd")
    [(bad, why)] = checkpoints.scan(tmp_path).bad
    moved = checkpoints.quarantine(bad, why)
    _unchanged(outside)
    reason = moved / checkpoints.REASON_FILE
    assert not reason.is_symlink() and "does not match" in reason.read_text()


def test_setting_aside_refuses_links_at_either_name(tmp_path: Path, outside: Path) -> None:
    """Without the driver's check (a link planted mid-run): refused, never moved or deleted
    through; `corrupt_*` used to crash rmtree, then the reason went into the link's target."""
    (tmp_path / "checkpoint_epoch_0002").symlink_to(outside)
    with pytest.raises(safe_fs.LinkRefused, match="checkpoint_epoch_0002: is a symbolic link"):
        checkpoints.quarantine(tmp_path / "checkpoint_epoch_0002", "bad")
    folder = _checkpoint(tmp_path, 1)
    (tmp_path / "corrupt_checkpoint_epoch_0001").symlink_to(outside)
    with pytest.raises(safe_fs.LinkRefused, match="corrupt_checkpoint_epoch_0001: is a symbolic"):
        checkpoints.quarantine(folder, "bad")
    _unchanged(outside)
    assert checkpoints.verify(folder).epoch == 1  # the real one is untouched


def test_checkpoint_files_behind_links_are_unusable_not_read(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "checkpoint_epoch_0002").symlink_to(outside)
    folder = _checkpoint(tmp_path, 1)
    (folder / "model.pt").unlink()
    (folder / "model.pt").symlink_to(outside / "passwd")
    scan = checkpoints.scan(tmp_path)
    assert scan.good == []
    reasons = dict((p.name, why) for p, why in scan.bad)
    assert "symbolic link" in reasons["checkpoint_epoch_0001"]
    assert "symbolic link" in reasons["checkpoint_epoch_0002"]


def test_records_are_not_appended_through_links(tmp_path: Path, outside: Path) -> None:
    for name in (run_folder.METRICS_FILE, run_folder.ATTEMPTS_FILE):
        (tmp_path / name).symlink_to(outside / "passwd")
    with pytest.raises(safe_fs.LinkRefused, match=r"metrics\.jsonl: is a symbolic link"):
        run_folder.record_epoch(tmp_path, {"epoch": 1})
    # A new attempt rewrites the metrics (replacing that link, not its target), then refuses
    # to append to the linked attempts.jsonl.
    with pytest.raises(safe_fs.LinkRefused, match=r"attempts\.jsonl: is a symbolic link"):
        run_folder.start_attempt(
            tmp_path, invocation="i", start_epoch=1, world_size=1, restored_from=None
        )
    _unchanged(outside)


def test_a_linked_summary_is_not_read_and_is_replaced_not_written_through(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (outside / "passwd").write_text('{"status": "succeeded", "secret": "root:x"}')
    (tmp_path / "summary.json").symlink_to(outside / "passwd")
    assert run_folder.read_summary(tmp_path) is None
    assert "summary.json is damaged (a symbolic link, not followed)" in capsys.readouterr().err
    run_folder.write_summary(tmp_path, {"status": "running"})
    assert not (tmp_path / "summary.json").is_symlink()
    assert (outside / "passwd").read_text() == '{"status": "succeeded", "secret": "root:x"}'


@pytest.mark.parametrize("held", [False, True], ids=["worker", "driver"])
def test_a_log_is_never_written_through_a_link(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str], held: bool
) -> None:
    log = run_logs.attempt_dir(tmp_path, 1) / "worker-0.log"
    log.parent.mkdir(parents=True)
    log.symlink_to(outside / "passwd")
    if held:  # the driver opens its log once training starts: exit 2 naming it
        refused = pytest.raises(safe_fs.LinkRefused, match=r"worker-0\.log: is a symbolic link")
        with refused, run_logs.capture(log, 1.0, "driver", held=True) as handler:
            print("starting")
            handler.open()
    else:  # a worker keeps its output on stderr and says why
        with run_logs.capture(log, 1.0, "worker rank 0"):
            print("epoch 1")
        assert "log not kept in the run folder" in capsys.readouterr().err
    _unchanged(outside)


def test_a_linked_logs_folder_is_not_written_into(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "logs").symlink_to(outside)
    with pytest.raises(safe_fs.LinkRefused, match=r"logs: is a symbolic link"):
        run_logs.next_attempt(tmp_path)  # the driver, before anything else
    with run_logs.capture(run_logs.attempt_dir(tmp_path, 1) / "worker-0.log", 1.0, "w"):
        print("epoch 1")  # a worker: on its stderr only
    assert "logs: is a symbolic link" in capsys.readouterr().err
    _unchanged(outside)


# --- `trainctl logs` on links: exit 2 naming it, nothing printed from the target ---------------
@pytest.mark.parametrize("linked", ["log", "rotated", "attempt", "logs"])
def test_logs_command_refuses_a_link(tmp_path: Path, outside: Path, linked: str) -> None:
    run_dir = tmp_path / "runs" / "r"
    attempt = run_logs.attempt_dir(run_dir, 1)
    attempt.mkdir(parents=True)
    (attempt / "driver.log").write_text("driver line\n")
    if linked == "log":
        (attempt / "worker-0.log").symlink_to(outside / "passwd")
        named = attempt / "worker-0.log"
    elif linked == "rotated":
        (attempt / "worker-0.log").write_text("current\n")
        (attempt / "worker-0.log.2").symlink_to(outside / "passwd")
        named = attempt / "worker-0.log.2"
    elif linked == "attempt":
        (outside / "worker-0.log").symlink_to(outside / "passwd")
        (attempt.parent / "attempt-2").symlink_to(outside)
        named = attempt.parent / "attempt-2"
    else:
        (run_dir / "logs" / "attempt-1" / "driver.log").unlink()
        (run_dir / "logs" / "attempt-1").rmdir()
        (run_dir / "logs").rmdir()
        (outside / "attempt-1").mkdir()
        (outside / "attempt-1" / "worker-0.log").write_text(SECRET)
        (run_dir / "logs").symlink_to(outside)
        named = run_dir / "logs"
    for extra in ([], ["--tail", "3"]):
        result = trainctl("logs", str(run_dir), "--worker", "0", *extra)
        assert_refused(result, 2, f"{named}: is a symbolic link")
        assert "root:x" not in result.text


def test_logs_command_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    attempt = run_logs.attempt_dir(tmp_path / "r", 1)
    attempt.mkdir(parents=True)
    os.mkfifo(attempt / "worker-0.log")
    # Named for what it is (it used to read "no worker-0.log ...; there: worker-0.log").
    result = trainctl("logs", str(tmp_path / "r"), "--worker", "0")
    assert_refused(result, 2, "worker-0.log: is a FIFO (named pipe), not a log file")


# --- deep JSON: damaged records, not an internal error; a rerun still works --------------------
def test_deep_json_records_are_damaged_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = '{"epoch": 1, "train_loss": 1.0, "val_loss": 1.0, "val_accuracy": 0.5}'
    (tmp_path / run_folder.METRICS_FILE).write_text(f'{good}\n{{"epoch": 2, "x": {DEEP}}}\n')
    (tmp_path / run_folder.ATTEMPTS_FILE).write_text(DEEP + "\n")
    (tmp_path / run_folder.SUMMARY_FILE).write_text(DEEP)
    folder = _checkpoint(tmp_path, 1)
    (folder / checkpoints.META_FILE).write_text(DEEP)
    assert [r["epoch"] for r in run_folder.epochs(tmp_path)] == [1]
    assert run_folder.attempts(tmp_path, "i") == []
    assert run_folder.read_summary(tmp_path) is None
    with pytest.raises(ValueError, match="nested 100000 levels deep"):
        checkpoints.verify(folder)
    summary = build_summary(
        tmp_path, status="succeeded", run_name="r", target_epochs=1, settings={},
        duration_s=1.0, failures=0, restored_from=None,
    )  # fmt: skip
    assert summary["metrics"]["val_accuracy"] == 0.5
    err = capsys.readouterr().err
    assert f"skipped 1 unreadable line(s) in {tmp_path / 'metrics.jsonl'} (line 2)" in err
    assert f"{tmp_path / 'summary.json'} is damaged (nested 100000 levels deep" in err


def test_a_rerun_over_deep_json_finishes_and_rewrites_the_summary(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The run is already complete, so the rerun trains nothing (no Ray): it must read the
    damaged records around and write a fresh summary, instead of an internal error."""
    run_dir = _env(monkeypatch, tmp_path)
    info = inspect_dataset(tmp_path / "data")
    _checkpoint(run_dir, 1, build_model("cnn", info))
    good = '{"epoch": 1, "train_loss": 1.0, "val_loss": 1.0, "val_accuracy": 0.5, "time": 1}'
    (run_dir / run_folder.METRICS_FILE).write_text(f"{good}\n{DEEP}\n")
    (run_dir / run_folder.SUMMARY_FILE).write_text(DEEP)
    result = trainctl("train")
    assert result.code == 0, result.text
    assert "summary.json is damaged (nested 100000 levels deep" in result.text
    assert "metrics.jsonl (line 2)" in result.text
    summary = run_folder.read_summary(run_dir)
    assert summary is not None and summary["status"] == "succeeded"
    assert summary["epochs_completed"] == 1 and load_settings().run_dir == run_dir


# --- the summary's temporary file -------------------------------------------------------------
def test_a_failed_replace_leaves_no_temporary_file(tmp_path: Path) -> None:
    (tmp_path / "summary.json").mkdir()  # os.replace of a file onto a folder fails
    with pytest.raises(IsADirectoryError):
        run_folder.write_summary(tmp_path, {"status": "running"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
    (tmp_path / "curves.png").mkdir()
    with pytest.raises(IsADirectoryError):
        write_atomic(tmp_path / "curves.png", b"png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.png", "summary.json"]


@pytest.mark.timeout(60)  # the depth scan once backtracked: a crafted record took hours
def test_an_unclosed_string_of_escaped_quotes_is_scanned_in_one_pass(tmp_path: Path) -> None:
    crafted = '{"status": "' + '\\"' * 1_000_000
    (tmp_path / run_folder.SUMMARY_FILE).write_text(crafted)
    (tmp_path / run_folder.METRICS_FILE).write_text(crafted + "\\\n")
    assert run_folder.read_summary(tmp_path) is None
    assert run_folder.epochs(tmp_path) == []


def test_a_run_folder_that_is_itself_a_link_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, outside: Path
) -> None:
    """Whoever can write the storage root could plant runs/<name> -> anywhere."""
    run_dir = _env(monkeypatch, tmp_path)
    run_dir.rmdir()
    (outside / "logs" / "attempt-1").mkdir(parents=True)
    (outside / "logs" / "attempt-1" / "driver.log").write_text(SECRET)
    run_dir.symlink_to(outside)
    for args in (
        ("check", "--skip-cluster"),
        ("train",),
        ("logs", "r", "--driver", "--storage", str(tmp_path / "runs")),
        ("logs", str(run_dir), "--driver"),
    ):
        result = trainctl(*args)
        assert_refused(result, 2, f"{run_dir}: is a symbolic link")
        assert SECRET.strip() not in result.text
    assert sorted(p.name for p in outside.iterdir()) == ["logs", "passwd"]
