"""Is the shared storage usable? Checked before any Ray work starts."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from app.errors import ConfigError


def expand(path: Path | str, what: str) -> Path:
    """`path` with ~ or ~user expanded and made absolute; an unknown user is bad input."""
    try:
        return Path(path).expanduser().absolute()
    except RuntimeError:  # pathlib: "Could not determine home directory"
        raise ConfigError(
            f"{what}={path}: {str(path).split('/')[0]} names no user on this machine"
        ) from None


def ensure_writable(path: Path, variable: str) -> None:
    """Create `path` if needed and prove a file can be written there, or raise ConfigError."""
    # Checked first: mkdir on an existing file fails with a bare "File exists".
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{variable}={path}: exists but is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{variable}={path}: cannot create the folder ({err.strerror})") from None
    if not path.is_dir():
        raise ConfigError(f"{variable}={path}: exists but is not a folder")
    probe = path / f".trainctl-write-test-{uuid.uuid4().hex}"
    try:
        probe.write_bytes(b"ok")
    except OSError as err:
        raise ConfigError(
            f"{variable}={path}: not writable ({err.strerror}); on Kubernetes check the volume's "
            "access mode and the pod's fsGroup"
        ) from None
    finally:
        probe.unlink(missing_ok=True)


def free_bytes(path: Path) -> int:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return shutil.disk_usage(existing).free


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.1f} TiB"
