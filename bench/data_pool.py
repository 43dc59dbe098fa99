"""Data pool: image-folder rows/s decoded on the training node's CPUs alone, against the same
with a CPU-only data node (Ray node label trainctl.io/role=data) doing the decoding.

One local multi-node Ray cluster for both variants, alternated rep by rep (bench/common.py):
the head stands for the training node (its CPUs, and with --gpu its GPU) and a second node,
labelled as the chart labels a data pool's nodes, for the data pool. A consumer actor on the
training node, reserving the CPUs a training worker does (and the GPU), pulls the train split
of a JPEG folder through the app's own calls (ImageFolder.build_datasets, epoch_batches):

  (a) training_node: Ray Data's tasks on the training node only (selector `!data`), the
      cluster as it is without a pool;
  (b) data_pool: the app's placement (app/data/pool.py: found from the node labels, Ray Data's
      tasks on the data node).

CPU mode (the default) measures decoding alone. On a machine with fewer cores than the two
nodes' CPUs together the nodes share the cores: the ratio then says what Ray's placement and
CPU budget do, not what a second machine adds; the result line reports both nodes' CPUs and
the machine's cores so it is read that way.

--gpu: a 16-core GPU machine standing for a GPU node with a CPU-only data node beside it:
larger JPEGs resized to 224 feed torchvision's resnet18, trained (bf16 autocast, channels_last)
on the GPU as fast as the batches come; images/s and GPU utilization (torch.cuda.utilization,
else nvidia-smi) per variant. Self-contained: generated JPEGs, no download. Writes the result
JSON to --out (a folder or a .json path) as well as the last line.

--stages: where a training worker's input time goes, on the training node's placement alone:
the consumer pulls the same epoch (raw) as numpy batches from Ray Data and nothing else, (raw
unordered) the same without the order training keeps, (raw small blocks) with read tasks of
64 files instead of ROWS_PER_BLOCK, (to device) through epoch_batches onto the device,
normalized, with no model, and (model) with the model step, as the comparison above.

Usage:
    python -m bench.data_pool [--rows 4096] [--reps 3] [--smoke]
    python -m bench.data_pool --gpu --out "$OUT"     # about 90 s on a 16-core H200 machine
    python -m bench.data_pool --gpu --stages --reps 2 --out "$OUT"
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from app.data.pool import LABEL_KEY, LABEL_VALUE, TRAINING_SELECTOR, find_data_pool, placed
from bench.common import (
    cached_dataset,
    interleave,
    medians,
    ratio,
    result_line,
    say,
)
from bench.ingest_folder import jpeg_folder

GPU_IMAGE, GPU_SIDE = 256, 224  # JPEG side written, side resized and cropped to (resnet18)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=None, help="train images (default by mode)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--train-cpus", type=int, default=None, help="the training node's CPUs")
    parser.add_argument("--data-cpus", type=int, default=None, help="the data node's CPUs")
    parser.add_argument("--worker-cpus", type=int, default=None, help="the consumer's CPUs")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument(
        "--object-store-gib", type=float, default=None, help="each node's object store"
    )
    parser.add_argument("--gpu", action="store_true", help="resnet18 on the GPU (see above)")
    parser.add_argument("--stages", action="store_true", help="the input's stages (see above)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 rep: it runs")
    parser.add_argument("--out", type=Path, default=None, help="folder or .json for the result")
    args = parser.parse_args()
    cores = os.cpu_count() or 2
    if args.gpu:
        defaults = {"rows": 8192, "train_cpus": 8, "data_cpus": 8, "worker_cpus": 2, "batch": 256}
        # A GPU node's object store holds GiBs. Ray's test clusters give each node 150 MiB,
        # 3 blocks of 256 decoded 224-pixel images: Ray Data then runs ~2 read tasks at a time
        # whatever the CPUs (measured: ~1,000 rows/s on 6 or 8 CPUs alike).
        defaults["object_store_gib"] = 8
    else:
        defaults = {"rows": 4096, "train_cpus": 2, "data_cpus": 2, "worker_cpus": 1, "batch": 256}
        defaults["object_store_gib"] = 0.5
    if args.smoke:
        defaults.update(rows=256, batch=64)
        args.reps = 1
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.cores = cores
    return args


def gpu_folder(rows: int, valid: int) -> Path:
    """train/ and valid/ of GPU_IMAGE-pixel JPEGs (quality 90), ten class folders, cached."""
    from PIL import Image

    def build(staging: Path) -> None:
        rng = np.random.default_rng(0)
        for index in range(rows + valid):
            split = "train" if index < rows else "valid"
            label = index % 10
            # A coarse random pattern blown up, plus noise: compresses like a photo, not noise.
            coarse = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
            image = coarse.repeat(GPU_IMAGE // 16, 0).repeat(GPU_IMAGE // 16, 1)
            image = np.minimum(image + rng.integers(0, 12, image.shape, dtype=np.uint8), 255)
            folder = staging / split / f"class{label:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image.astype(np.uint8)).save(folder / f"{index:07d}.jpg", quality=90)

    return cached_dataset(f"data-pool-jpeg-{GPU_IMAGE}-{rows}", build)


def start_cluster(args: argparse.Namespace) -> Any:
    """The head (training node) and one data node labelled as the chart labels a data pool's."""
    from ray.cluster_utils import Cluster

    store = int(args.object_store_gib * (1 << 30))
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "object_store_memory": store,
            "num_cpus": args.train_cpus,
            "num_gpus": 1 if args.gpu else 0,
            "include_dashboard": False,
            "dashboard_agent_listen_port": _free_port(),
        },
    )
    cluster.add_node(
        num_cpus=args.data_cpus,
        num_gpus=0,
        object_store_memory=store,
        labels={LABEL_KEY: LABEL_VALUE},
        dashboard_agent_listen_port=_free_port(),
    )
    cluster.wait_for_nodes()
    return cluster


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def train_split(root: Path, side: int) -> tuple[Any, Any]:
    """The folder's train split as `trainctl train` builds it, under the current DataContext."""
    from app.data.kinds.image_folder import ImageFolder, inspect_folder
    from app.settings import TrainSettings

    info, _ = inspect_folder(root, side)
    settings = TrainSettings(dataset="folder", data_path=root, image_size=side, model="cnn")
    return ImageFolder().build_datasets(settings, info)["train"], info


