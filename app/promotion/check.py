"""`trainctl check`'s promotion line: the gate a run must pass, and the champion it is judged
against, read the way the promotion step reads it (app/promotion/champion.py), with the
champion's task beside this run's (class names, channels, input size: app/promotion/task.py).

A pointer the step cannot use is a failed check: unreadable or not a pointer, the step keeps
the champion and no run is ever promoted (`kept the champion: not promoted (...)`) until the
file is fixed or removed; so it is without a number for TRAIN_CHECKPOINT_METRIC, or with a
copy whose files fail their check (the gate scores that copy on the run's rows). A champion of
another task fails it too: the step would keep it whatever the run scores, and a new task
needs a new TRAIN_MODEL_NAME. `train` leaves the pointer to that step, which reads it again
when the run ends (it may have moved by then).
"""

from __future__ import annotations

from typing import Any

from app.data.schema import DatasetInfo
from app.errors import ConfigError
from app.formatting import finite, one_line
from app.promotion import champion
from app.promotion.champion_task import TaskUnknown, vouched_card
from app.promotion.gate import CHANCE_METRIC, Chance, chance_of
from app.promotion.task import Task, another_task
from app.settings import TrainSettings
from app.settings.gate import BEATS, Gate
from app.storage import conditional
from app.storage.location import RunPath, store_errors
from app.storage.reading import is_dir_within, present_within

MAX_SHOWN_CHARS = 80  # a name or number from the pointer, as printed


class UnguardedChampion(Exception):
    """A champion the gate never compares with: any run that meets the gate replaces it, a
    worse one too. `check` prints it as WARN, `train` once as a warning before Ray starts: the
    gate is the user's to choose, so it is said, not refused."""


def promotion_check(settings: TrainSettings, info: DatasetInfo | None = None) -> str:
    """`gate ...; champion: run X v3, val_accuracy 0.962` or `...; no champion yet (...)`;
    ConfigError naming the pointer and what is wrong with it."""
    path = champion.pointer_path(settings.storage_path, settings.champion_name)
    seconds = settings.storage_timeout_s
    try:
        with store_errors(path, "TRAIN_STORAGE_PATH"):  # a bucket that cannot be read
            # No storage folder yet, or not a folder (the storage check says so): no pointer.
            # A bucket says whether it is there within the deadline; on a volume a link counts
            # as there, and the reader refuses it, as the step's does (damage, not absence).
            absent = not is_dir_within(settings.storage_path, "TRAIN_STORAGE_PATH", seconds) or (
                not present_within(path, "TRAIN_STORAGE_PATH", seconds)
            )
            pointer = None if absent else champion.read_pointer(path)
    except champion.PointerDamaged as err:
        raise ConfigError(damaged(str(err))) from None
    last = pointer and champion.last_version(pointer, one_line(str(path), 500))
    if last:  # every run would train and then keep it
        raise ConfigError(f"{last}; a run would train and then keep the champion, not promoted")
    line = describe(settings.promote_if, pointer, settings.checkpoint_metric, path)
    if pointer is None:
        held_out = info is not None and info.test_rows is not None
        counts = (info.test_class_counts if held_out else info.valid_class_counts) if info else ()
        chance = chance_of(counts) if info else None
        return _first(line, settings.promote_if, chance, held_out) + _race(path)
    run = Task.of_info(info) if info else None
    line += _tasks(pointer, run, settings, path) + _race(path)
    if not settings.promote_if.compares_with_champion:
        version = one_line(str(pointer["version"]), MAX_SHOWN_CHARS)
        raise UnguardedChampion(
            f"{line}; the gate never compares with the champion: any run that meets it "
            f"replaces v{version}, a worse one too; add {BEATS} (or class_drop<=0.02) to keep "
            "a worse model out"
        )
    return line


def _race(path: RunPath) -> str:
    """How two runs finishing at once are kept apart, where it is not the usual way (a lock on
    a volume, a compare-and-swap in S3: app/promotion/champion.py); ConfigError where the S3
    client that sends it is missing (the step could never move the pointer)."""
    guard = conditional.guard(path)
    if guard is conditional.Guard.COMPARE_AND_SWAP:
        problem = conditional.missing_client()
        if problem:
            raise ConfigError(f"{one_line(str(path), 500)}: {problem}; no run could be promoted")
    if guard is not conditional.Guard.NONE:
        return ""
    return (
        " (in GCS the pointer is last-writer-wins: two runs finishing at once may both be "
        "promoted, the second superseding the first; give each pool its own TRAIN_MODEL_NAME)"
    )


