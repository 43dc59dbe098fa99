"""TRAIN_PROMOTE_IF's per-class terms: their grammar (app/settings/gate.py) and their judging
(app/promotion/class_gate.py through app/promotion/gate.decide), as pure functions."""

from __future__ import annotations

from typing import Any

import pytest

from app.promotion.class_gate import VALIDATION_NOTE, Judged, Scores
from app.promotion.gate import decide
from app.settings.gate import ClassThreshold, Gate, Threshold, parse_gate

# A verdict judged on the validation data says that data selected the best checkpoint.
SELECTED_TAIL = "which selected the best checkpoint: a test/ split gives a held-out judgement]"


@pytest.mark.parametrize(
    ("text", "gate"),
    [
        ("min_class_recall>=0.8", Gate(classes=(ClassThreshold("recall", ">=", 0.8),))),
        ("recall[cat]>=0.9", Gate(classes=(ClassThreshold("recall", ">=", 0.9, "cat"),))),
        # The name as written; spaces around it are matched loosely (class_names.spelled_as).
        ("f1[ big dog ] > 0.5", Gate(classes=(ClassThreshold("f1", ">", 0.5, " big dog "),))),
        ("precision[3]>=1", Gate(classes=(ClassThreshold("precision", ">=", 1, "3"),))),
        ("class_drop<=0.02", Gate(class_drop=Threshold("class_drop", "<=", 0.02))),
        # ` and ` inside the brackets is the class name's: it was split as two conditions,
        # refused as "CLASS without `]`" (a red-team pass).
        (
            "recall[cat and dog]>=0.9 and val_accuracy>=0.5",
            Gate(thresholds=(Threshold("val_accuracy", ">=", 0.5),),
                 classes=(ClassThreshold("recall", ">=", 0.9, "cat and dog"),)),
        ),
        (
            "beats_champion and min_class_f1>=0.5 and class_drop<0.1 and val_loss<1",
            Gate(True, (Threshold("val_loss", "<", 1),), (ClassThreshold("f1", ">=", 0.5),),
                 Threshold("class_drop", "<", 0.1)),
        ),
    ],
)  # fmt: skip
def test_per_class_terms_parse_and_read_back(text: str, gate: Gate) -> None:
    assert parse_gate(text) == gate
    assert parse_gate(str(gate)) == gate
    assert gate.per_class


