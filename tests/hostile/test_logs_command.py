"""`trainctl logs --worker/--driver` on big, secret-bearing and growing logs: bounded memory,
credentials redacted, `--tail` read from the end, `--follow` through a rotation until SIGTERM."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

import app
from app.runfolder import log_capture as run_logs
from app.runfolder import log_reader
from app.storage import safe_fs
from tests.hostile.support import assert_refused, trainctl
from tests.s3_support import S3Server

REPO = Path(app.__file__).resolve().parents[1]
MiB = 1 << 20


def _log(tmp_path: Path, text: str | bytes = "") -> Path:
    log = run_logs.attempt_dir(tmp_path / "r", 1) / "worker-0.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(text.encode() if isinstance(text, str) else text)
    return log


def _big(log: Path, megabytes: int) -> None:
    line = b"x" * 99 + b"\n"
    with log.open("ab") as file:
        file.write(line * (megabytes * MiB // len(line)))


def _peak(call: object) -> int:
    tracemalloc.start()
    try:
        call()  # type: ignore[operator]
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_printed_lines_are_redacted(tmp_path: Path) -> None:
    _log(tmp_path, "reading s3://AKIAEXAMPLE:wJalr/K7MDENG@bucket/data\nplain\n")
    result = trainctl("logs", str(tmp_path / "r"), "--worker", "0")
    assert result.code == 0, result.text
    assert result.out.splitlines()[1:] == ["reading s3://***@bucket/data", "plain"]
    assert "wJalr" not in result.text and "AKIAEXAMPLE" not in result.text


def test_printed_lines_show_control_characters_escaped(tmp_path: Path) -> None:
    """A log lies where other jobs write: an OSC 52 clipboard write, an OSC 8 link and colour
    codes in it reached the terminal as they were. Tabs and other scripts stay as they are."""
    hostile = "\x1b]52;c;cm0gLXJmIH4K\x07\x1b[31mred\x1b]8;;http://evil\x1b\\link\r"
    _log(tmp_path, f"{hostile}\nkeep\tthis ✔ é\n")
    result = trainctl("logs", str(tmp_path / "r"), "--worker", "0")
    assert result.code == 0, result.text
    assert "\x1b" not in result.out and "\x07" not in result.out and "\r" not in result.out
    assert result.out.splitlines()[1:] == [
        "\\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b[31mred\\x1b]8;;http://evil\\x1b\\link",
        "keep\tthis ✔ é",
    ]


def test_a_big_log_is_streamed_in_bounded_memory(tmp_path: Path) -> None:
    """The whole log used to be read at once (100 MB held 386 MB); a line with no end is
    printed in pieces rather than gathered."""
    log = _log(tmp_path, b"first\n")
    _big(log, 8)
    with log.open("ab") as file:
        file.write(b"y" * (3 * MiB) + b"\nlast\n")
    lines = {"count": 0, "last": ""}

    def read() -> None:
        for line in log_reader.read_lines(log, tmp_path / "r"):
            lines["count"] += 1
            lines["last"] = line

    assert _peak(read) < 1 * MiB
    assert lines["last"] == "last"
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        from app.cli import run

        assert _peak(lambda: run(["logs", str(tmp_path / "r"), "--worker", "0"])) < 2 * MiB


def test_tail_reads_from_the_end_in_bounded_memory(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _big(log, 40)
    with log.open("ab") as file:
        file.write(b"".join(f"tail {i}\n".encode() for i in range(5)))
    results = []
    args = ("logs", str(log.parents[2]), "--worker", "0", "--tail", "3")
    assert _peak(lambda: results.append(trainctl(*args))) < 1 * MiB  # the file is 40 MiB
    assert results[0].code == 0, results[0].text
    assert results[0].out.splitlines()[1:] == ["tail 2", "tail 3", "tail 4"]


def test_tail_reaches_into_rotated_files(tmp_path: Path) -> None:
    log = _log(tmp_path, "c1\nc2")  # the current file's last line has no newline yet
    log.with_name("worker-0.log.1").write_text("b1\nb2\n")
    log.with_name("worker-0.log.2").write_text("a1\n")
    run_dir = str(tmp_path / "r")
    for count, want in ((1, ["c2"]), (3, ["b2", "c1", "c2"]), (9, ["a1", "b1", "b2", "c1", "c2"])):
        result = trainctl("logs", run_dir, "--worker", "0", "--tail", str(count))
        assert result.out.splitlines()[1:] == want, (count, result.text)
    assert trainctl("logs", run_dir, "--worker", "0", "--tail", "0").out.splitlines()[1:] == []
    # Past any log's length, and past C's integers: refused before anything is printed.
    huge = trainctl("logs", run_dir, "--worker", "0", "--tail", "9223372036854775808")
    assert_refused(huge, 2, "--tail", "0<=x<=10000000")
    assert "==>" not in huge.out


def test_follow_prints_new_lines_through_a_rotation_until_sigterm(tmp_path: Path) -> None:
    log = _log(tmp_path, "before\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "app", "logs", str(tmp_path / "r"), "--worker", "0", "-f"]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x.rstrip("\n")) for x in proc.stdout])
    reader.start()

    def expect(want: str) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                if lines.get(timeout=deadline - time.monotonic()) == want:
                    return
        raise AssertionError(f"{want!r} not printed")

    try:
        expect("before")
        with log.open("a") as file:
            file.write("appended https://user:hunter2@mlflow:5000/x\n")
        expect("appended https://***@mlflow:5000/x")
        log.rename(log.with_name("worker-0.log.1"))
        log.write_text("after rotation\n")
        expect("after rotation")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 143
        assert "stopped by SIGTERM" in proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        reader.join(timeout=10)


def test_tail_is_for_run_folder_logs_only() -> None:
    result = trainctl("logs", "some-rayjob", "--tail", "3")
    assert result.code == 2 and "--tail go with --worker or --driver" in result.text


def test_an_unreadable_log_is_named_not_a_traceback(tmp_path: Path) -> None:
    log = _log(tmp_path, "current\n")
    log.with_name("worker-0.log.1").mkdir()  # a rotated "file" that cannot be read
    result = trainctl("logs", str(tmp_path / "r"), "--worker", "0")
    assert result.code == 2, result.text
    # Named before any line is printed, with what it is instead of a file.
    assert f"{log.with_name('worker-0.log.1')}: is a folder, not a log file" in result.text
    assert "Traceback" not in result.text and "internal error" not in result.text


def test_a_fifo_or_folder_at_a_logs_name_is_named_for_what_it_is(tmp_path: Path) -> None:
    """It used to say `no driver.log in ...; there: driver.log`."""
    log = _log(tmp_path, "worker line\n")
    os.mkfifo(log.with_name("driver.log"))
    result = trainctl("logs", str(tmp_path / "r"))  # the driver's, by default
    assert_refused(result, 2, f"{log.with_name('driver.log')}: is a FIFO (named pipe), not a log")
    assert "there:" not in result.text
    os.mkfifo(log.with_name("worker-0.log.2"))  # a rotated one: refused before any line
    result = trainctl("logs", str(tmp_path / "r"), "--worker", "0")
    assert_refused(result, 2, "worker-0.log.2: is a FIFO (named pipe)")
    assert "worker line" not in result.out
    log.with_name("worker-1.log").mkdir()
    result = trainctl("logs", str(tmp_path / "r"), "--worker", "1")
    assert_refused(result, 2, "worker-1.log: is a folder, not a log file")


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path: Path) -> None:
    """`trainctl logs RUN | head -1`: the closed pipe is the reader's choice, not a log that
    "cannot be read" (it was named so, exit 2)."""
    _big(_log(tmp_path, b"first\n"), 2)
    command = [sys.executable, "-m", "app", "logs", str(tmp_path / "r"), "--worker", "0"]
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.readline()
    process.stdout.close()  # as `head -1` does
    error = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1  # click's end for a closed output: no message
    assert "cannot be read" not in error and "Traceback" not in error, error


def test_a_new_attempt_without_its_log_yet_points_to_the_one_before(tmp_path: Path) -> None:
    _log(tmp_path, b"first attempt\n").rename(
        run_logs.attempt_dir(tmp_path / "r", 1) / "driver.log"
    )
    run_logs.attempt_dir(tmp_path / "r", 2).mkdir(parents=True)  # a rerun's, before it writes
    result = trainctl("logs", str(tmp_path / "r"))
    assert_refused(result, 2, "attempt 2 is starting, or wrote nothing", "--attempt 1 shows")
    shown = trainctl("logs", str(tmp_path / "r"), "--attempt", "1")
    assert shown.code == 0 and "first attempt" in shown.out, shown.text


def test_a_signal_between_a_folder_walks_closes_stays_the_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`logs -f` looks the log up every half second, walking its folders by fd; SIGTERM is
    raised as an exception at whatever line runs. Landing just after an fd was closed, it used
    to make the walk's cleanup close that fd again: the EBADF replaced the signal, and `logs -f`
    ended "cannot be read" (exit 2) instead of "stopped by SIGTERM" (143). Each close on the
    walk is tried as the one the signal follows."""
    log = _log(tmp_path, "line\n")
    real_close = os.close
    for landing in range(1, 4):  # the run folder, logs/, attempt-1/: three closes on the walk
        calls = 0

        def close_then_signal(fd: int, landing: int = landing) -> None:
            nonlocal calls
            real_close(fd)
            calls += 1
            if calls == landing:
                raise KeyboardInterrupt("SIGTERM")

        monkeypatch.setattr(os, "close", close_then_signal)
        with pytest.raises(KeyboardInterrupt):
            safe_fs.lstat(log, tmp_path)
        monkeypatch.setattr(os, "close", real_close)
        assert calls >= landing


