"""Checkpoint cost per epoch: `ray.train.report` with SYNC upload against ASYNC, in one run.

One Ray Train worker trains the app's model for a fixed number of steps per "epoch", then saves
and reports a checkpoint exactly as the app does (`checkpoints.write_checkpoint`: model, optimizer
state, checksums). The upload mode alternates in blocks, S S A A S S A A ..., so each mode gets
the same share of epochs that follow the other mode (an ASYNC upload still running slows the
next epoch's compute; that cost is counted, not hidden). Two figures per mode:

  blocked_s: time the training loop waits in save + report (what ASYNC can remove);
  epoch_s:   compute + save + report (what the user gets back).

Usage: python -m bench.checkpoint [--model resnet18] [--blocks 3] [--smoke]
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from app.ray_cluster import join_or_start
from bench.common import (
    IMAGE_SHAPE,
    NUM_CLASSES,
    median,
    ratio,
    ray_bench_arguments,
    result_line,
    say,
)

MODES = ("SYNC", "ASYNC")


def _cifar_info() -> Any:
    from app.data.schema import DatasetInfo

    height, width, channels = IMAGE_SHAPE
    return DatasetInfo(
        channels=channels, height=height, width=width, num_classes=NUM_CLASSES,
        train_rows=0, valid_rows=0, layout="raw", mean=(0.5,) * 3, std=(0.25,) * 3,
    )  # fmt: skip


def save_and_report(mode: str, epoch: int, metrics: dict[str, float], state: dict) -> None:
    """The app's `_report` for rank 0, with the upload mode as a parameter.

    SYNC: the folder may go when report returns (Ray has copied it). ASYNC: Ray copies it in a
    background thread and then deletes it itself (delete_local_checkpoint_after_upload defaults
    to True for ASYNC), so it must outlive this call: mkdtemp, not a TemporaryDirectory.
    """
    import ray.train

    from app.runfolder import checkpoint_names, checkpoints

    folder = Path(tempfile.mkdtemp(prefix="trainctl-ckpt-"))
    checkpoints.write_checkpoint(folder, epoch=epoch, metrics=metrics, **state)
    ray.train.report(
        metrics,
        checkpoint=ray.train.Checkpoint.from_directory(str(folder)),
        checkpoint_dir_name=checkpoint_names.dir_name(epoch),
        checkpoint_upload_mode=ray.train.CheckpointUploadMode[mode],
        delete_local_checkpoint_after_upload=True,
    )


def worker(config: dict[str, Any]) -> None:
    import ray.train
    import ray.train.torch
    import torch
    from torch import nn

    from app.training.model import build_model

    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(build_model(config["model"], _cifar_info()))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    images = torch.randn(config["batch"], IMAGE_SHAPE[2], *IMAGE_SHAPE[:2])
    labels = torch.randint(0, NUM_CLASSES, (config["batch"],))
    loss_fn = nn.CrossEntropyLoss()
    timings = []
    for epoch, mode in enumerate(config["schedule"], start=1):
        started = time.perf_counter()
        for _ in range(config["steps"]):
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        computed = time.perf_counter()
        state = {
            "model_state": model.state_dict(),
            "train_state": {"optimizer": optimizer.state_dict(), "epoch": epoch, "step": epoch},
        }
        save_and_report(mode, epoch, {"epoch": epoch, "loss": float(loss)}, state)
        done = time.perf_counter()
        timings.append(
            {"mode": mode, "compute_s": computed - started, "blocked_s": done - computed}
        )
    Path(config["out"]).write_text(json.dumps(timings))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = ray_bench_arguments(__doc__, "small model, one block")
    parser.add_argument("--model", default="resnet18", choices=["resnet18", "vit", "cnn"])
    parser.add_argument("--blocks", type=int, default=3, help="S S A A blocks")
    parser.add_argument("--steps", type=int, default=3, help="training steps per epoch")
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    if args.smoke:
        args.model, args.blocks, args.steps, args.batch = "cnn", 1, 1, 8

    import ray
    from ray.train import CheckpointConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    join_or_start(args.address)
    work = Path(tempfile.mkdtemp(prefix="trainctl-ckptbench-"))
    schedule = [mode for _ in range(args.blocks) for mode in MODES for _ in range(2)]
    out = work / "timings.json"
    trainer = TorchTrainer(
        worker,
        train_loop_config={
            "model": args.model,
            "batch": args.batch,
            "steps": args.steps,
            "schedule": schedule,
            "out": str(out),
        },
        scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(
            name="checkpoint-bench",
            storage_path=str(work / "runs"),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
        ),
    )
    trainer.fit()
    timings = json.loads(out.read_text())
    size = sum(f.stat().st_size for f in (work / "runs").rglob("*.pt")) / 2
    shutil.rmtree(work, ignore_errors=True)
    ray.shutdown()

    say(
        f"checkpoint: model {args.model} (~{size / 2**20:.0f} MiB per checkpoint), "
        f"{args.steps} steps of batch {args.batch} per epoch, "
        f"schedule {' '.join(m[0] for m in schedule)}"
    )
    for row in timings:
        say(
            f"  {row['mode']:<5} compute {row['compute_s']:6.2f}s  "
            f"save+report {row['blocked_s']:6.3f}s"
        )
    figures = {}
    for mode in MODES:
        rows = [r for r in timings if r["mode"] == mode]
        figures[mode] = {
            "blocked_s": round(median(r["blocked_s"] for r in rows), 3),
            "epoch_s": round(median(r["compute_s"] + r["blocked_s"] for r in rows), 3),
        }
        say(
            f"median {mode:<5} save+report {figures[mode]['blocked_s']:.3f}s per epoch, "
            f"epoch {figures[mode]['epoch_s']:.2f}s"
        )
    saved = ratio(figures["SYNC"]["blocked_s"], figures["ASYNC"]["blocked_s"])
    say(f"ASYNC blocks the loop {saved:.1f}x less than SYNC")
    result = {
        "model": args.model,
        "checkpoint_mib": round(size / 2**20, 1),
        "per_epoch": figures,
        "sync_over_async_blocked": saved,
        "sync_over_async_epoch": ratio(figures["SYNC"]["epoch_s"], figures["ASYNC"]["epoch_s"]),
    }
    print(result_line("checkpoint", result), flush=True)
    return result


if __name__ == "__main__":
    main()
