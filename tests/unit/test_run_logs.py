"""Run-folder logs: the tee, rotation, tracebacks, and `trainctl logs --worker/--driver`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.errors import EXIT_INVALID, EXIT_OK, RunFailed
from app.run import log_lookup
from app.runfolder import log_capture as run_logs
from app.runfolder import log_reader
from app.storage.buckets import ObjectPath
from tests.s3_support import Bucket, S3Server
from tests.unit.kube_cli_support import trainctl


def test_capture_tees_output_and_writes_the_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = run_logs.attempt_dir(tmp_path, 1) / "worker-0.log"
    with pytest.raises(ZeroDivisionError), run_logs.capture(log, 1.0, "worker rank 0"):
        print("epoch 1 done")
        print("partial line without newline", end="", file=sys.stderr)
        1 / 0  # noqa: B018
    out, err = capsys.readouterr()
    assert out == "epoch 1 done\n" and err == "partial line without newline"  # still on screen
    text = log.read_text().splitlines()
    assert text[0].startswith("=== worker rank 0 at ")
    assert text[1:3] == ["epoch 1 done", "partial line without newline"]
    assert text[3] == "Traceback (most recent call last):"
    assert text[-1] == "ZeroDivisionError: division by zero"
    assert sys.stdout is not None and not isinstance(sys.stdout, run_logs._Tee)


def test_rays_progress_bar_lines_stay_on_screen_not_in_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep trial's driver.log was mostly Ray Data's bar states, raw JSON (a red-team pass):
    lines Ray's own driver draws as bars, from a process that is not it."""
    import json

    log = tmp_path / "driver.log"
    bar = json.dumps({"__magic_token__": "__ray_tqdm_magic_token__", "x": 3, "pos": 0})
    with run_logs.capture(log, 1.0, "driver"):
        print("epoch 1/2")
        print(bar)
        print("epoch 2/2")
    assert capsys.readouterr().out == f"epoch 1/2\n{bar}\nepoch 2/2\n"  # for Ray to draw
    assert log.read_text().splitlines()[1:] == ["epoch 1/2", "epoch 2/2"]


def test_expected_errors_are_written_as_messages(tmp_path: Path) -> None:
    log = tmp_path / "driver.log"
    with pytest.raises(RunFailed), run_logs.capture(log, 1.0, "driver"):
        raise RunFailed(["training failed: boom", "logs: here"])
    assert log.read_text().splitlines()[1:] == [
        "trainctl: training failed: boom",
        "trainctl: logs: here",
    ]


def test_logs_rotate_and_read_back_oldest_first(tmp_path: Path) -> None:
    log = run_logs.attempt_dir(tmp_path, 1) / "worker-1.log"
    with run_logs.capture(log, 2048 / 1024 / 1024, "rank 1"):  # 2 KiB
        for i in range(400):
            print(f"line {i:04d} " + "x" * 40)
    files = sorted(p.name for p in log.parent.iterdir())
    assert files == ["worker-1.log", "worker-1.log.1", "worker-1.log.2", "worker-1.log.3"]
    assert all(p.stat().st_size <= 2048 for p in log.parent.iterdir())
    lines = [line for line in log_lookup.read_lines(log) if line.startswith("line ")]
    numbers = [int(line.split()[1]) for line in lines]
    assert numbers == list(range(numbers[0], 400)) and numbers[0] > 0  # oldest ones rotated out


