"""Helm and `trainctl render` produce the same objects from the same values."""

from __future__ import annotations

import base64
import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from app.errors import ConfigError
from app.k8s import canonical, train_values
from app.k8s.render import load_values, render_objects, render_schedule_objects
from tests.contract.k8s_support import (
    CHART,
    KEPT_BY_GITOPS,
    MANAGED_BY,
    VALUES_FILES,
    HelmFailed,
    by_key,
    helm_render,
    helm_template,
    load_yaml,
    normalized,
    refusals,
)
from tests.contract.values_strategy import from_schema, schema, values_files

# The two places the engines may differ, on purpose: who manages the object, and the random
# token of a created auth Secret (a fresh one per offline render, in Helm as in Python).


def python_objects(paths: list[Path], release: str, namespace: str, **sets: Any) -> dict:
    values = load_values(paths, **sets)
    objects = {}
    for pool_objects in render_objects(values, release=release, namespace=namespace).values():
        objects.update(by_key(pool_objects))  # shared objects repeat per pool: same content
    objects.update(by_key(render_schedule_objects(values, release=release, namespace=namespace)))
    return objects


def rendered_alike(path: Path) -> tuple[dict, dict]:
    """`path` rendered by Helm and by trainctl, object for object alike: (Helm's, trainctl's)."""
    helm = by_key(helm_template([path], release="train", namespace="ml"))
    python = python_objects([path], "train", "ml")
    assert sorted(helm) == sorted(python)
    for key, obj in helm.items():
        assert normalized(obj) == normalized(python[key]), key
    return helm, python


@pytest.mark.parametrize("path", VALUES_FILES, ids=lambda p: p.stem)
def test_helm_and_trainctl_render_agree_object_for_object(path: Path) -> None:
    # Both engines read the same file bytes, each with its own YAML reader.
    helm, python = rendered_alike(path)
    for key, obj in helm.items():
        assert obj["metadata"]["labels"][MANAGED_BY] == "Helm"
        assert python[key]["metadata"]["labels"][MANAGED_BY] == "trainctl"


# `make test` renders this many generated values files through both engines (over half render,
# the rest are refused by the chart's rules, which both engines must do alike); `make parity`
# raises it. Derandomized: the same files every run, so a divergence is reproducible.
PARITY = settings(
    max_examples=int(os.environ.get("TRAINCTL_PARITY_EXAMPLES", "200")),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@PARITY
@given(user=values_files())
def test_generated_values_render_alike_or_are_refused_by_both(tmp_path: Path, user: dict) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(user), encoding="utf-8")
    try:
        python = python_objects([path], "train", "ml")
    except ConfigError as err:
        python = err
    try:
        helm = by_key(helm_template([path], release="train", namespace="ml"))
    except HelmFailed as err:
        helm = err
    if isinstance(python, ConfigError) and not isinstance(helm, HelmFailed):
        # Values the chart's schema cannot judge (a gate, batch size against workers): trainctl
        # refuses what the pods would refuse, so Helm's ConfigMaps must fail the settings model
        # with exactly trainctl's lines.
        assert sorted(python.problems) == sorted(_settings_refusals(helm, [path])), python
        event("refused by trainctl's settings check, as the pods would refuse Helm's")
        return
    assert isinstance(python, ConfigError) == isinstance(helm, HelmFailed), (python, helm)
    if isinstance(helm, HelmFailed):
        event("refused by both")  # --hypothesis-show-statistics: how many rendered
        return
    event("rendered by both")
    event(f"rendered storage.type {(user.get('storage') or {}).get('type', 'pvc')}")
    event(f"rendered scheduler.name {(user.get('scheduler') or {}).get('name', '')!r}")
    data_pool = user.get("dataPool") or {}
    if data_pool.get("enabled"):
        event(f"rendered a data pool, autoscaling {bool(data_pool.get('autoscaling'))}")
    assert sorted(helm) == sorted(python)
    for key, obj in helm.items():
        assert normalized(obj) == normalized(python[key]), key


