"""How many trials a sweep trains at once: TRAIN_TUNE_CONCURRENT, or what the cluster holds.

Pure arithmetic over what Ray says a cluster has (its CPUs and GPUs, the head's memory, a data
pool's CPUs), so that `trainctl tune` and `trainctl check` judge a sweep's concurrency alike:
`tune` lowers nothing it was told, but both say where more trials were asked for than can run.
"""

from __future__ import annotations

from typing import NamedTuple

from app.formatting import counted
from app.ray_cluster import DATA_CPUS
from app.settings import TrainSettings

# Each trial's driver, as much of it as Tune needs a request for: a hundredth of the marker
# resource Ray gives the head node alone (Ray Serve places its controller by the same name).
TRIAL_DRIVER = {"node:__internal_head__": 0.01}
HEAD_MARKER = next(iter(TRIAL_DRIVER))

# What one running trial holds in the head's memory: its driver and its Ray Train controller,
# each a Python process with torch (about 0.7 GiB each, measured on CPU); and what the sweep's
# own driver holds there, once.
HEAD_GIB_PER_TRIAL = 1.5
HEAD_GIB_FOR_THE_SWEEP = 1.0
GIB = 1024**3


class AtOnce(NamedTuple):
    """Trials at once, why (in words), and what will not go as said (each in words)."""

    trials: int
    why: str
    warnings: tuple[str, ...] = ()

    def said(self) -> str:
        return "; ".join([self.why, *(f"warning: {w}" for w in self.warnings)])


class Room(NamedTuple):
    """What a cluster has for trials: Ray's resources, the head's memory (bytes; None where
    not known) and the data pool's CPUs (among the resources, never a worker's)."""

    resources: dict[str, float]
    head_memory: float | None
    pool_cpus: float = 0.0


def connected_room() -> Room:
    """The room of the cluster this process is connected to."""
    import ray

    from app.data.pool import pool_from

    nodes = ray.nodes()
    head_memory = next(
        (
            node["Resources"].get("memory")
            for node in nodes
            if node.get("Alive") and HEAD_MARKER in node.get("Resources", {})
        ),
        None,
    )
    pool = pool_from(nodes)
    return Room(ray.cluster_resources(), head_memory, pool.cpus if pool is not None else 0.0)


def concurrent_trials(settings: TrainSettings, todo: int) -> tuple[int, str]:
    """TRAIN_TUNE_CONCURRENT, or as many trials as the connected cluster's CPUs and GPUs and
    the head's memory hold; and why, in words, warnings included."""
    at_once = trials_at_once_in(settings, connected_room(), todo)
    return at_once.trials, at_once.said()


def trials_on_head(head_memory: float | None) -> int | None:
    """How many trials' drivers the head's memory (Ray's `memory` resource there, in bytes)
    holds at once, at least one; None where the head's memory is not known."""
    if not head_memory:
        return None
    return max(1, int((head_memory / GIB - HEAD_GIB_FOR_THE_SWEEP) // HEAD_GIB_PER_TRIAL))


def _head_holds(head_memory: float | None, on_head: int) -> str:
    return (
        f"the head's {(head_memory or 0) / GIB:.1f} GiB of memory holds "
        f"{counted(on_head, 'trial')} at once (each trial's driver and Ray Train controller "
        f"run there, about {HEAD_GIB_PER_TRIAL:g} GiB a trial)"
    )


def trials_at_once(
    settings: TrainSettings,
    resources: dict[str, float],
    todo: int,
    head_memory: float | None,
    pool_cpus: float = 0.0,
) -> tuple[int, str]:
    """trials_at_once_in, as (trials, why with its warnings)."""
    at_once = trials_at_once_in(settings, Room(resources, head_memory, pool_cpus), todo)
    return at_once.trials, at_once.said()


def trials_at_once_in(settings: TrainSettings, room: Room, todo: int) -> AtOnce:
    """TRAIN_TUNE_CONCURRENT, warning where the head's memory or the cluster's resources hold
    fewer; else as many trials as the cluster's resources and the head's memory hold (at least
    one). And why, in words. The data pool's CPUs read the data, never train."""
    on_head = trials_on_head(room.head_memory)
    fits, why = _what_fits(settings, room.resources, room.pool_cpus)
    if settings.tune_concurrent:
        asked = settings.tune_concurrent
        concurrent = max(1, min(asked, todo))
        said = "TRAIN_TUNE_CONCURRENT" if concurrent == asked else (
            f"TRAIN_TUNE_CONCURRENT={asked}, for the {counted(todo, 'trial')} left to train"
        )  # fmt: skip
        warnings = []
        if on_head is not None and concurrent > on_head:
            warnings.append(f"{_head_holds(room.head_memory, on_head)}: raise head.memory")
        fit, held = _room(settings, room.resources, room.pool_cpus)
        if concurrent > fit:
            # Tune holds the others back until a trial ends: fewer train at once than said.
            # (The CPUs kept for reading data are not reserved: trials may take them.)
            warnings.append(f"{held}: the others wait for one to end")
        return AtOnce(concurrent, said, tuple(warnings))
    if on_head is not None and on_head < fits:
        fits = on_head
        why = f"{why}; {_head_holds(room.head_memory, on_head)}"
    return AtOnce(int(max(1, min(fits, todo))), f"{why}; TRAIN_TUNE_CONCURRENT sets it")


def _room(
    settings: TrainSettings, resources: dict[str, float], pool_cpus: float
) -> tuple[int, str]:
    """How many trials' workers the cluster can place at once, every CPU but the data pool's
    taken (at least one), and that said in words."""
    cpus, gpus = resources.get("CPU", 0) - pool_cpus, resources.get("GPU", 0)
    room = int(max(1, _trials_on(settings, cpus, gpus)))
    where = f"{gpus:g} GPUs" if settings.use_gpu else f"{cpus:g} CPUs for training"
    return room, f"the cluster's {where} hold {counted(room, 'trial')} of {_held(settings)} at once"


def _what_fits(
    settings: TrainSettings, resources: dict[str, float], pool_cpus: float
) -> tuple[float, str]:
    """How many trials the cluster's CPUs (and GPUs) hold at once, CPUs kept for reading the
    data, and why, in words."""
    cpus, gpus = resources.get("CPU", 0), resources.get("GPU", 0)
    kept = pool_cpus if pool_cpus > 0 else DATA_CPUS
    reading = f"{kept:g} on the data pool" if pool_cpus > 0 else f"{DATA_CPUS} kept"
    why = (
        f"a trial holds {_held(settings)}; the cluster has {cpus:g} CPUs, {reading} for reading "
        f"data, and {gpus:g} GPUs"
    )
    return _trials_on(settings, cpus - kept, gpus), why


def _trials_on(settings: TrainSettings, cpus: float, gpus: float) -> float:
    """How many trials' workers `cpus` CPUs (and, with TRAIN_USE_GPU, `gpus` GPUs) hold."""
    workers = settings.workers.max
    fits = cpus // (workers * settings.cpus_per_worker)
    return min(fits, gpus // workers) if settings.use_gpu else fits


def _held(settings: TrainSettings) -> str:
    """What one trial's workers hold: `2 workers x 1 CPU`, `4 workers x 1 GPU`."""
    each = "1 GPU" if settings.use_gpu else f"{settings.cpus_per_worker:g} CPU"
    return f"{counted(settings.workers.max, 'worker')} x {each}"
