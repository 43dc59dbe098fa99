"""The tutorial's CIFAR-10 ViT on one GPU: the tutorial's pipeline, `trainctl train`, the ceiling.

  (a) tutorial: the tutorial's Ray Train + Ray Data pipeline (bench/gpu_parts.py), fp32;
  (b) app:      the real `trainctl train` in a subprocess, with TRAIN_USE_GPU=true and nothing
                else about speed set (so bf16, torch.compile and fused AdamW come from its GPU
                defaults), on the same Parquet files; its start-up phases come from
                bench/startup.py's probe, its epochs from the run's metrics.jsonl;
  (c) bare:     the bare loop on batches already in GPU memory, bf16 eager and compiled.

Model: ViT image 32, patch 4, 12 layers, 8 heads, hidden 384, MLP 768; global batch 512; AdamW
lr 1e-3, weight decay 0.01. Data is synthetic and CIFAR-shaped (50,000 train images), generated
locally: nothing is downloaded. Prints images/s, epoch times, peak GPU memory, the ratios b/a and
b/c, then one JSON line. Usage (bench/gpu.sh wraps it):
    python -m bench.gpu_vit [--images 50000] [--epochs 4] [--parts a,b,c] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from app.ray_cluster import join_or_start
from bench import gpu_parts
from bench.common import (
    cifar_arrays,
    ratio,
    ray_bench_arguments,
    result_line,
    say,
    write_tensor_parquet,
)

VIT = {"image_size": 32, "patch_size": 4, "num_layers": 12, "num_heads": 8, "hidden_dim": 384}
VIT |= {"mlp_dim": 768, "num_classes": 10}
# --smoke: a one-layer, narrow ViT (and the app's small cnn) that check the script on CPU.
TINY_VIT = VIT | {"num_layers": 1, "num_heads": 2, "hidden_dim": 64, "mlp_dim": 128}
BATCH = 512


def app_run(
    work: Path, args: argparse.Namespace, gpu: bool, rep: int = 0, **extra: str
) -> dict[str, Any]:
    """(b): one real `trainctl train`; steady figures are the medians of epochs 2 and later.
    rep 1 is a second, fresh run on the same machine: its compilation comes from the cache
    (private to this user on this machine, app/training/accel.py)."""
    from app.runfolder.folder import read_jsonl
    from bench.startup import MARKS, one_start

    settings = {
        "dataset": "parquet",
        "model": "cnn" if args.smoke else "vit",
        "num_workers": "1",
        "global_batch_size": str(args.batch),
        "epochs": str(args.epochs),
        "use_gpu": "true" if gpu else "false",
        "cpus_per_worker": "1" if args.smoke else "4",
    } | extra
    marks = one_start(work, rep, args.address, settings=settings, data_path=work)
    epochs = read_jsonl(work / "runs" / f"startup-{rep}" / "metrics.jsonl")
    first, later = epochs[0], epochs[1:] or epochs
    steady_rate = statistics.median(e["images_per_s"] for e in later)
    steady_epoch = statistics.median(e["epoch_time_s"] for e in later)
    previous, phases = 0.0, {}
    for name, _ in MARKS:
        if name in marks:
            phases[name] = round(marks[name] - previous, 2)
            previous = marks[name]
    return {
        "images_per_s": round(steady_rate, 1),
        "epoch_s": round(steady_epoch, 2),
        "first_epoch_s": round(first["epoch_time_s"], 2),
        "compile_s": first.get("compile_s"),
        "first_batch_s": first.get("first_batch_s"),
        "compiled": bool(first.get("compiled")),
        "first_step_s": round(marks.get("first_step", float("nan")), 2),
        "first_checkpoint_s": round(marks.get("checkpoint", float("nan")), 2),
        "startup_phases_s": phases,
        "peak_gpu_gib": first.get("peak_gpu_gib"),
        "epochs": [
            {k: e.get(k) for k in ("epoch_time_s", "images_per_s", "first_batch_s", "compile_s")}
            for e in epochs
        ],
    }


def tutorial_run(work: Path, args: argparse.Namespace, gpu: bool) -> dict[str, Any]:
    import ray

    join_or_start(args.address)
    try:
        shape = TINY_VIT if args.smoke else VIT
        records = gpu_parts.tutorial(
            work, shape, batch=args.batch, epochs=args.tutorial_epochs, gpu=gpu
        )
    finally:
        ray.shutdown()
    later = records[1:] or records
    steady = statistics.median(r["epoch_s"] for r in later)
    return {
        "images_per_s": round(later[0]["images"] / steady, 1),
        "epoch_s": round(steady, 2),
        "first_epoch_s": round(records[0]["epoch_s"], 2),
        "peak_gpu_gib": records[-1]["peak_gpu_gib"],
    }


def fed_run(work: Path, args: argparse.Namespace, device: Any) -> dict[str, Any]:
    import ray

    join_or_start(args.address)
    try:
        feed = gpu_parts.app_feed(work, args.batch, device)
        backend = "eager" if device.type == "cpu" else "inductor"
        return gpu_parts.fed_loop(feed, TINY_VIT if args.smoke else VIT, device, backend=backend)
    finally:
        ray.shutdown()


def bare_runs(images: Any, labels: Any, args: argparse.Namespace, device: Any) -> dict[str, Any]:
    shape = TINY_VIT if args.smoke else VIT
    x, y = gpu_parts.resident_batches(images, labels, device)
    # On CPU (--smoke) inductor would spend minutes compiling: dynamo alone checks the path.
    backend = "eager" if device.type == "cpu" else "inductor"
    variants = {"eager": "", "compiled": backend}
    if not args.smoke:
        variants["regional"] = "regional"
    found = {}
    for name, how in variants.items():
        found[name] = gpu_parts.bare_loop(x, y, shape, device, batch=args.batch, compiled=how)
    return found


def run_part(
    part: str,
    found: dict[str, Any],
    work: Path,
    args: argparse.Namespace,
    gpu: bool,
    arrays: tuple[Any, Any],
    device: Any,
) -> None:
    images, labels = arrays
    if part == "b":
        found["b_app"] = app_run(work, args, gpu)
    elif part == "b2":
        found["b_app_second_run"] = app_run(work, args, gpu, rep=1)
    elif part == "b-eager":  # the same without torch.compile: what compilation buys
        found["b_app_uncompiled"] = app_run(work, args, gpu, rep=2, compile="off")
    elif part == "a":
        found["a_tutorial"] = tutorial_run(work, args, gpu)
    elif part == "d":
        found["d_bare_app_feed"] = fed_run(work, args, device)
    elif part == "c":
        for variant, figures in bare_runs(images, labels, args, device).items():
            found[f"c_bare_{variant}"] = figures


def _line(name: str, figures: dict[str, Any]) -> str:
    peak = figures.get("peak_gpu_gib")
    text = f"  {name:<14} {figures['images_per_s']:10,.0f} images/s"
    if "epoch_s" in figures:
        text += f"  epoch {figures['epoch_s']:6.2f}s  first epoch {figures['first_epoch_s']:6.2f}s"
    if "warmup_s" in figures:
        text += f"  warm-up (3 steps) {figures['warmup_s']:6.2f}s"
    return text + f"  peak GPU memory {peak if peak is not None else 'n/a'} GiB"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = ray_bench_arguments(__doc__, "tiny models and data; runs on CPU")
    parser.add_argument("--images", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--epochs", type=int, default=4, help="epochs of (b)")
    parser.add_argument("--tutorial-epochs", type=int, default=3, help="epochs of (a)")
    parser.add_argument(
        "--parts", default="b,b2,c,a", help="which of a, b, b2 (b again, warm cache), c to run"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.images, args.batch, args.epochs, args.tutorial_epochs = 256, 64, 1, 1
        args.parts = args.parts.replace("b,b2", "b")

    import torch

    gpu = torch.cuda.is_available()
    if gpu:
        device = torch.device("cuda")
        name = torch.cuda.get_device_name(device)
    elif args.smoke:
        device, name = torch.device("cpu"), "CPU (smoke run: figures mean nothing)"
    else:
        raise SystemExit("bench/gpu.sh needs an NVIDIA GPU (or --smoke to check it on CPU)")

    images, labels = cifar_arrays(args.images, seed=1)
    work = Path(tempfile.mkdtemp(prefix="trainctl-gpu-"))
    write_tensor_parquet(work / "train", images, labels, files=max(1, args.images // 5000))
    valid_images, valid_labels = cifar_arrays(max(args.batch, args.images // 5), seed=2)
    write_tensor_parquet(work / "valid", valid_images, valid_labels, files=1)
    say(
        f"gpu: ViT on {args.images:,} synthetic CIFAR-shaped images, batch {args.batch}, {name}, "
        f"torch {torch.__version__}"
    )

    found: dict[str, Any] = {}
    for part in args.parts.split(","):
        started = time.perf_counter()
        try:
            run_part(part, found, work, args, gpu, (images, labels), device)
        except Exception as err:  # one part's failure must not lose the others' figures
            if args.smoke:
                raise
            say(f"  part {part} failed: {type(err).__name__}: {err}")
        say(f"  (part {part} took {time.perf_counter() - started:.0f} s)")

    say("results (steady = median of the epochs after the first):")
    for key, figures in found.items():
        say(_line(key, figures))
    result: dict[str, Any] = {"device": name, "torch": torch.__version__, "images": args.images}
    result["variants"] = found
    app = found.get("b_app")
    if app:
        phases = ", ".join(f"{k} +{v:.1f}s" for k, v in app["startup_phases_s"].items())
        say(f"  app start-up: first optimizer step at {app['first_step_s']:.1f}s ({phases})")
        say(
            f"  app first epoch: compile {app['compile_s']} s, first batch {app['first_batch_s']} s"
        )
    if app and "a_tutorial" in found:
        tutorial = found["a_tutorial"]
        result["b_over_a"] = ratio(app["images_per_s"], tutorial["images_per_s"])
        result["b_over_a_epoch"] = ratio(tutorial["epoch_s"], app["epoch_s"])
        result["b_over_a_first_epoch"] = ratio(tutorial["first_epoch_s"], app["first_epoch_s"])
    if app and "c_bare_compiled" in found:
        result["b_over_c"] = ratio(app["images_per_s"], found["c_bare_compiled"]["images_per_s"])
    shown = {k: v for k, v in result.items() if k.startswith("b_over")}
    say("ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in shown.items()))
    print(result_line("gpu", result), flush=True)
    return result


if __name__ == "__main__":
    main()
