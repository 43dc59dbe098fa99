"""Run-folder history: progress lines people read, and history that survives resumes."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.formatting import format_duration
from app.runfolder import folder as run_folder
from app.runfolder.epoch_record import epoch_line


def _metrics(epoch: int) -> dict[str, float]:
    return {
        "epoch": epoch,
        "train_loss": 1.0 / epoch,
        "val_loss": 1.5 / epoch,
        "val_accuracy": 0.5 + epoch / 100,
        "epoch_time_s": 4.25,
    }


def test_progress_line_is_readable_with_eta() -> None:
    line = epoch_line(_metrics(3), 10, eta_s=125)
    assert line.startswith("epoch  3/10")
    assert "val_acc 53.00%" in line and "4.2s/epoch" in line and line.endswith("ETA 2m05s")


def test_progress_line_shows_throughput_when_recorded() -> None:
    line = epoch_line({**_metrics(1), "images_per_s": 12345.6}, 2, eta_s=4)
    assert "4.2s/epoch  12,346 img/s  ETA 4s" in line


def test_without_an_estimate_the_eta_is_the_remaining_epochs_at_this_pace() -> None:
    assert epoch_line(_metrics(2), 10).endswith("4.2s/epoch  ETA 34s")


def test_missing_or_odd_fields_are_left_out() -> None:
    record = {"epoch": 2, "train_loss": True, "val_loss": "nan", "val_accuracy": 0.5}
    assert epoch_line(record, 3) == "epoch 2/3  val_acc 50.00%"


def test_durations_read_short() -> None:
    cases = {-3: "0s", 59.4: "59s", 125: "2m05s", 3 * 3600 + 7 * 60: "3h07m", 5 * 86400: "5d"}
    assert {seconds: format_duration(seconds) for seconds in cases} == cases


def test_resume_forgets_epochs_after_the_checkpoint(tmp_path: Path) -> None:
    for epoch in (1, 2, 3):
        run_folder.record_epoch(tmp_path, _metrics(epoch))
    run_folder.start_attempt(
        tmp_path, invocation="b", start_epoch=3, world_size=2, restored_from="ckpt2"
    )
    run_folder.record_epoch(tmp_path, _metrics(3))
    assert [row["epoch"] for row in run_folder.epochs(tmp_path)] == [1, 2, 3]
    assert run_folder.attempts(tmp_path, "b")[0]["restored_from"] == "ckpt2"
    assert run_folder.attempts(tmp_path, "a") == []


def test_a_line_cut_short_by_a_kill_is_ignored(tmp_path: Path) -> None:
    run_folder.record_epoch(tmp_path, _metrics(1))
    with (tmp_path / run_folder.METRICS_FILE).open("a") as handle:
        handle.write('{"epoch": 2, "train_lo')
    assert [row["epoch"] for row in run_folder.epochs(tmp_path)] == [1]


def test_a_diverged_runs_records_are_json_a_reader_takes(tmp_path: Path) -> None:
    """metrics.jsonl and summary.json held `NaN` for a diverged run's loss (a red-team pass):
    Python reads it, jq and JavaScript refuse the file. Written as null; trainctl reads a
    null as the missing figure it read a NaN as."""
    import json
    import math

    from app.runfolder.folder import epochs, read_summary, record_epoch, write_summary

    record_epoch(tmp_path, {"epoch": 1, "val_loss": math.nan, "val_accuracy": 0.1})
    write_summary(tmp_path, {"status": "succeeded", "metrics": {"val_loss": -math.inf}})
    for name in ("metrics.jsonl", "summary.json"):
        text = (tmp_path / name).read_text()
        assert "NaN" not in text and "Infinity" not in text
        json.loads(text.splitlines()[0] if name.endswith("l") else text, parse_constant=_refuse)
    assert epochs(tmp_path)[0]["val_loss"] is None and epochs(tmp_path)[0]["val_accuracy"] == 0.1
    assert (read_summary(tmp_path) or {})["metrics"] == {"val_loss": None}


def _refuse(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


def test_a_record_the_store_refuses_is_said_unreadable_not_damaged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bucket that answers every request with AccessDenied (the credentials missing): the
    summary and sweep records were called damaged, and the sweep "rebuilt from the trials'
    folders" for a run that is no sweep (a red-team pass). Nothing is damaged: the read was
    refused, and the message says where to look."""
    from app.storage.buckets import ObjectPath

    with _refusing_store() as endpoint:
        run_dir = ObjectPath("s3://b-1/runs/r1", endpoint)
        assert run_folder.read_summary(run_dir) is None
        assert run_folder.read_sweep(run_dir) is None
    said = capsys.readouterr()
    text = said.out + said.err
    assert "summary.json cannot be read (" in text and "sweep.json cannot be read (" in text
    assert "check the storage's credentials and network" in text
    assert "damaged" not in text and "rebuilt" not in text


@contextlib.contextmanager
def _refusing_store() -> Iterator[str]:
    """An S3 endpoint that refuses every request as S3 does without valid credentials."""
    body = (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
        b"<Message>Access Denied</Message></Error>"
    )

    class Refuse(http.server.BaseHTTPRequestHandler):
        def _refuse(self) -> None:
            self.send_response(403)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = do_PUT = do_POST = _refuse

        def log_message(self, *args: object) -> None:  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