# The data pool and the gang scheduler drawn from their schema over one valid file: across the
# whole values file they are drawn too rarely to render often (an enabled data pool renders in
# about 1 file in 200 there). A quarter as many examples as above.
FOCUSED = settings(PARITY, max_examples=max(25, PARITY.max_examples // 4))
GPU_POOL = {"nodePools": {"gpu": {"gpusPerWorker": 4, "acceleratorType": "A100", "spot": True}}}


@FOCUSED
@given(
    # Enabled unless drawn off: a data pool left off renders as none at all.
    data_pool=from_schema(schema()["properties"]["dataPool"], "dataPool").map(
        lambda pool: {"enabled": True, **pool}
    ),
    scheduler=from_schema(schema()["properties"]["scheduler"], "scheduler"),
    mode=st.sampled_from(["K8sJobMode", "HTTPMode"]),
)
def test_generated_data_pools_and_schedulers_render_alike(
    tmp_path: Path, data_pool: dict, scheduler: dict, mode: str
) -> None:
    user = {**GPU_POOL, "dataPool": data_pool, "scheduler": scheduler}
    user["rayJob"] = {"submissionMode": mode}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(user), encoding="utf-8")
    try:
        python = python_objects([path], "train", "ml")
    except ConfigError as err:
        python = err
    try:
        helm = by_key(helm_template([path], release="train", namespace="ml"))
    except HelmFailed as err:
        helm = err
    assert isinstance(python, ConfigError) == isinstance(helm, HelmFailed), (python, helm)
    if isinstance(helm, HelmFailed):
        event("refused by both")
        return
    event(f"rendered scheduler.name {scheduler.get('name', '')!r}")
    event(f"rendered data pool enabled {data_pool.get('enabled', False)}")
    assert sorted(helm) == sorted(python)
    for key, obj in helm.items():
        assert normalized(obj) == normalized(python[key]), key


def _settings_refusals(helm: dict, paths: list[Path]) -> list[str]:
    """The settings model's problems with each pool's ConfigMap as Helm rendered it."""
    values = load_values(paths)
    configs = [obj for (kind, _), obj in helm.items() if kind == "ConfigMap"]
    pools = {obj["metadata"]["labels"].get("trainctl.io/pool"): obj["data"] for obj in configs}
    pools.pop(None, None)  # a ConfigMap of no pool (the schedule's)
    return train_values.problems(dict(sorted(pools.items())), values)


# Two files merged (the second over the first) and --set-json/--set/--set-string on top, as
# `helm template -f A -f B --set ...` takes them.
OVERLAY = """\
train: {lr: 1e-3, epochs: 1e1, tensorboard: yes}
poolDefaults: {tolerations: null}
labels: {x.io/built: 2024-05-01}
"""
SETS = {
    # A JSON map replaces the map it lands on (pkg/strvals sets it whole), which
    # helm_user_values cannot reproduce: JSON scalars and lists only here.
    "set_json": ("train.lr=0.002", 'imagePullSecrets=["reg-a","reg-b"]'),
    "set_values": ("train.epochs=7,labels.tier=gold", "rayAuth.enabled=false"),
    "set_string": ("labels.build=0042",),
}


@pytest.mark.parametrize("path", VALUES_FILES, ids=lambda p: p.stem)
def test_merged_files_and_sets_render_alike(path: Path, tmp_path: Path) -> None:
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(OVERLAY)
    try:
        helm = by_key(helm_template([path, overlay], release="train", namespace="ml", **SETS))
    except HelmFailed as err:
        helm = err
    try:
        python = python_objects([path, overlay], "train", "ml", **SETS)
    except ConfigError as err:
        python = err
    assert isinstance(python, ConfigError) == isinstance(helm, HelmFailed), (python, helm)
    if isinstance(helm, HelmFailed):
        return
    assert sorted(helm) == sorted(python)
    for key, obj in helm.items():
        assert normalized(obj) == normalized(python[key]), key


def test_pull_secrets_in_kubernetes_form_reach_the_schedules_pods_by_name(tmp_path: Path) -> None:
    """`imagePullSecrets: [{name: regcred}]` (the form the chart documents beside plain names)
    reached the schedule's CronJob from `trainctl render` as the text of the map, a Secret no
    registry has: the retrain pod could not pull its image (found by a red-team pass)."""
    path = tmp_path / "values.yaml"
    path.write_text(
        "imagePullSecrets: [{name: regcred}, plain]\nnodePools: {l4: {replicas: 1}}\n"
        "schedule: {enabled: true}\nrayAuth: {existingSecret: ray-auth}\n"
    )
    _, python = rendered_alike(path)
    cron = next(obj for key, obj in python.items() if obj["kind"] == "CronJob")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "plain"}]


