"""The run's end evaluation: the best checkpoint's export scored on the run's validation
split (and on its dataset's held-out test/ split, where there is one) by the code of
`trainctl evaluate --split valid` (app/evaluation/evaluate.py), before the gate is judged.

- A small split (app/evaluation/scoring.py, `fits_in_process`: up to 4,096 images of 64x64 or
  as many pixels) is scored by one Scorer in this driver, larger ones by the actor pool; the
  rows and the Scorer are the same either way.
- The export scored is the one on storage, verified (every file against the card's sha256)
  and required to be the card this step wrote: a concurrent rerun that rewrote export/ is an
  evaluation failure, not another model's figures.
- Each split's full report goes to `<run>/eval/<split>/`; summary.json gets the compact part
  (`compact`): accuracy, macro/weighted F1, ECE, and per class recall and F1.
- The gate is judged on test/ where the dataset has it, else on valid/ (app/promotion/
  class_gate.py says so in the verdict). Terms that compare with the champion on those rows
  (`class_drop`; every term on test/) score the champion's immutable export copy
  (champions/<name>/<sha>/, verified against the pointer's card_sha256 as `predict
  champion:` verifies it) on the same rows, through the same code, into
  `<run>/eval/champion-v<N>-<split>/`.
- A failed evaluation never loses the run: it is trained and exported, summary.json records
  the error, and the gate goes on without it only where it does not need it (no per-class
  term, judged on the validation data, whose figures training recorded and the evaluation
  would only reproduce); otherwise the champion is kept, saying why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.data.schema import DatasetInfo
from app.promotion.class_gate import Judged, Scores
from app.redact import redact_text

if TYPE_CHECKING:
    from app.evaluation.data import EvalData
    from app.evaluation.evaluate import EvalReport
    from app.evaluation.scoring import ScoringOptions
    from app.export.build import Export
    from app.settings import TrainSettings

MAX_SUMMARY_CLASSES = 1000  # per-class figures in summary.json; the eval folder has them all
MAX_PROBLEM_CHARS = 2000
MAX_SKIPPED_SHARE = 0.01  # unreadable images of the judged split the gate tolerates
FAILED_NOTE = (
    "the run is trained and exported; evaluate it again with `trainctl evaluate RUN --split valid`"
)


@dataclass
class RunEnd:
    """What the run's end evaluation found."""

    record: dict[str, Any]  # summary.json's `evaluation`
    judged: Judged | None  # None: not evaluated (promotion called without it)
    reports: dict[str, EvalReport] = field(default_factory=dict)  # split -> report
    source: EvalData | None = None  # the rows the gate is judged on
    champions: dict[str, Scores | str] = field(default_factory=dict)  # card sha -> figures/why


def judged_split(info: DatasetInfo) -> str:
    return "test" if info.test_rows is not None else "valid"


def not_evaluated() -> RunEnd:
    """The step called without an evaluation (a direct call, as the tests of its bookkeeping
    make; every run's driver evaluates): the gate reads the recorded figures, and per-class
    terms cannot pass."""
    return RunEnd({"skipped": "the promotion step was called without the run-end evaluation"}, None)


def evaluate_run_end(settings: TrainSettings, info: DatasetInfo, export: Export) -> RunEnd:
    """Score `export` on valid/ (and test/); never raises: a failure is recorded."""
    split = judged_split(info)
    record: dict[str, Any] = {"judged_on": split}
    found = RunEnd(record, None)
    problem = None
    try:
        _score_splits(settings, export, found, ("valid", "test") if split == "test" else ("valid",))
    except Exception as err:  # any failure: the run stays trained and exported
        problem = _describe(err)
        record.update(error=problem, note=FAILED_NOTE)
    report = found.reports.get(split)
    rows = report.metrics["rows"] if report else (info.test_rows or info.valid_rows)
    scores = Scores.of(report.metrics) if report else None
    unread = _too_many_skipped(report.metrics, split) if report else None
    if unread:  # the rows left are not the split the gate was set on
        problem, scores = unread, None
    found.judged = Judged(
        split, int(rows or 0), scores, problem=problem if scores is None else None,
        unread=unread, classes=info.label_names(),
    )  # fmt: skip
    return found


def _too_many_skipped(metrics: dict[str, Any], split: str) -> str | None:
    """Why the judged split's scores may not be judged on: more than MAX_SKIPPED_SHARE of its
    images could not be read. Both models are scored on the rows left, but 3 readable images
    of 903 judge nothing: a split mostly broken (or broken on purpose) would otherwise crown
    whichever model gets those few right."""
    skipped = int(metrics["skipped"]["count"])
    total = skipped + int(metrics["rows"])
    if skipped <= MAX_SKIPPED_SHARE * total:
        return None
    return (
        f"{skipped:,} of the {total:,} images of the {split} split could not be read (skipped; "
        f"over the {MAX_SKIPPED_SHARE:.0%} allowed), so the gate is not judged on the "
        f"{int(metrics['rows']):,} left: fix or remove them "
        f"(eval/{split}/metrics.json names the first)"
    )


