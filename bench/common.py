"""What every benchmark shares: interleaved repetitions, medians, the result line, test data.

The machine these run on is shared and noisy, so no figure is trusted alone: each benchmark runs
its variants in one process, alternating them rep by rep, and reports ratios of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

CACHE = Path(os.environ.get("TRAINCTL_BENCH_CACHE", "/tmp/trainctl-bench"))
IMAGE_SHAPE = (32, 32, 3)  # CIFAR-10: height, width, channels, uint8
NUM_CLASSES = 10


def ray_bench_arguments(doc: str | None, smoke: str, **sizes: int) -> argparse.ArgumentParser:
    """The options every benchmark on Ray takes: its sizes (--rows 4096 ...), --smoke (with
    what it shrinks to) and --address (a running cluster to join; else a local one starts)."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    for name, default in sizes.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--smoke", action="store_true", help=smoke)
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS"))
    return parser


def median(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 3) if denominator > 0 else float("nan")


def ratio_table(
    values: Mapping[str, float], pairs: Mapping[str, tuple[str, str]]
) -> dict[str, float]:
    """A table of named ratios between variants: {name: (numerator's, denominator's variant)},
    each a ratio() of their `values`, in the order named."""
    return {name: ratio(values[top], values[bottom]) for name, (top, bottom) in pairs.items()}


def interleave(
    variants: dict[str, Callable[[], dict[str, float]]], reps: int, *, say: Callable[[str], None]
) -> dict[str, list[dict[str, float]]]:
    """Run every variant once per rep, rotating the order so none always goes first or last."""
    names = list(variants)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            figures = variants[name]()
            results[name].append(figures)
            shown = "  ".join(f"{key} {_number(value)}" for key, value in figures.items())
            say(f"  rep {rep + 1}/{reps}  {name:<10} {shown}")
    return results


def _number(value: float) -> str:
    return (
        f"{value:,}"
        if isinstance(value, int)
        else f"{value:,.3g}"
        if value < 10
        else f"{value:,.0f}"
    )


def medians(results: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {
        name: {key: median(rep[key] for rep in reps) for key in reps[0]}
        for name, reps in results.items()
    }


def machine() -> dict[str, Any]:
    load1, _, _ = os.getloadavg()
    return {"cpus": os.cpu_count(), "load1": round(load1, 2), "date": time.strftime("%Y-%m-%d")}


def result_line(bench: str, figures: dict[str, Any]) -> str:
    """The last line a benchmark prints: one JSON object that `make bench` and tests can parse."""
    return json.dumps({"bench": bench, **figures, "machine": machine()}, sort_keys=False)


class Skipped(Exception):
    """A benchmark that cannot run here (its server did not start): reported, not failed."""


def skipped_line(bench: str, reason: str) -> str:
    """The last line of a benchmark that could not run: `make bench` reports it and goes on."""
    return json.dumps({"bench": bench, "skipped": reason, "machine": machine()})


def cifar_arrays(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-shaped images that compress like photos rather than like noise.

    Each image is an 8x8 random pattern blown up to 32x32 plus mild noise: smooth regions make
    Snappy and the Parquet encoders do real work, as they do on natural images.
    """
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, size=(rows, 8, 8, 3), dtype=np.uint8)
    images = coarse.repeat(4, axis=1).repeat(4, axis=2)
    noise = rng.integers(0, 8, size=images.shape, dtype=np.uint8)
    images = np.minimum(images.astype(np.uint16) + noise, 255).astype(np.uint8)
    labels = rng.integers(0, NUM_CLASSES, size=rows, dtype=np.int64)
    return images, labels


def write_tensor_parquet(folder: Path, images: np.ndarray, labels: np.ndarray, files: int) -> None:
    """The tutorial's layout: a Ray tensor column `image` and an int64 `label`, Snappy-compressed,
    as `ray.data.from_numpy(...).write_parquet()` writes it (one row group per file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from ray.data.extensions import ArrowTensorArray

    folder.mkdir(parents=True, exist_ok=True)
    for index, part in enumerate(np.array_split(np.arange(len(labels)), files)):
        table = pa.table(
            {
                "image": ArrowTensorArray.from_numpy(images[part]),
                "label": pa.array(labels[part]),
            }
        )
        pq.write_table(table, folder / f"part-{index:05d}.parquet", row_group_size=len(part))


def cached_dataset(name: str, build: Callable[[Path], None]) -> Path:
    """CACHE/<name>, made once by `build(folder)` and reused by every later benchmark run."""
    root = CACHE / name
    if root.is_dir():
        return root
    # Built beside its final name and renamed: a concurrent or killed run never sees half of it.
    staging = CACHE / f".{root.name}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    build(staging)
    try:
        staging.rename(root)
    except OSError:  # another run finished the same dataset first
        shutil.rmtree(staging, ignore_errors=True)
    return root


def tutorial_dataset(rows: int, files: int, valid_rows: int) -> Path:
    """train/ and valid/ in the tutorial's layout, generated once per size and cached."""

    def build(staging: Path) -> None:
        images, labels = cifar_arrays(rows + valid_rows)
        write_tensor_parquet(staging / "train", images[:rows], labels[:rows], files)
        write_tensor_parquet(
            staging / "valid", images[rows:], labels[rows:], max(1, files * valid_rows // rows)
        )

    return cached_dataset(f"cifar-tensor-{rows}x{files}", build)


def say(message: str) -> None:
    print(message, flush=True)
