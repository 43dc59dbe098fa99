"""The step after a successful run: export its best checkpoint, apply TRAIN_PROMOTE_IF, move
the champion pointer (and the MLflow alias) when the gate passes, and say so in summary.json
and in the driver's last line.

A function of a finished run folder and its settings: the driver calls it after writing the
summary, and it can be applied again to the same folder (a rerun of a finished run) with the
same result, even while another driver of the same run does it at the same moment: whether this
run's checkpoint is already the champion is decided against the pointer read inside the
compare-and-swap (app/promotion/champion.py), so both end with the pointer's version in their
summary. The decisions are pure functions: the gate (app/promotion/gate.py) and the task, which
must be the champion's whatever the gate says (app/promotion/task.py).

Nothing here loses a record. A promoted export is copied into the champion's immutable folder
(app/promotion/champion_export.py), which the pointer names: a later export of the same run
cannot change the champion. A failed export (or a champion copy the store refused) is a
failure of the run, exit 1 with the cause in summary.json (`status: failed`), not a gate's
"not promoted"; a rerun exports again. The summary goes through
app/runfolder/folder.write_final_summary, which never leaves it at "running" or half written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import replace
from typing import Any, NoReturn

import click

from app.data.schema import DatasetInfo
from app.errors import RunFailed, TrainctlError
from app.export import signature
from app.export.card import CARD_FILE, EXPORT_DIR, MAX_CARD_BYTES, WEIGHTS_FILE
from app.export.witness import witnessed
from app.formatting import finite, is_finite, one_line, whole
from app.promotion import champion, champion_export, gate, pointer_signature, registry
from app.promotion.champion_task import TaskUnknown, champion_task
from app.promotion.class_gate import Judged
from app.promotion.evaluation import RunEnd, champion_scorer, evaluate_run_end, not_evaluated
from app.promotion.task import Task, another_task
from app.redact import redact_text
from app.runfolder import checkpoints, retention
from app.runfolder.folder import SummaryNotWritten, recorded_tracking, write_final_summary
from app.settings import TrainSettings
from app.storage import safe_fs
from app.storage.reading import read_bounded


class NotPromoted(TrainctlError):
    """A run that trained but did not pass the gate, with TRAIN_NOT_PROMOTED_EXIT set."""

    label = "not promoted"  # not "failed": the run trained, and its run folder is complete

    def __init__(self, line: str, code: int) -> None:
        super().__init__(
            f"the run trained but was not promoted (TRAIN_NOT_PROMOTED_EXIT={code}): {line}"
        )
        self.exit_code = code


MAX_REASON = 300  # an earlier verdict's reason restated from summary.json, at most


def promote_run(
    settings: TrainSettings,
    info: DatasetInfo,
    summary: dict[str, Any],
    previous: dict[str, Any] | None = None,
    good: list[checkpoints.CheckpointRef] | None = None,
    evaluate: bool = False,
) -> dict[str, Any]:
    """Export, evaluate, gate, champion; the summary updated and written again. Raises NotPromoted
    when the gate failed and TRAIN_NOT_PROMOTED_EXIT is not 0, RunFailed when the export (or
    the champion's copy of it) could not be written.

    `previous` is the `promotion` record an earlier driver of this run left in summary.json
    (a rerun of a finished run): when it judged the same checkpoint under the same gate, its
    verdict stands and nothing is exported or gated again. `good`: the run folder's verified
    checkpoints where the caller has them (the driver's end-of-run scan, after pruning), so
    that every checkpoint file is hashed once per run's end; None: scanned here.
    `evaluate`: score the export at the run's end (app/promotion/evaluation.py) before the
    gate, as a run's driver does; without it (a direct call) per-class terms cannot pass."""
    run_dir = settings.run_dir
    metric = settings.checkpoint_metric
    if good is None:  # a sweep's best trial: witnessed as its own driver's end would
        good = witnessed(checkpoints.scan(run_dir).good, settings.signing_key, _say)
    best = next(iter(retention.ranked(good, metric)), None)
    promotion: dict[str, Any] = {"gate": str(settings.promote_if), "metric": metric}
    if best is not None:
        promotion["checkpoint"] = {"epoch": best.epoch, "metrics": best.metrics}
    line: str
    published = None  # the export folder the registry gets
    version = None
    ended: list[RunEnd] = []  # the run-end evaluation, where the export was made
    try:
        current = _already_champion(settings, best)
        if current is not None:  # a rerun of the champion run: nothing to export or move
            decision, version = _still_champion(settings, current, promotion)
            line = f"promoted v{version} (already the champion)"
            if earlier := _first_judged(previous, version):
                promotion["earlier"] = earlier
                line = f"promoted v{version} (already the champion; first judged: {earlier})"
            if _registry_missed(previous):  # its server was down: the registry follows now
                published = run_dir / EXPORT_DIR
        elif best is not None and _judged_before(settings, best, previous):
            line, decision, version = _verdict_stands(settings, previous, promotion)  # type: ignore[arg-type]
        elif best is None:
            raise _Kept("no verified checkpoint to export")
        else:
            line, decision, version, published = _export_and_gate(
                settings, info, best, promotion, ended, evaluate
            )
    except _Kept as kept:
        decision = gate.Decision(False, str(kept), metric, None, None, str(settings.promote_if))
        promotion.update(decision.record())
        kept_what = f"v{kept.version}" if kept.version else "the champion"
        line = f"kept {kept_what}: not promoted ({kept})"
        version = None
    except _Failed as failed:
        _fail(settings, summary, promotion, str(failed))
    promotion["line"] = line
    promotion["promoted"] = decision.promoted  # what a rerun's verdict restates
    run_id = registry.enabled(recorded_tracking(summary))
    if run_id and published is not None:
        _publish(settings, run_id, published, decision, promotion)
    if ended:
        summary = {**summary, "evaluation": ended[0].record}
        _track_evaluation(settings, summary, ended[0], run_id, best)
    summary = {**summary, "promoted": decision.promoted, "promotion": promotion}
    if version is not None:
        summary["champion_version"] = version
    write_final_summary(run_dir, summary)
    _say(line)  # the last line: a CronJob's log and `submit --wait` end with it
    if not decision.promoted and settings.not_promoted_exit:
        raise NotPromoted(line, settings.not_promoted_exit)
    return summary


def _publish(
    settings: TrainSettings,
    run_id: str,
    published: Any,
    decision: gate.Decision,
    promotion: dict[str, Any],
) -> None:
    """The export as a version of the MLflow registry's model (the champion alias with it)."""
    try:
        promotion["registry"] = registry.publish(
            run_id, published, settings.champion_name, decision.promoted
        )
    except Exception as err:  # the pointer already moved: say the registry did not follow
        promotion["registry"] = {"error": registry.describe(err)}
        _say(f"MLflow registry not updated: {promotion['registry']['error']}")


def _registry_missed(previous: dict[str, Any] | None) -> bool:
    """The earlier driver's promotion moved the pointer but not the MLflow registry (its
    record says why): left as it was, the registry's champion alias named the model before."""
    record = previous.get("registry") if isinstance(previous, dict) else None
    return isinstance(record, dict) and "error" in record


class _Kept(Exception):
    """Nothing to gate: the champion stays, for the reason given (its version, where read)."""

    def __init__(self, reason: str, version: int | None = None) -> None:
        super().__init__(reason)
        self.version = version


class _Failed(Exception):
    """The run's records could not be written: a failure of the run, with this cause."""


def _fail(
    settings: TrainSettings, summary: dict[str, Any], promotion: dict[str, Any], cause: str
) -> NoReturn:
    """Record the failure in summary.json (`status: failed`) and raise RunFailed."""
    run_dir = settings.run_dir
    line = f"failed: {cause}; the champion was not judged, the checkpoints are intact"
    promotion.update(error=cause, line=line)
    failed = {**summary, "status": "failed", "error": cause, "promoted": False,
              "promotion": promotion}  # fmt: skip
    try:
        write_final_summary(run_dir, failed)
    except SummaryNotWritten as err:  # both causes, the first one first
        raise RunFailed([cause, *err.problems]) from None
    _say(line)
    raise RunFailed(
        [cause, f"checkpoints and summary: {run_dir}",
         "rerun the same run (same TRAIN_RUN_NAME) once the store is fixed: it exports again "
         "without training"]
    )  # fmt: skip


def _pointer(settings: TrainSettings) -> Any:
    return champion.pointer_path(settings.storage_path, settings.champion_name)


def _same_checkpoint(
    pointer: dict[str, Any] | None, settings: TrainSettings, best: checkpoints.CheckpointRef
) -> bool:
    """Whether the pointer names this run's checkpoint `best` (its epoch and every metric it
    recorded: a run folder trained again from scratch has other figures)."""
    return (
        isinstance(pointer, dict)
        and pointer.get("run_dir") == redact_text(str(settings.run_dir))
        and pointer.get("epoch") == best.epoch
        and pointer.get("metrics") == best.metrics
    )


def _already_champion(
    settings: TrainSettings, best: checkpoints.CheckpointRef | None
) -> dict[str, Any] | None:
    """The pointer, when it already names this run's best checkpoint, promoted under this
    TRAIN_PROMOTE_IF; None otherwise. A rerun of a finished champion then changes nothing: no
    new export, version or registry entry. Under another gate it is judged again (exported and
    evaluated as any run's end is). Read without the lock: the pointer only ever moves to
    another checkpoint, which the compare-and-swap of a run that does export sees."""
    if best is None:
        return None
    try:
        current = champion.read_pointer(_pointer(settings))
    except champion.PointerDamaged:
        return None  # the gate step reports it
    if not _same_checkpoint(current, settings, best) or not _same_gate(current, settings):
        return None
    return current


def _same_gate(pointer: dict[str, Any] | None, settings: TrainSettings) -> bool:
    """Whether the champion was promoted under TRAIN_PROMOTE_IF as it is now."""
    return isinstance(pointer, dict) and pointer.get("gate") == str(settings.promote_if)


def _champion_judged_anew(
    settings: TrainSettings,
    current: dict[str, Any],
    decision: gate.Decision,
    promotion: dict[str, Any],
) -> tuple[str, gate.Decision, int | None, Any]:
    """The champion run's rerun under another gate: its verdict, on its own figures (there is
    no other champion to beat). A gate it fails leaves the pointer where it is, since a gate
    never takes a champion down (a better model replaces it), but the run is not promoted
    under it: TRAIN_NOT_PROMOTED_EXIT applies and summary.json says why."""
    _, version = _still_champion(settings, current, promotion)
    promotion.update(decision.record())
    if decision.promoted:
        line = f"promoted v{version} (already the champion; {decision.reason})"
        return line, decision, version, None
    decision = replace(decision, reason=f"{decision.reason}; v{version} stays the champion: a "
                       "gate never takes one down, a better model replaces it")  # fmt: skip
    promotion["reason"] = decision.reason
    return f"kept v{version}: not promoted ({decision.reason})", decision, version, None


def _still_champion(
    settings: TrainSettings, current: dict[str, Any], promotion: dict[str, Any]
) -> tuple[gate.Decision, int]:
    version = int(current["version"])
    decision = gate.Decision(
        True, "already the champion", settings.checkpoint_metric, current.get("value"),
        current.get("value"), str(settings.promote_if),
    )  # fmt: skip
    promotion.update(decision.record(), version=version, pointer=str(_pointer(settings)),
                     champion_before=current.get("run_name"))  # fmt: skip
    promotion["export"] = {"folder": current.get("export"),
                           "card_sha256": current.get("card_sha256")}  # fmt: skip
    return decision, version


def _first_judged(previous: dict[str, Any] | None, version: int) -> str | None:
    """Why this run was promoted to `version`, as its summary recorded it (each rerun carries
    it on): a rerun of the champion run replaced the figures it was promoted on with "already
    the champion" (a red-team pass)."""
    if not isinstance(previous, dict) or previous.get("version") != version:
        return None
    if previous.get("earlier"):
        return one_line(str(previous["earlier"]), MAX_REASON)
    reason = previous.get("reason")
    if not isinstance(reason, str) or reason.startswith("already the champion"):
        return None
    return one_line(reason, MAX_REASON)


def _judged_before(
    settings: TrainSettings, best: checkpoints.CheckpointRef, previous: dict[str, Any] | None
) -> bool:
    """Whether an earlier driver of this run already passed `best` through the same gate, up
    to a champion decision. Without this a rerun of an old finished run (a retried job, a
    re-applied manifest) would be judged again against the pointer of today: with a threshold
    gate, last month's model would become the new champion. A decision that never reached the
    pointer (export failed, pointer damaged or not written) has no `champion_before` and is
    made again."""
    if not isinstance(previous, dict) or "champion_before" not in previous:
        return False
    if previous.get("gate") != str(settings.promote_if):
        return False  # a new gate is a new question: judge again
    if previous.get("pointer") != str(_pointer(settings)):
        return False  # another TRAIN_MODEL_NAME: another champion to judge against
    # An evaluation the gate needed failed (the champion's copy altered, say): no verdict was
    # made, only a refusal that no longer holds once it is fixed.
    judged_on = previous.get("judged_on")
    if isinstance(judged_on, dict) and any(
        judged_on.get(k) for k in ("problem", "champion_problem")
    ):
        return False
    judged = previous.get("checkpoint")
    if isinstance(judged, dict):  # the checkpoint judged, by its epoch and figures
        return judged.get("epoch") == best.epoch and judged.get("metrics") == best.metrics
    # A verdict recorded before `checkpoint` was: the export it judged, still on storage.
    card = settings.run_dir / EXPORT_DIR / CARD_FILE
    try:
        text = read_bounded(card, settings.run_dir, MAX_CARD_BYTES)
        epoch = json.loads(text).get("checkpoint", {}).get("epoch")
    except (OSError, ValueError, AttributeError):
        return False
    recorded = (previous.get("export") or {}).get("card_sha256")
    return epoch == best.epoch and hashlib.sha256(text).hexdigest() == recorded


def _verdict_stands(
    settings: TrainSettings, previous: dict[str, Any], promotion: dict[str, Any]
) -> tuple[str, gate.Decision, int | None]:
    """The earlier verdict, restated, with the version it gave (None: not promoted). This run
    is not the champion (that case is handled before): it was never promoted, or it was and
    has since been replaced. Promoted then, it stays promoted, and its exit code with it: a
    retried job of a run that did its job said `not promoted` and failed its pipeline under
    TRAIN_NOT_PROMOTED_EXIT (a red-team pass)."""
    try:
        current = champion.read_pointer(_pointer(settings)) or {}
    except champion.PointerDamaged:
        current = {}
    was = previous.get("version")  # a record many hands can write: a version is a count
    was = whole(was, least=1)
    if not _was_promoted(previous):
        was = None  # the champion's run, kept under a stricter gate: its version, not promoted
    # The first verdict's words, not a nested "judged before" (a rerun of a rerun).
    first = previous.get("earlier") or previous.get("reason")
    why = one_line(str(first), MAX_REASON)
    reason = f"judged before, same checkpoint and gate: {why}"
    if was:
        now, by = current.get("version"), one_line(str(current.get("run_name")), 100)
        reason += (
            f"; v{was} since replaced by v{now} of run {by}" if now
            else f"; v{was} is no longer the champion"
        )  # fmt: skip
    decision = gate.Decision(
        bool(was), reason, settings.checkpoint_metric, previous.get("value"),
        previous.get("champion_value"), str(settings.promote_if), previous.get("thresholds") or [],
    )  # fmt: skip
    promotion.update(decision.record(), export=previous.get("export"), pointer=str(_pointer(
        settings)), champion_before=previous.get("champion_before") if was else current.get(
        "run_name"), earlier=why)  # fmt: skip
    if was:
        promotion["version"] = was
    return gate.outcome_line(decision, was, current.get("version")), decision, was


def _was_promoted(previous: dict[str, Any]) -> bool:
    """Whether the verdict recorded in `previous` promoted the run: its `promoted`, or for a
    record written before that was kept, the words its last line starts with."""
    promoted = previous.get("promoted")
    if isinstance(promoted, bool):
        return promoted
    line = previous.get("line")
    return isinstance(line, str) and line.startswith("promoted v")


def _export_and_gate(
    settings: TrainSettings,
    info: DatasetInfo,
    best: checkpoints.CheckpointRef,
    promotion: dict[str, Any],
    ended: list[RunEnd],
    evaluate: bool,
) -> tuple[str, gate.Decision, int | None, Any]:
    """(line, decision, version or None, the folder the registry gets); the run-end
    evaluation appended to `ended`."""
    from app.export.build import export_best

    try:
        export = export_best(settings, info, best)
    except Exception as err:  # a full disk, a store that refuses: the run failed, say why
        raise _Failed(f"export failed: {registry.describe(err)}") from None
    run_end = evaluate_run_end(settings, info, export) if evaluate else not_evaluated()
    ended.append(run_end)
    if evaluate:
        _say_evaluated(settings, run_end)
        _refuse_unreproduced(settings, run_end)
        _refuse_unreproduced_loss(settings, run_end)
    try:
        return move_champion(settings, info, best, export, promotion, run_end)
    except champion.PointerDamaged as err:  # `check` fails on it, in the same words
        raise _Kept(str(err)) from None
    except OSError as err:  # the store refused the pointer (pyarrow's errors are OSErrors)
        raise _Kept(f"champion pointer not written: {registry.describe(err)}") from None


class _Outcome:
    """What the last call of `decide` found (it runs again after a lost race)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.decision: gate.Decision | None = None
        self.already: dict[str, Any] | None = None  # the pointer naming this checkpoint
        self.kept: str | None = None  # another task, or one that cannot be told
        self.folder: Any = None  # the champion's copy of the export


def move_champion(
    settings: TrainSettings,
    info: DatasetInfo,
    best: checkpoints.CheckpointRef,
    export: Any,
    promotion: dict[str, Any],
    run_end: RunEnd | None = None,
) -> tuple[str, gate.Decision, int | None, Any]:
    """Judge `export` of checkpoint `best` against the champion and move the pointer, as one
    compare-and-swap: what two pools (or two runs) finishing at once race on. (line,
    decision, version or None, the folder the registry gets); `promotion` is filled in.
    `run_end`: the run-end evaluation the gate is judged on (None: the recorded figures)."""
    path = _pointer(settings)
    promotion["export"] = _export_record(settings, export)
    promotion["pointer"] = str(path)
    candidate = Task.from_card(export.card)
    held_out = run_end is not None and run_end.judged is not None and run_end.judged.held_out
    chance = gate.chance_of(info.test_class_counts if held_out else info.valid_class_counts)
    outcome = _Outcome()
    judged_against = _judging(settings, candidate, run_end)

    def judge(champion: dict[str, Any] | None) -> gate.Decision:
        """The gate's verdict on `best` against `champion` (None: none to beat)."""
        return gate.decide(
            settings.promote_if,
            best.metrics,
            (champion or {}).get("metrics"),
            settings.checkpoint_metric,
            retention.higher_is_better(settings.checkpoint_metric),
            chance,
            judged_against(champion),
        )

    def decide(current: dict[str, Any] | None) -> dict[str, Any] | None:
        outcome.reset()
        if _same_checkpoint(current, settings, best):  # another driver of this run promoted it
            outcome.already = current
            if not _same_gate(current, settings):  # a new question, judged on the run alone
                outcome.decision = judge(None)
            return None
        if current is not None:
            outcome.kept = (
                champion.last_version(current, _pointer(settings))
                or _task_problem(current, candidate, settings)
                or _nothing_to_beat(current, settings)
            )
            if outcome.kept:
                return None
        decision = judge(current)
        outcome.decision = decision
        if not decision.promoted:
            return None
        try:
            folder = champion_export.keep(export, settings.storage_path, settings.champion_name)
        except (OSError, champion_export.CopyRefused, safe_fs.LinkRefused) as err:
            raise _Failed(
                f"the champion's copy of the export could not be written: {_describe(err)}"
            ) from None
        outcome.folder = folder
        record = _pointer_record(settings, export, best, candidate, folder, current)
        if settings.signing_key is None:
            return record
        key = signature.private_key(settings.signing_key)
        return pointer_signature.signed(record, settings.champion_name, key)

    return _what_the_swap_did(settings, champion.replace(path, decide), outcome, promotion)


def _what_the_swap_did(
    settings: TrainSettings,
    replaced: champion.Replaced,
    outcome: _Outcome,
    promotion: dict[str, Any],
) -> tuple[str, gate.Decision, int | None, Any]:
    """move_champion's answer from what its last `decide` found and what the swap wrote;
    `promotion` gets the decision, the version and the champion it replaced."""
    before = replaced.before or {}
    if outcome.already is not None and outcome.decision is not None:
        return _champion_judged_anew(settings, outcome.already, outcome.decision, promotion)
    if outcome.already is not None:
        decision, version = _still_champion(settings, outcome.already, promotion)
        return f"promoted v{version} (already the champion)", decision, version, None
    promotion["champion_before"] = before.get("run_name")
    if outcome.kept:
        raise _Kept(outcome.kept, before.get("version"))
    decision = outcome.decision
    assert decision is not None
    promotion.update(decision.record())
    if replaced.written is None:
        line = gate.outcome_line(decision, None, before.get("version"))
        return line, decision, None, settings.run_dir / EXPORT_DIR
    version = int(replaced.written["version"])
    promotion["version"] = version
    promotion["export"]["champion_folder"] = replaced.written["export"]
    line = gate.outcome_line(decision, version, None)
    if replaced.superseded:  # GCS only: no compare-and-swap there (champion.py)
        other = (replaced.after or {}).get("run_name")
        promotion["superseded_by"] = other
        line += f"; then superseded by run {other} finishing at the same time"
    return line, decision, version, outcome.folder


def _export_record(settings: TrainSettings, export: Any) -> dict[str, Any]:
    """summary.json's promotion["export"]: the run's export folder and what is in it."""
    return {
        "folder": str(settings.run_dir / EXPORT_DIR),
        "format": export.card["format"],
        "file": export.card["file"],
        "weights": WEIGHTS_FILE,
        "fallback_reason": export.card["fallback_reason"],
        "card_sha256": export.card_sha256,
    }


def _pointer_record(
    settings: TrainSettings,
    export: Any,
    best: checkpoints.CheckpointRef,
    candidate: Task,
    folder: Any,
    current: dict[str, Any] | None,
) -> dict[str, Any]:
    """The champion pointer naming `best` (exported to `folder`), the version after `current`."""
    run_dir = redact_text(str(settings.run_dir))  # the pointer is read by many: no secrets
    before = current or {}
    return {
        "model_name": settings.champion_name,
        "version": int(before.get("version", 0)) + 1,
        "run_name": settings.run_name,
        "run_dir": run_dir,
        "export": redact_text(str(folder)),  # immutable: champion_export.py
        "run_export": f"{run_dir}/{EXPORT_DIR}",  # the run's latest export, which may move
        "card_sha256": export.card_sha256,
        "metric": settings.checkpoint_metric,
        "value": best.metrics.get(settings.checkpoint_metric),
        "metrics": best.metrics,
        "epoch": best.epoch,
        "task": candidate.record(),
        "gate": str(settings.promote_if),
        "previous": {"version": before.get("version"), "run_name": before.get("run_name")}
        if current
        else None,
        "promoted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _judging(settings: TrainSettings, candidate: Task, run_end: RunEnd | None) -> Any:
    """A function of the champion pointer: what the gate is judged on against it (the
    run-end evaluation, with the champion scored on the same rows where the gate compares
    with it: on either split, as its recorded figures are of its own data). The champion of
    the pointer read now is scored here, before the compare-and-swap, so the lock is not held
    while it is; a pointer that moved meanwhile is scored when judged (each champion once)."""
    judged = run_end.judged if run_end is not None else None
    terms = settings.promote_if
    if run_end is None or judged is None or judged.run is None:
        return lambda current: judged
    if terms.class_drop is None and not terms.beats_champion:
        return lambda current: judged
    scorer = champion_scorer(settings, run_end)

    def against(current: dict[str, Any] | None) -> Judged:
        assert judged is not None
        if current is None or _task_problem(current, candidate, settings):
            return judged  # no champion, or one the step keeps for its task anyway
        scores, problem = scorer(current)
        return replace(judged, champion=scores, champion_problem=problem)

    # A damaged pointer: the swap reads it again and keeps the champion, saying why.
    with contextlib.suppress(champion.PointerDamaged):
        against(champion.read_pointer(_pointer(settings)))
    return against


def _refuse_unreproduced(settings: TrainSettings, run_end: RunEnd) -> None:
    """Keep the champion when scoring the export's verified weights does not give the
    val_accuracy its checkpoint records, by more than one row (a GPU's nondeterministic kernels
    may flip a near tie), or by one row across a val_accuracy threshold of the gate: the record
    is what the gate reads, and a record edited in the run folder (its checksum is not a
    secret) or validation data changed since training must not promote a model on figures it
    does not have. One row is 3 points on a 30-image split: a tie passes only where the
    measured figure passes the same terms."""
    valid = run_end.record.get("valid") or {}
    if valid.get("reproduced") is not False:
        return
    measured, recorded = float(valid["accuracy"]), float(valid["recorded_val_accuracy"])
    if abs(measured - recorded) * max(1, int(valid.get("rows") or 1)) <= 1 + 1e-9:
        failed = [
            t
            for t in settings.promote_if.thresholds
            if t.metric == "val_accuracy" and t.holds(recorded) and not t.holds(measured)
        ]
        if not failed:
            _say(
                f"the evaluation's val_accuracy {measured:.4g} differs from the recorded "
                f"{recorded:.4g} by one row (a near tie): the gate reads the recorded figure"
            )
            return
        raise _Kept(
            f"the exported checkpoint scores val_accuracy {measured:.4g} on the validation "
            f"split, which fails {failed[0]} that the recorded {recorded:.4g} passes: a one-row "
            "difference (a GPU's near tie, or a record edited since training) is not let "
            "through a threshold"
        )
    raise _Kept(
        f"the exported checkpoint scores val_accuracy {measured:.4g} on the validation split, "
        f"not the {recorded:.4g} its record says: the checkpoint's record or the validation "
        "data changed since training, and no gate is judged on figures that do not reproduce"
    )


# How far the evaluation's val_loss may be from the recorded one (relative, with a floor for
# losses near 0): the same weights and rows, but other batches and, for a run that trained in
# bf16 on a GPU, the evaluation's own device and precision.
LOSS_TOLERANCE = 0.01
LOSS_FLOOR = 1e-3


def _refuse_unreproduced_loss(settings: TrainSettings, run_end: RunEnd) -> None:
    """Keep the champion when a gate term on val_loss passes on the recorded loss but not on
    the loss scoring the export's weights gives, beyond a near tie: as for val_accuracy, the
    record is what the gate reads, and an edited record must not promote a model."""
    terms = [t for t in settings.promote_if.thresholds if t.metric == "val_loss"]
    valid = run_end.record.get("valid") or {}
    measured, recorded = finite(valid.get("loss")), finite(valid.get("recorded_val_loss"))
    if not terms or measured is None or recorded is None:
        return  # not evaluated: the evaluation's failure is said, and judged, on its own
    if all(t.holds(measured) for t in terms):
        return  # the measured loss passes the same terms: the verdict is the same
    if abs(measured - recorded) <= max(LOSS_TOLERANCE * abs(recorded), LOSS_FLOOR):
        return
    raise _Kept(
        f"the exported checkpoint scores val_loss {measured:.4g} on the validation split, "
        f"not the {recorded:.4g} its record says: the checkpoint's record or the validation "
        "data changed since training, and no gate is judged on figures that do not reproduce"
    )


def _say_evaluated(settings: TrainSettings, run_end: RunEnd) -> None:
    """What the run-end evaluation found, or that it failed and what that means here."""
    for report in run_end.reports.values():
        click.echo(report.line())
    problem = run_end.record.get("error")
    if problem:
        judged = run_end.judged
        terms = settings.promote_if
        needs = terms.per_class or (judged is not None and judged.held_out)
        if needs:
            then = "the gate needs it: the champion is kept"
        elif terms.beats_champion and _has_champion(settings):
            then = "the gate compares with the champion on these rows: the champion is kept"
        else:
            then = (
                "promotion goes on: the gate has no per-class term and is judged on the "
                "validation figures training recorded"
            )
        _say(f"run-end evaluation failed: {problem}; the run is trained and exported; {then}")


def _has_champion(settings: TrainSettings) -> bool:
    try:
        return champion.read_pointer(_pointer(settings)) is not None
    except champion.PointerDamaged:
        return True  # the step keeps it, saying why


def _track_evaluation(
    settings: TrainSettings,
    summary: dict[str, Any],
    run_end: RunEnd,
    run_id: str | None,
    best: checkpoints.CheckpointRef | None,
) -> None:
    """The run-end evaluation to the run's MLflow run and TensorBoard folder, where it has
    them; each one's record (or error: the figures are in summary.json and eval/ whatever a
    tracker says) in the evaluation's record. W&B does not get it (yet)."""
    from app.tracking.eval_log import log_to_mlflow, log_to_tensorboard

    if not run_end.reports:
        return
    sends = {}
    step = best.epoch if best is not None else 0  # the figures are the checkpoint's
    if run_id:
        sends["mlflow"] = lambda: log_to_mlflow(run_id, run_end.reports, step)
    if "tensorboard" in recorded_tracking(summary):
        target = settings.run_dir / "tensorboard"
        sends["tensorboard"] = lambda: log_to_tensorboard(target, run_end.reports, step)
    for name, send in sends.items():
        try:
            run_end.record[name] = send()
        except Exception as err:
            problem = registry.describe(err)
            _say(f"run-end evaluation not logged to {name}: {problem}")
            run_end.record[name] = {"error": problem}


def _task_problem(current: dict[str, Any], candidate: Task, settings: TrainSettings) -> str | None:
    """Why `candidate` may not replace the champion `current` names: another task, or a
    champion that cannot be checked against its card (nothing proves what it is)."""
    try:
        found = champion_task(current, settings.storage_path, settings.champion_name)
    except TaskUnknown as err:
        return (
            f"the champion cannot be checked against its model card ({err}); remove the pointer "
            "or use another TRAIN_MODEL_NAME"
        )
    return another_task(found, candidate, settings.champion_name, current.get("version"))


def _nothing_to_beat(current: dict[str, Any], settings: TrainSettings) -> str | None:
    """Why a champion whose pointer has lost the figure `beats_champion` compares with is kept:
    judged as if there were none, any run above chance would replace it."""
    metric = settings.checkpoint_metric
    if not settings.promote_if.beats_champion:
        return None
    if is_finite((current.get("metrics") or {}).get(metric)):
        return None
    return (
        f"the champion's pointer {_pointer(settings)} has no {metric} "
        "(TRAIN_CHECKPOINT_METRIC) to beat, so no run can be judged better: fix the pointer, "
        "or set TRAIN_CHECKPOINT_METRIC to the metric it was promoted on"
    )


def _describe(err: BaseException) -> str:
    if isinstance(err, safe_fs.LinkRefused):
        return "; ".join(err.problems)
    return str(err) if isinstance(err, champion_export.CopyRefused) else registry.describe(err)


def _say(message: str) -> None:
    click.echo(f"trainctl: {message}")
