"""The probe that proves a folder writable before a command writes there (`predict --out`,
`compare --out`, TensorBoard's folder) leaves nothing behind, even where the write fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import python_on_a_full_disk

PROBE = """
import sys
from pathlib import Path
from app.storage.location import local_write_problem
print(local_write_problem(Path(sys.argv[1]) / "out.csv"))
"""


def test_a_refused_probe_is_named_and_removed(tmp_path: Path) -> None:
    """The probe file stayed behind on a full disk (a red-team pass)."""
    result = python_on_a_full_disk(PROBE, 1, str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{tmp_path}: File too large", result.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_writable_folder_is_said_so_and_left_as_it_was(tmp_path: Path) -> None:
    from app.storage.location import local_write_problem

    assert local_write_problem(tmp_path / "new" / "out.csv") is None
    assert list(tmp_path.iterdir()) == []  # the folder to be is not made


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no procfs (not Linux)")
def test_a_folder_that_takes_no_new_file_is_said_so() -> None:
    """/proc is there, but makes no file: it was said as "No such file or directory"."""
    from app.storage.location import local_write_problem

    assert local_write_problem(Path("/proc/x.csv")) == "/proc: no file can be created there"
