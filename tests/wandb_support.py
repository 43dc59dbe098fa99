"""What an offline W&B run wrote, read back from its run-<id>.wandb file.

W&B's own reader of these files lives in its Go core (wandb-core), not in its Python package;
`wandb sync` uploads them. The file is LevelDB's log format (32 KiB blocks of records, each with
a 7-byte header: CRC, length, type FULL/FIRST/MIDDLE/LAST) after a 7-byte ":W&B" header, each
record one of W&B's protobuf `Record`s (wandb.proto.wandb_internal_pb2), which the package
ships.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    run_id: str = ""
    project: str = ""
    name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    artifacts: dict[str, list[str]] = field(default_factory=dict)  # name -> its files
    exit_code: int | None = None


def offline_runs(folder: Path) -> list[OfflineRun]:
    """Every offline run under `folder` (its wandb/ folder), oldest first."""
    return [_read(path) for path in sorted(folder.glob("offline-run-*/run-*.wandb"))]


def _read(path: Path) -> OfflineRun:
    from wandb.proto import wandb_internal_pb2 as pb

    run = OfflineRun()
    for raw in _records(path.read_bytes()):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.run_id, run.project = record.run.run_id, record.run.project
            run.name = record.run.display_name
            run.config = {i.key: json.loads(i.value_json) for i in record.run.config.update}
        elif kind == "history":
            # A key is in `key` or, as W&B writes most now, in `nested_key`'s parts.
            run.history.append(
                {
                    i.key or "/".join(i.nested_key): json.loads(i.value_json)
                    for i in record.history.item
                }
            )
        elif kind == "artifact":
            files = [entry.path for entry in record.artifact.manifest.contents]
            run.artifacts[record.artifact.name] = sorted(files)
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def _records(data: bytes) -> list[bytes]:
    assert data[:4] == b":W&B", f"not a W&B run file: {data[:8]!r}"
    records, pending, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if kind == 0 and length == 0:  # zero padding to the end of the block
            pos += left
            continue
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == FULL:
            records.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            records.append(pending + chunk)
    return records