def test_the_gate_names_its_classes_once_each() -> None:
    gate = parse_gate("recall[cat]>=0.9 and f1[dog]>0.5 and precision[cat]>=0.5")
    assert gate.named_classes() == ("cat", "dog")
    assert not parse_gate("beats_champion and val_accuracy>=0.5").per_class


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("recall[cat]>=90", "did you mean recall[cat]>=0.9?"),
        ("min_class_recall>=80%", "write 0.8"),
        ("class_drop<=2", "a fraction from 0 to 1"),
        ("class_drop<=-0.1", "class_drop<=0 lets no class fall; write e.g. class_drop<=0.02"),
        ("class_drop>=0.02", "write class_drop<=MARGIN"),
        (
            "class_drop<=0.02 and class_drop<=0.05",
            "names class_drop twice (class_drop<=0.02 and class_drop<=0.05); write it once",
        ),
        ("min_class_auc>=0.5", "allowed: min_class_recall, min_class_precision, min_class_f1"),
        ("accuracy[cat]>=0.5", "per-class figures are recall, precision, f1"),
        ("recall[]>=0.5", "a class name in [] is 1 to 200 printable characters"),
        ("recall[cat>=0.5", "a named class is FIGURE[CLASS] OP FRACTION"),
        ("recall[cat]]>=0.5", "a named class is FIGURE[CLASS] OP FRACTION"),
        ("recall[cat]=0.5", "a named class is FIGURE[CLASS] OP FRACTION"),
        ("recall[\x1b[31m]>=0.5", "printable"),
        ("recall[" + "c" * 201 + "]>=0.5", "1 to 200"),
    ],
)
def test_malformed_per_class_terms_say_what_is_allowed(text: str, says: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_gate(text)
    assert says in str(err.value)


def scores(recall: dict[str, float], support: int = 10, accuracy: float = 0.9) -> Scores:
    per_class = {
        name: {"recall": r, "precision": r, "f1": r, "support": support}
        for name, r in recall.items()
    }
    return Scores(accuracy, 0.3, per_class)


def judge(
    text: str,
    run: Scores | None,
    champion: Scores | None = None,
    split: str = "valid",
    champion_metrics: dict[str, Any] | None = None,
    **more: Any,
) -> Any:
    judged = Judged(split, 40, run, champion=champion, **more)
    return decide(parse_gate(text), {"val_accuracy": 0.95}, champion_metrics, "val_accuracy",
                  True, None, judged)  # fmt: skip


def test_a_floor_on_every_class_names_the_class_below_it() -> None:
    failed = judge("min_class_recall>=0.8", scores({"cat": 0.95, "dog": 0.6, "eel": 0.7}))
    assert not failed.promoted
    assert failed.reason.startswith(
        "min_class_recall: class 'dog' recall 0.6000 is not >= 0.8 (support 10)"
    )
    assert "[on the valid data (40 rows), " + SELECTED_TAIL in failed.reason
    assert failed.classes == [{"term": "min_class_recall", "figure": "recall", "op": ">=",
                               "threshold": 0.8, "data": "valid", "class": "dog",
                               "value": 0.6, "passed": False}]  # fmt: skip
    assert failed.record()["judged_on"] == {"split": "valid", "rows": 40,
                                            "note": VALIDATION_NOTE}  # fmt: skip
    passed = judge("min_class_recall>=0.8", scores({"cat": 0.95, "dog": 0.85}))
    assert passed.promoted and passed.reason.startswith(
        "min_class_recall 0.8500 (class dog) >= 0.8"
    )


def test_a_class_without_rows_fails_every_term_that_judges_it() -> None:
    """Nothing shows the model knows a class the judged data has no rows of: a floor on every
    class and class_drop fail naming it, as a named term does. A floor that skipped it
    promoted a model judged on two classes of three."""
    figures = ("recall", "precision", "f1")
    run = Scores(0.9, 0.3, {"cat": {**dict.fromkeys(figures, 0.9), "support": 5},
                            "dog": {**dict.fromkeys(figures, 0.0), "support": 0}})  # fmt: skip
    floor = judge("min_class_recall>=0.8", run)
    assert not floor.promoted
    assert floor.reason.startswith(
        "min_class_recall: 1 class has no rows in the valid data (40 rows) ('dog'), so "
        "nothing judges them: add valid/ images of them"
    )
    assert floor.classes[0]["class"] == "dog" and floor.classes[0]["passed"] is False
    named = judge("recall[dog]>=0.1", run)
    assert not named.promoted and "recall[dog]: class 'dog' has no rows in the valid data" in (
        named.reason
    )
    absent = judge("recall[eel]>=0.1", run)
    assert not absent.promoted and "class 'eel' has no rows" in absent.reason
    # The evaluation lists only the classes it saw (in the labels or predicted): the model's
    # own class list says which are missing.
    unseen = judge("min_class_recall>=0.5", scores({"cat": 0.9, "dog": 0.9}), split="test",
                   classes=("cat", "dog", "eel"))  # fmt: skip
    assert not unseen.promoted and "1 class has no rows in the test data" in unseen.reason
    assert "('eel')" in unseen.reason
    champion = scores({"cat": 0.9, "dog": 0.9, "eel": 0.9})
    drop = judge("class_drop<=0.02", scores({"cat": 0.95, "dog": 0.95}), champion,
                 champion_metrics={"val_accuracy": 0.9}, classes=("cat", "dog", "eel"))  # fmt: skip
    assert not drop.promoted and drop.reason.startswith("class_drop: 1 class has no rows")
    both = "min_class_recall>=0.5 and class_drop<=0.02"
    whole = judge(both, scores({"cat": 0.95, "dog": 0.9}), champion,
                  champion_metrics={"val_accuracy": 0.9}, classes=("cat", "dog"))  # fmt: skip
    assert whole.promoted, whole.reason


def test_a_named_class_term_reports_its_figure() -> None:
    failed = judge("precision[cat]>=0.9 and recall[dog]>=0.5", scores({"cat": 0.8, "dog": 0.7}))
    assert failed.reason.startswith("precision[cat] 0.8000 is not >= 0.9 [on the valid data")
    assert [c["passed"] for c in failed.classes] == [False, True]


def test_class_drop_compares_each_class_with_the_champion_on_the_same_rows() -> None:
    champion = scores({"cat": 0.9, "dog": 0.9, "eel": 0.5})
    run = scores({"cat": 0.95, "dog": 0.85, "eel": 0.99})  # better overall, dog fell 0.05
    failed = judge("class_drop<=0.02", run, champion, champion_metrics={"val_accuracy": 0.9})
    assert not failed.promoted
    assert failed.reason.startswith(
        "class_drop: class 'dog' recall 0.8500 is 0.0500 below the champion's 0.9000 on the "
        "same rows (allowed: <= 0.02)"
    )
    assert failed.classes[0]["class"] == "dog" and failed.classes[0]["champion_recall"] == 0.9
    within = judge("class_drop<=0.06", run, champion, champion_metrics={"val_accuracy": 0.9})
    assert within.promoted and "class_drop 0.0500 (class dog) <= 0.06" in within.reason
    # Every class at or above the champion's: the largest "drop" is a gain, and no class fell.
    gained = judge("class_drop<=0.02", scores({"cat": 0.95, "dog": 0.95, "eel": 0.99}), champion,
                   champion_metrics={"val_accuracy": 0.9})  # fmt: skip
    assert gained.promoted, gained.reason
    assert "class_drop -0.0500 (no class below the champion's recall) <= 0.02" in gained.reason


def test_a_class_drop_of_exactly_the_margin_is_judged_on_the_counts_not_on_floats() -> None:
    """8/10 down to 7/10 falls exactly 0.1: the floats' difference is 0.10000000000000009,
    which failed `<= 0.1` saying "0.1000 below ... (allowed: <= 0.1)"; 9/10 down to 8/10 is
    0.09999999999999998 in floats, which passed a strict `< 0.1`."""
    champion = {"val_accuracy": 0.9}
    at = judge("class_drop<=0.1", scores({"cat": 0.7}), scores({"cat": 0.8}),
               champion_metrics=champion)  # fmt: skip
    assert at.promoted, at.reason
    assert at.classes[0]["value"] == 0.1 and at.classes[0]["passed"] is True
    strict = judge("class_drop<0.1", scores({"cat": 0.8}), scores({"cat": 0.9}),
                   champion_metrics=champion)  # fmt: skip
    assert not strict.promoted
    assert "class 'cat' recall 0.8000 is 0.1000 below" in strict.reason
    assert "(allowed: < 0.1)" in strict.reason
    # 3 of 7 down to 2 of 7: 1/7 exactly, which `<=0.15` allows and `<=0.14` does not.
    seven = [scores({"cat": hits / 7}, support=7) for hits in (3, 2)]
    assert judge("class_drop<=0.15", seven[1], seven[0], champion_metrics=champion).promoted
    assert not judge("class_drop<=0.14", seven[1], seven[0], champion_metrics=champion).promoted


def test_class_drop_without_a_champion_passes_with_a_note() -> None:
    first = judge("class_drop<=0.02", scores({"cat": 0.5, "dog": 0.9}))
    assert first.promoted and "class_drop: no champion yet, nothing to fall below" in first.reason


def test_class_drop_fails_when_the_champion_could_not_be_scored() -> None:
    champion = {"val_accuracy": 0.9}
    kept = judge("class_drop<=0.02", scores({"cat": 0.9}), None, champion_metrics=champion,
                 champion_problem="altered export")  # fmt: skip
    assert not kept.promoted
    assert "the champion could not be scored on the same rows (altered export)" in kept.reason


def test_per_class_terms_without_an_evaluation_are_not_promoted() -> None:
    kept = judge("min_class_recall>=0.5", None, problem="Ray died")
    assert not kept.promoted
    assert kept.reason.startswith(
        "the per-class terms need the run-end evaluation, which failed (Ray died)"
    )
    failed = Judged("valid", 40, None, problem="Ray died")
    plain = decide(parse_gate("val_accuracy>=0.5"), {"val_accuracy": 0.9}, None,
                   "val_accuracy", True, None, failed)  # fmt: skip
    assert plain.promoted  # nothing in the gate reads the evaluation on validation data


def test_on_a_test_split_every_term_reads_the_test_figures() -> None:
    run = scores({"cat": 0.9, "dog": 0.8}, accuracy=0.85)
    champion = scores({"cat": 0.9, "dog": 0.8}, accuracy=0.88)
    # The recorded val_accuracy (0.95) beats the champion's recorded 0.9, but on the test rows
    # the champion scores 0.88 and the run 0.85: kept.
    kept = judge("beats_champion", run, champion, split="test",
                 champion_metrics={"val_accuracy": 0.9})  # fmt: skip
    assert not kept.promoted
    assert kept.reason.startswith("val_accuracy 0.85 is not > the champion's 0.88")
    assert "[on the test data (40 rows)]" in kept.reason
    assert kept.record()["judged_on"] == {"split": "test", "rows": 40}
    floor = judge("val_accuracy>=0.9", run, split="test")
    assert not floor.promoted and floor.reason.startswith("val_accuracy 0.85 is not >= 0.9")
    unscored = judge("beats_champion", run, None, split="test",
                     champion_metrics={"val_accuracy": 0.9}, champion_problem="gone")  # fmt: skip
    assert (
        not unscored.promoted and "could not be scored on the test data (gone)" in unscored.reason
    )
    failed = judge("val_accuracy>=0.5", None, split="test", problem="unreadable")
    assert (
        not failed.promoted and "test data, whose evaluation failed (unreadable)" in failed.reason
    )


def test_on_the_validation_split_the_champion_is_compared_on_this_runs_rows() -> None:
    """A champion's recorded val_accuracy is of its own validation data: a run on another,
    easier folder with the same class names replaced it on the recorded figures alone (found
    by a red-team pass). `beats_champion` compares both models scored on this run's rows."""
    run = scores({"cat": 0.95, "dog": 0.95}, accuracy=0.95)
    # Recorded: 0.95 against the champion's 0.9 (its own data). On these rows it scores 0.97.
    kept = judge("beats_champion", run, scores({"cat": 0.97, "dog": 0.97}, accuracy=0.97),
                 champion_metrics={"val_accuracy": 0.9})  # fmt: skip
    assert not kept.promoted
    assert kept.reason == (
        "val_accuracy 0.95 is not > the champion's 0.97 [on the valid data (40 rows), "
        + SELECTED_TAIL
    )
    assert (kept.record()["value"], kept.record()["champion_value"]) == (0.95, 0.97)
    promoted = judge("beats_champion", run, scores({"cat": 0.9, "dog": 0.8}, accuracy=0.85),
                     champion_metrics={"val_accuracy": 0.99})  # fmt: skip
    assert promoted.promoted and promoted.reason == (
        "val_accuracy 0.95 > the champion's 0.85 [on the valid data (40 rows), " + SELECTED_TAIL
    )
    # val_loss, lower is better, from the same two evaluations (0.3 each in `scores`): a tie.
    loss = decide(parse_gate("beats_champion"), {"val_loss": 0.1}, {"val_loss": 0.5}, "val_loss",
                  False, None, Judged("valid", 40, run, champion=run))  # fmt: skip
    assert not loss.promoted and loss.reason.startswith("val_loss 0.3 is not < the champion's 0.3")
    # Not scored on these rows (a copy that fails its check), or no evaluation: kept, saying why,
    # and no recorded figure of other data is set beside the run's.
    unscored = judge("beats_champion", run, None, champion_metrics={"val_accuracy": 0.5},
                     champion_problem="altered copy")  # fmt: skip
    assert not unscored.promoted and unscored.reason == (
        "the champion could not be scored on this run's validation data (altered copy) "
        "[on the valid data (40 rows), " + SELECTED_TAIL
    )
    assert unscored.record()["champion_value"] is None
    failed = judge("beats_champion", None, champion_metrics={"val_accuracy": 0.5}, problem="oom")
    assert not failed.promoted
    assert "on this run's validation data, whose evaluation failed (oom)" in failed.reason
    # No champion yet: compared with chance on the recorded figure, as before.
    first = judge("beats_champion", None, problem="oom")
    assert first.promoted and first.reason == "no champion yet"


def test_scores_are_read_from_an_evaluations_metrics() -> None:
    metrics = {"accuracy": 0.5, "loss": 0.7, "per_class": [
        {"class": "cat", "index": 0, "precision": 1.0, "recall": 0.5, "f1": 0.6667, "support": 4,
         "predicted": 2}]}  # fmt: skip
    found = Scores.of(metrics)
    # Each class's answer count too: what the chance agreement of a champion is counted from.
    assert found.per_class == {"cat": {"recall": 0.5, "precision": 1.0, "f1": 0.6667,
                                       "support": 4.0, "predicted": 2.0}}  # fmt: skip
    assert (found.accuracy, found.loss) == (0.5, 0.7)


@pytest.mark.parametrize("split", ["valid", "test"])
def test_a_judged_split_mostly_unreadable_fails_every_gate(split: str) -> None:
    """3 readable images of 903 judge nothing: whichever model gets those few right would be
    crowned. Over 1% of the judged split skipped, every gate fails, on either split, saying
    why (a plain gate on valid/ included, which otherwise reads the recorded figures)."""
    from app.promotion.evaluation import _too_many_skipped

    metrics = {"rows": 3, "skipped": {"count": 900}}
    unread = _too_many_skipped(metrics, split)
    assert unread == (
        f"900 of the 903 images of the {split} split could not be read (skipped; over the 1% "
        f"allowed), so the gate is not judged on the 3 left: fix or remove them "
        f"(eval/{split}/metrics.json names the first)"
    )
    assert _too_many_skipped({"rows": 990, "skipped": {"count": 10}}, split) is None  # 1%
    assert _too_many_skipped({"rows": 989, "skipped": {"count": 11}}, split) is not None
    for gate in ("beats_champion", "val_accuracy>=0.5", "beats_champion and min_class_recall>=0"):
        kept = judge(gate, None, split=split, champion_metrics={"val_accuracy": 0.6},
                     problem=unread, unread=unread)  # fmt: skip
        assert not kept.promoted and kept.reason.startswith(unread), (gate, kept.reason)
        assert "missing" not in kept.reason  # said once why there are no figures
        # Once only: the per-class terms said it again as their own failure (a red-team pass).
        assert kept.reason.count(unread) == 1, kept.reason
        assert kept.record()["judged_on"]["unread"] == unread


def test_a_champion_not_scored_on_the_test_rows_records_no_figure_beside_the_runs() -> None:
    """A gate of thresholds alone does not score the champion on test/: its recorded figure
    (of the validation data) was written as champion_value beside the run's test figure, two
    splits side by side as if comparable (found by a red-team pass)."""
    held_out = judge("val_accuracy>=0.4", scores({"cat": 0.7}, accuracy=0.63), split="test",
                     champion_metrics={"val_accuracy": 0.87})  # fmt: skip
    assert held_out.promoted
    assert held_out.record()["value"] == 0.63 and held_out.record()["champion_value"] is None
    scored = judge("beats_champion", scores({"cat": 0.7}, accuracy=0.63), split="test",
                   champion=scores({"cat": 0.9}, accuracy=0.83),
                   champion_metrics={"val_accuracy": 0.87})  # fmt: skip
    assert not scored.promoted and scored.record()["champion_value"] == 0.83


def test_a_first_champion_says_what_data_it_was_judged_on() -> None:
    """`promoted v1 (no champion yet)` said nothing of the data, while the docs said the verdict
    tells a judgement on the validation data that selected the checkpoint (a red-team pass)."""
    run = scores({"cat": 0.95, "dog": 0.95}, accuracy=0.95)
    first = judge("beats_champion", run)
    assert first.promoted
    assert first.reason == "no champion yet [on the valid data (40 rows), " + SELECTED_TAIL
    held_out = judge("val_accuracy>=0.5", run, split="test")
    assert held_out.reason == "val_accuracy 0.95 >= 0.5 [on the test data (40 rows)]"
