"""Finding KubeRay's pinned CRDs: the order of sources, the SHA-256 check, the one message.

Downloads are served for real by an HTTP server on 127.0.0.1, so the same code that fetches
from GitHub in `make crds` runs here without internet.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import kuberay_crds
from tests.kuberay_crds import CrdsMissing, resolve
from tests.support import free_port

NAMES = ("ray.io_rayjobs.yaml", "ray.io_rayclusters.yaml")


def _write_sums(path: Path, files: dict[str, bytes]) -> Path:
    lines = [f"{hashlib.sha256(body).hexdigest()}  {name}" for name, body in files.items()]
    path.write_text("# test pins\n" + "\n".join(lines) + "\n")
    return path


def _fill(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in files.items():
        (folder / name).write_bytes(body)
    return folder


@pytest.fixture
def pinned(tmp_path: Path) -> tuple[dict[str, bytes], Path]:
    files = {name: f"kind: CustomResourceDefinition # {name}\n".encode() for name in NAMES}
    return files, _write_sums(tmp_path / "sums", files)


@pytest.fixture
def http_folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A real HTTP server on 127.0.0.1 serving a folder, as raw.githubusercontent.com would."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}/bases"
    server.shutdown()
    server.server_close()


def _closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/bases"  # nothing listens there


def test_the_pinned_sums_match_the_crds_the_suite_validates_against() -> None:
    folder = resolve(allow_download=False)
    assert kuberay_crds.check_folder(folder, kuberay_crds.pinned_sums()) is None
    assert set(kuberay_crds.pinned_sums()) == set(NAMES)


def test_kuberay_crds_dir_wins_over_every_other_source(tmp_path: Path, pinned) -> None:
    files, sums = pinned
    mine = _fill(tmp_path / "mine", files)
    shared = _fill(tmp_path / "shared", files)
    found = resolve(
        env={"KUBERAY_CRDS_DIR": str(mine)}, shared=shared, cache=tmp_path / "c", sums_file=sums
    )
    assert found == mine.resolve()


def test_a_wrong_kuberay_crds_dir_is_an_error_not_a_fallback(tmp_path: Path, pinned) -> None:
    files, sums = pinned
    mine = _fill(tmp_path / "mine", {**files, NAMES[0]: b"kind: SomethingElse\n"})
    shared = _fill(tmp_path / "shared", files)
    with pytest.raises(CrdsMissing) as err:
        resolve(
            env={"KUBERAY_CRDS_DIR": str(mine)},
            shared=shared,
            cache=tmp_path / "c",
            sums_file=sums,
        )
    expected = f"KUBERAY_CRDS_DIR={mine}: {NAMES[0]} does not match the pinned SHA-256"
    assert expected in str(err.value)


def test_shared_folder_then_cache(tmp_path: Path, pinned) -> None:
    files, sums = pinned
    shared, cache = tmp_path / "shared", tmp_path / "cache"
    _fill(cache, files)
    assert resolve(env={}, shared=shared, cache=cache, sums_file=sums) == cache.resolve()
    _fill(shared, files)
    assert resolve(env={}, shared=shared, cache=cache, sums_file=sums) == shared.resolve()


def test_a_tampered_cache_is_not_used(tmp_path: Path, pinned) -> None:
    files, sums = pinned
    cache = _fill(tmp_path / "cache", {**files, NAMES[1]: b"tampered"})
    with pytest.raises(CrdsMissing) as err:
        resolve(env={}, shared=tmp_path / "none", cache=cache, allow_download=False, sums_file=sums)
    assert f"{NAMES[1]} does not match the pinned SHA-256" in str(err.value)


def test_download_lands_checked_files_in_the_cache(tmp_path: Path, pinned, http_folder) -> None:
    files, sums = pinned
    served, url = http_folder
    _fill(served / "bases", files)
    cache = tmp_path / "cache"
    found = resolve(
        env={"KUBERAY_CRDS_URL": url}, shared=tmp_path / "none", cache=cache, sums_file=sums
    )
    assert found == cache.resolve()
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == files
    # The next resolution uses the cache and needs no server.
    assert resolve(env={}, shared=tmp_path / "none", cache=cache, sums_file=sums) == found


def test_a_download_that_does_not_match_keeps_nothing(tmp_path: Path, pinned, http_folder) -> None:
    files, sums = pinned
    served, url = http_folder
    _fill(served / "bases", {**files, NAMES[0]: b"kind: NotKubeRay\n"})
    cache = tmp_path / "cache"
    with pytest.raises(CrdsMissing) as err:
        resolve(env={"KUBERAY_CRDS_URL": url}, shared=tmp_path / "no", cache=cache, sums_file=sums)
    assert "does not match the pinned SHA-256; nothing was kept" in str(err.value)
    # No folder either: an empty one made the next message say a file of it was missing.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["served", "sums"], "nothing left"


def _serving(pinned, http_folder) -> tuple[dict[str, bytes], Path, str]:
    """(the pinned files, their sums file, the URL that serves them whole)."""
    files, sums = pinned
    served, url = http_folder
    _fill(served / "bases", files)
    return files, sums, url


def test_a_download_replaces_a_copy_that_failed_its_check(
    tmp_path: Path, pinned, http_folder
) -> None:
    files, sums, url = _serving(pinned, http_folder)
    cache = _fill(tmp_path / "cache", {NAMES[0]: files[NAMES[0]]})  # one file of them
    found = resolve(env={"KUBERAY_CRDS_URL": url}, shared=tmp_path / "no", cache=cache,
                    sums_file=sums)  # fmt: skip
    assert found == cache.resolve()
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == files


def test_offline_with_no_source_fails_fast_with_one_message(tmp_path: Path) -> None:
    """A checkout with nothing beside it and no network: the script that `make test` runs first."""
    checkout = tmp_path / "clone"
    (checkout / "tests").mkdir(parents=True)
    for name in ("kuberay_crds.py", "kuberay-crds.sha256"):
        shutil.copy(Path(kuberay_crds.__file__).with_name(name), checkout / "tests" / name)
    env = {"PATH": "/usr/bin:/bin", "KUBERAY_CRDS_URL": _closed_port_url()}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "tests/kuberay_crds.py"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert time.monotonic() - started < 60
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    message = result.stderr
    assert message.startswith("trainctl tests: KubeRay v1.7.0 CRDs not found. Tried:")
    assert "KUBERAY_CRDS_DIR: not set" in message
    assert f"shared folder {tmp_path / 'shared' / 'kuberay-crds'}: no such folder" in message
    assert f"cache {checkout / '.cache' / 'kuberay-crds' / 'v1.7.0'}: no such folder" in message
    assert "download: cannot download" in message
    assert "`make crds`" in message and "KUBERAY_CRDS_DIR=/path/to/folder" in message


def test_a_cache_that_is_a_file_is_named_not_a_traceback(
    tmp_path: Path, pinned, http_folder
) -> None:
    _, sums, url = _serving(pinned, http_folder)
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    with pytest.raises(CrdsMissing, match=f"cannot put the downloaded CRDs at {cache}"):
        resolve(env={"KUBERAY_CRDS_URL": url}, shared=tmp_path / "no", cache=cache,
                sums_file=sums)  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "served", "sums"]
