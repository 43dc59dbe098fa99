"""The weights a warm-started run begins from, as the workers get them: a file and the sha256
its bytes must have (app/run/warm_start.py resolves and verifies TRAIN_WARM_START into one,
before Ray starts). Loading never runs code and loads what was verified: the file is read once
into memory (at most MAX_WEIGHTS_BYTES, a regular file, no link followed), hashed, and those
bytes are given to torch.load(weights_only=True)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from app.errors import ConfigError
from app.runfolder.state_dicts import MAX_WEIGHTS_BYTES, load_tensors, plain_keys
from app.storage import safe_fs
from app.storage.location import RunPath
from app.storage.reading import read_bounded


@dataclass(frozen=True)
class WarmStart:
    """A resolved TRAIN_WARM_START: the weights file, the sha256 its bytes must have, and
    what it is, in words."""

    source: str  # TRAIN_WARM_START as set
    described: str  # "champion digits-cnn v3 (run nightly-0411, epoch 7)"
    file: RunPath
    sha256: str
    vouched_by: str  # what recorded sha256: "its model card", "its meta.json", "preflight"
    # {name: shape} of the weights, as preflight loaded them: a sweep's trials' models are
    # judged against these, without loading the file again.
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def load_weights(self) -> dict[str, Any]:
        """The state dict, from the bytes read now, once they are the bytes verified."""
        data = read_weights(self.file, self.source)
        found = hashlib.sha256(data).hexdigest()
        if found != self.sha256:
            raise ConfigError(
                f"TRAIN_WARM_START={self.source}: {self.file} has sha256 {found}, not the "
                f"{self.sha256} {self.vouched_by}; altered, and not loaded (an altered weights "
                "file is never trusted)"
            )
        return plain_keys(load_tensors(data))


def read_weights(path: RunPath, source: str) -> bytes:
    """The file's bytes: a regular file (a FIFO would hang), no link followed, bounded."""
    try:
        return read_bounded(path, path.parent, MAX_WEIGHTS_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"TRAIN_WARM_START={source}: {path} is not there") from None
    except safe_fs.LinkRefused as err:  # names where it points: give that file instead
        raise ConfigError([f"TRAIN_WARM_START={source}: {p}" for p in err.problems]) from None
    except IsADirectoryError:
        raise ConfigError(f"TRAIN_WARM_START={source}: {path} is a folder, not a file") from None
    except (OSError, ValueError) as err:  # not a regular file, over the bound, unreadable
        raise ConfigError(f"TRAIN_WARM_START={source}: {path} cannot be read ({err})") from None