def test_the_head_pod_asks_autoscalers_not_to_evict_it_unless_told_otherwise(
    tmp_path: Path,
) -> None:
    """The head holds the run's Ray cluster: a consolidation that evicts it restarts the run.
    By default it carries the cluster autoscaler's and Karpenter's keep-me annotations, and no
    worker does (they checkpoint on a drain). A key set to null is dropped, one added is kept."""
    default = tmp_path / "default.yaml"
    default.write_text("nodePools: {l4: {replicas: 2}}\n")
    changed = tmp_path / "changed.yaml"
    changed.write_text(
        "nodePools: {l4: {replicas: 2}}\n"
        "head: {annotations: {karpenter.sh/do-not-disrupt: null, team: ml}}\n"
    )
    heads = []
    for path in (default, changed):
        _, python = rendered_alike(path)
        (job,) = [obj for obj in python.values() if obj["kind"] == "RayJob"]
        cluster = job["spec"]["rayClusterSpec"]
        heads.append(cluster["headGroupSpec"]["template"]["metadata"]["annotations"])
        for group in cluster["workerGroupSpecs"]:
            assert "annotations" not in group["template"]["metadata"]
    assert heads == [
        {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
         "karpenter.sh/do-not-disrupt": "true"},
        {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false", "team": "ml"},
    ]  # fmt: skip


def test_what_every_pool_folder_shares_is_never_pruned_by_gitops(tmp_path: Path) -> None:
    """The ServiceAccount and the created auth Secret are in every pool folder, as the volume
    claim is: retiring one pool's Argo CD Application or Flux Kustomization deleted them under
    the other pools' jobs (found by a red-team pass). A user's own sync options win."""
    path = tmp_path / "values.yaml"
    path.write_text(
        "nodePools: {a100: {replicas: 1}, l4: {replicas: 1}}\n"
        "serviceAccount: {annotations: {argocd.argoproj.io/sync-options: Prune=false, x/y: z}}\n"
    )
    _, python = rendered_alike(path)
    by_kind = {obj["kind"]: obj["metadata"].get("annotations") for obj in python.values()}
    assert by_kind["ServiceAccount"] == {
        "helm.sh/resource-policy": "keep",
        **KEPT_BY_GITOPS,
        "argocd.argoproj.io/sync-options": "Prune=false",
        "x/y": "z",
    }
    assert KEPT_BY_GITOPS.items() <= by_kind["Secret"].items()


# YAML 1.1's line breaks raw in a values file (as PyYAML's dumper writes NEL) and escaped:
# NEL, CR and CRLF fold into a space in a quoted scalar, U+2028 and U+2029 are kept; both
# engines must read the same bytes so and render exactly what they read.
@pytest.mark.parametrize(
    ("brk", "meant"),
    [("\x85", " "), ("\u2028", "\u2028"), ("\u2029", "\u2029"), ("\r", " "), ("\r\n", " ")],
    ids=ascii,
)
def test_line_break_characters_render_alike(brk: str, meant: str, tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(
        "nodePools:\n  cpu: {gpusPerWorker: 0, tolerations: []}\n"
        f"runAnnotations:\n  x.io/raw: 'a{brk}  b'\n  x.io/edge: '{brk}  '\n"
        '  x.io/escaped: "a\\L\\P\\r\\nb"\n'  # "\\N" (U+0085) is refused there: see below
        f"env:\n  NOTE: 'a{brk}  b'\n  ESCAPED: \"a\\N\\L\\P\\r\\nb\"\n",
        encoding="utf-8",
        newline="",  # the bytes as written: no newline translation of \r
    )
    _, python = rendered_alike(path)
    (config,) = [o for o in python.values() if o["kind"] == "ConfigMap"]
    assert config["data"]["NOTE"] == f"a{meant}b"
    annotations = config["metadata"]["annotations"]
    assert annotations["x.io/raw"] == f"a{meant}b"
    assert annotations["x.io/edge"] == meant
    assert annotations["x.io/escaped"] == "a\u2028\u2029\r\nb"
    assert config["data"]["ESCAPED"] == "a\x85\u2028\u2029\r\nb"


# A text inside each free-form value, by its path (a number is a list index), as trainctl's
# messages name it; Helm's name it as a JSON pointer.
FREE_FORM = [
    "networkPolicy.dashboardFrom.0.k",
    "metrics.scraper.namespaceSelector.matchExpressions.0.values.0",
    "rayJob.historyServerOptions.collectorOptions.env.0.name",
]


def _at(where: str, text: str) -> dict:
    value: object = text
    for part in reversed(where.split(".")):
        value = [value] if part.isdigit() else {part: value}
    assert isinstance(value, dict)
    return value


@pytest.mark.parametrize("where", FREE_FORM)
@pytest.mark.parametrize(
    "text", ["\u2028'\n\u2028", "a\n\u2029", "\x7f", "\x85b", "\ufffe"], ids=ascii
)
def test_free_form_text_toyaml_cannot_write_is_refused_naming_the_key(
    where: str, text: str, tmp_path: Path
) -> None:
    """Helm's toYaml writes U+2028 and U+2029 raw inside a block scalar, as the line break
    itself, and `nindent` indents only after "\\n": the manifest broke, or read back another
    value. Both engines refuse such text in every free-form value, naming where it is."""
    values = _at(where, text)
    with pytest.raises(HelmFailed) as helm:
        helm_render(values)
    assert f"at '/{where.replace('.', '/')}'" in str(helm.value)
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError) as ours:
        load_values([path])
    (problem,) = ours.value.problems
    assert problem.startswith(f"{where}: the text ") and "U+2028" in problem


def test_free_form_keys_are_held_to_the_same_text(tmp_path: Path) -> None:
    values = {"networkPolicy": {"dashboardFrom": [{"a\u2028\nb": "v"}]}}
    with pytest.raises(HelmFailed, match="invalid propertyName"):
        helm_render(values)
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError) as ours:
        load_values([path])
    (problem,) = ours.value.problems
    assert problem.startswith("networkPolicy.dashboardFrom.0: the key ")