def _score_splits(
    settings: TrainSettings, export: Export, found: RunEnd, splits: tuple[str, ...]
) -> None:
    from app.errors import ConfigError
    from app.evaluation.data import run_split
    from app.evaluation.evaluate import describe, evaluate, run_export
    from app.evaluation.report import eval_folder
    from app.evaluation.scoring import connect

    run_dir = settings.run_dir
    # This driver writes summary.json's record of the export after the gate: its own check
    # against the export it made follows.
    scored = run_export(run_dir, as_recorded=False)
    if scored.card_sha256 != export.card_sha256:
        raise ConfigError(
            f"{run_dir}/export was rewritten by another driver of this run while this one "
            "evaluated it (another card); not scored"
        )
    # Listed and checked before Ray is joined, as `trainctl evaluate` does.
    sources = {split: run_split(scored.card, split, settings.storage_endpoint) for split in splits}
    connect()
    for split, source in sources.items():
        report = evaluate(
            scored, source.dataset(scored.card), eval_folder(run_dir, split), run_dir=run_dir,
            data=describe(source), row_prefix=source.row_prefix(),
            options=_options(source, scored.card),
            strict_hint=_strict_hint(split),
        )  # fmt: skip
        found.reports[split] = report
        found.record[split] = compact(report)
        if split == judged_split_of(found):
            found.source = source


def _options(source: EvalData, card: dict[str, Any]) -> ScoringOptions:
    """A split small enough is scored in this driver, which holds torch and the model code
    already; a larger one by `trainctl evaluate`'s actor pool across the cluster."""
    from app.evaluation.scoring import ScoringOptions, fits_in_process

    return ScoringOptions(in_process=fits_in_process(source.rows, card))


def judged_split_of(found: RunEnd) -> str:
    return str(found.record.get("judged_on", "valid"))


def compact(report: EvalReport) -> dict[str, Any]:
    """summary.json's part of an evaluation: the overall figures, recall and F1 per class."""
    m = report.metrics
    per_class = m["per_class"]
    figures: dict[str, Any] = {
        "folder": redact_text(str(report.folder)),
        "rows": m["rows"],
        "accuracy": m["accuracy"],
        "macro_f1": m["macro"]["f1"],
        "weighted_f1": m["weighted"]["f1"],
        "expected_calibration_error": m["expected_calibration_error"],
        "skipped": m["skipped"]["count"],
        "per_class": {
            c["class"]: {"recall": c["recall"], "f1": c["f1"], "support": c["support"]}
            for c in per_class[:MAX_SUMMARY_CLASSES]
        },
    }
    if len(per_class) > MAX_SUMMARY_CLASSES:
        figures["per_class_note"] = (
            f"the first {MAX_SUMMARY_CLASSES} of {len(per_class)} classes; all in metrics.json"
        )
    recorded = m.get("recorded")
    if recorded:  # the exact-reproduction property, checked on every run
        figures["recorded_val_accuracy"] = recorded["val_accuracy"]
        figures["reproduced"] = recorded["val_accuracy"] == m["accuracy"]
        if "val_loss" in recorded:  # the loss, where a gate reads it (promotion/step.py)
            figures["recorded_val_loss"] = recorded["val_loss"]
            figures["loss"] = m["loss"]
    return figures


def champion_scorer(
    settings: TrainSettings, found: RunEnd
) -> Callable[[dict[str, Any]], tuple[Scores | None, str | None]]:
    """A function of a champion pointer: its export's figures on the rows the gate is judged
    on (or why there are none), each champion scored once (by its card's sha256)."""

    def score(pointer: dict[str, Any]) -> tuple[Scores | None, str | None]:
        digest = str(pointer.get("card_sha256"))
        if digest not in found.champions:
            try:
                found.champions[digest] = _score_champion(settings, found, pointer)
            except Exception as err:  # an altered copy, a store that refuses: say which
                found.champions[digest] = _describe(err)
        got = found.champions[digest]
        return (got, None) if isinstance(got, Scores) else (None, got)

    return score


def _score_champion(settings: TrainSettings, found: RunEnd, pointer: dict[str, Any]) -> Scores:
    from app.errors import ConfigError
    from app.evaluation.evaluate import describe, evaluate
    from app.evaluation.report import eval_folder
    from app.export.card import verified
    from app.promotion.champion_task import TaskUnknown, champion_copy

    source = found.source
    if source is None:
        raise ConfigError("this run's own evaluation failed, so there are no rows to score on")
    try:
        folder = champion_copy(pointer, settings.storage_path, settings.champion_name)
    except TaskUnknown as err:
        raise ConfigError(str(err)) from None
    champion = verified(folder, card_sha256=str(pointer["card_sha256"]))  # promoted, or refused
    split = judged_split_of(found)
    name = f"champion-v{int(pointer.get('version') or 0)}-{split}"
    data = {**describe(source), "split": None, "scored_as": f"the champion, on this run's {split}"}
    report = evaluate(
        champion, source.dataset(champion.card), eval_folder(settings.run_dir, name),
        run_dir=settings.run_dir, data=data, row_prefix=source.row_prefix(),
        options=_options(source, champion.card),
        strict_hint=_strict_hint(split),
    )  # fmt: skip
    found.record.setdefault("champion", {})[split] = compact(report)
    return Scores.of(report.metrics)


def _strict_hint(split: str) -> str:
    """How a user stops at the first file of `split` that cannot be used: a run's end skips
    and counts them, and `train` has no --strict."""
    return f"`trainctl evaluate RUN --split {split} --strict` stops at the first"


def _describe(err: BaseException) -> str:
    """One line: a trainctl error's problems, anything else's type and first line."""
    from app.errors import TrainctlError

    if isinstance(err, TrainctlError):
        return redact_text("; ".join(err.problems))[:MAX_PROBLEM_CHARS]
    text = str(err).strip()
    first = text.splitlines()[0] if text else ""
    return redact_text(f"{type(err).__name__}: {first}")[:MAX_PROBLEM_CHARS]