@contextlib.contextmanager
def on_training_node() -> Iterator[None]:
    """Datasets created inside run their tasks on the training node only (selector `!data`):
    the cluster as it is without a pool."""
    import ray.data

    context = ray.data.DataContext.get_current()
    saved = context.execution_options.label_selector
    context.execution_options.label_selector = dict(TRAINING_SELECTOR)
    try:
        yield
    finally:
        context.execution_options.label_selector = saved


def variant(name: str, root: Path, args: argparse.Namespace, consumer: Any) -> dict[str, float]:
    """One epoch of the train split through the consumer, decoded where `name` says."""
    import ray

    side = GPU_SIDE if args.gpu else 32
    if name in STAGES:
        return stage(name, root, side, args, consumer)
    if name == "data_pool":
        pool = find_data_pool()  # the app's own discovery, from the node labels
        assert pool is not None, "the data node is not labelled as a data pool"
        with placed(pool):
            dataset, info = train_split(root, side)
    else:
        with on_training_node():
            dataset, info = train_split(root, side)
    return ray.get(consumer.epoch.remote(dataset, info, args.batch), timeout=900)


STAGES = ("raw", "raw_unordered", "raw_small_blocks", "to_device", "model")


def stage(name: str, root: Path, side: int, args: argparse.Namespace, consumer: Any) -> Any:
    """One epoch of `name`'s stage (--stages), decoded on the training node."""
    import ray

    from app.data.kinds import image_folder

    blocks = image_folder.ROWS_PER_BLOCK
    if name == "raw_small_blocks":
        image_folder.ROWS_PER_BLOCK = 64
    try:
        with on_training_node():
            dataset, info = train_split(root, side)
    finally:
        image_folder.ROWS_PER_BLOCK = blocks
    if name == "raw_unordered":
        dataset.context.execution_options.preserve_order = False
    mode = "raw" if name.startswith("raw") else name
    return ray.get(consumer.epoch.remote(dataset, info, args.batch, mode), timeout=900)


def make_consumer(args: argparse.Namespace) -> Any:
    """An actor on the training node that holds what a training worker holds."""
    import ray

    options = {
        "num_cpus": args.worker_cpus,
        "num_gpus": 1 if args.gpu else 0,
        "label_selector": dict(TRAINING_SELECTOR),
    }
    return ray.remote(Consumer).options(**options).remote(args.gpu)


