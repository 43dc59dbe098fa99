"""The step after a successful run: export its best checkpoint, apply TRAIN_PROMOTE_IF, move
the champion pointer (and the MLflow alias) when the gate passes, and say so in summary.json
and in the driver's last line.

A function of a finished run folder and its settings: the driver calls it after writing the
summary, and it can be applied again to the same folder (a rerun of a finished run) with the
same result. The decisions are app/promotion/gate.py's pure functions.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import click

from app.data.schema import DatasetInfo
from app.errors import TrainctlError
from app.export.card import CARD_FILE, EXPORT_DIR, MAX_CARD_BYTES
from app.promotion import champion, gate, registry
from app.redact import redact_text
from app.run import checkpoints
from app.run.folder import write_summary
from app.settings import TrainSettings
from app.storage.location import local_path
from app.storage.reading import read_bounded


class NotPromoted(TrainctlError):
    """A run that trained but did not pass the gate, with TRAIN_NOT_PROMOTED_EXIT set."""

    label = "not promoted"  # not "failed": the run trained, and its run folder is complete

    def __init__(self, line: str, code: int) -> None:
        super().__init__(
            f"the run trained but was not promoted (TRAIN_NOT_PROMOTED_EXIT={code}): {line}"
        )
        self.exit_code = code


def promote_run(
    settings: TrainSettings,
    info: DatasetInfo,
    summary: dict[str, Any],
    previous: dict[str, Any] | None = None,
    good: list[checkpoints.CheckpointRef] | None = None,
) -> dict[str, Any]:
    """Export, gate, champion; the summary updated and written again. Raises NotPromoted
    when the gate failed and TRAIN_NOT_PROMOTED_EXIT is not 0.

    `previous` is the `promotion` record an earlier driver of this run left in summary.json
    (a rerun of a finished run): when it judged the same checkpoint, export and gate, its
    verdict stands and nothing is exported or gated again. `good`: the run folder's verified
    checkpoints where the caller has them (the driver's end-of-run scan, after pruning), so
    that every checkpoint file is hashed once per run's end; None: scanned here."""
    run_dir = settings.run_dir
    metric = settings.checkpoint_metric
    good = checkpoints.scan(run_dir).good if good is None else good
    best = next(iter(checkpoints.ranked(good, metric)), None)
    promotion: dict[str, Any] = {"gate": str(settings.promote_if), "metric": metric}
    line: str
    card_sha = None
    current = _already_champion(settings, best)
    try:
        if current is not None:  # a rerun of the champion run: nothing to export or move
            version = int(current["version"])
            decision = gate.Decision(
                True, "already the champion", metric, current.get("value"),
                current.get("value"), str(settings.promote_if),
            )  # fmt: skip
            promotion.update(decision.record(), version=version, pointer=str(_pointer(settings)),
                             champion_before=current.get("run_name"))  # fmt: skip
            promotion["export"] = {"folder": current.get("export"),
                                   "card_sha256": current.get("card_sha256")}  # fmt: skip
            line = f"promoted v{version} (already the champion)"
        elif best is not None and _judged_before(settings, best, previous):
            line, decision = _verdict_stands(settings, previous, promotion)  # type: ignore[arg-type]
            version = None
        elif best is None:
            raise _Kept("no verified checkpoint to export")
        else:
            line, decision, version, card_sha = _export_and_gate(settings, info, best, promotion)
    except _Kept as kept:
        decision = gate.Decision(False, str(kept), metric, None, None, str(settings.promote_if))
        promotion.update(decision.record())
        line = f"kept the champion: not promoted ({kept})"
        version = None
    promotion["line"] = line
    run_id = registry.enabled(summary.get("tracking"))
    if run_id and card_sha:
        try:
            promotion["registry"] = registry.publish(
                run_id, run_dir / EXPORT_DIR, settings.champion_name, decision.promoted
            )
        except Exception as err:  # the pointer already moved: say the registry did not follow
            promotion["registry"] = {"error": registry.describe(err)}
            _say(f"MLflow registry not updated: {promotion['registry']['error']}")
    summary = {**summary, "promoted": decision.promoted, "promotion": promotion}
    if version is not None:
        summary["champion_version"] = version
    write_summary(run_dir, summary)
    _say(line)  # the last line: a CronJob's log and `submit --wait` end with it
    if not decision.promoted and settings.not_promoted_exit:
        raise NotPromoted(line, settings.not_promoted_exit)
    return summary


class _Kept(Exception):
    """Nothing to gate: the champion stays, for the reason given."""


def _pointer(settings: TrainSettings) -> Any:
    return champion.pointer_path(settings.storage_path, settings.champion_name)


def _already_champion(
    settings: TrainSettings, best: checkpoints.CheckpointRef | None
) -> dict[str, Any] | None:
    """The pointer, when it already names this run's best checkpoint and its export on storage
    is still the one promoted (its card's sha256); None otherwise. A rerun of a finished
    champion then changes nothing: no new export, version or registry entry."""
    if best is None:
        return None
    try:
        current = champion.read_pointer(_pointer(settings))
    except champion.PointerDamaged:
        return None  # the gate step reports it
    if not current or current.get("run_dir") != redact_text(str(settings.run_dir)):
        return None
    if current.get("epoch") != best.epoch:
        return None
    card = settings.run_dir / EXPORT_DIR / CARD_FILE
    try:
        found = hashlib.sha256(read_bounded(card, local_path(settings.run_dir), MAX_CARD_BYTES))
    except (OSError, ValueError):
        return None
    return current if found.hexdigest() == current.get("card_sha256") else None


def _judged_before(
    settings: TrainSettings, best: checkpoints.CheckpointRef, previous: dict[str, Any] | None
) -> bool:
    """Whether an earlier driver of this run already passed `best`, exported as it is now on
    storage, through the same gate, up to a champion decision. Without this a rerun of an old
    finished run (a retried job, a re-applied manifest) would be judged again against the
    pointer of today: with a threshold gate, last month's model would become the new champion.
    A decision that never reached the pointer (export failed, pointer damaged or not written)
    has no `champion_before` and is made again."""
    if not isinstance(previous, dict) or "champion_before" not in previous:
        return False
    if previous.get("gate") != str(settings.promote_if):
        return False  # a new gate is a new question: judge again
    if previous.get("pointer") != str(_pointer(settings)):
        return False  # another TRAIN_MODEL_NAME: another champion to judge against
    card = settings.run_dir / EXPORT_DIR / CARD_FILE
    try:
        text = read_bounded(card, local_path(settings.run_dir), MAX_CARD_BYTES)
        epoch = json.loads(text).get("checkpoint", {}).get("epoch")
    except (OSError, ValueError, AttributeError):
        return False
    recorded = (previous.get("export") or {}).get("card_sha256")
    return epoch == best.epoch and hashlib.sha256(text).hexdigest() == recorded


def _verdict_stands(
    settings: TrainSettings, previous: dict[str, Any], promotion: dict[str, Any]
) -> tuple[str, gate.Decision]:
    """The earlier verdict, restated: this run is not the champion (that case is handled
    before), whether it was never promoted or was promoted and has since been replaced."""
    try:
        current = champion.read_pointer(_pointer(settings)) or {}
    except champion.PointerDamaged:
        current = {}
    was = previous.get("version")
    if previous.get("earlier"):  # a rerun of a rerun: the first verdict, not a nested one
        why = str(previous["earlier"])
    elif was:
        why = f"v{was} of this run was replaced by run {current.get('run_name')}"
    else:
        why = str(previous.get("reason"))
    reason = f"judged before, same checkpoint and gate: {why}"
    decision = gate.Decision(
        False, reason, settings.checkpoint_metric, previous.get("value"),
        previous.get("champion_value"), str(settings.promote_if), previous.get("thresholds") or [],
    )  # fmt: skip
    promotion.update(decision.record(), export=previous.get("export"), pointer=str(_pointer(
        settings)), champion_before=current.get("run_name"), earlier=why)  # fmt: skip
    return gate.outcome_line(decision, None, current.get("version")), decision


def _export_and_gate(
    settings: TrainSettings,
    info: DatasetInfo,
    best: checkpoints.CheckpointRef,
    promotion: dict[str, Any],
) -> tuple[str, gate.Decision, int | None, str]:
    from app.export.build import export_best

    try:
        card, card_sha = export_best(settings, info, best)
    except Exception as err:  # any export failure keeps the champion where it is
        raise _Kept(f"export failed: {registry.describe(err)}") from None
    promotion["export"] = {
        "folder": str(settings.run_dir / EXPORT_DIR),
        "format": card["format"],
        "file": card["file"],
        "fallback_reason": card["fallback_reason"],
        "card_sha256": card_sha,
    }
    try:
        line, decision, version = _move_champion(settings, best, card_sha, promotion)
    except OSError as err:  # the store refused the pointer (pyarrow's errors are OSErrors)
        raise _Kept(f"champion pointer not written: {registry.describe(err)}") from None
    return line, decision, version, card_sha


def _move_champion(
    settings: TrainSettings,
    best: checkpoints.CheckpointRef,
    card_sha: str,
    promotion: dict[str, Any],
) -> tuple[str, gate.Decision, int | None]:
    path = _pointer(settings)
    promotion["pointer"] = str(path)
    run_dir = redact_text(str(settings.run_dir))  # the pointer is read by many: no secrets
    outcome: dict[str, Any] = {}

    def decide(current: dict[str, Any] | None) -> dict[str, Any] | None:
        decision = gate.decide(
            settings.promote_if,
            best.metrics,
            (current or {}).get("metrics"),
            settings.checkpoint_metric,
            checkpoints.higher_is_better(settings.checkpoint_metric),
        )
        outcome["decision"] = decision
        if not decision.promoted:
            return None
        return {
            "model_name": settings.champion_name,
            "version": int((current or {}).get("version", 0)) + 1,
            "run_name": settings.run_name,
            "run_dir": run_dir,
            "export": f"{run_dir}/{EXPORT_DIR}",
            "card_sha256": card_sha,
            "metric": settings.checkpoint_metric,
            "value": best.metrics.get(settings.checkpoint_metric),
            "metrics": best.metrics,
            "epoch": best.epoch,
            "gate": str(settings.promote_if),
            "promoted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    try:
        replaced = champion.replace(path, decide)
    except champion.PointerDamaged as err:
        raise _Kept(str(err)) from None
    decision: gate.Decision = outcome["decision"]
    promotion.update(decision.record())
    before = replaced.before or {}
    promotion["champion_before"] = before.get("run_name")
    if replaced.written is None:
        return gate.outcome_line(decision, None, before.get("version")), decision, None
    version = int(replaced.written["version"])
    promotion["version"] = version
    line = gate.outcome_line(decision, version, None)
    if replaced.superseded:
        other = (replaced.after or {}).get("run_name")
        promotion["superseded_by"] = other
        line += f"; then superseded by run {other} finishing at the same time"
    return line, decision, version


def _say(message: str) -> None:
    click.echo(f"trainctl: {message}")
