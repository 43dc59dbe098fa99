"""What NOTES.txt warns of in values that render but are likely a mistake, said by `trainctl
render` and `submit` on stderr with the same words (charts/trainctl/templates/NOTES.txt holds
the Helm side; tests/contract/test_value_warnings.py holds the two alike).

- A mutable `latest` tag without a digest: replacement nodes pull the moved tag while nodes
  that pulled it earlier keep theirs (IfNotPresent), so one Ray cluster runs two images, and a
  moved tag changes no RayJob name, so GitOps starts no run for it.
- A deletion rule with DeleteSelf: GitOps (Argo CD self-heal, Flux) creates the deleted RayJob
  again at its next sync, and it trains again, a GPU cluster start each time.
"""

from __future__ import annotations

from typing import Any

LATEST = (
    "WARNING: image.tag is latest and image.digest is empty: nodes that pulled it before keep "
    "their copy (pullPolicy IfNotPresent) beside new nodes pulling the moved tag, and a moved tag "
    "renames no RayJob, so GitOps starts no run for it; pin a version tag or image.digest."
)
DELETE_SELF = (
    "WARNING: a rayJob.deletionStrategy rule deletes the RayJob itself (DeleteSelf): Argo CD "
    "self-heal or Flux creates it again at the next sync, and it trains again; under GitOps use "
    "DeleteCluster or DeleteWorkers, or shutdownAfterJobFinishes (docs/gitops.md)."
)

DRAWN = (
    "WARNING: tune.space draws {keys} anew for every trial, so the value in train (or a pool's "
    "train) is not used; take it out of one of them."
)


def value_warnings(values: dict[str, Any]) -> list[str]:
    """NOTES.txt's WARNING lines of these values, in its order."""
    found = []
    image = values.get("image") or {}
    if str(image.get("tag")) == "latest" and not image.get("digest"):
        found.append(LATEST)
    strategy = (values.get("rayJob") or {}).get("deletionStrategy")
    # deletionRules, or KubeRay's older onSuccess / onFailure form. The block is free-form
    # (KubeRay's CRD judges it): any other shape is no rule here.
    strategy = strategy if isinstance(strategy, dict) else {}
    given = strategy.get("deletionRules")
    rules = given if isinstance(given, list) else []
    rules = [*rules, strategy.get("onSuccess"), strategy.get("onFailure")]
    if any(isinstance(r, dict) and r.get("policy") == "DeleteSelf" for r in rules):
        found.append(DELETE_SELF)
    if drawn := _drawn_and_fixed(values):
        found.append(DRAWN.format(keys=", ".join(drawn)))
    return found


def _drawn_and_fixed(values: dict[str, Any]) -> list[str]:
    """The tune.space keys that train: or an enabled pool's train: also sets, sorted (as Go
    ranges over a map). A pool's train replaces poolDefaults.train whole, like its other keys."""
    tune = _mapping(values.get("tune"))
    if not tune.get("enabled"):
        return []
    defaults = _mapping(values.get("poolDefaults"))
    fixed = set(_mapping(values.get("train")))
    for given in _mapping(values.get("nodePools")).values():
        pool = {**defaults, **_mapping(given)}
        if pool.get("enabled", True):  # the chart's default, in values not merged with it
            fixed |= set(_mapping(pool.get("train")))
    return sorted(set(_mapping(tune.get("space"))) & fixed)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
