"""Values the chart still reads under their old names, for one release: the `kueue:` block.

`kueue: {enabled, queueName, priorityClass}` became `scheduler: {name: kueue, queue,
priorityClass}`. Values files written for the old chart keep rendering the same RayJobs (the same
labels, `suspend`, and so the same names): while `scheduler.name` is empty, `kueue.enabled: true`
is read as `scheduler.name=kueue`, and both engines print DEPRECATION (Helm in NOTES.txt,
`trainctl render` and `submit` on stderr). Setting both is refused. The chart mirrors this in
charts/trainctl/templates/_helpers.tpl ("trainctl.scheduler", "trainctl.deprecations") and
_checks.tpl, with the same words.
"""

from __future__ import annotations

from typing import Any

MOVED = (
    "kueue.queueName moved to scheduler.name=kueue and scheduler.queue (and kueue.priorityClass "
    "to scheduler.priorityClass): see docs/kubernetes.md#gang-scheduling"
)


def _kueue(values: dict[str, Any]) -> dict[str, Any]:
    return values.get("kueue") or {}


def effective_scheduler(values: dict[str, Any]) -> dict[str, Any]:
    """`scheduler`, with the deprecated kueue block read into it while scheduler.name is empty."""
    scheduler = dict(values.get("scheduler") or {})
    kueue = _kueue(values)
    if kueue.get("enabled") and not scheduler.get("name"):
        scheduler.update(
            name="kueue",
            queue=kueue.get("queueName") or "",
            priorityClass=kueue.get("priorityClass") or "",
        )
    return scheduler


def conflict(values: dict[str, Any]) -> str | None:
    """Both blocks choosing a scheduler: which one was meant is not ours to guess."""
    name = (values.get("scheduler") or {}).get("name")
    if _kueue(values).get("enabled") and name:
        return (
            f"kueue.enabled=true and scheduler.name={name} both choose the gang scheduler: the "
            f"kueue block is deprecated, remove it ({MOVED})"
        )
    return None


def notes(values: dict[str, Any]) -> list[str]:
    """DEPRECATION lines for these values (none without the old block)."""
    if "kueue" not in values:
        return []
    reading = (
        "this chart version reads kueue.enabled=true as scheduler.name=kueue"
        if _kueue(values).get("enabled")
        else "this chart version ignores the block (kueue.enabled is not true)"
    )
    return [
        f"DEPRECATION: the kueue block will be refused by a later chart version; {reading}. {MOVED}"
    ]
