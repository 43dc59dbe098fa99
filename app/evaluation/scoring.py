"""Batch inference on Ray Data: a pool of actors, each loading the export's model once, scores
batches of uint8 rows (app/evaluation/rows.py) where the cluster has room. A run's end scores
its own small splits (`fits_in_process`) with one Scorer in the driver instead: the driver
already holds torch and the model code, and an actor would cost a process start and a second
model load, seconds on every run, to score a few hundred rows. The rows are read and decoded by
the same Ray Data tasks either way, and scored by the same Scorer.

Each actor builds the card's model with trainctl's own code and loads weights.pt's verified
bytes into it (app/export/predict.py, `load_model`): the bytes travel to the actors in Ray's
object store as they were hashed, so what is loaded is what was verified, and nothing in an
export can run code. A batch is then prepared exactly as the training loop prepares
validation batches (app/data/pipeline.py's Normalizer: one addcmul from uint8 NHWC into
channels_last float32), the model runs in eval mode with the autocast the run validated with
(its recorded TRAIN_AMP: none, so float32, on CPU), and a row's class is the argmax of its
logits, as validation counts it. That is what makes `trainctl evaluate --split valid` count
the very hits training counted.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from app.errors import ConfigError
from app.export.card import Verified

if TYPE_CHECKING:
    import ray.data

MAX_BATCH = 65_536
MAX_ACTORS = 10_000
# What a run's end scores in its driver, in pixels (rows x height x width): 4,096 images of
# 64x64, about 330 of 224x224, seconds on the driver's CPUs; more goes to the actor pool.
IN_PROCESS_PIXELS = 4096 * 64 * 64


@dataclass(frozen=True)
class ScoringOptions:
    """How the actor pool is sized."""

    batch_size: int = 256  # rows per forward pass
    actors: int | None = None  # the pool's most actors; None: as many as the cluster holds
    gpus: bool = False  # one GPU per actor
    cpus_per_actor: float = 1.0
    top_k: int = 5  # classes kept per row, with their probabilities
    in_process: bool = False  # one Scorer in this process, on its CPUs, instead of a pool


def precision_of(card: dict[str, Any], use_gpu: bool) -> str:
    """The autocast the run validated with (its recorded TRAIN_AMP), where this device has it:
    "off" (float32), "bf16" or "fp16" (GPUs only)."""
    settings = card.get("settings")
    amp = settings.get("amp") if isinstance(settings, dict) else None
    if amp == "fp16" and not use_gpu:
        return "off"
    return amp if amp in ("bf16", "fp16") else "off"


class Scorer:
    """Ray Data's callable class: the export's model, loaded once per actor."""

    def __init__(self, export: Any, top_k: int, use_gpu: bool, threads: int) -> None:
        import torch

        from app.data.pipeline import Normalizer
        from app.export.predict import card_info, load_model
        from app.training.model import uses_channels_last

        if isinstance(export, list):  # [ObjectRef]: see `scored`
            import ray

            export = ray.get(export[0])
        torch.set_num_threads(max(1, threads))
        self.device = torch.device("cuda" if use_gpu else "cpu")
        card = export.card
        model = load_model(export).to(self.device)
        if uses_channels_last(card["architecture"]):  # as the training loop holds it
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        self.normalize = Normalizer(card_info(card), self.device)
        self.classes = len(card["class_names"])
        self.top_k = min(top_k, self.classes)
        self.autocast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(
            precision_of(card, use_gpu)
        )

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch
        import torch.nn.functional as F

        images = batch.pop("image")
        labels = np.asarray(batch["label"], dtype=np.int64)
        rows = len(labels)
        errors = batch.get("error")
        good = np.flatnonzero(errors == "") if errors is not None else np.arange(rows)
        predicted = np.full(rows, -1, np.int64)
        confidence = np.full(rows, np.nan)
        loss = np.full(rows, np.nan)
        top = np.full((rows, self.top_k), -1, np.int64)
        top_p = np.full((rows, self.top_k), np.nan)
        if len(good):
            pixels = torch.from_numpy(np.ascontiguousarray(images[good])).to(self.device)
            truth = torch.from_numpy(labels[good]).to(self.device)
            x, truth = self.normalize(pixels, truth)
            with (
                torch.inference_mode(),
                torch.autocast(
                    self.device.type, dtype=self.autocast, enabled=self.autocast is not None
                ),
            ):
                logits = self.model(x)
            with torch.inference_mode():
                hits = logits.argmax(dim=1)  # the logits as computed, as validation counts
                logits = logits.float()
                probabilities = torch.softmax(logits, dim=1)
                values, indices = probabilities.topk(self.top_k, dim=1)
                labelled = truth >= 0  # batch prediction has no labels (-1)
                row_loss = F.cross_entropy(logits, truth.clamp(min=0), reduction="none")
                row_loss = torch.where(labelled, row_loss, torch.nan)
                chosen = probabilities.gather(1, hits[:, None])[:, 0]
            predicted[good] = hits.cpu().numpy()
            confidence[good] = chosen.double().cpu().numpy()
            loss[good] = row_loss.double().cpu().numpy()
            top[good] = indices.cpu().numpy()
            top_p[good] = values.double().cpu().numpy()
        return {
            **batch,
            "predicted": predicted,
            "confidence": confidence,
            "loss": loss,
            "top_index": top,
            "top_probability": top_p,
        }


def scored(rows: ray.data.Dataset, export: Verified, options: ScoringOptions) -> ray.data.Dataset:
    """`rows` ({"image": uint8 HxWxC, "label": int, and any columns passed through}) with each
    row's scores, from an actor pool sized by `options` within what the cluster holds."""
    import ray
    from ray.data import ActorPoolStrategy

    pool = options.actors or default_actors(options)
    return rows.map_batches(
        Scorer,
        fn_constructor_kwargs={
            # The verified bytes put in the object store once and read there by every actor
            # (inside a list: Ray passes the reference as it is, resolved in __init__).
            "export": [ray.put(export)],
            "top_k": options.top_k,
            "use_gpu": options.gpus,
            "threads": max(1, int(options.cpus_per_actor)),
        },
        batch_size=options.batch_size,
        batch_format="numpy",
        compute=ActorPoolStrategy(min_size=1, max_size=pool),
        num_cpus=options.cpus_per_actor,
        num_gpus=1 if options.gpus else 0,
    )