def test_logs_command_reads_the_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "runs" / "demo"
    for attempt, text in ((1, "first"), (2, "second")):
        folder = run_logs.attempt_dir(run_dir, attempt)
        folder.mkdir(parents=True)
        (folder / "worker-1.log").write_text(f"{text} attempt\n")
        (folder / "driver.log").write_text(f"driver {text}\n")
    code, out, _ = trainctl(capsys, "logs", str(run_dir), "--worker", "1")
    assert code == EXIT_OK
    assert out.splitlines() == [f"==> {run_dir}/logs/attempt-2/worker-1.log <==", "second attempt"]
    code, out, _ = trainctl(capsys, "logs", str(run_dir), "--worker", "1", "--attempt", "1")
    assert out.splitlines()[1] == "first attempt"
    # A run name under --storage, or under TRAIN_STORAGE_PATH.
    code, out, _ = trainctl(capsys, "logs", "demo", "--driver", "--storage", str(run_dir.parent))
    assert code == EXIT_OK and out.splitlines()[1] == "driver second"
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(run_dir.parent))
    code, out, _ = trainctl(capsys, "logs", "demo", "--driver")
    assert code == EXIT_OK and out.splitlines()[1] == "driver second"
    # Bad input: exit 2 with what exists.
    code, _, err = trainctl(capsys, "logs", str(run_dir), "--worker", "7")
    assert code == EXIT_INVALID and "no worker-7.log" in err and "worker-1.log" in err
    code, _, err = trainctl(capsys, "logs", str(run_dir), "--worker", "1", "--attempt", "9")
    assert code == EXIT_INVALID and "holds attempts 1, 2" in err
    code, _, err = trainctl(capsys, "logs", "nope", "--worker", "0")
    assert code == EXIT_INVALID and "is a run folder with logs" in err
    code, _, err = trainctl(capsys, "logs", str(run_dir), "--worker", "0", "--driver")
    assert code == EXIT_INVALID and "not both" in err
    code, _, err = trainctl(capsys, "logs", "some-rayjob", "--attempt", "1")
    assert code == EXIT_INVALID and "go with --worker or --driver" in err


