"""The evaluation's figures (app/evaluation/metrics.py) against values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from app.evaluation.metrics import (
    Outcomes,
    calibration,
    confusion_matrix,
    confusion_pairs,
    most_confused,
    summarize,
)


def outcomes(
    labels: list[int],
    predicted: list[int],
    confidence: list[float] | None = None,
    top: list[list[int]] | None = None,
    loss: list[float] | None = None,
) -> Outcomes:
    rows = len(labels)
    return Outcomes(
        labels=np.array(labels, np.int64),
        predicted=np.array(predicted, np.int64),
        confidence=np.array(confidence or [0.5] * rows, np.float64),
        top=np.array(top or [[p] for p in predicted], np.int64),
        loss=np.array(loss or [1.0] * rows, np.float64),
    )


def by_class(figures: dict) -> dict[str, dict]:
    return {row["class"]: row for row in figures["per_class"]}


# 3 classes, 2 rows each. True 0 -> (0, 1); true 1 -> (1, 1); true 2 -> (2, 0).
THREE = outcomes([0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0], loss=[0.5, 2.0, 0.1, 0.2, 0.3, 1.5])


def test_accuracy_is_the_count_of_argmax_hits_over_rows() -> None:
    figures = summarize(THREE, ["a", "b", "c"])
    assert (figures["rows"], figures["correct"]) == (6, 4)
    assert figures["accuracy"] == 4 / 6
    assert figures["loss"] == pytest.approx((0.5 + 2.0 + 0.1 + 0.2 + 0.3 + 1.5) / 6)
    assert "top5_accuracy" not in figures  # 3 classes: top-5 says nothing


def test_per_class_precision_recall_f1_and_macro_average() -> None:
    figures = summarize(THREE, ["a", "b", "c"])
    rows = by_class(figures)
    # a: predicted twice (rows 0, 5), right once; b: predicted 3 times, right twice; c: once.
    assert rows["a"]["precision"] == pytest.approx(1 / 2)
    assert rows["b"]["precision"] == pytest.approx(2 / 3)
    assert rows["c"]["precision"] == pytest.approx(1.0)
    assert [rows[c]["recall"] for c in "abc"] == pytest.approx([1 / 2, 1.0, 1 / 2])
    assert [rows[c]["f1"] for c in "abc"] == pytest.approx([0.5, 0.8, 2 / 3])
    assert [rows[c]["support"] for c in "abc"] == [2, 2, 2]
    assert [rows[c]["predicted"] for c in "abc"] == [2, 3, 1]
    assert figures["macro"]["precision"] == pytest.approx((1 / 2 + 2 / 3 + 1) / 3)
    assert figures["macro"]["recall"] == pytest.approx(2 / 3)
    assert figures["macro"]["f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)


def test_weighted_average_weighs_by_support() -> None:
    # True a x3 -> (a, a, b); true b x1 -> b. P: a 2/2, b 1/2; R: a 2/3, b 1.
    figures = summarize(outcomes([0, 0, 0, 1], [0, 0, 1, 1]), ["a", "b"])
    assert figures["weighted"]["precision"] == pytest.approx((3 * 1 + 1 * 0.5) / 4)
    assert figures["weighted"]["recall"] == pytest.approx((3 * 2 / 3 + 1 * 1) / 4)
    assert figures["weighted"]["f1"] == pytest.approx((3 * 0.8 + 1 * 2 / 3) / 4)
    assert figures["macro"]["precision"] == pytest.approx((1 + 0.5) / 2)


def test_classes_that_never_occur_are_left_out_of_the_averages() -> None:
    names = [str(i) for i in range(10)]
    figures = summarize(outcomes([0, 1], [0, 1]), names)
    assert [row["class"] for row in figures["per_class"]] == ["0", "1"]
    assert figures["macro"]["f1"] == 1.0


def test_top5_counts_the_label_among_the_five_most_probable() -> None:
    names = [str(i) for i in range(7)]
    top = [[3, 1, 2, 0, 4], [6, 5, 4, 3, 2], [0, 1, 2, 3, 4], [2, 3, 4, 5, 6]]
    figures = summarize(outcomes([3, 0, 0, 6], [3, 6, 0, 2], top=top), names)
    assert figures["accuracy"] == 2 / 4
    assert figures["top5_accuracy"] == 3 / 4  # row 1's label 0 is not in its top 5


def test_expected_calibration_error_over_equal_width_bins() -> None:
    # Two rows at 0.95 (bin 14, one right) and two at 0.55 (bin 8, both right):
    # |0.5 - 0.95| * 2/4 + |1.0 - 0.55| * 2/4 = 0.45.
    ece, table = calibration(np.array([0.95, 0.95, 0.55, 0.55]), np.array([1, 0, 1, 1], bool))
    assert ece == pytest.approx(0.45)
    assert [(round(b["lower"] * 15), b["rows"]) for b in table] == [(8, 2), (14, 2)]
    assert table[1]["accuracy"] == 0.5 and table[1]["confidence"] == pytest.approx(0.95)


def test_calibration_bins_are_closed_above() -> None:
    # 0.2 = 3/15 is the upper edge of bin 2, 0 falls in the first bin, 1 in the last.
    _, table = calibration(np.array([0.0, 0.2, 1.0]), np.array([1, 1, 1], bool))
    assert [(round(b["lower"] * 15), round(b["upper"] * 15)) for b in table] == [
        (0, 1), (2, 3), (14, 15)
    ]  # fmt: skip
    perfect, _ = calibration(np.array([1.0, 1.0]), np.array([1, 1], bool))
    assert perfect == 0.0
    assert calibration(np.zeros(0), np.zeros(0, bool)) == (0.0, [])


def test_summary_reports_the_calibration_it_used() -> None:
    figures = summarize(
        outcomes([0, 1, 0, 0], [0, 0, 0, 0], confidence=[0.95, 0.95, 0.55, 0.55]), ["a", "b"]
    )
    assert figures["expected_calibration_error"] == pytest.approx(0.45)
    assert figures["calibration"]["bins"] == 15
    assert figures["calibration"]["binning"] == "equal-width"


def test_confusion_counts_dense_and_sparse_agree() -> None:
    matrix = confusion_matrix(THREE.labels, THREE.predicted, 3)
    assert matrix.tolist() == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]
    pairs = confusion_pairs(THREE.labels, THREE.predicted, 3)
    assert pairs.tolist() == [[1, 1, 2], [0, 0, 1], [0, 1, 1], [2, 0, 1], [2, 2, 1]]
    for true, predicted, count in pairs:
        assert matrix[true, predicted] == count
    assert int(pairs[:, 2].sum()) == THREE.rows


def test_most_confused_pairs_leave_the_diagonal_out_and_say_their_share() -> None:
    pairs = confusion_pairs(THREE.labels, THREE.predicted, 3)
    found = most_confused(pairs, np.array([2, 2, 2]), ["a", "b", "c"])
    assert found == [
        {"true": "a", "predicted": "b", "count": 1, "share_of_true": 0.5},
        {"true": "c", "predicted": "a", "count": 1, "share_of_true": 0.5},
    ]


def test_many_classes_are_counted_without_a_dense_matrix() -> None:
    classes = 100_000
    labels = np.array([5, 99_999, 99_999, 7], np.int64)
    predicted = np.array([5, 3, 3, 99_998], np.int64)
    pairs = confusion_pairs(labels, predicted, classes)
    assert pairs.tolist() == [[99_999, 3, 2], [5, 5, 1], [7, 99_998, 1]]
    with pytest.raises(ValueError, match="100000 classes"):
        confusion_matrix(labels, predicted, classes)
