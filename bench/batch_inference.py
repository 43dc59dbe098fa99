"""Batch inference: images/s of `trainctl predict` over a folder with Ray Data (an actor pool,
the files decoded in Ray's workers) against a plain single-process loop over the same files
(today's few-files path: read, decode and classify in chunks of 64, in one process).

Both classify the same CIFAR-shaped JPEG files (bench/ingest_folder.py's folder) with the same
export: a `trainctl train`-style run folder holding one checkpoint of the model (random
weights: the work per image is what counts), exported by the app's own code. Each figure is
end to end, from the call to every prediction in hand: for Ray Data that includes listing the
folder and starting the actor pool (each actor imports torch and loads the model), which a
large folder amortizes. Usage:
    python -m bench.batch_inference [--images 4096] [--reps 3] [--model resnet18] [--smoke]
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
from bench.ingest_folder import folder_rows, jpeg_folder

SIDE = 32
TOP_K = 5


def make_export(storage: Path, data: Path, model: str) -> Path:
    """A run folder with one checkpoint of `model` for 32x32 RGB images in 10 classes,
    exported as `trainctl train` exports its best checkpoint."""
    import torch

    from app.data.schema import DatasetInfo
    from app.export.build import export_best
    from app.runfolder import checkpoint_names, checkpoints
    from app.settings import TrainSettings
    from app.training.model import build_model

    names = tuple(sorted(p.name for p in (data / "train").iterdir()))
    info = DatasetInfo(
        channels=3, height=SIDE, width=SIDE, num_classes=len(names), train_rows=0,
        valid_rows=0, layout="folder", mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25),
        path=data, class_names=names,
    )  # fmt: skip
    settings = TrainSettings(
        _env_file=None, dataset="folder", data_path=data, model=model, image_size=SIDE,
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
    found = predict(str(run_dir), files, TOP_K)
    took = time.perf_counter() - started
    assert len(found) == len(files)
    return {"images_per_s": len(files) / took, "seconds": took}


def ray_data(run_dir: Path, folder: Path, images: int, actors: int | None) -> dict[str, float]:
    """`trainctl predict FOLDER`'s path, step by step with its own functions (verify the
    export, list the folder, read + decode + score on the actor pool), timed to the first
    scored batch and to the last."""
    from app.data.folder_listing import list_images
    from app.evaluation.batch_predict import rows_dataset
    from app.evaluation.scoring import ScoringOptions, scored
    from app.export.card import verified

    started = time.perf_counter()
    export = verified(run_dir / "export", run_dir)
    dataset = rows_dataset([(folder, list_images(folder)[0])], export.card)
    rows, first, first_rows = 0, 0.0, 0
    for batch in scored(dataset, export, ScoringOptions(actors=actors, top_k=TOP_K)).iter_batches(
        batch_size=None, batch_format="numpy"
    ):
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
    args = parser.parse_args(argv)
    if args.smoke:
        args.images, args.reps, args.model = 128, 1, "cnn"
    images = folder_rows(args.images)

    import os

    import ray

    from app.ray_cluster import join_or_start

    data = jpeg_folder(images, valid_rows=1)
    folder = data / "train"
    files = sorted(str(p) for p in folder.rglob("*.jpg"))
    join_or_start(args.address)
    with tempfile.TemporaryDirectory(prefix="trainctl-bench-") as tmp:
        run_dir = make_export(Path(tmp), data, args.model)
        say(
            f"batch inference: {images:,} {SIDE}x{SIDE} JPEG files in {folder}, {args.model}, "
            f"top-{TOP_K}; Ray cluster with {ray.cluster_resources().get('CPU', 0):g} CPUs, "
            f"this machine {os.cpu_count()} cores"
        )
        variants = {
            "a_single": lambda: single_process(run_dir, files),
            "b_ray_data": lambda: ray_data(run_dir, folder, images, args.actors),
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
        "images_per_s": rates,
        "seconds": {name: round(values["seconds"], 2) for name, values in figures.items()},
        "b_over_a": ratio(rates["b_ray_data"], rates["a_single"]),
        "ray_first_batch_s": round(pool["first_batch_s"], 2),
        "ray_steady_images_per_s": steady,
        "steady_b_over_a": ratio(steady, rates["a_single"]),
    }
    print(result_line("batch_inference", result), flush=True)
    return result


if __name__ == "__main__":
    main()