# Text free-form values may hold, with everything toYaml quotes or folds: intact in both.
KEPT_TEXT = 'a\'b\n"c"\t: #{{ x }}\r\n\u00a0\u00e9\U0001f600 \\ end\n'


@pytest.mark.parametrize("where", FREE_FORM)
def test_free_form_text_with_newlines_and_quotes_renders_intact(where: str, tmp_path: Path) -> None:
    values = {
        "nodePools": {"cpu": {"gpusPerWorker": 0, "tolerations": []}},
        **_at(where, KEPT_TEXT),
    }
    values["metrics"] = {"enabled": True, **values.get("metrics", {})}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    _, python = rendered_alike(path)
    assert json.dumps(KEPT_TEXT)[1:-1] in json.dumps(list(python.values())), where


def test_annotations_holding_line_separators_next_to_newlines_render_intact(
    tmp_path: Path,
) -> None:
    """runAnnotations went through toYaml too: "\\u2028'\\n" failed Helm's render ("internal
    error rendering pool"), and "\\n\\u2028" came back with a newline added. The chart quotes
    each value now, as trainctl does."""
    notes = {"x.io/a": "\u2028'\n\u2028", "x.io/b": "\n\u2028", "x.io/c": "a\u2029\nb"}
    values = {
        "nodePools": {"cpu": {"gpusPerWorker": 0, "tolerations": []}},
        "runAnnotations": notes,
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    helm = by_key(helm_template([path], release="train", namespace="ml"))
    python = python_objects([path], "train", "ml")
    assert sorted(helm) == sorted(python)
    kept = [obj for obj in helm.values() if "x.io/a" in obj["metadata"].get("annotations", {})]
    assert {obj["kind"] for obj in kept} == {"ConfigMap", "NetworkPolicy", "RayJob"}
    for obj in kept:
        assert notes.items() <= obj["metadata"]["annotations"].items(), obj["kind"]
    for key, obj in helm.items():
        assert normalized(obj) == normalized(python[key]), key


def test_each_pool_list_holds_everything_its_rayjob_references() -> None:
    values = load_values([VALUES_FILES[0]])
    pools = render_objects(values, release="train", namespace="ml")
    assert sorted(pools) == ["a100", "l4", "t4"]
    for pool, objects in pools.items():
        kinds = sorted(o["kind"] for o in objects)
        assert kinds == sorted(
            ["ConfigMap", "NetworkPolicy", "PersistentVolumeClaim", "RayJob", "ServiceAccount"]
        ), pool
        (job,) = [o for o in objects if o["kind"] == "RayJob"]
        assert job["metadata"]["name"].startswith(f"train-{pool}-")


def test_created_secret_is_in_every_pool_list_and_never_in_a_configmap() -> None:
    values = load_values([VALUES_FILES[1]])  # values-cpu.yaml: the chart creates the Secret
    for objects in render_objects(values, release="demo", namespace="ml").values():
        (secret,) = [o for o in objects if o["kind"] == "Secret"]
        assert secret["metadata"]["annotations"]["trainctl.io/create-only"] == "true"
        token = base64.b64decode(secret["data"]["auth_token"]).decode()
        for obj in objects:
            if obj["kind"] == "ConfigMap":
                assert token not in json.dumps(obj)


@pytest.mark.parametrize(
    "bad",
    [
        {"train": {"epochs": 0}},
        {"train": {"num_workers": 4}},  # derived per pool
        {"train": {"learning_rate": 0.1}},  # not a setting
        {"train": {"amp": False}},  # YAML `off` without quotes
        {"nodePools": {"A100": {}}},
        {"nodePools": {"a": {"gpusPerWorker": -1}}},
        {"nodePools": {"a": {"memoryPerWorker": "lots"}}},
        # A worker with no CPU runs no training step, and a data pool none of Ray Data's tasks.
        {"nodePools": {"a": {"cpusPerWorker": 0}}},
        {"nodePools": {"a": {"cpusPerWorker": "0m"}}},
        {"dataPool": {"enabled": True, "cpusPerWorker": "0"}},
        {"dataPool": {"enabled": True, "cpusPerWorker": "0.0"}},
        # Nor a fraction of one: Ray counts it as a whole CPU and runs a task per CPU counted.
        {"dataPool": {"enabled": True, "cpusPerWorker": "1m"}},
        {"dataPool": {"enabled": True, "cpusPerWorker": 0.5}},
        # Nor a count no node has, which Ray would be started with: bounded, in either spelling.
        {"nodePools": {"a": {"cpusPerWorker": 1e300}}},
        {"nodePools": {"a": {"cpusPerWorker": "1e300"}}},
        {"dataPool": {"enabled": True, "cpusPerWorker": 10000}},
        {"dataPool": {"enabled": True, "cpusPerWorker": "10000000m"}},
        {"head": {"cpu": "1e300"}},
        {"head": {"cpu": 0}},
        {"storage": {"mountPath": "relative/path"}},
        {"storage": {"runsSubPath": "../escape"}},
        {"env": {"WANDB_API_KEY": "secret-value"}},
        {"env": {"TRAIN_EPOCHS": "3"}},
        # The app reads TRAIN_* without regard to case: lowercase would slip past the train: checks.
        {"env": {"train_epochs": "3"}},
        {"env": {"X": "a\u0000b"}},  # no environment variable can hold a NUL: the pod never starts
        {"secretEnv": [{"name": "train_epochs", "secretName": "s", "key": "k"}]},
        {"secretEnv": [{"name": "Train_Lr", "secretName": "s", "key": "k"}]},
        {"rayJob": {"submissionMode": "SidecarMode"}},
        {"kueue": {"enabled": True}},  # the deprecated block still needs its queue
        {"kueue": {"enabled": True, "queueName": "q"}, "scheduler": {"name": "volcano"}},
        {"scheduler": {"name": "kueue"}},  # Kueue needs a LocalQueue
        {"scheduler": {"name": "kai-scheduler", "queue": "q"}},  # K8sJobMode: KAI refuses it
        {"scheduler": {"name": "scheduler-plugins", "queue": "q"}},  # it has no queues
        {"scheduler": {"name": "volcano", "queue": "Not_A_Name"}},
        {"scheduler": {"name": "slurm"}},
        {"dataPool": {"enabled": True, "autoscaling": True}},  # no minReplicas/maxReplicas
        {"dataPool": {"minReplicas": 0, "maxReplicas": 4}},  # without autoscaling
        {"dataPool": {"enabled": True, "autoscaling": True, "minReplicas": 3, "maxReplicas": 1}},
        {
            "dataPool": {"enabled": True, "autoscaling": True, "minReplicas": 1, "maxReplicas": 4},
            "scheduler": {"name": "kueue", "queue": "q"},  # Kueue cannot autoscale a RayJob
        },
        {"dataPool": {"enabled": True}, "nodePools": {"data": {}}},  # the data group's name
        {"dataPool": {"enabled": True, "replicas": 0}},
        {"rayAuth": {"enabled": "yes"}},
        {"tune": {"space": {"lr": {"beta": [1, 2]}}}},
        {"tune": {"space": {"lr": {"uniform": [0, 1], "choice": [1]}}}},
        {"tune": {"space": {"lr": {"uniform": []}}}},
        {"tune": {"space": {"LR": {"uniform": [0.1, 1]}}}},
        {"tune": {"samples": 0}},
        {"tune": {"scheduler": "pbt"}},
        {"tune": {"reductionFactor": 1}},
        {"unknownTopLevel": 1},
        # Found by the schema-derived strategy: Helm's toYaml wrote this list as nothing at
        # all (the pool lost its tolerations unsaid), and an unquoted PodMonitor label key
        # broke trainctl's YAML; both are Kubernetes names and values, bounded as such now.
        {"poolDefaults": {"tolerations": [{"key": "k", "value": "\x94v"}]}},
        {"metrics": {"podMonitor": {"labels": {"{% raw %}\x0fX": "v"}}}},
        # An annotation that means U+0085 (a values file's "\N"): Helm's toYaml would write it
        # raw, where it reads back as a line break; test_line_break_characters_render_alike.
        {"runAnnotations": {"x.io/note": "a\x85b"}},
        # Free-form text Helm's toYaml cannot write intact (app/k8s/names.py FREE_FORM_TEXT):
        # U+2028 next to a newline broke the manifest; a DEL rendered the dashboard rule as
        # `from:` with nothing, which lets every source in.
        {"networkPolicy": {"dashboardFrom": [{"k": "\u2028'\n\u2028"}]}},
        {"networkPolicy": {"dashboardFrom": [{"ipBlock": {"cidr": "10.0.0.0/8\x7f"}}]}},
        {"rayJob": {"deletionStrategy": {"onSuccess": {"policy": "Delete\n\u2029"}}}},
        {"metrics": {"scraper": {"podSelector": {"matchExpressions": [{"key\x85": "a"}]}}}},
        # Found by a red-team pass. Past int32 (KubeRay's field), Helm wrapped 1e20 to a
        # negative deadline and named the RayJob differently from trainctl.
        {"rayJob": {"activeDeadlineSeconds": 10**20}},
        {"rayJob": {"activeDeadlineSeconds": 2**31}},
        {"rayJob": {"preRunningDeadlineSeconds": 2**31}},
        {"rayJob": {"ttlSecondsAfterFinished": 2**31}},
        {
            "poolDefaults": {
                "tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": 2**53}]
            }
        },
        # The GPU count would replace the CPU (or memory) request; a name without a domain is
        # no extended resource the API server takes.
        {"gpuResourceName": "cpu"},
        {"gpuResourceName": "memory"},
        {"gpuResourceName": "gpu"},
        {"gpuResourceName": "kubernetes.io/gpu"},
        {"storage": {"storageClassName": "Fast_SSD"}},
        {"storage": {"volumeName": "PV 1"}},
        {"networkPolicy": {"dashboardFrom": [{}]}},  # no peer: the API server refuses it
        # Empty selectors in a non-empty object (null drops the default's labels): every pod of
        # every namespace could scrape.
        {
            "metrics": {
                "scraper": {
                    "namespaceSelector": {"matchLabels": None, "matchExpressions": []},
                    "podSelector": {"matchLabels": None, "matchExpressions": []},
                }
            }
        },
        {"env": {"GITHUB_PAT": "ghp_0123456789abcdef"}},
        {"env": {"WANDB_KEY": "0123456789abcdef"}},
        {"env": {"AUTH": "Bearer eyJhbGciOiJIUzI1NiJ9.e30.x"}},
        {"rayJob": {"runtimeEnv": {"env_vars": {"HEADER": "basic dXNlcjpwYXNzd29yZA=="}}}},
        # The history server collector's variables, passed through into the RayJob (a
        # red-team pass): a credential by its name or its form goes in valueFrom.
        {
            "rayJob": {
                "historyServerOptions": {
                    "collectorOptions": {
                        "image": "c:1",
                        "env": [{"name": "AWS_SECRET_ACCESS_KEY", "value": "topsecretpw"}],
                    }
                }
            }
        },
        {
            "rayJob": {
                "historyServerOptions": {
                    "collectorOptions": {
                        "image": "c:1",
                        "env": [{"name": "STORE", "value": "s3://ak:topsecretpw@minio:9000/logs"}],
                    }
                }
            }
        },
        {"tune": {"enabled": True, "space": {}}},
        {"tune": {"enabled": True, "space": {"lr": {"uniform": [0.5, 0.1]}}}},
        {"tune": {"space": {"epochs": {"choice": [1, 2]}}}},
        {"tune": {"space": {"model": {"choice": ["resnet1800"]}}}},
    ],
    ids=lambda b: json.dumps(b),
)
def test_bad_values_are_refused_by_both_engines(bad: dict, tmp_path: Path) -> None:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(json.dumps(bad))
    with pytest.raises(HelmFailed):
        helm_render(bad)
    from app.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        render_objects(load_values([values_file]), release="demo", namespace="ml")
    key = next(iter(bad))
    assert any(key in problem for problem in err.value.problems), err.value.problems


