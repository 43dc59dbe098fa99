"""An evaluation's figures, from what the model said about each row.

Pure numpy and scikit-learn (no torch, no Ray), so the unit tests check every figure against
hand-computed values:

- accuracy counts a row right when the argmax of the logits is its label, exactly as the
  training loop's validation counts it (app/training/loop.py), so that the same rows give the
  same count; top-5 accuracy (the label among the 5 most probable classes) where there are
  more than 5 classes;
- precision, recall, F1 and support per class, and their macro (unweighted mean over classes)
  and weighted (by support) averages: scikit-learn's `precision_recall_fscore_support` over
  the classes that occur as a label or a prediction (its default), 0 where a ratio has no
  rows (`zero_division=0`);
- expected calibration error: rows binned by confidence (the top class's softmax probability)
  into ECE_BINS equal-width bins, (lower, upper] (a confidence of exactly 0 in the first), and
  the bins' |accuracy - mean confidence| averaged, weighted by their rows (Guo et al., 2017);
- the confusion matrix (rows: true class, columns: predicted) where it has at most
  MATRIX_MAX_CLASSES classes, and always the most confused pairs, counted sparsely, so that
  100,000 classes never make a matrix of 10^10 cells.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

ECE_BINS = 15
TOP_K = 5
MATRIX_MAX_CLASSES = 1000  # 8 MB of int64 counts; beyond, the pairs alone
MOST_CONFUSED = 100


@dataclass(frozen=True)
class Outcomes:
    """The scored rows: one entry per row that could be read."""

    labels: np.ndarray  # (N,) int64: the true class
    predicted: np.ndarray  # (N,) int64: argmax of the logits
    confidence: np.ndarray  # (N,) float64: the softmax probability of `predicted`
    top: np.ndarray  # (N, k) int64: the k most probable classes, k = min(TOP_K, classes)
    loss: np.ndarray  # (N,) float64: cross-entropy of the true class

    @property
    def rows(self) -> int:
        return len(self.labels)


def summarize(outcomes: Outcomes, class_names: list[str]) -> dict[str, Any]:
    """metrics.json's figures for `outcomes` over the classes `class_names` (label i is
    class_names[i])."""
    from sklearn.metrics import precision_recall_fscore_support

    labels, predicted = outcomes.labels, outcomes.predicted
    correct = int(np.count_nonzero(labels == predicted))
    rows = outcomes.rows
    figures: dict[str, Any] = {
        "rows": rows,
        "correct": correct,
        # A ratio of the two counts, as the training loop's val_accuracy is.
        "accuracy": correct / rows if rows else 0.0,
    }
    if len(class_names) > TOP_K:
        hits = int(np.count_nonzero((outcomes.top == labels[:, None]).any(axis=1)))
        figures["top5_accuracy"] = hits / rows if rows else 0.0
    figures["loss"] = float(np.mean(outcomes.loss)) if rows else 0.0
    ece, bins = calibration(outcomes.confidence, labels == predicted)
    figures["expected_calibration_error"] = ece
    figures["calibration"] = {"bins": ECE_BINS, "binning": "equal-width", "table": bins}
    present = np.union1d(labels, predicted)
    per_class = precision_recall_fscore_support(labels, predicted, labels=present, zero_division=0)
    predicted_counts = np.bincount(predicted, minlength=len(class_names))
    most = _answered_most(labels, predicted, len(class_names))
    figures["per_class"] = []
    for index, p, r, f, s in zip(present.tolist(), *per_class, strict=True):
        figures["per_class"].append(
            {
                "class": class_names[index],
                "index": index,
                "precision": float(p),
                "recall": float(r),
                "f1": float(f),
                "support": int(s),
                "predicted": int(predicted_counts[index]),
            }
        )
        if index in most:
            answer, count = most[index]
            figures["per_class"][-1]["answered_most"] = {
                "class": class_names[answer],
                "count": count,
            }
    for average in ("macro", "weighted"):
        p, r, f, _ = precision_recall_fscore_support(
            labels, predicted, labels=present, average=average, zero_division=0
        )
        figures[average] = {"precision": float(p), "recall": float(r), "f1": float(f)}
    return figures


def _answered_most(
    labels: np.ndarray, predicted: np.ndarray, classes: int
) -> dict[int, tuple[int, int]]:
    """For each class with rows: (the answer given most often on its rows, how often); a tie
    goes to the lower class number. What shows rows labelled `a` that the model reads as `b`
    (app/promotion/gate.py: a champion facing relabelled data)."""
    most: dict[int, tuple[int, int]] = {}
    for true, answer, count in confusion_pairs(labels, predicted, classes).tolist():
        most.setdefault(int(true), (int(answer), int(count)))  # pairs come largest first
    return most


def calibration(
    confidence: np.ndarray, correct: np.ndarray, bins: int = ECE_BINS
) -> tuple[float, list[dict[str, float]]]:
    """(expected calibration error, the table of non-empty bins) over `bins` equal-width
    bins of confidence, each (lower, upper]; a confidence of exactly 0 falls in the first."""
    rows = len(confidence)
    if rows == 0:
        return 0.0, []
    edges = np.linspace(0.0, 1.0, bins + 1)
    # searchsorted over the inner edges, side="left": edges[b] < c <= edges[b + 1] -> bin b.
    index = np.searchsorted(edges[1:-1], confidence, side="left")
    ece, table = 0.0, []
    for b in range(bins):
        member = index == b
        count = int(np.count_nonzero(member))
        if not count:
            continue
        accuracy = float(np.mean(correct[member]))
        mean_confidence = float(np.mean(confidence[member]))
        ece += count / rows * abs(accuracy - mean_confidence)
        table.append(
            {
                "lower": float(edges[b]),
                "upper": float(edges[b + 1]),
                "rows": count,
                "accuracy": accuracy,
                "confidence": mean_confidence,
            }
        )
    return float(ece), table


def confusion_pairs(labels: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """Every (true, predicted, count) that occurs, as an (M, 3) int64 array sorted by count
    (largest first), then true and predicted class."""
    if len(labels) == 0:
        return np.zeros((0, 3), np.int64)
    codes, counts = np.unique(labels.astype(np.int64) * classes + predicted, return_counts=True)
    pairs = np.stack([codes // classes, codes % classes, counts], axis=1)
    order = np.lexsort((pairs[:, 1], pairs[:, 0], -pairs[:, 2]))
    return pairs[order]


def confusion_matrix(labels: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """The (classes, classes) count matrix, rows the true class; ValueError past
    MATRIX_MAX_CLASSES."""
    if classes > MATRIX_MAX_CLASSES:
        raise ValueError(f"{classes} classes: over {MATRIX_MAX_CLASSES} for a matrix")
    from sklearn.metrics import confusion_matrix as sk_confusion

    return sk_confusion(labels, predicted, labels=np.arange(classes))


def most_confused(
    pairs: np.ndarray, support: np.ndarray, class_names: list[str], limit: int = MOST_CONFUSED
) -> list[dict[str, Any]]:
    """The off-diagonal pairs with the most rows: true class, predicted class, rows, and the
    share of the true class's rows they are."""
    wrong = pairs[pairs[:, 0] != pairs[:, 1]][:limit]
    return [
        {
            "true": class_names[int(t)],
            "predicted": class_names[int(p)],
            "count": int(n),
            "share_of_true": float(n) / float(support[int(t)]),
        }
        for t, p, n in wrong
    ]