def fits_in_process(rows: int, card: dict[str, Any]) -> bool:
    """Whether `rows` images at the card's input size are few enough to score in this
    process (IN_PROCESS_PIXELS)."""
    size = card["input"]
    return rows * int(size["height"]) * int(size["width"]) <= IN_PROCESS_PIXELS


def scored_batches(
    rows: ray.data.Dataset, export: Verified, options: ScoringOptions
) -> Iterator[dict[str, np.ndarray]]:
    """Each batch of `rows` with its scores (as `scored` adds them): from the actor pool, or
    with `options.in_process` from one Scorer in this process, on its CPUs, batch by batch as
    Ray Data's tasks read and decode the rows."""
    if not options.in_process:
        yield from scored(rows, export, options).iter_batches(batch_size=None, batch_format="numpy")
        return
    import torch

    # The caller's thread count is left as it was (the driver goes on exporting, plotting).
    scorer = Scorer(export, options.top_k, use_gpu=False, threads=torch.get_num_threads())
    for batch in rows.iter_batches(batch_size=options.batch_size, batch_format="numpy"):
        yield scorer(batch)


PROGRESS_EVERY_S = 10.0  # a progress line at most this often: a few per minute of scoring


def with_progress(
    batches: Iterator[dict[str, np.ndarray]],
    total: int | None,
    unit: str,
    say: Callable[[str], None] | None = None,
    every_s: float = PROGRESS_EVERY_S,
) -> Iterator[dict[str, np.ndarray]]:
    """`batches` (scored ones: each has `top_index`) as they come, saying every `every_s`
    seconds how many rows are scored, of `total` where it is known, and how fast: a batch of
    thousands of files showed nothing for a minute (found by a red-team pass). Said while a
    batch is awaited too (from a thread): a batch of large images scored nothing on the
    terminal until its 256 rows were done. `say`: stderr by default, since stdout may hold the
    predictions or --json."""
    say = say or _to_stderr
    started = time.monotonic()
    state = {"done": 0, "last": started}
    lock = threading.Lock()

    def line(now: float) -> None:
        with lock:
            state["last"] = now
            done = state["done"]
        of = f" of {total:,} {unit} ({done / total:.0%})" if total else f" {unit}"
        elapsed = now - started
        pace = _rate(done / max(elapsed, 1e-9)) if done else f"none yet after {elapsed:.0f} s"
        say(f"trainctl: scored {done:,}{of}, {pace}")

    stop = threading.Event()

    def tick() -> None:  # a line where no batch came for a period
        while not stop.wait(every_s):
            now = time.monotonic()
            if now - state["last"] >= every_s:
                line(now)

    if every_s >= 1:
        threading.Thread(target=tick, name="trainctl-progress", daemon=True).start()
    try:
        for batch in batches:
            with lock:
                state["done"] += len(batch["top_index"])
            now = time.monotonic()
            if now - state["last"] >= every_s:
                line(now)
            yield batch
    finally:
        stop.set()


