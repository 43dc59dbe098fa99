"""TRAIN_PROMOTE_IF's per-class terms judged, as pure functions: `recall[cat]>=0.9`,
`min_class_recall>=0.8` and `class_drop<=0.02` (app/settings/gate.py) against the run-end
evaluation's per-class figures (app/promotion/evaluation.py), and the champion's on the same
rows.

What the gate is judged on (`Judged`): the dataset's held-out test/ split where it has one,
else the validation split the best checkpoint was selected on. A class with no rows in that
data has no recall, so nothing shows the model knows it: a term that judges it (a named class,
a floor on every class, `class_drop`) fails, naming the classes. A floor that skipped them
would promote a model never judged on them (`trainctl check` refuses such a gate before Ray).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from app.runfolder.class_names import spelled_as
from app.settings.gate import CLASS_DROP, ClassThreshold, Gate, exact

VALIDATION_NOTE = (
    "judged on the validation data the best checkpoint was selected on; add a test/ split for "
    "a held-out judgement"
)


@dataclass(frozen=True)
class Scores:
    """One model's figures on the judged rows (an evaluation's metrics.json)."""

    accuracy: float
    loss: float
    per_class: Mapping[str, Mapping[str, float]]  # class -> recall, precision, f1, support
    # class -> (the answer given most often on its rows, how often), where counted
    answered: Mapping[str, tuple[str, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, metrics: Mapping[str, Any]) -> Scores:
        figures = ("recall", "precision", "f1", "support", "predicted")
        rows = metrics.get("per_class") or []
        per_class = {str(c["class"]): {k: float(c[k]) for k in figures if k in c} for c in rows}
        answered = {
            str(c["class"]): (str(c["answered_most"]["class"]), int(c["answered_most"]["count"]))
            for c in rows
            if isinstance(c.get("answered_most"), Mapping)
        }
        return cls(float(metrics["accuracy"]), float(metrics["loss"]), per_class, answered)

    @property
    def rows(self) -> int:
        return int(sum(c["support"] for c in self.per_class.values()))

    def chance_agreement(self) -> float | None:
        """The accuracy of answers drawn at random, as often per class as this model gave
        them, against these rows' labels: sum over classes of (answered share x row share).
        None where the per-class answers were not counted."""
        rows = self.rows
        if rows <= 0 or any("predicted" not in c for c in self.per_class.values()):
            return None
        return sum(c["predicted"] * c["support"] for c in self.per_class.values()) / rows**2

    def with_rows(self) -> dict[str, Mapping[str, float]]:
        return {name: c for name, c in self.per_class.items() if c["support"] > 0}


@dataclass(frozen=True)
class Judged:
    """What the gate is judged on: the split, and the run's and the champion's scores there
    (None with the reason where they could not be had)."""

    split: str  # "test" or "valid"
    rows: int
    run: Scores | None = None
    problem: str | None = None  # why `run` is None
    champion: Scores | None = None
    champion_problem: str | None = None  # why `champion` is None, where there is a champion
    notes: list[str] = field(default_factory=list)
    unread: str | None = None  # too many of the split's images unreadable to judge on what is left
    classes: tuple[str, ...] = ()  # the model's classes: each one a floor or class_drop judges

    @property
    def held_out(self) -> bool:
        return self.split == "test"

    def where(self) -> str:
        return f"the {self.split} data ({self.rows:,} rows)"

    def record(self) -> dict[str, Any]:
        found: dict[str, Any] = {"split": self.split, "rows": self.rows}
        if not self.held_out:
            found["note"] = VALIDATION_NOTE
        for key in ("problem", "champion_problem", "unread"):
            if getattr(self, key):
                found[key] = getattr(self, key)
        return found


def judge_classes(
    gate: Gate, judged: Judged | None, has_champion: bool
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """(the per-class checks as recorded, the failures, notes) of `gate`'s class terms."""
    if not gate.per_class or (judged is not None and judged.unread):
        return [], [], []  # a split too unreadable to judge already fails every gate, once
    if judged is None or judged.run is None:
        why = judged.problem if judged is not None else "no run-end evaluation"
        return [], [f"the per-class terms need the run-end evaluation, which failed ({why})"], []
    checks: list[dict[str, Any]] = []
    failed: list[str] = []
    notes: list[str] = []
    for term in gate.classes:
        check, problem, note = _term(term, judged.run, judged)
        checks.append(check)
        failed += [problem] if problem else []
        notes += [note] if note else []
    if gate.class_drop is not None:
        check, problem, note = _drop(gate, judged, has_champion)
        checks.append(check)
        failed += [problem] if problem else []
        notes += [note] if note else []
    return checks, failed, notes


