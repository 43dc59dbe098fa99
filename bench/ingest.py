"""Ingest: rows/s that reach a do-nothing consumer, tutorial pipeline vs the app's vs pyarrow.

  (a) tutorial: Ray Data `read_parquet` + per-row `.map` with torchvision ToTensor + Normalize,
      then `iter_torch_batches`;
  (b) app: `build_datasets` + `cache_datasets` + `epoch_batches` from `app.data`, exactly the
      calls `trainctl train` makes (uint8 batches, normalized on the training device; here the
      CPU). Data this size fits in the object store, so the app reads the files once and every
      epoch streams from memory; the first epoch's read is reported as `cold_*`;
  (b_stream) the same with TRAIN_CACHE_DATASET=off: every epoch streams from the files, as the
      app does for data too big to keep;
  (c) ceiling for reading the files: pyarrow into numpy, no Ray, no torch;
  (b_stream_folder) the app streaming JPEG files from class folders (TRAIN_DATASET=folder,
      bench/ingest_folder.py): decoding in Ray Data's tasks, against the Parquet layouts.

Each runs on the tutorial's layout (a Ray tensor column) and on the layout `trainctl
prepare-data` writes (raw fixed-size binary, suffix _raw). The steady-state rate excludes the
wait for the first batch, which is reported on its own. Usage:
    python -m bench.ingest [--rows 100000] [--reps 3] [--smoke] [--address RAY_ADDRESS]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from app.ray_cluster import join_or_start
from bench.common import (
    CACHE,
    IMAGE_SHAPE,
    interleave,
    medians,
    ratio,
    ratio_table,
    ray_bench_arguments,
    result_line,
    say,
    tutorial_dataset,
)
from bench.ingest_folder import folder_rows, jpeg_folder

BATCH = 512  # the tutorial's global batch; one consumer here, so also the per-worker batch
TARGET_B_OVER_A, TARGET_B_OVER_C = 3.0, 0.5


def drain(batches: Iterable[Any], rows_of: Callable[[Any], int]) -> dict[str, float]:
    """Pull every batch and do nothing with it.

    The rate is taken between the moments 10% and 90% of the rows have arrived: that leaves out
    the wait for the first batch (reported on its own), the burst of blocks that finished
    together while the consumer waited for it, and the straggling last read task.
    """
    started = time.perf_counter()
    marks = [(0, started)]
    rows = 0
    for batch in batches:
        rows += rows_of(batch)
        marks.append((rows, time.perf_counter()))
    first = marks[1][1] - started
    low = next(m for m in marks[1:] if m[0] >= 0.1 * rows)
    high = next(m for m in marks if m[0] >= 0.9 * rows)
    if high[1] <= low[1]:  # too few batches for a window: fall back to after the first batch
        low, high = marks[1], marks[-1]
    span = high[1] - low[1]
    return {
        "rows_per_s": (high[0] - low[0]) / span if span > 0 else float("nan"),
        "first_batch_s": first,
        # Rows over the whole pass, first batch included. A slow start lets the pipeline buffer
        # rows that then arrive in a burst; this figure is immune to that.
        "end_to_end_rows_per_s": rows / (marks[-1][1] - started),
        "rows": rows,
    }


# --- (a) the tutorial's pipeline ------------------------------------------------------------
def tutorial_transform() -> Callable[[dict[str, Any]], dict[str, Any]]:
    from torchvision import transforms

    # Built once per worker rather than once per row: if anything this flatters the tutorial.
    compose = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))]
    )

    def transform(row: dict[str, Any]) -> dict[str, Any]:
        row["image"] = compose(row["image"])
        return row

    return transform


def tutorial(train_dir: Path) -> dict[str, float]:
    import ray.data

    dataset = ray.data.read_parquet(str(train_dir)).map(tutorial_transform())
    return drain(dataset.iter_torch_batches(batch_size=BATCH), lambda b: len(b["label"]))


# --- (b) the app's pipeline -------------------------------------------------------------------
def _app_dataset(data_dir: Path, cache: str, dataset: str) -> tuple[Any, Any]:
    """The settings and checked dataset `trainctl train` starts from, built once per variant."""
    from app.data.kinds import dataset_kind
    from app.settings import TrainSettings

    settings = TrainSettings(
        dataset=dataset, data_path=data_dir, num_workers="1", global_batch_size=BATCH,
        cache_dataset=cache, model="cnn", image_size=IMAGE_SHAPE[0],
    )  # fmt: skip
    kind = dataset_kind(settings.dataset)
    return settings, kind.ensure(kind.location(settings.data_path), settings)[0]


def app_pipeline(
    data_dir: Path, cache: str = "auto", dataset: str = "parquet"
) -> Callable[[], dict[str, float]]:
    """`trainctl train`'s calls: settings, the kind's ensure, build_datasets, cache_datasets,
    epoch_batches, for two epochs.

    With the cache (the default for data that fits in the object store), the first epoch reads
    and decodes the files before its first batch and every epoch then streams from memory: the
    steady state is the second epoch's, and the read is reported as the first epoch's cost
    (`cold_*`). With cache="off", every epoch streams from the files and the two epochs agree.
    """
    import torch

    from app.data.cache import cache_datasets
    from app.data.kinds import build_datasets
    from app.data.pipeline import epoch_batches

    settings, info = _app_dataset(data_dir, cache, dataset)
    epoch = iter(range(1, 1_000_000))

    def run() -> dict[str, float]:
        started = time.perf_counter()
        train = cache_datasets(build_datasets(settings, info), settings, info)[0]["train"]
        read_s = time.perf_counter() - started

        def one_epoch() -> dict[str, float]:
            batches = epoch_batches(
                train.iterator(), batch_size=BATCH, info=info, device=torch.device("cpu"),
                epoch=next(epoch), seed=settings.seed, shuffle=True,
            )  # fmt: skip
            return drain(batches, lambda b: int(b[1].shape[0]))

        first, second = one_epoch(), one_epoch()
        first_total = first["rows"] / first["end_to_end_rows_per_s"]
        return {
            **second,
            "cold_first_batch_s": read_s + first["first_batch_s"],
            "cold_end_to_end_rows_per_s": first["rows"] / (read_s + first_total),
        }

    return run


# --- (c) the ceiling: pyarrow straight into numpy -----------------------------------------------
def pyarrow_numpy(folder: Path) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(images uint8 NHWC, labels) per file, as fast as pyarrow gives them: no checks, no copy
    beyond Parquet's own decoding. Reads the tutorial's tensor column and the app's raw bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for path in sorted(folder.glob("*.parquet")):
        table = pq.read_table(path, columns=["image", "label"])
        column = table.column("image").combine_chunks()
        if pa.types.is_fixed_size_binary(column.type):  # prepare-data's raw layout
            pixels = np.frombuffer(column.buffers()[1], np.uint8)
        else:  # a tensor column: its storage is a list of every pixel per image
            storage = getattr(column, "storage", column)
            pixels = storage.flatten().to_numpy(zero_copy_only=False)
        yield pixels.reshape(len(table), *IMAGE_SHAPE), table.column("label").to_numpy()


def ceiling(folder: Path) -> dict[str, float]:
    return drain(pyarrow_numpy(folder), lambda b: len(b[1]))


def prepare_data_layout(rows: int) -> Path:
    """CIFAR-shaped data as `trainctl prepare-data` writes it (synthetic, so no download)."""
    from app.data.kinds import prepare_dataset

    out = CACHE / f"prepared-synthetic-{rows}"
    prepare_dataset("synthetic", out, rows=rows)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = ray_bench_arguments(__doc__, "tiny size, one rep", rows=100_000, files=20, reps=3)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.files, args.reps = 4096, 4, 1

    import ray
    import ray.data
    import torch

    # The consumer runs as a training worker would: Ray gives a worker with
    # TRAIN_CPUS_PER_WORKER=1 OMP_NUM_THREADS=1. Two torch threads on two busy cores made the
    # app's on-device normalization 5-20x slower here, an artefact no worker ever sees.
    torch.set_num_threads(1)
    root = tutorial_dataset(args.rows, args.files, valid_rows=max(BATCH, args.rows // 10))
    prepared = prepare_data_layout(args.rows)
    jpegs = jpeg_folder(folder_rows(args.rows), max(BATCH, folder_rows(args.rows) // 10))
    join_or_start(args.address)

    say(
        f"ingest: {args.rows:,} CIFAR-shaped rows, batch {BATCH}; tutorial layout (Ray tensor "
        f"column, {args.files} files) in {root}, prepare-data layout (raw bytes) in {prepared}"
    )
    variants = {
        "a_tutorial": lambda: tutorial(root / "train"),
        "b_app": app_pipeline(root),
        "b_stream": app_pipeline(root, cache="off"),
        "c_pyarrow": lambda: ceiling(root / "train"),
        "b_app_raw": app_pipeline(prepared),
        "b_stream_raw": app_pipeline(prepared, cache="off"),
        "c_pyarrow_raw": lambda: ceiling(prepared / "train"),
        "b_stream_folder": app_pipeline(jpegs, cache="off", dataset="folder"),
    }
    figures = medians(interleave(variants, args.reps, say=say))
    ray.shutdown()

    for name, values in figures.items():
        say(
            f"median {name:<14} {values['rows_per_s']:>10,.0f} rows/s   first batch "
            f"{values['first_batch_s']:.2f}s   end to end {values['end_to_end_rows_per_s']:>9,.0f}"
            f" rows/s"
        )
    rate = {name: values["rows_per_s"] for name, values in figures.items()}
    whole = {name: values["end_to_end_rows_per_s"] for name, values in figures.items()}
    cold = {
        name: values["cold_end_to_end_rows_per_s"]
        for name, values in figures.items()
        if "cold_end_to_end_rows_per_s" in values
    }
    ratios: dict[str, float] = {}
    # The same five figures for both file layouts: the tutorial's, and prepare-data's (raw).
    for tag, layout in (("", ""), ("raw_", "_raw")):
        app, stream, bare = f"b_app{layout}", f"b_stream{layout}", f"c_pyarrow{layout}"
        pairs = {"b_over_a": (app, "a_tutorial"), "b_over_c": (app, bare)}
        pairs |= {"stream_b_over_a": (stream, "a_tutorial"), "stream_b_over_c": (stream, bare)}
        ratios |= {tag + name: value for name, value in ratio_table(rate, pairs).items()}
        ratios[f"{tag}cold_end_to_end_b_over_a"] = ratio(cold[app], whole["a_tutorial"])
    folder = {
        "folder_stream_over_raw_stream": ("b_stream_folder", "b_stream_raw"),
        "folder_stream_over_stream": ("b_stream_folder", "b_stream"),
    }
    ratios |= ratio_table(rate, folder)
    ratios["folder_end_to_end_over_raw"] = ratio(whole["b_stream_folder"], whole["b_stream_raw"])
    say(
        f"same files (tutorial layout), per epoch: b/a = {ratios['b_over_a']:.2f} "
        f"(target >= {TARGET_B_OVER_A}), b/c = {ratios['b_over_c']:.2f} (target >= "
        f"{TARGET_B_OVER_C}); streaming every epoch from the files (TRAIN_CACHE_DATASET=off): "
        f"b/a = {ratios['stream_b_over_a']:.2f}, b/c = {ratios['stream_b_over_c']:.2f}"
    )
    say(
        f"first epoch, which reads the files (end to end, first batch included): "
        f"app {cold['b_app']:,.0f} vs tutorial {whole['a_tutorial']:,.0f} rows/s, "
        f"b/a = {ratios['cold_end_to_end_b_over_a']:.2f}"
    )
    say(
        f"prepare-data layout: b/a = {ratios['raw_b_over_a']:.2f}, b/c = "
        f"{ratios['raw_b_over_c']:.2f}; streaming: b/a = {ratios['raw_stream_b_over_a']:.2f}, "
        f"b/c = {ratios['raw_stream_b_over_c']:.2f}; first epoch end to end b/a = "
        f"{ratios['raw_cold_end_to_end_b_over_a']:.2f}"
    )
    say(
        f"image folder (JPEG decode in Ray Data, {folder_rows(args.rows):,} files), streaming: "
        f"{ratios['folder_stream_over_raw_stream']:.3f} x the prepare-data layout, "
        f"{ratios['folder_stream_over_stream']:.3f} x the tutorial layout; end to end "
        f"{ratios['folder_end_to_end_over_raw']:.3f} x the prepare-data layout"
    )
    result = {
        "rows": args.rows,
        "reps": args.reps,
        "rows_per_s": {k: round(v) for k, v in rate.items()},
        "first_batch_s": {k: round(v["first_batch_s"], 3) for k, v in figures.items()},
        "cold_first_batch_s": {
            k: round(v["cold_first_batch_s"], 3)
            for k, v in figures.items()
            if "cold_first_batch_s" in v
        },
        "end_to_end_rows_per_s": {k: round(v) for k, v in whole.items()},
        "cold_end_to_end_rows_per_s": {k: round(v) for k, v in cold.items()},
        "rows_delivered": {k: int(v["rows"]) for k, v in figures.items()},
        **ratios,
        "targets_met": ratios["b_over_a"] >= TARGET_B_OVER_A
        and ratios["b_over_c"] >= TARGET_B_OVER_C,
    }
    print(result_line("ingest", result), flush=True)
    return result


if __name__ == "__main__":
    main()
