"""torch.compile's cache runs what it finds: it must never be on the run storage, which every
RayJob of a namespace can write, only in a folder of this user's on this machine."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from app.training import accel

PLANTED = "import os; os.system('touch /tmp/pwned')  # planted by another job\n"


@pytest.fixture
def local_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """This machine's temp folder, and no cache folder chosen by anyone yet."""
    folder = tmp_path / "local-tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    # Set first, so that the value the code under test sets is undone after the test.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "unset")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    return folder


def _private(folder: Path) -> None:
    status = folder.lstat()
    assert stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid()
    assert stat.S_IMODE(status.st_mode) == 0o700


def test_the_cache_is_private_and_local_not_on_the_storage(local_tmp: Path, tmp_path: Path) -> None:
    storage = tmp_path / "runs"  # TRAIN_STORAGE_PATH, shared by every job
    old = storage / ".torch-compile-cache" / "fxgraph" / "ab"
    old.mkdir(parents=True)
    (old / "planted.py").write_text(PLANTED)
    folder = accel.private_compile_cache()
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    assert Path(cache_dir()) == folder == Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    assert folder.parent == local_tmp and storage not in folder.parents
    _private(folder)
    assert not any(p.name == "planted.py" for p in folder.rglob("*"))
    assert accel.private_compile_cache() == folder  # a restarted worker on this pod reuses it


@pytest.mark.parametrize("planted", ["link", "world-writable"])
def test_a_planted_cache_folder_is_not_used(local_tmp: Path, tmp_path: Path, planted: str) -> None:
    """Someone else got to the name first (a shared /tmp): a fresh private folder instead."""
    name = local_tmp / f"{accel.COMPILE_CACHE_PREFIX}{os.getuid()}"
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "planted.py").write_text(PLANTED)
    if planted == "link":
        name.symlink_to(theirs)
    else:
        name.mkdir()
        name.chmod(0o777)
    folder = accel.private_compile_cache()
    assert folder not in (name, theirs) and folder.parent == local_tmp
    _private(folder)
    assert list(folder.iterdir()) == []