def _term(
    term: ClassThreshold, run: Scores, judged: Judged
) -> tuple[dict[str, Any], str | None, str | None]:
    check: dict[str, Any] = {"term": term.term, "figure": term.figure, "op": term.op,
                             "threshold": term.value, "data": judged.split}  # fmt: skip
    if term.name is not None:
        spelled = spelled_as(term.name, tuple(run.per_class))
        found = run.per_class.get(spelled) if spelled is not None else None
        if found is None or found["support"] <= 0:
            check.update({"class": term.name, "value": None, "passed": False})
            return check, f"{term.term}: class {term.name!r} has no rows in {judged.where()}", None
        value = found[term.figure]
        ok = term.holds(value)
        check.update({"class": term.name, "value": value, "passed": ok})
        if ok:
            return check, None, None
        return check, f"{term.term} {value:.4f} is not {term.op} {exact(term.value)}", None
    classes = run.with_rows()
    unjudged = without_rows(judged)
    if unjudged:
        check.update({"class": unjudged[0], "value": None, "passed": False})
        return check, f"{term.term}: {_unjudged_text(unjudged, judged)}", None
    # The class furthest on the wrong side of the bound: the one a floor is about.
    low = term.op in (">=", ">")
    worst = (min if low else max)(classes, key=lambda n: classes[n][term.figure], default=None)
    if worst is None:
        check.update({"class": None, "value": None, "passed": False})
        return check, f"{term.term}: no class has rows in {judged.where()}", None
    value = classes[worst][term.figure]
    ok = term.holds(value)
    check.update({"class": worst, "value": value, "passed": ok})
    if ok:
        return check, None, None
    return check, (
        f"{term.term}: class {worst!r} {term.figure} {value:.4f} is not {term.op} "
        f"{exact(term.value)} (support {int(classes[worst]['support'])})"
    ), None  # fmt: skip


def without_rows(judged: Judged) -> list[str]:
    """The model's classes that have no rows in the judged data (in class order)."""
    assert judged.run is not None
    scored = judged.run.with_rows()
    every = judged.classes or tuple(judged.run.per_class)
    return [name for name in every if name not in scored]


def _unjudged_text(unjudged: list[str], judged: Judged) -> str:
    listed = ", ".join(repr(n) for n in unjudged[:5]) + (" ..." if len(unjudged) > 5 else "")
    return (
        f"{len(unjudged)} {'class has' if len(unjudged) == 1 else 'classes have'} no rows in "
        f"{judged.where()} ({listed}), so nothing "
        f"judges them: add {judged.split}/ images of them"
    )


def _drop(
    gate: Gate, judged: Judged, has_champion: bool
) -> tuple[dict[str, Any], str | None, str | None]:
    drop = gate.class_drop
    assert drop is not None and judged.run is not None
    check: dict[str, Any] = {"term": drop.metric, "figure": "recall", "op": drop.op,
                             "threshold": drop.value, "data": judged.split}  # fmt: skip
    if not has_champion:
        check.update({"class": None, "value": None, "passed": True})
        return check, None, f"{drop.metric}: no champion yet, nothing to fall below"
    if judged.champion is None:
        check.update({"class": None, "value": None, "passed": False})
        why = judged.champion_problem or "not scored"
        problem = f"{drop.metric}: the champion could not be scored on the same rows ({why})"
        return check, problem, None
    unjudged = without_rows(judged)
    if unjudged:
        check.update({"class": unjudged[0], "value": None, "passed": False})
        return check, f"{drop.metric}: {_unjudged_text(unjudged, judged)}", None
    ours = judged.run.with_rows()
    theirs = judged.champion.per_class
    drops = {name: _fall(theirs[name], figures) for name, figures in ours.items() if name in theirs}
    worst = max(drops, key=lambda n: drops[n], default=None)
    if worst is None:
        check.update({"class": None, "value": None, "passed": True})
        return check, None, f"{drop.metric}: no class to compare"
    ok = drop.holds_exactly(drops[worst])
    value = float(drops[worst])
    check.update(
        {"class": worst, "value": value, "passed": ok, "recall": ours[worst]["recall"],
         "champion_recall": theirs[worst]["recall"]}
    )  # fmt: skip
    if ok:
        return check, None, None
    return check, (
        f"{drop.metric}: class {worst!r} recall {ours[worst]['recall']:.4f} is {value:.4f} below "
        f"the champion's {theirs[worst]['recall']:.4f} on the same rows (allowed: "
        f"{drop.op} {exact(drop.value)})"
    ), None  # fmt: skip


def _fall(theirs: Mapping[str, float], ours: Mapping[str, float]) -> Fraction:
    """How far our recall of a class is below the champion's, exactly. Both were scored on the
    same rows, so each recall is a count of hits over the class's support: the difference of
    the counts over it is the exact fall (9/10 - 7/10 is 2/10, where the floats' difference
    is 0.20000000000000007). Figures that are not such counts (supports that differ, records
    not of the same rows) fall back to the exact difference of the two recorded floats."""
    support = ours["support"]
    if support == theirs["support"] and support > 0 and float(support).is_integer():
        hits = [figures["recall"] * support for figures in (theirs, ours)]
        if all(abs(h - round(h)) < 1e-6 for h in hits):
            return Fraction(round(hits[0]) - round(hits[1]), int(support))
    return Fraction(theirs["recall"]) - Fraction(ours["recall"])


def passed_text(checks: list[dict[str, Any]]) -> str:
    """The per-class checks that passed, as the verdict shows them."""
    parts = []
    for c in checks:
        if c["value"] is None:
            continue
        where = f" (class {c['class']})" if c["class"] is not None and "[" not in c["term"] else ""
        if c["term"] == CLASS_DROP and c["value"] <= 0:  # the largest "drop" is a gain
            where = " (no class below the champion's recall)"
        parts.append(f"{c['term']} {c['value']:.4f}{where} {c['op']} {exact(c['threshold'])}")
    return ", ".join(parts)
