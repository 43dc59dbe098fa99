"""`trainctl check`: what `trainctl train` would trip over, found in seconds, without training.

The chart runs it as the RayJob's first step, so a bad setting fails before the GPUs are busy.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import metadata

import click

from app.data.schema import DatasetInfo
from app.errors import ConfigError
from app.settings import TrainSettings
from app.storage import ensure_writable, free_bytes, human_bytes

PINNED = ("ray", "torch", "torchvision")


def run_preflight(settings: TrainSettings, *, connect: bool = True) -> None:
    found: dict[str, DatasetInfo] = {}  # the dataset check's findings, for the cluster check
    checks: list[tuple[str, Callable[[TrainSettings], str]]] = [
        ("settings", _settings),
        ("storage", _storage),
        # Rows per worker is judged after the cluster's capacity, as `train` does, so a request
        # the cluster never holds is reported once, by the cluster check.
        ("dataset", lambda s: _dataset(s, found, rows_per_worker=not connect)),
        ("versions", _versions),
    ]
    if connect:
        checks.append(("cluster", lambda s: _cluster(s, found.get("info"))))
    problems = []
    for name, check in checks:
        try:
            detail = check(settings)
        except ConfigError as err:
            problems.extend(err.problems)
            click.echo(f"FAIL  {name}: {'; '.join(err.problems)}")
        else:
            click.echo(f"ok    {name}: {detail}")
    if problems:
        raise ConfigError(problems)


def _settings(settings: TrainSettings) -> str:
    workers = settings.workers
    scale = f"{workers.min}-{workers.max} (elastic)" if workers.elastic else str(workers.max)
    device = "GPU" if settings.use_gpu else "CPU"
    return (
        f"{settings.model} on {settings.dataset}, {settings.epochs} epochs, {scale} {device} "
        f"worker(s), run {settings.run_name}"
    )


def _storage(settings: TrainSettings) -> str:
    ensure_writable(settings.storage_path, "TRAIN_STORAGE_PATH")
    return (
        f"{settings.storage_path} writable, {human_bytes(free_bytes(settings.storage_path))} free"
    )


def _dataset(settings: TrainSettings, found: dict[str, DatasetInfo], rows_per_worker: bool) -> str:
    from app.data import inspect_dataset
    from app.model import model_problem

    folder = settings.dataset_dir
    if settings.dataset != "parquet" and not (folder / "train").exists():
        return f"{settings.dataset} not prepared yet; `trainctl train` will write it to {folder}"
    info = found["info"] = inspect_dataset(folder)
    problem = model_problem(settings.model, info, settings.vit_patch)
    if rows_per_worker:
        problem = problem or workers_problem(settings, info)
    if problem:
        raise ConfigError(problem)
    return (
        f"{folder}: {info.train_rows} train / {info.valid_rows} valid rows, "
        f"{info.height}x{info.width}x{info.channels} images ({info.layout}), "
        f"{info.num_classes} classes"
    )


def workers_problem(settings: TrainSettings, info: DatasetInfo) -> str | None:
    """Every worker needs rows of each split; None when it gets them.

    Ray splits each dataset evenly across workers: a rank with no rows would "train" on
    nothing, and the run would still report success.
    """
    workers = settings.workers.max
    if min(info.train_rows, info.valid_rows) >= workers:
        return None
    return (
        f"TRAIN_NUM_WORKERS={settings.num_workers}: {workers} workers need at least one row "
        f"each, but train has {info.train_rows} rows and valid {info.valid_rows}; use fewer "
        "workers or more data"
    )


def _versions(settings: TrainSettings) -> str:
    pins = _pins()
    found = []
    for name in PINNED:
        installed = metadata.version(name)
        wanted = pins.get(name)
        # Local build tags (+cpu, +cu128) are the same release for compatibility purposes.
        if wanted and installed.split("+")[0] != wanted:
            raise ConfigError(
                f"{name} {installed} is installed but trainctl is pinned to {name}=={wanted}; "
                "use the project's image or `pip install -c requirements/constraints.txt .`"
            )
        found.append(f"{name} {installed}")
    return ", ".join(found)


def _pins() -> dict[str, str]:
    pins = {}
    for requirement in metadata.requires("trainctl") or []:
        match = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*==\s*([^;\s]+)", requirement)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def _cluster(settings: TrainSettings, info: DatasetInfo | None) -> str:
    import ray

    from app.ray_cluster import check_capacity, connect_ray

    connect_ray(settings)
    check_capacity(settings)
    problem = workers_problem(settings, info) if info else None
    if problem:
        raise ConfigError(problem)
    resources = ray.cluster_resources()
    nodes = len([n for n in ray.nodes() if n.get("Alive")])
    return (
        f"{nodes} node(s), {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs "
        f"(Ray {ray.__version__})"
    )
