"""A full disk at the run's end: during the export and while writing the summary.

The store is a real, full file system: a small tmpfs mounted in a private mount namespace
(`unshare -rm`, no root needed on the host) and filled until it refuses a byte more, so every
write fails with ENOSPC. Where user namespaces are not allowed, the same writes fail for real
another way: RLIMIT_FSIZE makes any file past 4 KiB fail with EFBIG. Either way the run fails
with a clear cause (exit 1, RunFailed), summary.json never says `running` and is never half
written, and no temporary file is left behind. No Ray: the promotion step and the summary
writer run in a subprocess on a run folder holding a real checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.promotion_support import make_run
from tests.support import REPO

SCRIPT = """
import json, os, resource, shutil, signal, sys
from pathlib import Path
from app.errors import RunFailed

storage, prepared, how, what = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
shutil.copytree(prepared, storage / "r")
summary = storage / "r" / "summary.json"
summary.write_text(json.dumps({"run_name": "r", "status": "running", "pad": "x" * 6000}))
if how == "tmpfs":  # fill it: every later write gets ENOSPC
    with open(storage / "filler", "wb", buffering=0) as filler:
        try:
            while filler.write(b"\\0" * 4096):
                pass
        except OSError:
            pass
else:  # every file past 4 KiB gets EFBIG
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

from app.promotion.step import promote_run
from app.runfolder.folder import write_final_summary
from tests.promotion_support import INFO, settings_for

problems = None
try:
    if what == "export":
        promote_run(settings_for(storage, "r"), INFO, {"run_name": "r", "status": "succeeded"})
    else:
        write_final_summary(storage / "r", {"run_name": "r", "status": "succeeded",
                                            "tracking": {"mlflow": {"run_id": "abc"}},
                                            "pad": "y" * 20000})
except RunFailed as err:
    problems = err.problems
export = storage / "r" / "export"
print(json.dumps({
    "problems": problems,
    "summary": summary.read_text() if summary.exists() else None,
    "leftovers": [str(p) for p in storage.rglob("*") if p.name.endswith(".tmp")],
    "export": sorted(p.name for p in export.iterdir()) if export.is_dir() else [],
    "pointer": (storage / "champions").exists(),
}))
"""


def _full_store(tmp_path: Path) -> tuple[list[str], str]:
    """The command prefix that runs the script on a full store, and how it is full."""
    mountpoint = tmp_path / "store"
    mountpoint.mkdir()
    probe = ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=2m none '{mountpoint}'"]
    try:
        usable = subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except FileNotFoundError:
        usable = False
    if usable:
        mount = 'mount -t tmpfs -o size=2m none "$0" && exec "$@"'
        return ["unshare", "-rm", "sh", "-c", mount, str(mountpoint)], "tmpfs"
    return [], "rlimit"


def _run(tmp_path: Path, what: str) -> tuple[dict, str]:
    make_run(tmp_path / "prepared", "r", 0.9)
    prefix, how = _full_store(tmp_path)
    command = [*prefix, sys.executable, "-c", SCRIPT, str(tmp_path / "store"),
               str(tmp_path / "prepared" / "r"), how, what]  # fmt: skip
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), how


REFUSED = {"tmpfs": "No space left on device", "rlimit": "File too large"}


def test_a_full_disk_during_the_export_fails_the_run_with_its_cause(tmp_path: Path) -> None:
    found, how = _run(tmp_path, "export")
    problems = found["problems"]
    assert problems, found  # RunFailed, exit 1: not a gate's "not promoted"
    assert problems[0].startswith("export failed: OSError: ") and REFUSED[how] in problems[0]
    summary = json.loads(found["summary"])  # whole JSON, whatever was written
    assert summary["status"] == "failed" and "export failed" in summary["error"]
    assert found["leftovers"] == [] and found["export"] == []  # nothing half written
    assert found["pointer"] is False


def test_a_full_disk_at_the_summary_never_leaves_it_running(tmp_path: Path) -> None:
    found, how = _run(tmp_path, "summary")
    problems = found["problems"]
    assert problems and "summary.json could not be written" in problems[0], found
    assert REFUSED[how] in problems[0]
    summary = json.loads(found["summary"])
    assert summary["status"] == "failed" and summary["summary_incomplete"] is True
    assert summary["tracking"] == {"mlflow": {"run_id": "abc"}}  # what a rerun needs: kept
    assert found["leftovers"] == []
