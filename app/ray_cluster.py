"""Joining a Ray cluster and checking it can ever hold the requested workers."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping

import click

from app import process_tree
from app.cpus import usable_cpus
from app.errors import ConfigError, TrainctlError
from app.held_signals import signals_held
from app.settings import TrainSettings

# Progress comes from the run's metrics file (app.run.progress); worker output stays in Ray's log
# folder instead of burying the epoch lines.
QUIET = {"log_to_driver": False, "logging_level": "WARNING", "configure_logging": True}


# Ray Train's controller takes one report per worker per poll, every 2 s by default. A run that
# checkpoints inside epochs reports faster than that, so commits fell behind the training (a
# just-in-time checkpoint queued behind older ones, near its drain deadline) and the run's end
# waited for the backlog: about 20 s of idle cluster per run with TRAIN_CHECKPOINT_EVERY=40 on
# this project's test data. Ray hands this variable from the driver to its controller and
# workers; one set in the environment wins.
CONTROLLER_POLL = ("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
# Ray Train looks for drained nodes every 5 s by default: a sixth of a 30 s spot notice gone
# before the workers hear of it. The poll is one small read from Ray's control store.
DRAIN_POLL = ("RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S", "1")
# A task that fails and will be retried (Ray Data's reads, sampling a Parquet file) printed a
# notice with the tail of its traceback to the driver's stdout, once per retry, among the
# epoch lines. A retry that succeeds needs no word; one that fails for good ends the run,
# which names the cause (the file, for a read).
RETRY_NOTICES = ("RAY_enable_output_error_log_if_still_retry", "0")


def joined_address(settings: TrainSettings) -> str | None:
    """The running cluster a command joins (TRAIN_RAY_ADDRESS, else RAY_ADDRESS); None where it
    starts a local one of its own."""
    return settings.ray_address or os.environ.get("RAY_ADDRESS") or None


def connect_ray(settings: TrainSettings) -> None:
    import ray

    os.environ.setdefault(*CONTROLLER_POLL)
    os.environ.setdefault(*DRAIN_POLL)

    address = joined_address(settings)
    if address:
        # ray.init alone retries a closed port for minutes, deaf to SIGTERM: knock first, even
        # when this process is already connected (the address asked for must answer).
        wait_for_address(address, settings.ray_connect_timeout)
    if ray.is_initialized():
        return
    if not address and (said := oversubscribed(settings)):  # a local cluster: said once
        click.echo(f"trainctl: warning: {said}", err=True)
    join_or_start(address, num_cpus=local_num_cpus(settings))


# CPUs a local cluster gets beyond the workers': Ray Data's read tasks need a CPU slot each, and
# with none free they would wait for the training workers forever.
DATA_CPUS = 2


def local_num_cpus(settings: TrainSettings) -> int:
    """The CPUs a local cluster is told it has: this process's usable CPUs (its affinity and
    cgroup quota, not the machine's count), or the workers' CPUs plus DATA_CPUS where that is
    more. Ray's CPUs are scheduling slots: on a small machine the workers and the data reading
    share the cores rather than wait for one another."""
    need = math.ceil(settings.workers.max * settings.cpus_per_worker) + DATA_CPUS
    return max(usable_cpus().usable, need)


# Training workers per usable CPU past which a local cluster is more likely a mistake than a
# plan: each worker is a process of its own holding torch, and they all take turns on the cores.
WORKERS_PER_CPU = 2


def oversubscribed(settings: TrainSettings) -> str | None:
    """Why the local cluster `train` starts is a poor home for this many workers (it is sized
    to hold them all, so nothing else says so); None where it is not."""
    machine = usable_cpus()
    workers = settings.workers.max
    if workers <= WORKERS_PER_CPU * machine.usable:
        return None
    return (
        f"{workers} training workers on {machine.describe()}: each is a process of its own "
        "holding torch (about 1 GiB of memory), taking turns on the cores, so the run is slower "
        f"than with fewer; set TRAIN_NUM_WORKERS to {machine.usable} or fewer here, or "
        "TRAIN_RAY_ADDRESS to train on a cluster"
    )


def local_resources(settings: TrainSettings) -> dict[str, float] | None:
    """What the local cluster `trainctl train` starts would hold (CPUs as local_num_cpus says,
    the GPUs and accelerator type Ray detects), resolved by Ray's own node-resource code
    without starting anything; None where this Ray has no such code (the caller then starts
    the cluster to ask it)."""
    try:
        from ray._private.resource_and_label_spec import ResourceAndLabelSpec

        spec = ResourceAndLabelSpec(num_cpus=local_num_cpus(settings)).resolve(is_head=True)
        return {name: float(value) for name, value in spec.to_resource_dict().items()}
    except (ImportError, AttributeError, TypeError, ValueError):
        return None


# Warnings Ray Data logs just before it raises, for failures the run names itself: the Parquet
# reader's sampling, on a file it cannot read, guesses at credentials ("If this is a
# credentials or permissions issue...") for a damaged page, and repeats the error's text.
_SUPERSEDED = ("Parquet dataset sampling failed",)


def _for_the_log_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR or str(record.msg).startswith(_SUPERSEDED)


class _OffTheTerminal(logging.Filter):
    """Passes what Ray Data says below ERROR to the terminal, but for the warnings above."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _for_the_log_only(record)


