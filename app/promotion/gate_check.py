"""The `gate` check of `trainctl check` and `train` (before Ray starts): TRAIN_PROMOTE_IF as
it will be judged, term by term, on which data and against what, and a gate that could never
pass refused (exit 2): a term naming a class the dataset does not have (with the allowed
names), or one that judges a class with no rows in the data the gate is judged on (a named
class, or any class for a floor on every class and for `class_drop`).

The class names are the dataset description's (app/data/schema.DatasetInfo: the image
folder's class folders, the Parquet files' class names, else the label numbers "0".."K-1").
"""

from __future__ import annotations

from app.data.schema import DatasetInfo
from app.errors import ConfigError, did_you_mean
from app.formatting import one_line
from app.promotion.class_gate import VALIDATION_NOTE
from app.runfolder.class_names import spelled_as
from app.runfolder.retention import higher_is_better
from app.settings import TrainSettings
from app.settings.gate import BEATS, Gate

MAX_SHOWN_CLASSES = 20
# The figures a held-out test split replaces with its own (app/promotion/gate.py _on_data); the
# other epoch-record metrics (train_loss, epoch_time_s, ...) are the checkpoint's training record.
MEASURED = ("val_accuracy", "val_loss")


class GateAdvice(Exception):
    """A gate that passes: but with a term every model meets, or one that rewards a worse
    model. `check` prints WARN, `train` a warning once: the gate is the user's to choose."""


def gate_check(settings: TrainSettings, info: DatasetInfo | None) -> str:
    """`gate ...: term; term; ... judged on ...`; ConfigError for a gate that cannot pass."""
    gate = settings.promote_if
    if info is not None:
        _check_classes(gate, info)
    test_rows = info.test_rows if info is not None else None
    terms = [str(t) for t in gate.thresholds]
    if gate.beats_champion:
        terms.insert(
            0, f"{BEATS} ({settings.checkpoint_metric} against the champion's on the same rows)"
        )
    terms += [
        f"{t} ({'every class' if t.name is None else 'class ' + t.name})" for t in gate.classes
    ]
    if gate.class_drop is not None:
        terms.append(
            f"{gate.class_drop} (each class's recall against the champion's export scored on "
            "the same rows; while there is no champion it passes)"
        )
    # One term is the gate itself: said once, not as `gate: gate`.
    said = terms[0] if len(terms) == 1 else f"{gate}: " + "; ".join(terms)
    recorded = sorted({t.metric for t in gate.thresholds if t.metric not in MEASURED})
    if test_rows is not None:
        data = f"the held-out test data ({test_rows:,} rows)"
        whose = "the run's and the champion's" if gate.compares_with_champion else "the run's"
        which = "every term" if not recorded else "every term but " + ", ".join(recorded)
        said += f"; {which} judged on {data}, {whose} figures there"
    elif gate.per_class:
        said += f"; per-class terms {VALIDATION_NOTE}"
    elif gate.beats_champion:
        said += f"; the run's and the champion's figures on this run's rows, {VALIDATION_NOTE}"
    else:
        said += f"; the recorded figures, {VALIDATION_NOTE}"
    if recorded:
        said += f"; {', '.join(recorded)}: the checkpoint's own training record"
    if advice := _advice(gate, settings.lr):
        raise GateAdvice(f"{said}; but " + "; ".join(advice))
    return said


# The least value of an epoch record's field: every figure is a count, a rate, a time or a
# loss, none below 0, and epochs count from 1.
LEAST = {"epoch": 1.0}


def _advice(gate: Gate, lr: float) -> list[str]:
    """Terms every model meets, and terms that reward a worse one. `lr`: TRAIN_LR, the most
    the cosine schedule's learning rate reaches, and so the most a checkpoint records."""
    found = []
    for t in gate.thresholds:
        if t.metric in MEASURED:
            continue
        # A bound on the training record that every checkpoint meets (`epoch>=1`, `lr<=1`
        # under TRAIN_LR=0.001) judges nothing: said as `val_accuracy>=0` is.
        least = LEAST.get(t.metric, 0.0)
        if t.op in (">=", ">") and t.holds(least):
            found.append(f"{t} holds for every model (no {t.metric} is below {least:g})")
        elif t.metric == "lr" and t.op in ("<=", "<") and t.holds(lr):
            found.append(f"{t} holds for every model (no checkpoint's lr is above TRAIN_LR={lr:g})")
    bounds = [(str(t), t.metric, t.op, t.value) for t in gate.thresholds]
    bounds += [(str(t), "score", t.op, t.value) for t in gate.classes]
    for term, metric, op, value in bounds:
        if metric not in ("val_accuracy", "val_loss", "score"):
            continue
        up = metric == "score" or higher_is_better(metric)
        if (op in (">=", ">")) != up:
            found.append(f"{term} promotes a worse model over a better one")
        elif up and (value < 0 or (value == 0 and op == ">=")):
            found.append(f"{term} holds for every model")
    if gate.drop_always_met:
        found.append(
            f"{gate.class_drop} holds for every model (no recall falls by more than 1); "
            "a drop it should stop is below 1, e.g. class_drop<=0.05"
        )
    return found


def _check_classes(gate: Gate, info: DatasetInfo) -> None:
    names = info.label_names()
    counts = info.test_class_counts if info.test_rows is not None else info.valid_class_counts
    split = "test" if info.test_rows is not None else "valid"
    problems = []
    for typed in gate.named_classes():
        name = spelled_as(typed, names) or typed  # as the dataset spells it
        if name not in names:
            close = did_you_mean(name.strip(), names, "").removeprefix("; ")
            hint = f" ({close})" if close else ""
            problems.append(
                f"TRAIN_PROMOTE_IF names class {one_line(name, 200)!r}{hint}, which the dataset "
                f"does not have; its classes: {_listed(names)}"
            )
            continue
        if counts and not counts[names.index(name)]:
            problems.append(
                f"TRAIN_PROMOTE_IF names class {name!r}, which has no rows in {split}/: the term "
                f"could never pass; add {split} images of it or remove the term"
            )
    every = [str(t) for t in gate.classes if t.name is None]
    every += [str(gate.class_drop)] if gate.class_drop is not None else []
    empty = tuple(n for n, count in zip(names, counts or (), strict=False) if not count)
    if every and empty:
        problems.append(
            f"TRAIN_PROMOTE_IF {' and '.join(every)} judges every class, and {len(empty)} "
            f"{'has' if len(empty) == 1 else 'have'} no rows in {split}/ ({_listed(empty)}), so "
            f"nothing would judge them and the gate would keep the champion; add {split} images "
            "of them, or judge named classes only (recall[CLASS]>=...)"
        )
    if problems:
        raise ConfigError(problems)


def _listed(names: tuple[str, ...]) -> str:
    shown = ", ".join(_shown(n) for n in names[:MAX_SHOWN_CLASSES])
    return shown + (f" ... ({len(names)} in all)" if len(names) > MAX_SHOWN_CLASSES else "")


def _shown(name: str) -> str:
    """A class name in a list of them: quoted where it would not read as one (spaces around
    it, a comma in it)."""
    plain = name == name.strip() and "," not in name and "'" not in name
    return one_line(name, 200) if plain else repr(one_line(name, 200))
