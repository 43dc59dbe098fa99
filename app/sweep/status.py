"""`trainctl status <sweep folder>`: the trials' table, from sweep.json."""

from __future__ import annotations

import json
from collections.abc import Callable

from app.formatting import shown
from app.redact import redact
from app.runfolder.folder import read_sweep
from app.settings.tune_plan import TRIALS_DIR
from app.storage.reading import present
from app.sweep.results import SWEEP_FILE, table


def show_sweep(
    target: str | None, storage: str | None, echo: Callable[[str], None], *, as_json: bool
) -> bool:
    """Show the sweep `target` names (a folder, or a name under --storage) and return True;
    False when it is not a sweep's folder (`status` then reads it as run folders)."""
    from app.settings.env import settings_environ, storage_access, storage_location

    if target is None or target in ("", ".", ".."):
        return False
    endpoint, _ = storage_access(settings_environ())
    if storage is not None and "/" not in target and "://" not in target:
        path = storage_location(storage, f"--storage {redact(storage)}", endpoint) / target
    else:
        path = storage_location(target, f"RUN_DIR {redact(target)!r}", endpoint)
    try:
        if not present(path / SWEEP_FILE):
            return False
    except (OSError, ValueError):
        return False
    trials = path / TRIALS_DIR
    record = read_sweep(path, f"each trial's own folder: trainctl status {shown(str(trials))}")
    if record is None:
        return True  # a sweep's folder all the same: its run folders are the trials'
    echo(json.dumps(record, indent=2) if as_json else table(record))
    return True