class _ToTheRootHandlers(logging.Handler):
    """Hands Ray Data's errors (and the warnings above) to the root logger's handlers, where a
    run's log capture keeps them in driver.log. Not by propagation: Ray Data's parent logger,
    Ray's, prints to the terminal."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if not _for_the_log_only(record):
            return
        for handler in logging.getLogger().handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def quiet_ray_data() -> None:
    """Ray Data in this process (the driver reads and caches the data) speaks through trainctl.

    - Its INFO lines would bury the run's own, and its progress bars are off on purpose: the
      epoch lines are the progress.
    - Its errors come with a traceback of Ray's internals (a data file its reader refuses
      mid-run printed some sixty lines) before the run's own one-line reason for the same
      failure. They stay off the terminal, and are kept, traceback included, in the run's
      driver.log (app/runfolder/log_capture.py) and in Ray Data's own ray-data.log; so do its
      warnings that only precede such a failure (_SUPERSEDED).
    """
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False
    logger = logging.getLogger("ray.data")
    logger.setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)
    for handler in logger.handlers:
        terminal = isinstance(handler, logging.StreamHandler)
        if terminal and not any(isinstance(f, _OffTheTerminal) for f in handler.filters):
            handler.addFilter(_OffTheTerminal())
    if not any(isinstance(handler, _ToTheRootHandlers) for handler in logger.handlers):
        logger.addHandler(_ToTheRootHandlers())


def join_or_start(address: str | None, *, num_cpus: int | None = None) -> None:
    """Join the Ray cluster at `address`, or start a local one that lives as long as this
    process. The one place `trainctl train` and the benchmarks (bench/) connect to Ray."""
    import ray

    os.environ.setdefault(*RETRY_NOTICES)
    _own_auth_line()
    quiet_ray_data()
    if address:
        _may_join(address)
        with _own_sigterm():
            ray.init(address=address, **QUIET)
        return
    # address="local": without it, ray.init() joins whatever cluster this machine last started
    # (/tmp/ray/ray_current_cluster) and then rejects num_cpus.
    # No dashboard: its dozen processes would compete with training for a laptop's cores, and
    # nothing submits jobs to a cluster that lives only as long as this command.
    before = process_tree.descendants()  # any this command started itself are not Ray's
    try:
        with _own_sigterm():
            ray.init(
                address="local",
                num_cpus=num_cpus or usable_cpus().usable,
                include_dashboard=False,
                **QUIET,
            )
    except BaseException as err:
        _leave_half_started(before)  # a stop or failure in ray.init: no Ray process outlives it
        if not isinstance(err, Exception):  # SIGTERM or Ctrl-C: the command says it
            raise
        raise _did_not_start(err) from None
    # On stderr, as a diagnostic: stdout is the command's (`evaluate --json` prints one
    # JSON document there).
    click.echo(f"trainctl: {auth_line(os.environ)}", err=True)


@contextlib.contextmanager
def _own_sigterm() -> Iterator[None]:
    """ray.init with this process's SIGTERM handler kept. Ray swaps in its own, `sys.exit(15)`,
    and its core worker a C handler that prints a stack trace: SIGTERM in `evaluate` or
    `predict` ended with exit 15, Ray's trace and no word of trainctl's (a red-team pass), where
    every command stops with 143 and `trainctl: stopped by SIGTERM`. A SIGTERM during the init
    is the process's own handler's too. Off the main thread nothing is set (Ray sets nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    own = signal.getsignal(signal.SIGTERM)
    try:
        yield
    except SystemExit as err:
        if err.code != signal.SIGTERM or not callable(own):
            raise
        own(signal.SIGTERM, None)  # raises as the command's handler does (Terminated, ...)
        raise
    finally:
        signal.signal(signal.SIGTERM, own)


def _may_join(address: str) -> None:
    """ConfigError where the head at `address` refuses this client, asked before ray.init.

    ray.init meets a refused token by asking again each second for 20 s, printing Ray's C++
    warning each time, and then raises a bare ConnectionError that says nothing of the token:
    `trainctl check` against a `ray start` head (token authentication is Ray's default there)
    ended in trainctl's "internal error". Ray's own control-store client refuses at once, with
    AuthenticationError; it is private API, so a client of another shape is left to ray.init.
    Ray Client addresses (ray://) and "auto" are not a head's control store.
    """
    if "://" in address or _host_port(address) is None:
        return
    import ray.exceptions

    try:
        from ray._private.authentication.authentication_token_setup import (
            ensure_token_if_auth_enabled,
        )
        from ray._raylet import GcsClient
    except ImportError:
        return
    try:
        # First the token this client would send: with RAY_AUTH_MODE=token and no token, Ray's
        # C++ client aborts the process (a failed check and a stack trace), where this raises.
        ensure_token_if_auth_enabled(None, create_token_if_missing=False)
    except ray.exceptions.AuthenticationError as err:
        raise ConfigError(
            f"Ray address {address}: RAY_AUTH_MODE=token, but this client has no token to "
            f"send: {err.message.strip()}"
        ) from None
    try:
        GcsClient(address=address)
    except ray.exceptions.AuthenticationError:
        raise ConfigError(refused_token(address, os.environ)) from None
    except ray.exceptions.RpcError as err:
        # Something took the connection (wait_for_address knocked) but no Ray head answered
        # within Ray's own deadline: another service, or a head too busy to answer.
        raise ConfigError(
            f"Ray address {address}: no Ray head answered there ({type(err).__name__}: "
            f"{err}); is it the head's GCS port (6379 by default), and is the head up?"
        ) from None
    except TypeError:  # another Ray's client: ray.init asks
        return


def refused_token(address: str, env: Mapping[str, str]) -> str:
    """What to do when the head at `address` refuses this client's token (or its lack of one)."""
    mode = env.get("RAY_AUTH_MODE", "").lower()
    set_token = (
        "the cluster's token in RAY_AUTH_TOKEN or in the file RAY_AUTH_TOKEN_PATH names "
        "(`ray start` writes ~/.ray/auth_token on the head's machine)"
    )
    if mode != "token":
        return (
            f"Ray address {address}: the cluster requires token authentication, and this "
            f"client sends no token (RAY_AUTH_MODE={mode or 'unset'}): set RAY_AUTH_MODE=token "
            f"and {set_token}"
        )
    return (
        f"Ray address {address}: the cluster refused the token this client sends (from "
        f"{_token_source(env)}): it is not the cluster's; set {set_token}"
    )


def _token_source(env: Mapping[str, str]) -> str:
    """Where Ray reads this client's token from, in the order it looks."""
    if env.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    return env.get("RAY_AUTH_TOKEN_PATH") or "~/.ray/auth_token"


# Set once a local cluster's start was stopped midway: see stopped_midway_start.
_STOPPED_MIDWAY = threading.Event()


def stopped_midway_start() -> bool:
    """Whether this process stopped a local Ray cluster's start midway (`_leave_half_started`).
    Its Ray core worker is then half built, and Python's exit hooks run on it ended the process
    with a segmentation fault about 1 time in 17 (a red-team pass): such a process ends without
    them (app/cli_exit.py exit_process), everything the start made being stopped already."""
    return _STOPPED_MIDWAY.is_set()


def _leave_half_started(before: list[process_tree.Proc]) -> None:
    """What a stopped or failed ray.init started of a local cluster, stopped, with signals held
    off: its agents were left running under PID 1 after a SIGTERM (a red-team pass). Ray's own
    stop ends the processes it had recorded; the raylet's agents, started before it could stop
    them, are ended here with the rest of what ray.init started: the processes below this one
    that `before` (taken as it began) does not hold (app/process_tree.py)."""
    import ray

    _STOPPED_MIDWAY.set()
    with signals_held():
        started = [p for p in process_tree.descendants() if p not in before]
        with contextlib.suppress(Exception):
            ray.shutdown()
        process_tree.end(started)


def _did_not_start(err: Exception) -> TrainctlError:
    return TrainctlError(
        f"the local Ray cluster did not start ({type(err).__name__}: {err}); nothing was "
        "trained: rerun when the machine is less loaded (and RAY_TMPDIR, or /tmp, is "
        "writable), or set TRAIN_RAY_ADDRESS to a running cluster"
    )


# Ray announces the token authentication it turns on for a new local cluster with a warning
# that ends "Set RAY_AUTH_MODE=disabled to opt out", on every run: advice to switch off a
# default this project keeps (rayAuth on Kubernetes). Ray logs it from this module; trainctl
# drops that one record and says in its own line that auth is on, and why.
RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
RAY_AUTH_NOTICE = "Token authentication is enabled for this Ray cluster."


class _DropAuthNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(RAY_AUTH_NOTICE)


def _own_auth_line() -> None:
    logger = logging.getLogger(RAY_AUTH_LOGGER)
    if not any(isinstance(f, _DropAuthNotice) for f in logger.filters):
        logger.addFilter(_DropAuthNotice())


def auth_line(env: Mapping[str, str]) -> str:
    """What a local cluster's token authentication is, in trainctl's words (Ray sets
    RAY_AUTH_MODE=token for a new local cluster unless it was set)."""
    mode = env.get("RAY_AUTH_MODE", "").lower()
    if mode != "token":
        return (
            f"warning: Ray token authentication is off (RAY_AUTH_MODE={mode or 'unset'}): "
            "anyone who can reach this machine's Ray ports can run code on it"
        )
    return (
        f"ray: token authentication is on (the token in {_token_source(env)}): only its "
        "holders can submit work to this local cluster, not other users or hosts"
    )


RETRY_EVERY_S = 5.0


def _host_port(address: str) -> tuple[str, int] | None:
    """Where `address` points (ray://host:port or host:port); None for auto, local and the like."""
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


def wait_for_address(address: str, timeout_s: float) -> None:
    """Return once something listens at `address`; ConfigError after `timeout_s`."""
    target = _host_port(address)
    if target is None:
        return
    deadline = time.monotonic() + timeout_s
    attempts = int(timeout_s // RETRY_EVERY_S) + 1
    attempt = 1
    while True:
        try:
            socket.create_connection(target, timeout=min(RETRY_EVERY_S, timeout_s)).close()
            return
        except OSError as err:
            remaining = deadline - time.monotonic()
            why = err.strerror or type(err).__name__
            if remaining <= 0 or attempt >= attempts:
                raise ConfigError(
                    f"Ray address {address}: nothing answers at {target[0]}:{target[1]} ({why}) "
                    f"within {timeout_s:g} s (TRAIN_RAY_CONNECT_TIMEOUT); is the Ray head up?"
                ) from None
            delay = min(RETRY_EVERY_S, remaining)
            attempt += 1
            click.echo(
                f"trainctl: Ray at {target[0]}:{target[1]} not reachable ({why}); "
                f"retrying in {delay:g} s ({attempt}/{attempts})"
            )
            time.sleep(delay)


def check_capacity(settings: TrainSettings, pool_cpus: Callable[[], float] = lambda: 0.0) -> None:
    """Refuse a request the cluster can never hold, instead of waiting for it forever.
    `pool_cpus`: the data pool's CPUs as the cluster stands (app/data/pool.py), which no
    training worker is placed on."""
    import ray
    import ray.data

    # A cluster this command started itself is complete at once; a joined one may still be
    # adding nodes (a RayJob's workers start after its head).
    joined = joined_address(settings)
    deadline = time.monotonic() + (settings.capacity_wait_s if joined else 0)
    while True:
        missing = capacity_problems(settings, ray.cluster_resources(), pool_cpus())
        if not missing or time.monotonic() >= deadline:
            break
        time.sleep(1)  # nodes of a just-started cluster may still be joining
    if missing:
        raise ConfigError(missing)


def capacity_problems(
    settings: TrainSettings, resources: dict[str, float], pool_cpus: float = 0.0
) -> list[str]:
    """What the cluster's `resources` can never hold of the run's workers; `pool_cpus` of its
    CPUs are the data pool's, whose nodes take no training worker."""
    workers = settings.workers.min
    problems = []
    cpus = workers * settings.cpus_per_worker
    if resources.get("CPU", 0) - pool_cpus < cpus:
        pool = f", {pool_cpus:g} of them on the data pool (no training there)" if pool_cpus else ""
        problems.append(
            f"TRAIN_NUM_WORKERS={settings.num_workers} x TRAIN_CPUS_PER_WORKER="
            f"{settings.cpus_per_worker:g} needs {cpus:g} CPUs; the Ray cluster has "
            f"{resources.get('CPU', 0):g}{pool}"
        )
    if settings.use_gpu and resources.get("GPU", 0) < workers:
        problems.append(
            f"TRAIN_USE_GPU=true with TRAIN_NUM_WORKERS={settings.num_workers} needs {workers} "
            f"GPUs; the Ray cluster has {resources.get('GPU', 0):g}"
        )
    if settings.accelerator_type:
        key = f"accelerator_type:{settings.accelerator_type}"
        if resources.get(key, 0) <= 0:
            known = sorted(
                k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")
            )
            problems.append(
                f"TRAIN_ACCELERATOR_TYPE={settings.accelerator_type}: no node of that type in the "
                f"Ray cluster (types present: {', '.join(known) or 'none'})"
            )
    return problems