def _first(line: str, gate: Gate, chance: Chance | None, held_out: bool = False) -> str:
    """No champion yet: what the first run must score, where the data says (on the held-out
    test data, where the dataset has it: the gate is judged there)."""
    if not gate.beats_champion or chance is None:
        return line
    data = "held-out test data" if held_out else "validation data"
    return line.replace(
        "(the first run",
        f"(the first run whose {CHANCE_METRIC} beats the {data}'s majority-class "
        f"rate {chance.rate:.4f} + {chance.margin:.4g}",
        1,
    )


def _tasks(
    pointer: dict[str, Any], run: Task | None, settings: TrainSettings, path: RunPath
) -> str:
    """`, classes [...] 3x32x32; this run: classes [...] 3x32x32`; ConfigError when they
    differ, or when the champion cannot be checked against its model card (the step would keep
    the champion)."""
    if run is None:  # nothing to compare with: show what the pointer records, if anything
        try:
            return f", {Task.from_record(pointer['task']).describe()}" if "task" in pointer else ""
        except ValueError:
            return ""
    from app.export.card import verified
    from app.export.predict import check_loads

    where = one_line(str(path), 500)
    try:
        folder, card = vouched_card(pointer, settings.storage_path, settings.champion_name)
    except TaskUnknown as err:
        raise ConfigError(
            f"{where}: the champion cannot be checked against its model card "
            f"({one_line(str(err), 500)}); a run would train and then keep the champion, not "
            "promoted: remove the pointer or use another TRAIN_MODEL_NAME"
        ) from None
    try:  # every file the card lists: the gate scores the champion's copy on the run's rows
        # Loaded too: weights the card vouches for may still not load (NaN, another model).
        check_loads(verified(folder, card_sha256=str(pointer["card_sha256"])))
    except ConfigError as err:
        why = one_line("; ".join(err.problems), 500)
        raise ConfigError(
            f"{where}: the champion's copy fails its check ({why}); a run's gate could not "
            "score it, so the run would train and then keep the champion, not promoted: put "
            "the copy back from the champion run's export, or remove the pointer"
        ) from None
    found = Task.from_card(card)
    problem = another_task(found, run, settings.champion_name, pointer.get("version"))
    if problem:
        raise ConfigError(
            f"{where}: {problem}; a run would train and then keep the champion, not promoted"
        )
    return f", {found.describe()}; this run: {run.describe()}"


def damaged(problem: str) -> str:
    return (
        f"{one_line(problem, 500)}; a run would train and then keep the champion, not "
        "promoted, until the file is fixed or removed (the next run that passes the gate "
        "then becomes v1)"
    )


def describe(gate: Gate, pointer: dict[str, Any] | None, metric: str, path: RunPath) -> str:
    """What the gate asks and who the champion is, in one line; ConfigError when the pointer
    would mis-gate (no number to beat)."""
    said = f"gate {gate}"
    if str(gate) == BEATS:  # TRAIN_PROMOTE_IF's default
        said += (
            f" (the default: a run is promoted when its {metric}, TRAIN_CHECKPOINT_METRIC, is "
            "strictly better than the champion's, both scored on the run's rows)"
        )
    where = one_line(str(path), 500)
    if pointer is None:
        first = "the first run to pass the gate" if gate.thresholds else "the first run"
        return f"{said}; no champion yet ({first} becomes v1 at {where})"
    value = finite((pointer.get("metrics") or {}).get(metric))  # what the gate compares with
    if value is None:
        if gate.beats_champion:
            raise ConfigError(
                f"{where}: the champion has no {metric} (TRAIN_CHECKPOINT_METRIC) on record, "
                "and the promotion step keeps such a champion: a run would train and then keep "
                "it, not promoted; fix the pointer, or set TRAIN_CHECKPOINT_METRIC to the "
                "metric it was promoted on"
            )
        shown = "no " + metric
    else:
        shown = f"{metric} {value:.4g}" + (" on its own data" if gate.beats_champion else "")
    run = one_line(str(pointer.get("run_name", "?")), MAX_SHOWN_CHARS)
    version = one_line(str(pointer["version"]), MAX_SHOWN_CHARS)
    return f"{said}; champion: run {run} v{version}, {shown}"
