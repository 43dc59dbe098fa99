"""Checkpoint cost on S3 against a local volume: the storage-dependent steps, side by side.

A checkpoint of the app's model with its AdamW state is written once
(app/runfolder/checkpoints.py, as rank 0 does each epoch). Then, per repetition and alternating
the order, each store takes it
through the three steps whose cost depends on where the run folder lives:

  upload_s: Ray Train's own copy of the finished folder to storage (the background part of an
            ASYNC report; the training loop does not wait for it, the run's end does);
  verify_s: the driver's scan before a run or rerun: list the folder, read and hash every file
            (app/runfolder/checkpoints.scan);
  delete_s: pruning it (app/runfolder/checkpoints.prune's delete).

The S3 store is moto's server on 127.0.0.1 (.venv-moto, as in the tests): it keeps objects in
memory, so the figures show the protocol's cost on loopback, not a real network's bandwidth.
Usage: python -m bench.object_storage [--model resnet18] [--reps 5] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Skipped, interleave, medians, ratio, result_line, say, skipped_line

REPO = Path(__file__).resolve().parent.parent


def _checkpoint(model_name: str, folder: Path) -> int:
    import torch

    from app.runfolder import checkpoint_names, checkpoints
    from app.training.model import build_model
    from bench.checkpoint import _cifar_info

    model = build_model(model_name, _cifar_info())
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    optimizer.step()  # AdamW's moments exist only after a step: the checkpoint's real size
    checkpoints.write_checkpoint(
        folder / checkpoint_names.dir_name(1),
        model_state=model.state_dict(),
        train_state={"optimizer": optimizer.state_dict(), "epoch": 1, "step": 1},
        epoch=1,
        metrics={"val_accuracy": 0.5},
    )
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _moto() -> tuple[subprocess.Popen[bytes], str]:
    binary = os.environ.get("MOTO_BIN") or str(REPO / ".venv-moto" / "bin" / "moto_server")
    import socket

    if not os.access(binary, os.X_OK):
        raise Skipped(
            f"no moto server at {binary} (`make bench` builds .venv-moto; or set MOTO_BIN)"
        )

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    try:
        server = subprocess.Popen(
            [binary, "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    except OSError as err:
        raise Skipped(f"moto server at {binary} could not start: {err}") from None
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
            break
        except OSError:
            if server.poll() is not None:
                raise Skipped(f"moto server at {binary} exited ({server.returncode})") from None
            if time.monotonic() > deadline:
                server.kill()
                raise Skipped(f"moto server at {binary} did not answer within 60 s") from None
            time.sleep(0.2)
    put = urllib.request.Request(f"{endpoint}/bench", method="PUT")
    try:
        urllib.request.urlopen(put, timeout=10).close()
    except OSError as err:  # it answered, then could not make a bucket: not an S3 server
        server.kill()
        server.wait(timeout=30)
        raise Skipped(f"moto server at {binary} could not create a bucket: {err}") from None
    return server, endpoint


def _steps(local: Path, storage: Any) -> Callable[[], dict[str, float]]:
    """One repetition on `storage` (a Path or an ObjectPath): upload, verify, delete."""
    import pyarrow.fs as pafs
    from ray.train.v2._internal.execution.storage import _upload_to_fs_path

    from app.runfolder import checkpoint_names, checkpoints
    from app.storage.location import remove_tree, storage_options

    def once() -> dict[str, float]:
        run_dir = storage / f"run-{time.monotonic_ns()}"
        name = checkpoint_names.dir_name(1)
        # Where Ray Train itself would upload it: the bucket's client, or the local file system.
        where = storage_options(run_dir / name)
        fs = where.get("storage_filesystem") or pafs.LocalFileSystem()
        target = where["storage_path"]
        started = time.perf_counter()
        _upload_to_fs_path(str(local / name), fs, target)
        uploaded = time.perf_counter()
        scan = checkpoints.scan(run_dir)
        verified = time.perf_counter()
        assert [ref.epoch for ref in scan.good] == [1], scan
        remove_tree(run_dir)
        deleted = time.perf_counter()
        return {
            "upload_s": uploaded - started,
            "verify_s": verified - uploaded,
            "delete_s": deleted - verified,
        }

    return once


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="resnet18", choices=["resnet18", "vit", "cnn"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="small model, two repetitions")
    args = parser.parse_args(argv)
    if args.smoke:
        args.model, args.reps = "cnn", 2

    from app.storage.buckets import ObjectPath

    # moto takes any key, but an unsigned client (no credentials at all) is not what users run:
    # fake ones, forced, so that no real key is ever sent, even to loopback.
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench")
    os.environ.update(AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
    try:
        server, endpoint = _moto()
    except Skipped as why:
        say(f"skipped: {why}")
        print(skipped_line("object_storage", str(why)), flush=True)
        return {"skipped": str(why)}
    try:
        with tempfile.TemporaryDirectory(prefix="trainctl-bench-") as tmp:
            local = Path(tmp) / "written"
            size = _checkpoint(args.model, local)
            say(f"checkpoint of {args.model}: {size / 2**20:.1f} MiB; S3 at {endpoint} (moto)")
            variants = {
                "volume": _steps(local, Path(tmp) / "volume"),
                "s3": _steps(local, ObjectPath("s3://bench/runs", endpoint)),
            }
            got = medians(interleave(variants, args.reps, say=say))
    finally:
        server.terminate()
        server.wait(timeout=30)
    volume, s3 = got["volume"], got["s3"]
    result = {
        "model": args.model,
        "checkpoint_mib": round(size / 2**20, 1),
        "reps": args.reps,
        **{f"volume_{k}": round(v, 4) for k, v in volume.items()},
        **{f"s3_{k}": round(v, 4) for k, v in s3.items()},
        **{f"s3_over_volume_{k.removesuffix('_s')}": ratio(s3[k], volume[k]) for k in volume},
    }
    print(result_line("object_storage", result), flush=True)
    return result


if __name__ == "__main__":
    main()
