"""Where the tests find KubeRay's pinned CRDs, and the one message when they are nowhere.

The CRDs are KubeRay's, not ours, so they are not committed. Their SHA-256 sums are
(`tests/kuberay-crds.sha256`), and every source is held to them, so a test never validates
against a different KubeRay than the one the chart targets. Sources, first match wins:

1. `KUBERAY_CRDS_DIR`, a folder the user points at;
2. `../shared/kuberay-crds` beside the checkout, where that folder exists;
3. the cache in the checkout, `.cache/kuberay-crds/<version>/` (ignored by git);
4. a download of the pinned release into that cache (`make crds`), kept only if the sums match.

Standard library only: `make test` runs this with the machine's Python before the virtualenv
exists, so a machine without the CRDs fails in seconds, not after a ten-minute setup.

    python3 tests/kuberay_crds.py   # print the folder (downloading if need be), or explain, exit 2
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VERSION = "v1.7.0"
SUMS_FILE = REPO / "tests" / "kuberay-crds.sha256"
CACHE = REPO / ".cache" / "kuberay-crds" / VERSION
SHARED = REPO.parent / "shared" / "kuberay-crds"
BASE_URL = (
    f"https://raw.githubusercontent.com/ray-project/kuberay/{VERSION}/ray-operator/config/crd/bases"
)
DOWNLOAD_TIMEOUT_S = 20.0
# A CRD is about 1.4 MB; anything far larger is not the file we asked for.
MAX_BYTES = 16 * 1024 * 1024


class CrdsMissing(Exception):
    """No source holds the pinned CRDs; the message says what was tried and what to do."""


@dataclass
class Resolution:
    tried: list[str] = field(default_factory=list)

    def note(self, source: str, why: str) -> None:
        self.tried.append(f"{source}: {why}")


def pinned_sums(sums_file: Path = SUMS_FILE) -> dict[str, str]:
    """File name -> SHA-256, from the `sha256sum`-format file committed beside this module."""
    sums: dict[str, str] = {}
    for line in sums_file.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            digest, name = line.split(maxsplit=1)
            sums[name.lstrip("*")] = digest
    return sums


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_folder(folder: Path, sums: dict[str, str]) -> str | None:
    """None when `folder` holds every pinned file with its pinned sum, else why not."""
    if not folder.is_dir():
        return "no such folder"
    for name, expected in sums.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if _sha256(path) != expected:
            return f"{name} does not match the pinned SHA-256 (not KubeRay {VERSION}'s file)"
    return None


def download(cache: Path, sums: dict[str, str], base_url: str, timeout: float) -> None:
    """Fetch each pinned file into `cache`; the folder lands only once every sum has matched.
    Fetched into a folder beside it, then renamed: a failed or interrupted download leaves no
    folder (an empty one made the next attempt's message say `ray.io_rayjobs.yaml is missing`,
    as if a copy were half there)."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=cache.parent, prefix=f".{cache.name}."))
    staging.chmod(0o755)  # as a folder made with mkdir: mkdtemp's is the owner's alone
    try:
        for name, expected in sums.items():
            url = f"{base_url.rstrip('/')}/{name}"
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    body = response.read(MAX_BYTES + 1)
            except (urllib.error.URLError, OSError, ValueError) as err:
                reason = getattr(err, "reason", err)
                raise CrdsMissing(f"cannot download {url}: {reason}") from None
            if len(body) > MAX_BYTES or hashlib.sha256(body).hexdigest() != expected:
                raise CrdsMissing(f"{url} does not match the pinned SHA-256; nothing was kept")
            (staging / name).write_bytes(body)
        try:
            if cache.is_dir() and not cache.is_symlink():  # a copy that failed its check
                shutil.rmtree(cache)
            os.replace(staging, cache)
        except OSError as err:
            # Another download landed first (the folder is not empty), or the cache is a file
            # or a link: what is there now is used if it checks out.
            if check_folder(cache, sums) is not None:
                raise CrdsMissing(f"cannot put the downloaded CRDs at {cache}: {err}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def resolve(
    *,
    env: dict[str, str] | None = None,
    shared: Path = SHARED,
    cache: Path = CACHE,
    allow_download: bool = True,
    sums_file: Path = SUMS_FILE,
) -> Path:
    """The first source that holds the pinned CRDs, downloading into the cache as a last resort."""
    env = dict(os.environ) if env is None else env
    sums = pinned_sums(sums_file)
    tried = Resolution()

    explicit = env.get("KUBERAY_CRDS_DIR", "").strip()
    if explicit:
        folder = Path(explicit).expanduser()
        folder = folder if folder.is_absolute() else (REPO / folder)
        problem = check_folder(folder, sums)
        if problem is None:
            return folder.resolve()
        # An explicit choice that is wrong is an error, not a cue to look elsewhere.
        raise CrdsMissing(_explain([f"KUBERAY_CRDS_DIR={explicit}: {problem}"]))
    tried.note("KUBERAY_CRDS_DIR", "not set")

    for source, folder in (("shared folder", shared), ("cache", cache)):
        problem = check_folder(folder, sums)
        if problem is None:
            return folder.resolve()
        tried.note(f"{source} {folder}", problem)

    if not allow_download:
        tried.note("download", "not attempted (run `make crds`)")
        raise CrdsMissing(_explain(tried.tried))
    base_url = env.get("KUBERAY_CRDS_URL", BASE_URL)
    try:
        download(cache, sums, base_url, DOWNLOAD_TIMEOUT_S)
    except CrdsMissing as err:
        tried.note("download", str(err))
        raise CrdsMissing(_explain(tried.tried)) from None
    return cache.resolve()


def _explain(tried: list[str]) -> str:
    lines = [f"trainctl tests: KubeRay {VERSION} CRDs not found. Tried:"]
    lines += [f"  - {item}" for item in tried]
    lines += [
        "Provide them in one of these ways, then run `make test` again:",
        "  - `make crds` on a machine with internet (downloads and checks them into .cache/)",
        "  - KUBERAY_CRDS_DIR=/path/to/folder holding ray.io_rayjobs.yaml and "
        f"ray.io_rayclusters.yaml from KubeRay {VERSION} (ray-operator/config/crd/bases)",
    ]
    return "\n".join(lines)


def main() -> int:
    try:
        print(resolve())
    except CrdsMissing as err:
        print(err, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