class Consumer:
    """Pulls batches with the app's epoch_batches; with a GPU, trains resnet18 on them."""

    def __init__(self, gpu: bool) -> None:
        import torch

        self.gpu = gpu
        self.device = torch.device("cuda" if gpu else "cpu")
        self.model = self.optimizer = None
        if gpu:
            from torchvision.models import resnet18

            model = resnet18(num_classes=10).to(self.device, memory_format=torch.channels_last)
            self.model = model
            self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def epoch(self, dataset: Any, info: Any, batch: int, mode: str = "model") -> dict[str, float]:
        """mode: "model" (batches onto the device and a training step on each), "to_device"
        (the batches alone) or "raw" (Ray Data's numpy batches, nothing after)."""
        from app.data.pipeline import epoch_batches

        sampler = GpuSampler() if self.gpu else None
        rows, started, first = 0, time.perf_counter(), None
        if mode == "raw":
            batches = (
                (b["image"], b["label"])
                for b in dataset.iterator().iter_batches(batch_size=batch, batch_format="numpy")
            )
        else:
            batches = epoch_batches(
                dataset.iterator(), batch_size=batch, info=info, device=self.device, epoch=0,
                seed=0, shuffle=False,
            )  # fmt: skip
        for images, labels in batches:
            if first is None:
                first = time.perf_counter()
            if self.model is not None and mode == "model":
                self._step(images, labels)
            rows += len(labels)
        if self.gpu:
            import torch

            torch.cuda.synchronize()
        ended = time.perf_counter()
        first = first or ended
        figures = {
            "rows_per_s": round(rows / max(1e-9, ended - started), 1),
            "first_batch_s": round(first - started, 2),
            "rows": rows,
        }
        if sampler is not None:
            figures["gpu_util_pct"] = sampler.stop()
        return figures

    def _step(self, images: Any, labels: Any) -> None:
        import torch

        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(self.model(images), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()


class GpuSampler:
    """Mean GPU utilization (%) over an epoch, sampled every 0.2 s in a thread; -1 if neither
    torch.cuda.utilization (needs pynvml) nor nvidia-smi answers."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(0.2):
            value = _utilization()
            if value is None:
                return
            self.samples.append(value)

    def stop(self) -> float:
        self.done.set()
        self.thread.join(timeout=10)
        return round(statistics.mean(self.samples), 1) if self.samples else -1.0


def _utilization() -> float | None:
    try:
        import torch

        return float(torch.cuda.utilization())
    except Exception:  # no pynvml: ask nvidia-smi
        pass
    try:
        answer = subprocess.run(
            ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=5, check=True,
        )  # fmt: skip
        return float(answer.stdout.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def main() -> None:
    import ray
    import ray.data

    args = arguments()
    say(
        f"data pool: {args.rows} train images, training node {args.train_cpus} CPUs "
        f"(consumer {args.worker_cpus}){' + 1 GPU' if args.gpu else ''}, data node "
        f"{args.data_cpus} CPUs, on a machine of {args.cores} cores"
    )
    valid = max(16, args.rows // 16)
    root = gpu_folder(args.rows, valid) if args.gpu else jpeg_folder(args.rows, valid)
    cluster = start_cluster(args)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        consumer = make_consumer(args)
        names = STAGES if args.stages else NAMES
        if not args.smoke:  # Ray's worker processes, cuDNN's first steps: not the steady state
            for name in names:
                variant(name, root, args, consumer)
        runs = {name: (lambda name=name: variant(name, root, args, consumer)) for name in names}
        figures = medians(interleave(runs, args.reps, say=say))
    finally:
        ray.shutdown()
        cluster.shutdown()
    result = summarize(figures, args)
    line = result_line("data_pool", result)
    if args.out is not None:
        name = "data_pool_stages.json" if args.stages else "data_pool.json"
        path = args.out / name if args.out.suffix != ".json" else args.out
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(line + "\n")
    print(line, flush=True)


NAMES = ("training_node", "data_pool")


def summarize(figures: dict[str, dict[str, float]], args: argparse.Namespace) -> dict[str, Any]:
    names = STAGES if args.stages else NAMES
    rates = {name: figures[name]["rows_per_s"] for name in names}
    result: dict[str, Any] = {
        "mode": ("gpu" if args.gpu else "cpu") + (" stages" if args.stages else ""),
        "rows": int(figures[names[0]]["rows"]),
        "rows_per_s": rates,
        "first_batch_s": {name: figures[name]["first_batch_s"] for name in names},
        "placement": {
            "training_node_cpus": args.train_cpus,
            "consumer_cpus": args.worker_cpus,
            "data_node_cpus": args.data_cpus,
            "machine_cores": args.cores,
            "object_store_gib_per_node": args.object_store_gib,
        },
    }
    if args.gpu:
        result["gpu_util_pct"] = {name: figures[name]["gpu_util_pct"] for name in names}
        result["model"] = f"resnet18, {GPU_SIDE} px from {GPU_IMAGE} px JPEGs, batch {args.batch}"
    if args.stages:
        result["over_raw"] = {name: ratio(rates[name], rates["raw"]) for name in names}
        say("rows/s: " + " | ".join(f"{name} {rate:,.0f}" for name, rate in rates.items()))
        return result
    over = result["data_pool_over_training_node"] = ratio(
        rates["data_pool"], rates["training_node"]
    )
    say(
        f"rows/s: training node {rates['training_node']:,.0f} | data pool "
        f"{rates['data_pool']:,.0f}: data_pool/training_node {over}"
    )
    return result


if __name__ == "__main__":
    main()
