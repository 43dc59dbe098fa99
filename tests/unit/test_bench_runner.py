"""`make bench`'s runner: a benchmark whose server cannot start is skipped with its reason, and
a failing one does not stop the others. Runs the real runner and scripts, without Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import REPO


def bench(*args: str, moto: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MOTO_BIN": moto, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_missing_server_skips_its_benchmark_with_the_reason(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-moto_server")
    done = bench("--only", "object_storage", "--smoke", moto=missing)
    assert done.returncode == 0, done.stdout + done.stderr
    total = json.loads(done.stdout.strip().splitlines()[-1])
    assert total["failed"] == {}
    assert missing in total["skipped"]["object_storage"]
    assert f"object_storage skipped: no moto server at {missing}" in done.stdout


def test_a_failing_benchmark_is_reported_and_the_others_still_run(tmp_path: Path) -> None:
    # A moto "server" that exits at once: the benchmark is skipped; an unknown name fails.
    fake = tmp_path / "moto_server"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    done = bench("--only", "no_such_bench,object_storage", "--smoke", moto=str(fake))
    assert done.returncode == 1, done.stdout + done.stderr
    total = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(total["failed"]) == {"no_such_bench"} and total["targets_met"] is False
    assert "exited (3)" in total["skipped"]["object_storage"]
    assert "no_such_bench FAILED" in done.stdout


def test_a_server_that_answers_but_is_not_s3_is_skipped_and_stopped(tmp_path: Path) -> None:
    fake = tmp_path / "moto_server"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import http.server, sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self): self.send_response(200); self.end_headers()\n"
        "    def do_PUT(self): self.send_response(500); self.end_headers()\n"
        "    def log_message(self, *a): pass\n"
        "http.server.HTTPServer((sys.argv[2], int(sys.argv[4])), H).serve_forever()\n"
    )
    fake.chmod(0o755)
    done = bench("--only", "object_storage", "--smoke", moto=str(fake))
    assert done.returncode == 0, done.stdout + done.stderr
    total = json.loads(done.stdout.strip().splitlines()[-1])
    assert "could not create a bucket" in total["skipped"]["object_storage"]
    leftover = subprocess.run(["pgrep", "-f", str(fake)], capture_output=True, check=False)
    assert leftover.stdout == b"", "the fake server was left running"


def test_a_ratio_table_names_each_ratio_in_order_and_never_divides_by_zero() -> None:
    from bench.common import ratio_table

    rates = {"app": 300.0, "tutorial": 200.0, "bare": 0.0}
    table = ratio_table(rates, {"b_over_a": ("app", "tutorial"), "a_over_b": ("tutorial", "app")})
    assert table == {"b_over_a": 1.5, "a_over_b": 0.667} and list(table) == ["b_over_a", "a_over_b"]
    [(name, value)] = ratio_table(rates, {"b_over_c": ("app", "bare")}).items()
    assert name == "b_over_c" and value != value  # nan: no such ratio, never a crash