def test_logs_of_a_sweep_point_to_its_trials(tmp_path: Path) -> None:
    (tmp_path / "sweep" / "trials" / "trial-0001").mkdir(parents=True)
    (tmp_path / "sweep" / "sweep.json").write_text("{}")
    result = trainctl("logs", str(tmp_path / "sweep"))
    assert_refused(
        result, 2, "is a sweep's folder", f"trainctl logs {tmp_path / 'sweep' / 'trials'}/<trial>"
    )


def test_a_run_given_by_its_uri_is_never_looked_up_again_under_the_storage(
    monkeypatch: pytest.MonkeyPatch, s3_server: S3Server
) -> None:
    """A URI that held no run was looked up again as a name under TRAIN_STORAGE_PATH, and the
    refusal named `s3://b/runs/s3://b/runs/nope/sweep.json: Empty path component` (found by a
    red-team pass)."""
    bucket = s3_server.bucket("logs-by-uri")
    bucket.write("runs/r1/summary.json", b"{}")
    monkeypatch.setenv("TRAIN_STORAGE_ENDPOINT", s3_server.endpoint)
    monkeypatch.setenv("TRAIN_STORAGE_PATH", "s3://logs-by-uri/runs")
    for run, why in (
        ("s3://logs-by-uri/runs/nope", "no such folder: s3://logs-by-uri/runs/nope"),
        ("s3://logs-by-uri/runs/r1", "s3://logs-by-uri/runs/r1 is no run folder with logs"),
    ):
        result = trainctl("logs", run)
        assert_refused(result, 2, f"run '{run}': {why}")
        assert "s3://logs-by-uri/runs/s3:" not in result.text and "Empty path" not in result.text
