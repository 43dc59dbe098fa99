"""TRAIN_PROMOTE_IF's decision: a parsed gate (app/settings/gate.py) against the exported
checkpoint's metrics and the champion's, as pure functions.

`beats_champion` also compares with chance, with or without a champion: the checkpoint's
val_accuracy must beat the majority-class rate of the judged data (what a model that always
answers the most common class scores) by a margin (`Chance`). A model that learned nothing is
otherwise promoted by the first run of a new TRAIN_MODEL_NAME, or over a champion that scores
worse still on these rows (one trained on another task's labels).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from app.formatting import finite
from app.promotion.class_gate import Judged, Scores, judge_classes, passed_text
from app.settings.gate import Gate, exact

# What the first champion is compared with chance on, whatever TRAIN_CHECKPOINT_METRIC is: the
# one figure of every epoch record that a majority-class rate is comparable with.
CHANCE_METRIC = "val_accuracy"
CHANCE_MARGIN = 0.05  # the least a first champion must beat the majority-class rate by


@dataclass(frozen=True)
class Chance:
    """The majority-class rate of the validation data and the margin to beat it by.

    The margin is the larger of CHANCE_MARGIN and two standard errors of a rate measured on
    `rows` images (sqrt(rate * (1 - rate) / rows)): on 30 validation images a model no better
    than the majority class still scores up to ~0.17 above it by luck about one time in 40,
    while on 10,000 the noise is a fraction of a point and 0.05 asks for a visible gain. It is
    capped at half the majority-class error (1 - rate) / 2, so that on data where one class is
    97% the bar (0.985) can still be reached."""

    rate: float
    margin: float
    rows: int

    @property
    def bar(self) -> float:
        return self.rate + self.margin

    def record(self) -> dict[str, Any]:
        return {"metric": CHANCE_METRIC, "majority_rate": self.rate, "margin": self.margin,
                "valid_rows": self.rows}  # fmt: skip


def chance_of(valid_class_counts: Sequence[int]) -> Chance | None:
    """The Chance of validation data with these per-class counts; None when not counted."""
    rows = sum(valid_class_counts)
    if rows <= 0:
        return None
    rate = max(valid_class_counts) / rows
    noise = 2 * math.sqrt(rate * (1 - rate) / rows)
    return Chance(rate, min(max(CHANCE_MARGIN, noise), (1 - rate) / 2), rows)


@dataclass(frozen=True)
class Decision:
    """The gate's verdict, with the numbers it was made from (summary.json's `promotion`)."""

    promoted: bool
    reason: str
    metric: str
    value: float | None
    champion_value: float | None
    gate: str
    thresholds: list[dict[str, Any]] = field(default_factory=list)
    chance: dict[str, Any] | None = None  # the first champion's comparison with chance
    classes: list[dict[str, Any]] = field(default_factory=list)  # per-class terms checked
    judged_on: dict[str, Any] | None = None  # the data the gate was judged on (Judged)

    def record(self) -> dict[str, Any]:
        found = {
            "reason": self.reason,
            "gate": self.gate,
            "metric": self.metric,
            "value": self.value,
            "champion_value": self.champion_value,
            "thresholds": self.thresholds,
        }
        if self.chance is not None:
            found["chance"] = self.chance
        if self.classes:
            found["classes"] = self.classes
        if self.judged_on is not None:
            found["judged_on"] = self.judged_on
        return found


def decide(
    gate: Gate,
    metrics: Mapping[str, float],
    champion_metrics: Mapping[str, float] | None,
    metric: str,
    higher_is_better: bool,
    chance: Chance | None = None,
    judged: Judged | None = None,
) -> Decision:
    """Whether the exported checkpoint (`metrics`) passes `gate` against the champion's.

    `metric` is TRAIN_CHECKPOINT_METRIC, what `beats_champion` compares; `chance`, what it
    compares with when there is no champion (None: the validation data was not counted).
    `judged`: the run-end evaluation the gate is judged on (app/promotion/class_gate.py). On a
    held-out test split, val_accuracy and val_loss are the test figures, the run's and the
    champion's on the same rows, for every term; on the validation split they are the
    recorded ones (the evaluation reproduces them), and only the class terms read it."""
    # The champion's own figure, as recorded on its own data: what a relabelling is told by.
    recorded = finite((champion_metrics or {}).get(CHANCE_METRIC))
    metrics, champion_metrics, failed = _on_data(gate, metrics, champion_metrics, judged)
    no_figures = not metrics and bool(failed)  # already said why: not each figure "missing"
    value, champion, comparable = _compared(gate, metric, metrics, champion_metrics, judged)
    checks = _thresholds(gate, metrics, no_figures, failed)
    if gate.beats_champion and champion is not None and comparable:
        better = value is not None and (value > champion if higher_is_better else value < champion)
        if not better and not (value is None and no_figures):
            shown = "missing" if value is None else f"{value:.4g}"
            word = ">" if higher_is_better else "<"
            failed.append(f"{metric} {shown} is not {word} the champion's {champion:.4g}")
    against_chance = None
    if gate.beats_champion and chance is not None:
        has = champion_metrics is not None
        against_chance = _against_chance(chance, metrics, no_figures, has, failed)
    has_champion = champion_metrics is not None
    disagreeing = (
        labels_disagree(judged.champion, judged, recorded)
        if has_champion and judged is not None and judged.champion is not None
        else None
    )
    if disagreeing:
        failed.append(disagreeing)
    classes, class_failed, notes = judge_classes(gate, judged, has_champion)
    failed += class_failed
    reason = _reason(gate, failed, checks, classes, metric, value, champion, higher_is_better)
    # Every verdict on a split's rows says which, and that the validation data selected the
    # checkpoint: a first champion on it was promoted without a word of it (a red-team pass).
    on_rows = gate.per_class or (gate.beats_champion and champion_metrics is not None)
    if judged is not None and (judged.held_out or on_rows or judged.run is not None):
        reason += f" [on {judged.where()}" + (
            "]"
            if judged.held_out
            else ", which selected the best checkpoint: a test/ split gives a held-out judgement]"
        )
    if notes:
        reason += "; " + "; ".join(notes)
    if not comparable:
        champion = None  # its recorded figure is of its own data, not of these rows
    return Decision(
        not failed, reason, metric, value, champion, str(gate), checks, against_chance, classes,
        judged.record() if judged is not None else None,
    )  # fmt: skip


def _thresholds(
    gate: Gate, metrics: Mapping[str, float], no_figures: bool, failed: list[str]
) -> list[dict[str, Any]]:
    """Each threshold's check as recorded; a failure's words appended to `failed`."""
    checks = []
    for threshold in gate.thresholds:
        found = finite(metrics.get(threshold.metric))
        ok = found is not None and threshold.holds(found)
        checks.append({"metric": threshold.metric, "op": threshold.op, "threshold": threshold.value,
                       "value": found, "passed": ok})  # fmt: skip
        if not ok and not (found is None and no_figures):
            shown = "missing" if found is None else f"{found:.4g}"
            failed.append(
                f"{threshold.metric} {shown} is not {threshold.op} {exact(threshold.value)}"
            )
    return checks


def _against_chance(
    chance: Chance,
    metrics: Mapping[str, float],
    no_figures: bool,
    has_champion: bool,
    failed: list[str],
) -> dict[str, Any]:
    """`beats_champion`'s comparison with chance, as recorded; its failure appended to
    `failed`. With a champion too: one that scores 0 on these rows (another task's labels) is
    beaten by a model that always answers one class."""
    found = finite(metrics.get(CHANCE_METRIC))
    ok = found is not None and found > chance.bar
    if not ok and not (found is None and no_figures):
        why = "beating the champion too" if has_champion else "no champion yet"
        failed.append(
            f"{CHANCE_METRIC} {_show(found, 4)} does not beat the majority-class rate "
            f"{chance.rate:.4f} + {chance.margin:.4g} ({why})"
        )
    return {**chance.record(), "value": found, "passed": ok}


# How many standard errors below chance agreement a champion's accuracy on the judged rows must
# be to say that the rows and the champion disagree on what the classes are. A champion of the
# same task scores above chance on new rows of it; a weak one, or one facing drifted data, near
# it (within 3 standard errors all but about one time in 700).
DISAGREEMENT_ERRORS = 3.0


def labels_disagree(champion: Scores, judged: Judged, recorded: float | None = None) -> str | None:
    """Why the judged rows cannot judge against this champion: they label its class names
    otherwise than its own data did (data relabelled, or another task under the same names),
    as its answers on them show. Same class names, same input shape, yet the champion then
    scores near zero on the rows, and any run trained on them beat it. None where they agree.

    Two signs, either enough:
    - its answers agree with the labels less often than answers drawn at random would
      (Scores.chance_agreement), by more than DISAGREEMENT_ERRORS standard errors: every
      digit shifted by one (a red-team pass promoted such a run over a champion that had
      scored 0.79 on its own data);
    - classes whose rows it answers as another class more often than as themselves, in a
      cycle (`circle` rows read as `square` and `square` rows as `circle`), where the cycle is
      the whole of its fall from `recorded` (its val_accuracy on its own data): read back, its
      accuracy here is its own again (_swapped). Two of three classes swapped leave its
      accuracy at chance exactly, and a run on the swapped data replaced a champion that was
      right on every row of its own (a red-team pass). A champion that confuses two classes
      on its own data too falls nowhere, and is judged as usual."""
    expected = champion.chance_agreement()  # None without rows or answers counted
    if expected is not None:
        error = math.sqrt(expected * (1 - expected) / champion.rows)
        if champion.accuracy < expected - DISAGREEMENT_ERRORS * error:
            return (
                f"the champion agrees with the labels of {judged.where()} less often than "
                f"chance: accuracy {champion.accuracy:.4f} where answers drawn at random, as "
                f"often per class as it gave them, would score {expected:.4f}; {RELABELLED}"
            )
    cycle = _swapped(champion, recorded)
    if not cycle:
        return None
    shown = "; ".join(
        f"rows labelled {_name(c)} most often as {_name(d)} ({n:,} of {s:,})"
        for c, d, n, s in cycle[:MAX_CYCLE_SHOWN]
    )
    more = len(cycle) - MAX_CYCLE_SHOWN
    shown += f"; and so on around {more:,} more classes" if more > 0 else ""
    read_back = champion.accuracy + sum(n for _, _, n, _ in cycle) / champion.rows
    return (
        f"on {judged.where()}, the champion answers {shown}; its accuracy {champion.accuracy:.4f}"
        f" there is {read_back:.4f} read back, as on its own data ({recorded:.4f}): {RELABELLED}"
    )


RELABELLED = (
    "these rows label its class names otherwise than its own data did (relabelled data, or "
    "another task under the same names), so no run trained on them is judged against it. A "
    "relabelled dataset is a new task: give it its own TRAIN_MODEL_NAME"
)
MAX_CYCLE_SHOWN = 5  # classes of a swap named in the message; the rest counted
MIN_SWAPPED_ROWS = 5  # rows of a class answered as another: fewer tell nothing
# One-sided chance of a class's rows going to another that often by luck, DISAGREEMENT_ERRORS
# standard errors out; shared among the classes tested (Bonferroni), or a set of hundreds of
# classes would find a "swap" by luck.
_ONE_SIDED = 1 - NormalDist().cdf(DISAGREEMENT_ERRORS)


def _swapped(champion: Scores, recorded: float | None) -> list[tuple[str, str, int, int]]:
    """A cycle of classes (class, answered as, how often, its rows) where the champion answers
    each class's rows (MIN_SWAPPED_ROWS at least) as the next class more often than as the
    class itself or any other, the cycle as a whole more often than its share of all its
    answers explains (a one-sided test, corrected for the classes tested), and where reading
    the cycle back gives the champion its `recorded` accuracy again from one significantly
    below it; [] where there is none.

    The cycle is tested as a whole, not edge by edge: a weak champion facing a swap answers a
    class it half knew as the other only about half the time (7 of 15 rows, a red-team pass),
    which no test of that edge alone can tell from chance, while the two edges together can."""
    rows = champion.rows
    if rows <= 0 or recorded is None:
        return []
    edges: dict[str, tuple[str, int, int]] = {}
    for name, (answer, count) in champion.answered.items():
        figures = champion.per_class.get(name, {})
        support = int(figures.get("support", 0))
        right = round(figures.get("recall", 0.0) * support)
        known = answer in champion.per_class and "predicted" in champion.per_class[answer]
        if answer != name and known and count >= MIN_SWAPPED_ROWS and count > right:
            edges[name] = (answer, count, support)
    for start in edges:
        path, at = [start], edges[start][0]
        while at in edges and at not in path:
            path.append(at)
            at = edges[at][0]
        if at in path:  # a cycle: from where it closes
            cycle = [(c, *edges[c]) for c in path[path.index(at) :]]
            if _past_chance(champion, cycle) and _explains_the_fall(champion, cycle, recorded):
                return cycle
    return []


def _past_chance(champion: Scores, cycle: list[tuple[str, str, int, int]]) -> bool:
    """Whether the cycle's rows go to the next class more often, all together, than answers
    drawn as often per class as the champion gave them would: by more than the one-sided bar
    of DISAGREEMENT_ERRORS standard errors, shared among the classes (Bonferroni), or a set of
    hundreds of classes would find a cycle by luck."""
    rows = champion.rows
    bar = NormalDist().inv_cdf(1 - _ONE_SIDED / max(1, len(champion.answered)))
    excess = variance = 0.0
    for _, answer, count, support in cycle:
        share = champion.per_class[answer]["predicted"] / rows  # its answers that are `answer`
        excess += count - support * share
        variance += support * share * (1 - share)
    return variance > 0 and excess > bar * math.sqrt(variance)


def _explains_the_fall(
    champion: Scores, cycle: list[tuple[str, str, int, int]], recorded: float
) -> bool:
    """Whether the champion scores significantly below its `recorded` accuracy here, and
    reading the cycle back (each class's rows answered as the next counted right) brings it
    to within the same margin of it. The margin: DISAGREEMENT_ERRORS standard errors of an
    accuracy of `recorded` on these rows (Agresti-Coull, so that 1.0 has one too)."""
    rows = champion.rows
    adjusted = (recorded * rows + 2) / (rows + 4)
    margin = DISAGREEMENT_ERRORS * math.sqrt(adjusted * (1 - adjusted) / rows)
    read_back = champion.accuracy + sum(count for _, _, count, _ in cycle) / rows
    return champion.accuracy < recorded - margin <= read_back


def _name(name: str) -> str:
    return repr(name[:60])


def _on_data(
    gate: Gate,
    metrics: Mapping[str, float],
    champion_metrics: Mapping[str, float] | None,
    judged: Judged | None,
) -> tuple[Mapping[str, float], Mapping[str, float] | None, list[str]]:
    """The figures the gate compares: on a held-out split, the evaluations' (the run's, and
    the champion's where there is one); a champion that could not be scored there is a
    failure of a gate that compares with it (nothing else is on the same rows). A judged
    split whose images were mostly unreadable fails every gate, on either split."""
    if judged is not None and judged.unread:  # on either split: what is left is not it
        return {}, champion_metrics, [judged.unread]
    if judged is None:
        return metrics, champion_metrics, []
    if not judged.held_out:
        return metrics, champion_metrics, _unscored_on_valid(gate, champion_metrics, judged)
    if judged.run is None:
        return {}, champion_metrics, [
            f"the gate is judged on the held-out test data, whose evaluation failed "
            f"({judged.problem})"
        ]  # fmt: skip
    metrics = {**metrics, **_as_metrics(judged.run)}
    if champion_metrics is None:
        return metrics, None, []
    if judged.champion is None:
        failed = []
        if gate.beats_champion:
            failed.append(
                f"the champion could not be scored on the test data ({judged.champion_problem})"
            )
        return metrics, champion_metrics, failed
    return metrics, {**champion_metrics, **_as_metrics(judged.champion)}, []


def _as_metrics(scores: Scores) -> dict[str, float]:
    """An evaluation's figures under the names of the epoch record's that they stand for."""
    return {CHANCE_METRIC: scores.accuracy, "val_loss": scores.loss}


def _unscored_on_valid(
    gate: Gate, champion_metrics: Mapping[str, float] | None, judged: Judged
) -> list[str]:
    """Why `beats_champion` cannot be judged on the validation split: the champion's recorded
    figure is of the data it was trained on, which may be another folder with the same class
    names (an easier one wins on it), so both models are scored on this run's validation rows
    or the champion is kept."""
    if not gate.beats_champion or champion_metrics is None or judged.unread:
        return []
    if judged.run is None:
        return [
            f"the champion is compared with on this run's validation data, whose evaluation "
            f"failed ({judged.problem})"
        ]  # fmt: skip
    if judged.champion is None:
        return [
            f"the champion could not be scored on this run's validation data "
            f"({judged.champion_problem})"
        ]  # fmt: skip
    return []


def _compared(
    gate: Gate,
    metric: str,
    metrics: Mapping[str, float],
    champion_metrics: Mapping[str, float] | None,
    judged: Judged | None,
) -> tuple[float | None, float | None, bool]:
    """(the run's figure, the champion's, whether they are of the same rows) that
    `beats_champion` compares. On a held-out split `_on_data` put both test figures in; on
    the validation split a gate that compares with the champion reads both models' run-end
    evaluation (the run's reproduces its recorded val_accuracy). A champion not scored on the
    judged rows is not compared: the gate has failed on it already, saying why."""
    value = finite(metrics.get(metric))
    champion = finite((champion_metrics or {}).get(metric))
    if judged is None or champion_metrics is None:
        return value, champion, True
    if judged.champion is None:
        return value, champion, not (judged.held_out or gate.beats_champion)
    if judged.held_out or not gate.beats_champion:
        return value, champion, True
    assert judged.run is not None  # a champion is scored only on rows the run was scored on
    ours, theirs = _as_metrics(judged.run), _as_metrics(judged.champion)
    return ours.get(metric), theirs.get(metric), True


def _reason(
    gate: Gate,
    failed: list[str],
    checks: list[dict[str, Any]],
    classes: list[dict[str, Any]],
    metric: str,
    value: float | None,
    champion: float | None,
    higher_is_better: bool,
) -> str:
    if failed:
        return "; ".join(failed)
    passed = ", ".join(p for p in (_passed(checks), passed_text(classes)) if p)
    if gate.beats_champion and champion is not None:
        word = ">" if higher_is_better else "<"
        per_class = passed_text(classes)  # the thresholds as before: the comparison says it
        return f"{metric} {_show(value)} {word} the champion's {_show(champion)}" + (
            f", {per_class}" if per_class else ""
        )
    if gate.beats_champion:
        return "no champion yet" + (f"; {passed}" if passed else "")
    return passed or "no conditions"


def _passed(checks: list[dict[str, Any]]) -> str:
    return ", ".join(
        f"{c['metric']} {_show(c['value'])} {c['op']} {exact(c['threshold'])}" for c in checks
    )


def _show(value: float | None, places: int | None = None) -> str:
    if value is None:
        return "missing"
    return f"{value:.4g}" if places is None else f"{value:.{places}f}"


def outcome_line(decision: Decision, version: int | None, champion_version: int | None) -> str:
    """The run's last line: what a GitOps pipeline or a person reading the job log sees."""
    if decision.promoted:
        return f"promoted v{version} ({decision.reason})"
    kept = f"kept v{champion_version}" if champion_version else "kept no champion"
    return f"{kept}: not promoted ({decision.reason})"
