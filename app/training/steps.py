"""Optimizer steps per epoch: how the training loop counts them, and when there are too few.

A dataset smaller than a few batches gives one or two optimizer steps per epoch: the model
barely moves, whatever the epoch count, and such a run ends near chance (a 90-image folder at
the default batch of 128 took one step per epoch). Preflight says so, with a batch size that
gives MIN_STEPS. Free of torch: preflight imports it before anything heavy.
"""

from __future__ import annotations

import math

MIN_STEPS = 10  # per epoch: fewer and a cosine schedule barely moves the weights


def steps_per_epoch(train_rows: int, global_batch_size: int) -> int:
    """What the loop runs per epoch (app/training/loop.py) where a step takes
    `global_batch_size` rows: every row once, the last batch partial."""
    return max(1, math.ceil(train_rows / global_batch_size))


def per_worker_batch(global_batch_size: int, world: int) -> int:
    """Each worker's batch: TRAIN_GLOBAL_BATCH_SIZE split among `world` workers, the remainder
    dropped (3 over 2 workers: 1 each, so a step takes 2 rows)."""
    return max(1, global_batch_size // world)


def steps_with(train_rows: int, global_batch_size: int, world: int) -> int:
    """The steps per epoch `world` workers run: a step takes per_worker_batch x world rows.
    The schedule counted with TRAIN_GLOBAL_BATCH_SIZE itself, and where it does not divide
    among the workers the cosine reached 0 with a third of the run still to train (a red-team
    pass: 3 over 2 workers)."""
    return steps_per_epoch(train_rows, per_worker_batch(global_batch_size, world) * world)


def uneven_split(global_batch_size: int, world: int) -> str | None:
    """A warning where TRAIN_GLOBAL_BATCH_SIZE does not divide among `world` workers (the most
    an elastic range runs), or None."""
    if global_batch_size % world == 0:
        return None
    each = per_worker_batch(global_batch_size, world)
    return (
        f"TRAIN_GLOBAL_BATCH_SIZE={global_batch_size} does not divide among {world} workers: "
        f"each takes {each}, so a step trains on {each * world} rows, not "
        f"{global_batch_size}; give a multiple of the worker count"
    )


def few_steps(train_rows: int, global_batch_size: int, max_workers: int) -> str | None:
    """A warning naming the batch size, the rows and a batch size that gives MIN_STEPS (at
    least one row per worker), or None when the epoch has enough steps. Counted as the
    `max_workers` workers run them (steps_with), as the schedule and the check's line are."""
    steps = steps_with(train_rows, global_batch_size, max_workers)
    if steps >= MIN_STEPS:
        return None
    said = (
        f"{train_rows:,} train rows at TRAIN_GLOBAL_BATCH_SIZE={global_batch_size} give "
        f"{steps} optimizer step{'' if steps == 1 else 's'} per epoch; at least {MIN_STEPS} "
        "is typical"
    )
    fits = train_rows // MIN_STEPS  # the largest batch that still gives MIN_STEPS
    if fits < max_workers:
        return (
            f"{said}: the data is too small for {MIN_STEPS} steps of at least one row per "
            f"worker ({max_workers} workers); add data or use fewer workers"
        )
    suggestion = 1 << (fits.bit_length() - 1)  # a power of two, as batch sizes usually are
    suggestion = max(suggestion, max_workers)
    return f"{said}: lower TRAIN_GLOBAL_BATCH_SIZE (e.g. {suggestion})"
