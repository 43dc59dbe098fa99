"""TRAIN_PROMOTE_IF: its grammar and its parse, with the settings (no run code, no torch).

Grammar (whitespace-separated, case-sensitive):

    gate      := condition ("and" condition)*
    condition := "beats_champion" | METRIC OP NUMBER | class_term
    class_term:= FIGURE "[" CLASS "]" OP FRACTION     (recall[cat]>=0.9: one named class)
               | "min_class_" FIGURE OP FRACTION     (min_class_recall>=0.8: every class)
               | "class_drop" ("<=" | "<") FRACTION  (no class's recall more than this below
                                                      the champion's, on the same rows)
    FIGURE    := "recall" | "precision" | "f1"
    OP        := ">=" | ">" | "<=" | "<"

METRIC is a field of the epoch record (app/runfolder/epoch_record.py), read from the exported
checkpoint's metrics. `beats_champion` compares TRAIN_CHECKPOINT_METRIC (the metric that ranks
checkpoints, in its own direction) with the champion's value of it: strictly better, so a tie
keeps the champion (with no champion yet, it compares with chance: app/promotion/gate.py).
Only `and` exists: a gate is a list of requirements, all of which must hold; `or` would make
"why was it kept" ambiguous.

Class terms are judged on the run-end evaluation's per-class figures (app/evaluation), on the
dataset's held-out test/ split where it has one, else on the validation split; CLASS is a class
name of the data (any characters but `]`, as written; spaces around it need not be typed
where the name without them is one class; ` and ` inside the brackets is the name's own),
checked against the dataset's classes before Ray starts (app/promotion/gate_check.py). Their
numbers are fractions from 0 to 1, like val_accuracy. The decision (the gate against the
metrics) is app/promotion/gate.py's. `parse_condition` and `Threshold` are the grammar's parts
other settings of the same shape reuse.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema
from pydantic_settings import NoDecode

from app.errors import did_you_mean
from app.formatting import finite

BEATS = "beats_champion"
OPS = (">=", "<=", ">", "<")  # two-character operators first: ">=" is not ">" then "="
MAX_GATE_CHARS = 500
FRACTIONS = ("val_accuracy",)  # metrics recorded as 0..1
# Figures of an epoch that are never below 0 (times, memory, a rate), and those of them always
# above 0 (an epoch takes time and trains images): `epoch_time_s<=0` could never hold.
NOT_NEGATIVE = ("lr", "first_batch_s", "first_step_s", "compile_s", "peak_gpu_gib")
ABOVE_ZERO = ("epoch_time_s", "run_time_s", "worker_time_s", "images_per_s")
_NUMBER = r"([-+]?[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)"
_CONDITION = re.compile(r"\A([a-z_][a-z0-9_]*)\s*(>=|<=|>|<)\s*" + _NUMBER + r"\Z")
_NAMED = re.compile(r"\A([a-z0-9_]+)\[([^\]]*)\]\s*(>=|<=|>|<)\s*" + _NUMBER + r"\Z")
FIGURES = ("recall", "precision", "f1")  # per-class figures of an evaluation (metrics.json)
CLASS_FLOOR = "min_class_"  # min_class_recall: the figure's floor on every class
CLASS_DROP = "class_drop"
MAX_CLASS_CHARS = 200


@dataclass(frozen=True)
class Threshold:
    metric: str
    op: str
    value: float

    def holds(self, found: float) -> bool:
        return _compare(found, self.op, self.value)

    def holds_exactly(self, found: Fraction) -> bool:
        """`holds` for an exact figure, against the threshold as written: `0.1` is 1/10, not
        the float nearest it. A difference of two recalls taken in floats misses by an ulp
        either way (0.8 - 0.7 is 0.10000000000000009), so a drop of exactly the allowed
        margin would fail `<=`."""
        return _compare(found, self.op, Fraction(exact(self.value)))

    def met_by(self, figure: Any) -> bool:
        """Whether a figure read from a record meets this threshold; a missing, non-numeric or
        non-finite figure does not."""
        found = finite(figure)
        return found is not None and self.holds(found)

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{exact(self.value)}"


def _compare(found: Any, op: str, bound: Any) -> bool:
    return {">=": found >= bound, ">": found > bound, "<=": found <= bound, "<": found < bound}[op]


def exact(value: float) -> str:
    """A threshold as written back (the recorded gate, the verdict): the shortest text that
    reads back as the same float (`0.9999999`, not `:g`'s `1`), without a needless `.0`."""
    value = float(value)
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


@dataclass(frozen=True)
class ClassThreshold:
    """A per-class figure's bound: on the class `name`, or on every class (None)."""

    figure: str  # one of FIGURES
    op: str
    value: float
    name: str | None = None

    def holds(self, found: float) -> bool:
        return Threshold(self.figure, self.op, self.value).holds(found)

    @property
    def term(self) -> str:
        """The term's left side as written: `recall[cat]`, `min_class_recall`."""
        return f"{CLASS_FLOOR}{self.figure}" if self.name is None else f"{self.figure}[{self.name}]"

    def __str__(self) -> str:
        return f"{self.term}{self.op}{exact(self.value)}"


@dataclass(frozen=True)
class Gate:
    doc_label: ClassVar[str] = "condition"  # its type, as docs/settings.md says
    beats_champion: bool = False
    thresholds: tuple[Threshold, ...] = ()
    classes: tuple[ClassThreshold, ...] = ()
    class_drop: Threshold | None = None  # metric CLASS_DROP, op <= or <

    def __str__(self) -> str:
        parts = ([BEATS] if self.beats_champion else []) + [str(t) for t in self.thresholds]
        parts += [str(t) for t in self.classes]
        parts += [str(self.class_drop)] if self.class_drop else []
        return " and ".join(parts)

    @property
    def compares_with_champion(self) -> bool:
        """Whether a worse run than the champion can fail it: `beats_champion`, or a class
        drop against the champion's recalls that some drop can exceed. A gate of thresholds
        alone promotes any run that meets them, a worse one too."""
        return self.beats_champion or (self.class_drop is not None and not self.drop_always_met)

    @property
    def drop_always_met(self) -> bool:
        """`class_drop<=1`: a recall falls by at most 1 (from 1 to 0), so every model meets it,
        one that recalls none of a class the champion recalled fully included."""
        drop = self.class_drop
        return drop is not None and drop.op == "<=" and drop.value >= 1

    @property
    def per_class(self) -> bool:
        """Whether the gate needs the run-end evaluation's per-class figures."""
        return bool(self.classes) or self.class_drop is not None

    def named_classes(self) -> tuple[str, ...]:
        """The classes the gate names, in order, once each."""
        return tuple(dict.fromkeys(t.name for t in self.classes if t.name is not None))


def metrics() -> tuple[str, ...]:
    """The epoch record's fields. Imported when a gate is parsed, not with this module: the
    settings (and so `trainctl predict`'s CLI) import the gate's type without the run code."""
    from app.runfolder.epoch_record import FIELDS

    return tuple(f.name for f in FIELDS)


def allowed() -> str:
    figures = "|".join(FIGURES)
    return f"conditions are {BEATS} or METRIC OP NUMBER joined by `and`; METRIC is one of " + (
        ", ".join(metrics()) + f"; OP is one of {', '.join(OPS)}; per class: "
        f"{CLASS_FLOOR}{{{figures}}} OP FRACTION (every class), {{{figures}}}[CLASS] OP "
        f"FRACTION (one class), {CLASS_DROP}<=FRACTION (no class's recall more than this "
        "below the champion's)"
    )


def parse_gate(text: str) -> Gate:
    """The gate `text` describes; ValueError naming the part that is wrong and what is allowed."""
    if len(text) > MAX_GATE_CHARS:
        raise ValueError(f"longer than {MAX_GATE_CHARS} characters")
    parts = _conditions(text.strip())
    if not text.strip():
        raise ValueError(f"is empty; {allowed()}")
    outside = _outside_classes(text)
    if slip := _slip(text, outside):
        raise ValueError(slip)
    joiner = re.search(r"\s(and|or|&&|\|\|)\s", outside, re.IGNORECASE)
    if joiner and joiner.group(1) != "and":
        raise ValueError(
            f"cannot read {text!r}: conditions are joined by a lowercase `and` (every one must "
            f"hold; there is no `or`), not {joiner.group(1)!r}"
        )
    beats, thresholds, classes, drop = False, [], [], None
    for part in parts:
        part = part.strip()
        if part == BEATS:
            beats = True
            continue
        term = parse_class_term(part)
        if isinstance(term, ClassThreshold):
            classes.append(term)
        elif term is not None:
            if drop is not None:  # one would silently replace the other, the stricter too
                raise ValueError(
                    f"names {CLASS_DROP} twice ({drop} and {term}); write it once, with the "
                    "margin you mean"
                )
            drop = term
        else:
            thresholds.append(parse_condition(part, metrics(), FRACTIONS))
    terms = [(t.metric, t.op, t.value) for t in thresholds]
    terms += [(t.term, t.op, t.value) for t in classes] + (
        [(CLASS_DROP, drop.op, drop.value)] if drop else []
    )
    if never := _never_met(terms):
        raise ValueError(never)
    return Gate(beats, tuple(thresholds), tuple(classes), drop)


def _never_met(terms: list[tuple[str, str, float]]) -> str | None:
    """Why no figure could meet these bounds together, None where one could. A gate that can
    never pass keeps every champion forever, and a stop that can never be met trains on, both
    silently: `val_accuracy>=0.9 and val_accuracy<=0.1`, `train_loss<=-1`, `val_accuracy>1`."""
    by_term: dict[str, list[tuple[str, float, str]]] = {}
    for term, op, value in terms:
        by_term.setdefault(_one_key(term), []).append((op, value, f"{term}{op}{exact(value)}"))
    # A floor on every class (min_class_recall>=0.9) is a floor on each class the gate names:
    # with recall[cat]<=0.5 beside it, no model passes.
    for term, op, value in terms:
        if term.startswith(CLASS_FLOOR) and op in (">=", ">"):
            named = f"{term.removeprefix(CLASS_FLOOR)}["
            for other in [t for t in by_term if t.startswith(named)]:
                by_term[other].append((op, value, f"{term}{op}{exact(value)}"))
    for term, bounds in by_term.items():
        # class_drop's own bounds are checked where it is read (parse_class_term).
        fraction = term in FRACTIONS or "[" in term or term.startswith(CLASS_FLOOR)
        # The lowest and highest value the figure may take, each with whether it is excluded.
        positive = term in ABOVE_ZERO
        low = (0.0, positive) if fraction or positive or term.endswith("loss") or (
            term in NOT_NEGATIVE) else (-math.inf, False)  # fmt: skip
        high = (1.0, False) if fraction else (math.inf, False)
        for op, value, _ in bounds:
            if op in (">=", ">") and (value, op == ">") > low:
                low = (value, op == ">")
            if op in ("<=", "<") and (value, op != "<") < (high[0], not high[1]):
                high = (value, op == "<")
        if low[0] > high[0] or (low[0] == high[0] and (low[1] or high[1])):
            written = " and ".join(said for _, _, said in bounds)
            kind = (
                "is a fraction from 0 to 1" if fraction
                else "is always above 0" if positive
                else "is never below 0"
            )  # fmt: skip
            why = "" if len(bounds) > 1 else f" ({term} {kind})"
            return f"{written!r} can never hold{why}"
    return None


def _one_key(term: str) -> str:
    """A term's key, one for every spelling of one class (`recall[ cat]`, `recall[cat]`): the
    gate matches class names without spaces around them and in any Unicode form."""
    figure, bracket, name = term.partition("[")
    if not bracket:
        return term
    return f"{figure}[{unicodedata.normalize('NFC', name.removesuffix(']')).strip()}]"


def never_met_by_the_run(gate: Gate, *, epochs: int, gpu: bool, compiles: bool) -> str | None:
    """The first threshold that no checkpoint of a run with these settings could meet, and why;
    None where each could. `_never_met` judges the bounds alone; these follow from the run:
    its epochs count from 1 to `epochs`, `peak_gpu_gib` is recorded on a GPU only, and a run
    that does not compile (`compiles`: TRAIN_COMPILE on, or auto on a GPU) records `compiled`
    and `compile_s` as 0. A gate that can never pass keeps every champion after a whole run."""
    on_epoch = [t for t in gate.thresholds if t.metric == "epoch"]
    if on_epoch and not _some_epoch(on_epoch, epochs):
        said = " and ".join(str(t) for t in on_epoch)
        return f"{said}: a checkpoint's epoch is a whole number from 1 to TRAIN_EPOCHS={epochs}"
    for t in gate.thresholds:
        if t.metric == "peak_gpu_gib" and not gpu:
            return f"{t}: peak_gpu_gib is recorded on a GPU only, and TRAIN_USE_GPU is false"
        if t.metric in ("compiled", "compile_s") and not compiles and not t.holds(0.0):
            return (
                f"{t}: a run that does not compile records {t.metric} 0 (TRAIN_COMPILE off, or "
                "auto on CPU)"
            )
    return None


def _some_epoch(bounds: list[Threshold], epochs: int) -> bool:
    """Whether a whole number from 1 to `epochs` meets every bound (`epoch>1 and epoch<2`: none)."""
    low, high = 1, epochs
    for t in bounds:
        if t.op in (">=", ">"):
            low = max(low, math.floor(t.value) + 1 if t.op == ">" else math.ceil(t.value))
        else:
            high = min(high, math.ceil(t.value) - 1 if t.op == "<" else math.floor(t.value))
    return low <= high


def _slip(text: str, outside: str) -> str | None:
    """A slip of the pen the generic "cannot read" left to be guessed (a red-team pass): an
    operator written backwards, a decimal comma, terms joined by a comma."""
    for wrong, right in (("=>", ">="), ("=<", "<=")):
        if wrong in outside:
            return f"{text!r}: the operator is {right}, not {wrong}"
    if re.search(r"\d,\d", outside):
        return f"{text!r}: a number takes a decimal point (0.9), not a comma"
    if re.search(r"[,;]", outside):
        return f"{text!r}: conditions are joined by ` and `, not a comma or semicolon"
    return None


def _outside_classes(text: str) -> str:
    """`text` with each class name in brackets masked, its length kept: a class name may hold
    ` and ` or ` or `, which join nothing."""
    return re.sub(r"\[[^\]]*\]", lambda found: "[" + "x" * (len(found[0]) - 2) + "]", text)


def _conditions(text: str) -> list[str]:
    """`text` split at each ` and ` outside brackets (`recall[cat and dog]>=0.9` is one
    condition)."""
    parts, start = [], 0
    for joint in re.finditer(r"\s+and\s+", _outside_classes(text)):
        parts.append(text[start : joint.start()])
        start = joint.end()
    return [*parts, text[start:]]


def parse_condition(part: str, known: tuple[str, ...], fractions: tuple[str, ...]) -> Threshold:
    """One `METRIC OP NUMBER` whose METRIC is one of `known` (those in `fractions` are 0..1);
    ValueError naming what is wrong and what is allowed."""
    percent = part.endswith("%")
    match = _CONDITION.match(part.removesuffix("%"))
    if not match:
        # A word alone: most likely a term misspelt (beats_champoin), said before the grammar.
        close = did_you_mean(part, ("beats_champion", *known), "").removeprefix("; ")
        hint = f" ({close})" if close and re.fullmatch(r"\w+", part) else ""
        raise ValueError(f"cannot read {part!r}{hint}; {allowed()}")
    metric, op, number = match.groups()
    if metric not in known:
        close = did_you_mean(metric, known, "").removeprefix("; ")
        hint = f" ({close})" if close else ""
        raise ValueError(f"unknown metric {metric!r}{hint}; {allowed()}")
    value = _number(part, number)
    if metric in fractions:
        _fraction(part, metric, op, value, percent)
    elif percent:  # a loss has no percentage: `val_loss<5%` must not become `val_loss<5`
        raise ValueError(
            f"{part!r}: {metric} is a plain number, not a percentage; write it without `%`"
        )
    return Threshold(metric, op, value)


def parse_class_term(part: str) -> ClassThreshold | Threshold | None:
    """`part` as a per-class term (a ClassThreshold, or the class_drop Threshold); None where
    it is not one (a plain METRIC OP NUMBER); ValueError where it is one, badly written."""
    percent = part.endswith("%")
    text = part.removesuffix("%")
    named = _NAMED.match(text)
    if named:
        figure, name, op, number = named.groups()
        if figure not in FIGURES:
            raise ValueError(f"{part!r}: per-class figures are {', '.join(FIGURES)}; {allowed()}")
        # As written: a class folder's name may begin or end with a space (matched loosely:
        # app/runfolder/class_names.spelled_as).
        if not name.strip() or len(name) > MAX_CLASS_CHARS or not name.isprintable():
            raise ValueError(
                f"{part!r}: a class name in [] is 1 to {MAX_CLASS_CHARS} printable characters"
            )
        value = _fraction(part, f"{figure}[{name}]", op, _number(part, number), percent)
        return ClassThreshold(figure, op, value, name)
    if "[" in text or "]" in text:
        raise ValueError(f"cannot read {part!r}; a named class is FIGURE[CLASS] OP FRACTION, "
                         f"FIGURE one of {', '.join(FIGURES)}, CLASS without `]`")  # fmt: skip
    plain = _CONDITION.match(text)
    if not plain:
        return None
    term, op, number = plain.groups()
    if term == CLASS_DROP:
        if op not in ("<=", "<"):
            raise ValueError(
                f"{part!r}: {CLASS_DROP} is the most a class's recall may fall below the "
                f"champion's: write {CLASS_DROP}<=MARGIN"
            )
        value = _number(part, number)
        if value < 0 and not percent:
            raise ValueError(
                f"{part!r}: {CLASS_DROP} is a fraction from 0 to 1, the most a class's recall "
                f"may fall below the champion's: {CLASS_DROP}<=0 lets no class fall; write e.g. "
                f"{CLASS_DROP}<=0.02"
            )
        fraction = _fraction(part, term, op, value, percent)
        if op == "<" and fraction == 0:
            raise ValueError(
                f"{part!r} asks every class's recall to rise above the champion's, which no "
                f"run can do where the champion recalls a class fully: {CLASS_DROP}<=0 lets no "
                f"class fall; write e.g. {CLASS_DROP}<=0.02"
            )
        return Threshold(CLASS_DROP, op, fraction)
    if term.startswith(CLASS_FLOOR):
        figure = term.removeprefix(CLASS_FLOOR)
        if figure not in FIGURES:
            floors = ", ".join(CLASS_FLOOR + f for f in FIGURES)
            raise ValueError(f"{part!r}: unknown per-class floor; allowed: {floors}")
        return ClassThreshold(figure, op, _fraction(part, term, op, _number(part, number), percent))
    return None


def _number(part: str, number: str) -> float:
    value = float(number)
    if not math.isfinite(value):
        raise ValueError(f"{part!r}: the number must be finite")
    if value == 0 and any(digit in "123456789" for digit in number.split("e")[0].split("E")[0]):
        # 1e-400 reads as 0: the gate would be judged as `<=0`, not as written (a red-team pass).
        raise ValueError(
            f"{part!r}: {number} is closer to 0 than a float can hold (about 5e-324) and would "
            "be judged as 0; write 0, or a number a float holds"
        )
    return value


def _fraction(part: str, metric: str, op: str, value: float, percent: bool) -> float:
    """`value`, a fraction from 0 to 1; ValueError otherwise. The epoch line shows accuracy
    as a percentage; a gate of 90 would never pass, silently. `95%` is refused too, not read
    as 0.95: the recorded gate is what was written."""
    if percent or not 0 <= value <= 1:
        said = f"{part!r}: {metric} is a fraction from 0 to 1 (the epoch line's 95.28% is 0.9528)"
        # Only a bar written as a percentage, or one no fraction comes near (90), is read as
        # one: 1.5 as 0.015 would suggest a floor that lets nearly everything pass.
        if not (percent and 0 < value <= 100) and not 10 <= value <= 100:
            raise ValueError(said)
        fraction = exact(value / 100)
        raise ValueError(f"{said}: write {fraction}; did you mean {metric}{op}{fraction}?")
    return value


def _gate_setting(value: Any) -> Gate:
    return value if isinstance(value, Gate) else parse_gate(str(value))


# The settings field's type: text in (env, .env, chart), the parsed Gate inside, its canonical
# text out (summary.json, `trainctl env`). NoDecode: pydantic-settings would otherwise read a
# dataclass field's text as JSON.
GateSetting = Annotated[
    Gate,
    NoDecode,
    BeforeValidator(_gate_setting),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string"}),
]