def _rate(per_s: float) -> str:
    """Rows a second, with the digits that say it: `1,234/s`, `12/s`, `0.26/s` (big images
    scored at a fraction of one a second showed `0/s`)."""
    return f"{per_s:,.0f}/s" if per_s >= 10 else f"{per_s:.2g}/s"


def _to_stderr(line: str) -> None:
    import click

    click.echo(line, err=True)


def default_actors(options: ScoringOptions) -> int:
    """As many actors as the cluster has GPUs (with --gpus) or CPUs for them; the pool starts
    with one and grows while rows wait. On CPUs, Ray Data fuses the read step (same
    resources) into the actors, so each decodes the files it scores and none need be left for
    read tasks; GPU actors take their rows from read tasks on the cluster's CPUs."""
    import ray

    resources = ray.cluster_resources()
    if options.gpus:
        return max(1, int(resources.get("GPU", 0)))
    return max(1, int(resources.get("CPU", 1) // options.cpus_per_actor))


def check_resources(options: ScoringOptions) -> None:
    """Refuse (exit 2) a pool the cluster can never hold, naming what it has, rather than wait
    for it forever."""
    import ray

    resources = ray.cluster_resources()
    cpus, gpus = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    types = sorted(k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:"))
    has = f"{cpus:g} CPUs, {gpus:g} GPUs" + (
        f", accelerator types {', '.join(types)}" if types else ""
    )
    if options.gpus and gpus < 1:
        raise ConfigError(
            f"--gpus: the Ray cluster has no GPU (it has {has}); leave --gpus out to score on "
            "CPUs, or join a cluster with GPUs (TRAIN_RAY_ADDRESS or RAY_ADDRESS)"
        )
    nodes = [n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")]
    # Ray Data fuses the tasks that read the rows into the actors only where their resources
    # are equal (1 CPU, no GPU, as those tasks take): otherwise they run apart, beside them.
    apart = options.gpus or options.cpus_per_actor != 1
    problem = cpus_per_actor_problem(options.cpus_per_actor, nodes, readers_apart=apart)
    if problem is not None:
        raise ConfigError(
            f"--cpus-per-actor {options.cpus_per_actor:g}: {problem}; the cluster has {has}"
        )


def cpus_per_actor_problem(cpus: float, nodes: list[float], *, readers_apart: bool) -> str | None:
    """Why an actor of `cpus` CPUs could never score on nodes of these CPU counts, or None.

    With `readers_apart`, one CPU must stay free beside the first actor for the tasks that
    read and decode the rows for it: an actor holding a lone node's every CPU waited for rows
    that were never read, with no end (a red-team pass)."""
    largest = max(nodes, default=0.0)
    if cpus > largest:
        return f"no node of the Ray cluster has that many CPUs (the largest has {largest:g})"
    if not readers_apart:
        return None
    most = max(
        n if any(m >= 1 for j, m in enumerate(nodes) if j != i) else n - 1
        for i, n in enumerate(nodes)
    )
    if cpus <= most:
        return None
    advice = f"give at most {most:g}" if most >= 1 else "join a cluster with more CPUs"
    return (
        f"the actor would leave {max(largest - cpus, 0):g} of the {largest:g} CPUs of the only "
        "node it fits on, where the tasks that read the rows for it need 1, so scoring would "
        f"never start: {advice}"
    )


def connect() -> None:
    """Join the Ray cluster at TRAIN_RAY_ADDRESS (or RAY_ADDRESS), once it answers within
    TRAIN_RAY_CONNECT_TIMEOUT seconds, or start a local one for this command; a process
    already connected (a training driver) stays as it is."""
    import ray

    from app.ray_cluster import join_or_start, wait_for_address

    if ray.is_initialized():
        return
    address = os.environ.get("TRAIN_RAY_ADDRESS") or os.environ.get("RAY_ADDRESS") or None
    if address:
        wait_for_address(address, _connect_timeout())
    join_or_start(address)


def _connect_timeout() -> float:
    """TRAIN_RAY_CONNECT_TIMEOUT, held to the setting's own bounds."""
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError

    from app.settings import TrainSettings

    field = TrainSettings.model_fields["ray_connect_timeout"]
    given = os.environ.get("TRAIN_RAY_CONNECT_TIMEOUT", "").strip()
    if not given:
        return float(field.default)
    try:
        return float(TypeAdapter(Annotated[float, field]).validate_python(given))
    except ValidationError as err:
        message = "; ".join(str(item["msg"]) for item in err.errors())
        raise ConfigError(f"TRAIN_RAY_CONNECT_TIMEOUT={given!r}: {message}") from None
