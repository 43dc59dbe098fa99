"""Batch inference: images/s of `trainctl predict` over a folder with Ray Data (an actor pool,
the files decoded in Ray's workers) against a plain single-process loop over the same files
(today's few-files path: read, decode and classify in chunks of 64, in one process).

Both classify the same CIFAR-shaped JPEG files (bench/ingest_folder.py's folder) with the same
export: a `trainctl train`-style run folder holding one checkpoint of the model (random
weights: the work per image is what counts), exported by the app's own code. Each figure is
end to end, from the call to every prediction in hand: for Ray Data that includes listing the
folder and starting the actor pool (each actor imports torch and loads the model), which a
large folder amortizes.

--gpu (a GPU machine): 256-pixel JPEGs (bench/data_pool.py's) resized to 224 for resnet18, and
both ways on the GPU: (a) the plain loop decodes in its one process and classifies each 256
images on the GPU; (b) one GPU actor scores what Ray Data's read tasks decode on the
machine's other CPUs (`trainctl predict FOLDER --gpus`). Usage:
    python -m bench.batch_inference [--images 4096] [--reps 3] [--model resnet18] [--smoke]
    python -m bench.batch_inference --gpu --images 8192 [--out DIR]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    interleave,
    medians,
    ratio,
    ray_bench_arguments,
    result_line,
    say,
)
from bench.data_pool import GPU_SIDE, gpu_folder
from bench.ingest_folder import folder_rows, jpeg_folder

SIDE = 32
TOP_K = 5
GPU_BATCH = 256  # the actor pool's batch size (ScoringOptions)


def make_export(storage: Path, data: Path, model: str, side: int = SIDE) -> Path:
    """A run folder with one checkpoint of `model` for side x side RGB images in 10 classes,
    exported as `trainctl train` exports its best checkpoint."""
    import torch

    from app.data.schema import DatasetInfo
    from app.export.build import export_best
    from app.runfolder import checkpoint_names, checkpoints
    from app.settings import TrainSettings
    from app.training.model import build_model

    names = tuple(sorted(p.name for p in (data / "train").iterdir()))
    info = DatasetInfo(
        channels=3, height=side, width=side, num_classes=len(names), train_rows=0,
        valid_rows=0, layout="folder", mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25),
        path=data, class_names=names,
    )  # fmt: skip
    settings = TrainSettings(
        _env_file=None, dataset="folder", data_path=data, model=model, image_size=side,
        storage_path=storage, run_name="bench",
    )  # fmt: skip
    torch.manual_seed(0)
    state = build_model(model, info).state_dict()
    folder = settings.run_dir / checkpoint_names.dir_name(1)
    checkpoints.write_checkpoint(
        folder, model_state=state, train_state={"epoch": 1}, epoch=1,
        metrics={"epoch": 1.0, "val_accuracy": 0.1}, class_names=names,
    )  # fmt: skip
    export_best(settings, info, checkpoints.scan(settings.run_dir).good[0])
    return settings.run_dir


def single_process(run_dir: Path, files: list[str]) -> dict[str, float]:
    from app.export.predict import predict

    started = time.perf_counter()
    found = predict(run_dir, files, TOP_K)
    took = time.perf_counter() - started
    assert len(found) == len(files)
    return {"images_per_s": len(files) / took, "seconds": took}


def single_process_gpu(run_dir: Path, files: list[str]) -> dict[str, float]:
    """The plain loop on a GPU: decode GPU_BATCH files in this process (as `predict` decodes
    a few), classify them on the GPU, top-k back on the host; end to end."""
    import torch

    from app.export.card import verified
    from app.export.predict import input_batch, load_model
    from app.training.model import uses_channels_last

    started = time.perf_counter()
    export = verified(run_dir / "export", run_dir)
    card = export.card
    device = torch.device("cuda")
    model = load_model(export).to(device)
    if uses_channels_last(card["architecture"]):
        model = model.to(memory_format=torch.channels_last)
    rows = 0
    for start in range(0, len(files), GPU_BATCH):
        chunk = files[start : start + GPU_BATCH]
        x = input_batch(chunk, card).to(device, non_blocking=True)
        with torch.inference_mode():
            values, _ = torch.softmax(model(x).float(), dim=1).topk(TOP_K, dim=1)
        rows += len(values.cpu())
    took = time.perf_counter() - started
    assert rows == len(files)
    return {"images_per_s": len(files) / took, "seconds": took}


def ray_data(
    run_dir: Path, folder: Path, images: int, actors: int | None, gpus: bool = False
) -> dict[str, float]:
    """`trainctl predict FOLDER`'s path, step by step with its own functions (verify the
    export, list the folder, read + decode + score on the actor pool), timed to the first
    scored batch and to the last."""
    from app.data.folder_listing import list_images
    from app.evaluation.batch_predict import rows_dataset
    from app.evaluation.scoring import ScoringOptions, scored_batches
    from app.export.card import verified

    started = time.perf_counter()
    export = verified(run_dir / "export", run_dir)
    dataset = rows_dataset([(folder, list_images(folder)[0])], export.card)
    rows, first, first_rows = 0, 0.0, 0
    options = ScoringOptions(actors=actors, gpus=gpus, top_k=TOP_K)
    for batch in scored_batches(dataset, export, options):
        rows += len(batch["predicted"])
        assert not any(batch["error"])
        if not first:
            first, first_rows = time.perf_counter() - started, rows
    took = time.perf_counter() - started
    assert rows == images
    steady = (rows - first_rows) / (took - first) if took > first and rows > first_rows else 0.0
    return {
        "images_per_s": images / took,
        "seconds": took,
        "first_batch_s": first,
        "steady_images_per_s": steady,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = ray_bench_arguments(__doc__, "128 images, one rep, the small cnn", images=4096, reps=3)
    parser.add_argument("--model", default="resnet18", help="TRAIN_MODEL of the export")
    parser.add_argument("--actors", type=int, help="the pool's most actors [default: all CPUs]")
    parser.add_argument("--gpu", action="store_true", help="both ways on the GPU (see above)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the result's JSON")
    args = parser.parse_args(argv)
    if args.smoke:
        args.images, args.reps, args.model = 128, 1, "cnn"
    images = folder_rows(args.images)

    import os

    import ray

    from app.ray_cluster import join_or_start

    side = GPU_SIDE if args.gpu else SIDE
    data = (
        gpu_folder(images, max(16, images // 16)) if args.gpu else jpeg_folder(images, valid_rows=1)
    )
    folder = data / "train"
    files = sorted(str(p) for p in folder.rglob("*.jpg"))
    join_or_start(args.address)
    with tempfile.TemporaryDirectory(prefix="trainctl-bench-") as tmp:
        run_dir = make_export(Path(tmp), data, args.model, side)
        say(
            f"batch inference: {images:,} JPEG files in {folder} ({side}x{side} for the model"
            f"{', on the GPU' if args.gpu else ''}), {args.model}, "
            f"top-{TOP_K}; Ray cluster with {ray.cluster_resources().get('CPU', 0):g} CPUs, "
            f"this machine {os.cpu_count()} cores"
        )
        variants = {
            "a_single": lambda: (single_process_gpu if args.gpu else single_process)(
                run_dir, files
            ),
            "b_ray_data": lambda: ray_data(run_dir, folder, images, args.actors, args.gpu),
        }
        figures = medians(interleave(variants, args.reps, say=say))
    ray.shutdown()
    rates = {name: round(values["images_per_s"], 1) for name, values in figures.items()}
    for name, rate in rates.items():
        say(f"median {name:<12} {rate:>9,.1f} images/s  ({figures[name]['seconds']:.2f} s)")
    pool = figures["b_ray_data"]
    steady = round(pool["steady_images_per_s"], 1)
    say(
        f"       b_ray_data first scored batch after {pool['first_batch_s']:.2f} s (listing, "
        f"actor start, model load), then {steady:,.1f} images/s"
    )
    result = {
        "images": images,
        "model": args.model,
        "device": "gpu" if args.gpu else "cpu",
        "side": side,
        "images_per_s": rates,
        "seconds": {name: round(values["seconds"], 2) for name, values in figures.items()},
        "b_over_a": ratio(rates["b_ray_data"], rates["a_single"]),
        "ray_first_batch_s": round(pool["first_batch_s"], 2),
        "ray_steady_images_per_s": steady,
        "steady_b_over_a": ratio(steady, rates["a_single"]),
    }
    line = result_line("batch_inference", result)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "batch_inference.json").write_text(line + "\n")
    print(line, flush=True)
    return result


if __name__ == "__main__":
    main()
