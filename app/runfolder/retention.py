"""Which checkpoints stay on storage: decided here, once, for the run and for the folder.

trainctl, not Ray, owns retention: Ray's CheckpointConfig keeps everything it is given
(`num_to_keep=None`, app/run/driver.py), because only trainctl knows which folders it ranks,
which were quarantined, which fail their checksums and which earlier drivers wrote. The rule:
the `keep` best by the checkpoint metric, plus the newest (the one a rerun resumes from).

Only end-of-epoch checkpoints are ranked: folders whose name is `checkpoint_epoch_NNNN`
(RANKED_NAME), which were validated. A mid-epoch checkpoint (`checkpoint_epoch_NNNN_step_SSSSSSSS`,
app/runfolder/checkpoint_names.py) has no validation: it is never ranked and never `best`, and it
stays only while it is the newest checkpoint of all (the one a rerun resumes from); a newer one
of either kind supersedes it. Any other folder (a quarantined `corrupt_...`) is never removed.

The pure decision (`to_remove`) knows nothing of storage, nor of the checkpoint record: it ranks
anything shaped like one (`Ranked`). app/runfolder/checkpoints.py `prune` applies it to a run
folder, and `InRunPruner` (built by checkpoints.py `in_run_pruner`) applies it after each epoch
while Ray trains, so checkpoints do not pile up on storage until the end of a long run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from app.storage.location import RunPath


class Ranked(Protocol):
    """What retention reads of a checkpoint (app/runfolder/checkpoints.py `CheckpointRef`)."""

    @property
    def path(self) -> RunPath: ...
    @property
    def epoch(self) -> int: ...
    @property
    def metrics(self) -> dict[str, float]: ...
    @property
    def step(self) -> int | None: ...
    @property
    def order(self) -> tuple[int, int]: ...


Ref = TypeVar("Ref", bound=Ranked)  # ranked and to_remove hand back what they were given

# The end-of-epoch checkpoint folder name (app/runfolder/checkpoints.py dir_name writes it).
RANKED_NAME = re.compile(r"checkpoint_epoch_\d{4,}")


def is_ranked(name: str) -> bool:
    """Whether a checkpoint folder named `name` takes part in retention's ranking."""
    return RANKED_NAME.fullmatch(name) is not None


def higher_is_better(metric: str) -> bool:
    """The one place the score direction is decided: pruning and the summary's `best` ask here."""
    return metric != "val_loss"


def ranked(good: Sequence[Ref], metric: str) -> list[Ref]:
    """End-of-epoch checkpoints, best first by `metric`; a checkpoint without it ranks last,
    newer before older on ties. Mid-epoch checkpoints have no validation: never ranked."""
    up = higher_is_better(metric)
    missing = float("-inf") if up else float("inf")
    validated = (ref for ref in good if ref.step is None)
    by_epoch = sorted(validated, key=lambda ref: ref.epoch, reverse=True)
    return sorted(by_epoch, key=lambda ref: ref.metrics.get(metric, missing), reverse=up)


def to_remove(good: Sequence[Ref], *, keep: int, metric: str) -> list[Ref]:
    """The good checkpoints to delete: every ranked one beyond the `keep` best by `metric`, and
    every mid-epoch one, except the newest checkpoint of all. Other folders are never chosen."""
    candidates = [ref for ref in good if is_ranked(ref.path.name) or ref.step is not None]
    if not candidates:
        return []
    newest = max(candidates, key=lambda ref: ref.order)
    survivors = {ref.path for ref in ranked(candidates, metric)[:keep]} | {newest.path}
    newest_first = sorted(candidates, key=lambda ref: ref.order, reverse=True)
    return [ref for ref in newest_first if ref.path not in survivors]


class InRunPruner:
    """Prunes the run folder after each epoch the driver sees, while Ray trains.

    Each checkpoint is verified (its files hashed) once and remembered, so a long run does not
    re-read every kept checkpoint each epoch; the end of the run scans afresh (driver `_finish`).
    A checkpoint still being copied fails verification and is looked at again next time: only
    verified checkpoints are ever deleted, and never the newest of them.

    `verify_new(known)`: the good checkpoints not among the `known` paths (checkpoints.scan);
    `prune(good)`: checkpoints.prune over them, returning the removed paths; `warn`: where a
    failed pass is told (it never stops training: the next pass, or the run's end, retries).
    """

    def __init__(
        self,
        verify_new: Callable[[Collection[RunPath]], list[Ranked]],
        prune: Callable[[list[Ranked]], list[RunPath]],
        warn: Callable[[str], None],
    ) -> None:
        self._verify_new, self._prune, self._warn = verify_new, prune, warn
        self._known: dict[RunPath, Ranked] = {}

    def after_checkpoint(self) -> None:
        try:
            for ref in self._verify_new(set(self._known)):
                self._known[ref.path] = ref
            for path in self._prune(list(self._known.values())):
                self._known.pop(path, None)
        except Exception as err:  # storage hiccups included: pruning must not end the run
            self._warn(f"checkpoints not pruned yet ({type(err).__name__}: {err})")