def test_logs_of_a_run_folder_path_show_the_drivers_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path (with a '/', or one that exists here) is a run folder, never a RayJob name."""
    run_dir = tmp_path / "runs" / "demo"
    folder = run_logs.attempt_dir(run_dir, 1)
    folder.mkdir(parents=True)
    (folder / "driver.log").write_text("driver line\n")
    (folder / "worker-0.log").write_text("worker line\n")
    code, out, err = trainctl(capsys, "logs", str(run_dir))
    assert code == EXIT_OK, err
    assert out.splitlines() == [f"==> {folder}/driver.log <==", "driver line"]
    monkeypatch.chdir(tmp_path / "runs")
    for name in ("demo", "./demo", "demo/"):  # exists here: the folder, not a RayJob
        code, out, err = trainctl(capsys, "logs", name, "--tail", "1")
        assert code == EXIT_OK and out.splitlines()[1:] == ["driver line"], (name, err)
    code, out, err = trainctl(capsys, "logs", "demo", "--storage", str(tmp_path / "runs"))
    assert code == EXIT_OK and out.splitlines()[1:] == ["driver line"], err
    # Neither a path here nor a RayJob name: said so, with the rule.
    code, _, err = trainctl(capsys, "logs", "Demo_Run")
    assert code == EXIT_INVALID and "not a valid Kubernetes name" in err, err
    assert "nor is it a file or folder here" in err and "contains '/'" in err


def test_a_held_log_writes_nothing_unless_opened(tmp_path: Path) -> None:
    refused = tmp_path / "refused" / "driver.log"
    with pytest.raises(RunFailed), run_logs.capture(refused, 1.0, "driver", held=True):
        print("checking the cluster")
        raise RunFailed("no capacity")
    assert not refused.parent.exists()  # bad input leaves no folder behind
    started = tmp_path / "started" / "driver.log"
    with run_logs.capture(started, 1.0, "driver", held=True) as log:
        print("starting run")
        log.open()
        print("epoch 1/2")
    assert started.read_text().splitlines()[1:] == ["starting run", "epoch 1/2"]


def test_a_logged_line_that_a_handler_prints_is_written_once(tmp_path: Path) -> None:
    """Ray's worker loggers print through a handler that writes to the current sys.stderr (the
    tee) and also reach the root logger: each line used to land in the log twice."""
    import logging

    log = tmp_path / "worker-0.log"
    printing = logging.getLogger("trainctl.test.printing")
    printing.setLevel(logging.INFO)
    quiet = logging.getLogger("trainctl.test.quiet")
    quiet.setLevel(logging.INFO)
    with run_logs.capture(log, 1.0, "banner"):
        # A handler made inside the capture writes to the tee; the record still propagates.
        handler = logging.StreamHandler(sys.stderr)
        printing.addHandler(handler)
        try:
            printing.info("Reporting training result 1")
            print("printed line")
            quiet.info("only the root logger sees this")
            printing.info("Reporting training result 2")
        finally:
            printing.removeHandler(handler)
    lines = log.read_text().splitlines()[1:]
    assert lines == [
        "Reporting training result 1",
        "printed line",
        "only the root logger sees this",
        "Reporting training result 2",
    ]


# --- reading a log back from a bucket: streamed, tailed, followed --------------------------------
@pytest.fixture
def bucket_log(
    s3_server: S3Server,
    request: pytest.FixtureRequest,
) -> tuple[Bucket, ObjectPath]:
    bucket = s3_server.bucket("logs-" + request.node.name.replace("_", "-")[:30].strip("-"))
    path = ObjectPath(bucket.uri("runs/r/logs/attempt-1/worker-0.log"), bucket.endpoint)
    return bucket, path


def test_a_log_in_a_bucket_streams_and_tails_across_rotated_objects(
    bucket_log: tuple[Bucket, ObjectPath],
) -> None:
    bucket, path = bucket_log
    key = "runs/r/logs/attempt-1/worker-0.log"
    bucket.write(key + ".1", b"old 1\nold 2\n")
    bucket.write(key, b"".join(f"line {i}\n".encode() for i in range(3000)) + b"no newline")
    lines = list(log_reader.read_lines(path))
    assert lines[:3] == ["old 1", "old 2", "line 0"] and lines[-1] == "no newline"
    assert len(lines) == 3003
    assert list(log_reader.tail_lines(path, 2)) == ["line 2999", "no newline"]
    assert list(log_reader.tail_lines(path, 3003))[:2] == ["old 1", "old 2"]


def test_following_a_log_in_a_bucket_reads_each_upload_and_a_rotation(
    bucket_log: tuple[Bucket, ObjectPath],
) -> None:
    """Each poll of the real object: an upload that grew it prints the new lines once; a
    smaller object (the log begun again after a rotation) is read from its start."""
    bucket, path = bucket_log
    key = "runs/r/logs/attempt-1/worker-0.log"
    bucket.write(key, b"first\n")
    uploads = [b"first\nsecond\nthird\n", b"after rotation\n", None]
    printed: list[str] = []

    def sleep(seconds: float) -> None:  # the poll's wait: the next upload lands meanwhile
        upload = uploads.pop(0)
        if upload is None:
            raise KeyboardInterrupt  # what Ctrl-C (or the CLI's SIGTERM handler) raises
        bucket.write(key, upload)

    with pytest.raises(KeyboardInterrupt):
        log_reader.follow_log(path, printed.append, tail=1, sleep=sleep)
    assert printed == ["first", "second", "third", "after rotation"]


def test_a_log_in_a_bucket_is_uploaded_and_continued_by_a_restart(
    s3_server: S3Server,
) -> None:
    bucket = s3_server.bucket("logs-uploaded-and-continued")
    root = ObjectPath(bucket.uri("runs/r1"), bucket.endpoint)
    path = run_logs.attempt_dir(root, 1) / "worker-0.log"
    with run_logs.capture(path, 20.0, "worker rank 0, attempt 1"):
        print("first start")
    with run_logs.capture(path, 20.0, "worker rank 0, attempt 1"):
        print("after a restart")
    text = bucket.read("runs/r1/logs/attempt-1/worker-0.log").decode()
    assert text.index("first start") < text.index("after a restart")
    assert run_logs.attempts(root) == [1]
    found = log_lookup.log_file(root, worker=0, attempt=None)
    assert list(log_lookup.read_lines(found))[-1] == "after a restart"


def test_a_failed_runs_hint_names_only_the_logs_its_attempt_wrote(tmp_path: Path) -> None:
    """A red-team pass: a run that failed before its workers trained said `--worker N, N = 0`,
    and `trainctl logs RUN --worker 0` then answered 'no worker-0.log'."""
    from app.run.driver import _logs_line

    attempt = tmp_path / "logs" / "attempt-2"
    attempt.mkdir(parents=True)
    (attempt / "driver.log").write_text("d\n")
    assert _logs_line(tmp_path, 2) == (
        f"driver log: {attempt}/driver.log (`trainctl logs {tmp_path} --driver`); no worker "
        "wrote a log in this attempt"
    )
    for rank in (0, 1):
        (attempt / f"worker-{rank}.log").write_text("w\n")
    (attempt / "worker-1.log.1").write_text("rotated\n")  # an older file is not a rank
    line = _logs_line(tmp_path, 2)
    assert line.startswith(f"driver and worker logs: {attempt}/ (`trainctl logs {tmp_path} ")
    assert "--worker N`, N = 0 to 1, the worker's rank; --driver" in line, line