def test_a_collector_variable_read_from_a_secret_renders(tmp_path: Path) -> None:
    """The refusals above leave the collector's own way to a credential open: valueFrom."""
    secret = {"secretKeyRef": {"name": "s3", "key": "secret"}}
    values = {"nodePools": {"a": {}}, "rayJob": {"historyServerOptions": {"collectorOptions": {
        "image": "c:1", "env": [{"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": secret},
                                {"name": "REGION", "value": "eu-west-1"}]}}}}  # fmt: skip
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    helm = by_key(helm_render(values))
    python = python_objects([path], "demo", "ml")
    assert sorted(helm) == sorted(python)
    job = next(obj for key, obj in python.items() if key[0] == "RayJob")
    history = job["spec"]["rayClusterSpec"]["historyServerOptions"]["collectorOptions"]
    assert history["env"][0] == {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": secret}


def test_rule_failures_carry_the_same_message_in_both_engines(tmp_path: Path) -> None:
    from app.errors import ConfigError

    bad = {"rayJob": {"shutdownAfterJobFinishes": False, "ttlSecondsAfterFinished": 60}}
    values_file = tmp_path / "values.yaml"
    values_file.write_text(json.dumps(bad))
    with pytest.raises(ConfigError) as err:
        render_objects(load_values([values_file]), release="demo", namespace="ml")
    (message,) = err.value.problems
    with pytest.raises(HelmFailed) as helm_err:
        helm_render(bad)
    assert message in str(helm_err.value)

    long_release = "a-release-name-that-is-far-too-long"
    with pytest.raises(ConfigError) as err:
        render_objects(load_values([VALUES_FILES[0]]), release=long_release, namespace="ml")
    with pytest.raises(HelmFailed) as helm_err:
        helm_render(load_yaml(VALUES_FILES[0]), release=long_release)
    assert err.value.problems[0] in str(helm_err.value)

    # Helm rendered any namespace, for the API server to refuse every object at apply time
    # (found by a platform team's pass); a label of 63 characters is one.
    for namespace in ("ML", "team_a", "a" * 64):
        with pytest.raises(ConfigError) as err:
            render_objects(load_values([VALUES_FILES[0]]), release="demo", namespace=namespace)
        with pytest.raises(HelmFailed) as helm_err:
            helm_render(load_yaml(VALUES_FILES[0]), namespace=namespace)
        assert err.value.problems == [f"namespace {namespace!r} must be a DNS-1123 label"]
        assert err.value.problems[0] in str(helm_err.value)
    assert helm_render(load_yaml(VALUES_FILES[0]), namespace="a" * 63)


@pytest.mark.parametrize(
    "number", [0.00001, 1e-7, 0.5, 2.5e-5, 100000.5, 1234567.5, 3.0, 1e6, 0.1 + 0.2, 123.456]
)
def test_number_formats_match_go(number: float) -> None:
    values = {
        "rayJob": {"runtimeEnv": {"x": number, "s": "<&>"}},
        # A pod's CPUs are fewer than 10000: a larger number is shown as a GPU-hour price.
        "nodePools": {"p": {"cpusPerWorker": number if number < 10000 else 1}},
        "head": {"rayStartParams": {"num-cpus": "1"}},  # Ray Data's CPU, beside a tiny pod
    }
    setting = "lr" if 0 < number <= 10 else "gpu_hour_price"
    values["train"] = {setting: number} if number <= 1_000_000 else {}
    (job,) = [o for o in helm_render(values) if o["kind"] == "RayJob"]
    assert job["spec"]["runtimeEnvYAML"] == canonical.go_json(values["rayJob"]["runtimeEnv"])
    _, (group,) = (
        job["spec"]["rayClusterSpec"]["headGroupSpec"],
        job["spec"]["rayClusterSpec"]["workerGroupSpecs"],
    )
    worker = group["template"]["spec"]["containers"][0]
    if number < 10000:
        assert worker["resources"]["limits"]["cpu"] == canonical.scalar(number)
    if values["train"]:
        data = next(o for o in helm_render(values) if o["kind"] == "ConfigMap")["data"]
        assert data[f"TRAIN_{setting.upper()}"] == canonical.scalar(number)


def test_canonical_text_is_unambiguous() -> None:
    assert canonical.canon({"a": "b,c"}) != canonical.canon({"a": "b", "c": ""})
    assert canonical.canon(["1"]) != canonical.canon([1])
    assert canonical.canon({"k": 1}) == canonical.canon({"k": 1.0})  # Helm has only float64
    spec = {"x": [1, {"y": "é"}]}
    assert canonical.content_hash(spec, {}) == canonical.content_hash(copy.deepcopy(spec), {})


# Every part of the chart on at once, so that a null for any default key reaches a template that
# reads it: a pool, an autoscaled data pool, the schedule, the PodMonitor, a sweep, a policy.
EVERYTHING_ON = {
    "nodePools": {"a": {}},
    "dataPool": {"enabled": True, "autoscaling": True, "minReplicas": 1, "maxReplicas": 2},
    "schedule": {"enabled": True},
    "metrics": {"podMonitor": {"enabled": True}},
    "tune": {"enabled": True, "space": {"lr": {"loguniform": [0.0001, 0.1]}}},
    "networkPolicy": {"enabled": True},
    "rayAuth": {"existingSecret": "ray-auth"},
}


def _default_key_paths(values: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple]:
    paths = []
    for key, value in values.items():
        paths.append((*prefix, key))
        if isinstance(value, dict):
            paths += _default_key_paths(value, (*prefix, key))
    return paths


def _with_null(base: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    values = copy.deepcopy(base)
    at = values
    for key in path[:-1]:
        if not isinstance(at.get(key), dict):
            at[key] = {}
        at = at[key]
    at[path[-1]] = None
    return values


NULLED_PATHS = _default_key_paths(load_yaml(CHART / "values.yaml"))


def test_a_null_for_any_default_key_renders_alike_or_is_refused_by_both(tmp_path: Path) -> None:
    """A values key left empty is a null, and a null deletes the chart's default (Helm's rule,
    docs/kubernetes.md): `labels:` with nothing after it. For every key of values.yaml, on a
    file that turns every part of the chart on, both engines render the same objects or both
    refuse it naming the key; neither crashes (a red-team pass: `trainctl render` stopped with
    "internal error: UndefinedError" on 16 of them, Helm with a template's nil pointer on 13)."""
    problems = []
    for path in NULLED_PATHS:
        values = _with_null(EVERYTHING_ON, path)
        file = tmp_path / "values.json"
        file.write_text(json.dumps(values))
        try:
            helm: Any = by_key(helm_render(values))
        except HelmFailed as err:
            helm = err
        key = ".".join(path)
        try:
            python: Any = python_objects([file], "demo", "ml")
        except ConfigError as err:
            python = err
        except Exception as err:
            problems.append(f"{key}: trainctl crashed: {err!r:.300}")
            continue
        if isinstance(helm, HelmFailed) or isinstance(python, ConfigError):
            said = str(helm) if isinstance(helm, HelmFailed) else ""
            if (
                not isinstance(helm, HelmFailed)
                or "executing" in said
                or not isinstance(python, ConfigError)
            ):
                problems.append(
                    f"{key}: helm {said[-300:] or 'rendered'}; trainctl {python!r:.300}"
                )
                continue
            # The key, or the map a rule judges whole (an emptied selector), by both.
            named = path[-2:]
            if not (any(k in p for k in named for p in python.problems)
                    and any(k in said for k in named)):  # fmt: skip
                problems.append(f"{key}: not named: helm {said[-300:]}; trainctl {python.problems}")
            continue
        if sorted(helm) != sorted(python) or any(
            normalized(obj) != normalized(python[name]) for name, obj in helm.items()
        ):
            problems.append(f"{key}: rendered differently")
    assert not problems, "\n".join(problems)
    # What trainctl says of a deleted key the chart needs: it, its default, and why it is gone.
    helm, said = refusals(_with_null(EVERYTHING_ON, ("schedule", "cron")), tmp_path)
    assert "missing property 'cron'" in helm
    assert said == [
        "schedule.cron: missing: the chart needs it ('0 3 * * 0' by default), and a null (an "
        "empty value) deletes the chart's default; give it a value"
    ]
