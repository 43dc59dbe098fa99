"""The Helm chart, rendered by the real Helm engine: lint, CRD schema, pools, storage, names."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import kubernetes_validate
import pytest

from app.k8s import rules
from app.settings import TrainSettings
from tests.contract.examples_support import unknown_fields
from tests.contract.k8s_support import (
    EXAMPLES,
    VALUES_FILES,
    HelmFailed,
    by_key,
    config_data,
    containers,
    crd_schema,
    crd_validator,
    helm_lint,
    helm_render,
    load_yaml,
    of_kind,
    podgroup_validator,
    rayjob_groups,
    refusals,
)

THREE_POOLS = load_yaml(EXAMPLES / "values-three-pools.yaml")
CORE_KINDS = (
    "ConfigMap",
    "Secret",
    "PersistentVolumeClaim",
    "NetworkPolicy",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "CronJob",
)


@pytest.fixture(scope="module")
def three_pools() -> list[dict]:
    return helm_render(THREE_POOLS, release="train", namespace="ml")


@pytest.fixture(scope="module", params=VALUES_FILES, ids=lambda p: p.stem)
def rendered(request: pytest.FixtureRequest) -> list[dict]:
    return helm_render(load_yaml(request.param))


def test_lint_strict_is_clean_with_defaults_and_every_values_file() -> None:
    assert helm_lint() == []
    for path in VALUES_FILES:
        assert helm_lint(load_yaml(path)) == [], path


def test_three_pools_render_exactly_three_rayjobs_one_per_pool(three_pools: list[dict]) -> None:
    jobs = of_kind(three_pools, "RayJob")
    assert sorted(
        j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"] for j in jobs
    ) == [
        "a100",
        "l4",
        "t4",
    ]
    for job in jobs:
        assert re.fullmatch(r"train-(a100|l4|t4)-[0-9a-f]{8}", job["metadata"]["name"])


def test_every_rayjob_is_valid_against_the_kuberay_crd(rendered: list[dict]) -> None:
    jobs = of_kind(rendered, "RayJob")
    assert jobs, "each values file enables at least one pool"
    schema = crd_schema("rayjobs")
    for job in jobs:
        problems = [error.message for error in crd_validator("rayjobs").iter_errors(job)]
        assert problems == [], problems
        # Pod templates, containers and their lifecycle hooks are all walked, not just the top.
        assert _no_unknown_fields(job["spec"], schema["properties"]["spec"], "spec") > 100


def test_the_crd_checks_refuse_an_unknown_field_and_a_wrong_type(three_pools: list[dict]) -> None:
    """The checks above can fail: a field the CRD lacks, deep in a worker's container, and a
    field of the wrong type are both caught."""
    schema = crd_schema("rayjobs")["properties"]["spec"]
    job = copy.deepcopy(of_kind(three_pools, "RayJob")[0])
    _, (group,) = rayjob_groups(job)
    group["template"]["spec"]["containers"][0]["preStopHook"] = {}
    with pytest.raises(AssertionError, match="preStopHook is not in the CRD"):
        _no_unknown_fields(job["spec"], schema, "spec")
    group["template"]["spec"]["containers"][0].pop("preStopHook")
    group["template"]["spec"]["terminationGracePeriodSeconds"] = "soon"
    assert list(crd_validator("rayjobs").iter_errors(job)), "a string grace period passed"


def _no_unknown_fields(value: object, schema: dict, where: str) -> int:
    """The API server would silently prune fields the CRD does not declare: refuse them.

    Returns how many fields were checked, so a caller can tell the walk went deep.
    """
    checked = 0
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            assert key in schema["properties"], f"{where}.{key} is not in the CRD"
            checked += 1 + _no_unknown_fields(item, schema["properties"][key], f"{where}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            checked += _no_unknown_fields(item, schema["items"], f"{where}[{i}]")
    return checked


def test_core_kinds_are_valid_kubernetes_objects(rendered: list[dict]) -> None:
    kinds = {o["kind"] for o in rendered}
    # PodMonitor (no schema here: Prometheus Operator's CRD) is checked in test_metrics_chart,
    # PodGroup (scheduler-plugins' CRD) below.
    assert kinds <= {"RayJob", "PodMonitor", "PodGroup", *CORE_KINDS}, kinds
    for obj in rendered:
        if obj["kind"] in CORE_KINDS:
            kubernetes_validate.validate(obj, "1.31", strict=True)


def test_every_podgroup_is_valid_against_its_crd_and_gangs_one_rayjob(rendered: list[dict]) -> None:
    validator, schema = podgroup_validator()
    groups = of_kind(rendered, "PodGroup")
    for group in groups:
        assert [e.message for e in validator.iter_errors(group)] == []
        assert unknown_fields(group, schema, "") == []
    jobs = of_kind(rendered, "RayJob")
    gangs = {
        job["metadata"]["name"]
        for job in jobs
        if job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"].get("schedulerName")
    }
    assert {g["metadata"]["name"] for g in groups} == gangs


def test_each_rayjob_targets_only_its_pool(three_pools: list[dict]) -> None:
    for job in of_kind(three_pools, "RayJob"):
        _, (group,) = rayjob_groups(job)
        pool = THREE_POOLS["nodePools"][group["groupName"]]
        worker_spec = group["template"]["spec"]
        assert worker_spec["nodeSelector"] == pool["nodeSelector"]
        expected_tolerations = pool.get("tolerations") or [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
        assert worker_spec["tolerations"] == expected_tolerations
        (worker,) = worker_spec["containers"]
        gpus = str(pool["gpusPerWorker"])
        assert worker["resources"]["requests"]["nvidia.com/gpu"] == gpus
        assert worker["resources"]["limits"]["nvidia.com/gpu"] == gpus
        assert group["replicas"] == group["minReplicas"] == group["maxReplicas"]
        assert group["resources"] == {f"accelerator_type:{pool['acceleratorType']}": "1"}

        data = config_data(three_pools, job["metadata"]["name"])
        assert data["TRAIN_NUM_WORKERS"] == str(pool["replicas"] * pool["gpusPerWorker"])
        assert data["TRAIN_USE_GPU"] == "true"
        assert data["TRAIN_ACCELERATOR_TYPE"] == pool["acceleratorType"]


def test_the_head_stays_on_cpu_nodes(three_pools: list[dict]) -> None:
    for job in of_kind(three_pools, "RayJob"):
        head, _ = rayjob_groups(job)
        spec = head["template"]["spec"]
        assert spec["nodeSelector"] == THREE_POOLS["head"]["nodeSelector"]
        assert not any("gpu" in t.get("key", "") for t in spec.get("tolerations") or [])
        for container in containers(head["template"]):
            for kind in ("requests", "limits"):
                assert not any("gpu" in r for r in container["resources"][kind])
        assert head["rayStartParams"] == {"num-cpus": "0"}


def test_every_ray_pod_mounts_the_shared_claim_and_reads_the_configmap(
    rendered: list[dict],
) -> None:
    claims = [o["metadata"]["name"] for o in of_kind(rendered, "PersistentVolumeClaim")]
    for job in of_kind(rendered, "RayJob"):
        name = job["metadata"]["name"]
        data = config_data(rendered, name)
        head, groups = rayjob_groups(job)
        if re.match(r"(s3|gs)://", data["TRAIN_STORAGE_PATH"]):
            continue  # storage.type s3/gcs: no volume (test_chart_object_storage.py)
        mounts = set()
        for group in [head, *groups]:
            spec = group["template"]["spec"]
            volumes = {v["name"]: v for v in spec["volumes"]}
            claim = volumes["shared"]["persistentVolumeClaim"]["claimName"]
            assert claim in claims or claim == "team-datasets"  # created here or existingClaim
            (container,) = spec["containers"]
            assert {"configMapRef": {"name": name}} in container["envFrom"]
            mount = next(m for m in container["volumeMounts"] if m["name"] == "shared")
            mounts.add(mount["mountPath"])
        (mount_path,) = mounts  # one mount path on head and every worker
        assert data["TRAIN_STORAGE_PATH"].startswith(mount_path + "/")
        assert data["TRAIN_DATA_PATH"].startswith(mount_path + "/")


def test_storage_is_a_readwritemany_claim_and_never_an_inline_volume(rendered: list[dict]) -> None:
    for claim in of_kind(rendered, "PersistentVolumeClaim"):
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for job in of_kind(rendered, "RayJob"):
        head, groups = rayjob_groups(job)
        for group in [head, *groups]:
            for volume in group["template"]["spec"]["volumes"]:
                if volume["name"] == "gcs-credentials":  # storage.type gcs: a key file
                    continue
                if volume["name"] == "autoscaler-token":  # dataPool.autoscaling: the API token
                    assert set(volume) == {"name", "projected"}, volume
                    continue
                if volume["name"] == "tune-space":  # tune.enabled: the run's own ConfigMap
                    assert volume["configMap"]["name"] == job["metadata"]["name"], volume
                    assert group is head, "only the head runs `trainctl tune`"
                    continue
                assert set(volume) & {"persistentVolumeClaim", "emptyDir"}, volume
                assert not set(volume) & {"nfs", "hostPath"}, volume


def test_names_link_rayjob_configmap_and_run_name(rendered: list[dict]) -> None:
    for job in of_kind(rendered, "RayJob"):
        name = job["metadata"]["name"]
        assert len(name) <= rules.MAX_RAYJOB_NAME
        assert rules.DNS_1035.match(name)
        assert config_data(rendered, name)["TRAIN_RUN_NAME"] == name
        # One quoted bash -c argument: KubeRay's submitter pastes it into its own bash line.
        # A sweep (tune.enabled, examples/values-nightly-sweep.yaml) runs `trainctl tune`.
        command = "tune" if "TRAIN_TUNE_SPACE" in config_data(rendered, name) else "train"
        assert job["spec"]["entrypoint"] == f"bash -c 'trainctl check && exec trainctl {command}'"


def test_rendered_rayjobs_pass_the_operator_rules(rendered: list[dict]) -> None:
    for job in of_kind(rendered, "RayJob"):
        assert rules.rayjob_problems(job) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda s: s.update(suspend=True, shutdownAfterJobFinishes=False), "suspended"),
        (
            lambda s: s.update(shutdownAfterJobFinishes=False, ttlSecondsAfterFinished=60),
            "ttlSecondsAfterFinished",
        ),
        (
            lambda s: s["rayClusterSpec"]["workerGroupSpecs"][0]["rayStartParams"].update(
                {"num-gpus": "4"}
            ),
            "both rayStartParams and resources",
        ),
        (lambda s: s["rayClusterSpec"].update(rayVersion="2.50.0"), "2.52.0"),
        (lambda s: s.update(activeDeadlineSeconds=0), "activeDeadlineSeconds"),
    ],
)
def test_the_operator_rules_catch_what_the_schema_cannot(
    three_pools: list[dict], change: object, expected: str
) -> None:
    job = copy.deepcopy(of_kind(three_pools, "RayJob")[0])
    change(job["spec"])  # type: ignore[operator]
    crd_validator("rayjobs").validate(job)  # the CRD schema lets it through...
    assert any(expected in p for p in rules.rayjob_problems(job))  # ...the rules do not


def test_a_long_name_fails_at_render_with_the_limit_in_the_message() -> None:
    with pytest.raises(HelmFailed, match="at most 47"):
        helm_render(THREE_POOLS, release="a-very-long-release-name-for-training")
    job = copy.deepcopy(of_kind(helm_render(THREE_POOLS), "RayJob")[0])
    job["metadata"]["name"] = "x" * 48
    assert rules.rayjob_problems(job)


def test_cpu_only_pool_runs_one_worker_per_pod_without_gpus() -> None:
    values = load_yaml(EXAMPLES / "values-cpu.yaml")
    objects = helm_render(values)
    for job in of_kind(objects, "RayJob"):
        _, (group,) = rayjob_groups(job)
        (worker,) = group["template"]["spec"]["containers"]
        assert set(worker["resources"]["limits"]) == {"cpu", "memory"}
        data = config_data(objects, job["metadata"]["name"])
        assert data["TRAIN_USE_GPU"] == "false"
        assert data["TRAIN_NUM_WORKERS"] == str(values["poolDefaults"]["replicas"])


def test_kueue_labels_and_suspends_and_needs_shutdown() -> None:
    values = load_yaml(EXAMPLES.parent / "tests/contract/values/existing-claim-kueue.yaml")
    (job,) = of_kind(helm_render(values), "RayJob")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert job["spec"]["suspend"] is True
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert job["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] is False
    values["rayJob"] = {"shutdownAfterJobFinishes": False, "ttlSecondsAfterFinished": 0}
    with pytest.raises(HelmFailed, match=r"scheduler\.name=kueue needs rayJob\.shutdown"):
        helm_render(values)


def _job_names(values: dict) -> dict[str, str]:
    return {
        j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"]: j["metadata"]["name"]
        for j in of_kind(helm_render(values, release="train"), "RayJob")
    }


def test_content_hash_names_change_with_the_config_and_only_for_that_pool() -> None:
    before = _job_names(THREE_POOLS)
    assert _job_names(copy.deepcopy(THREE_POOLS)) == before  # same config, same objects

    changed = copy.deepcopy(THREE_POOLS)
    changed["nodePools"]["l4"]["train"] = {"epochs": 31}
    after = _job_names(changed)
    assert after["l4"] != before["l4"]
    assert (after["a100"], after["t4"]) == (before["a100"], before["t4"])

    everywhere = copy.deepcopy(THREE_POOLS)
    everywhere["train"]["lr"] = 0.003
    assert set(_job_names(everywhere).values()).isdisjoint(before.values())

    tagged = copy.deepcopy(THREE_POOLS)
    tagged["runTag"] = "2024-06-01"
    assert set(_job_names(tagged).values()).isdisjoint(before.values())


def test_configmap_env_is_valid_settings_for_every_pool(
    rendered: list[dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    for job in of_kind(rendered, "RayJob"):
        data = config_data(rendered, job["metadata"]["name"])
        train_keys = {k for k in data if k.startswith("TRAIN_")}
        fields = {f"TRAIN_{name.upper()}" for name in TrainSettings.model_fields}
        assert train_keys <= fields, train_keys - fields
        with monkeypatch.context() as env:
            for key in list(__import__("os").environ):
                if key.startswith("TRAIN_"):
                    env.delenv(key)
            for key in train_keys:
                env.setenv(key, data[key])
            env.chdir(__import__("tempfile").mkdtemp())  # no stray .env file
            settings = TrainSettings()
        assert settings.run_name == job["metadata"]["name"]
        assert str(settings.storage_path) == data["TRAIN_STORAGE_PATH"]


def test_shared_objects_are_rendered_once(three_pools: list[dict]) -> None:
    keys = [(o["kind"], o["metadata"]["name"]) for o in three_pools]
    assert len(keys) == len(set(keys))
    objects = by_key(three_pools)
    assert ("PersistentVolumeClaim", "train-shared") in objects
    assert ("Secret", "train-ray-auth") not in objects  # the example uses an existing Secret


def test_the_crd_schema_check_can_fail(three_pools: list[dict]) -> None:
    import jsonschema

    job = copy.deepcopy(of_kind(three_pools, "RayJob")[0])
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        crd_validator("rayjobs").validate(job)
    job = copy.deepcopy(of_kind(three_pools, "RayJob")[0])
    job["spec"]["rayClusterSpec"]["authOptions"]["mode"] = "password"
    with pytest.raises(jsonschema.ValidationError):
        crd_validator("rayjobs").validate(job)
    job = copy.deepcopy(of_kind(three_pools, "RayJob")[0])
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["x"] = 1
    with pytest.raises(jsonschema.ValidationError):
        crd_validator("rayjobs").validate(job)


@pytest.mark.parametrize(
    ("pools", "says"),
    [
        (["a100"], 'schedule.pools names "a100", which is not in nodePools (l4, t4)'),
        # A disabled pool rendered no CronJob, while NOTES said its retrain was scheduled.
        (["t4"], 'schedule.pools names "t4", whose pool is disabled (nodePools.t4.enabled: '
                 "false), so no CronJob would retrain it"),
    ],
)  # fmt: skip
def test_a_schedule_for_a_pool_that_cannot_run_is_refused_by_both_engines(
    pools: list[str], says: str
) -> None:
    values = {
        "nodePools": {"l4": {"gpusPerWorker": 1}, "t4": {"gpusPerWorker": 1, "enabled": False}},
        "schedule": {"enabled": True, "pools": pools},
    }
    from app.k8s.values import coalesce, default_values

    with pytest.raises(HelmFailed) as helm:
        helm_render(values)
    assert says in str(helm.value)
    assert any(says in line for line in rules.values_problems(coalesce(default_values(), values)))
    values["schedule"]["pools"] = ["l4"]
    (cronjob,) = of_kind(helm_render(values), "CronJob")
    assert "l4" in cronjob["metadata"]["name"]
    assert rules.values_problems(coalesce(default_values(), values)) == []


@pytest.mark.parametrize(
    ("toleration", "says"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists", "value": "present",
          "effect": "NoSchedule"}, "a toleration with operator Exists takes no value"),
        ({"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule",
          "tolerationSeconds": 30}, "tolerationSeconds is for effect NoExecute only"),
        ({"operator": "Equal", "value": "x"}, "a toleration without a key matches every taint"),
        ({"key": "", "value": "x"}, "a toleration without a key matches every taint"),
    ],
)  # fmt: skip
def test_tolerations_kubernetes_refuses_in_pods_are_refused_at_render(
    toleration: dict, says: str, tmp_path: Path
) -> None:
    """The RayJob is accepted and its pods are refused inside KubeRay: the run waited its
    whole preRunningDeadlineSeconds for pods that were never made."""
    values = {"nodePools": {"l4": {"gpusPerWorker": 1, "tolerations": [toleration]}}}
    helm, ours = refusals(values, tmp_path)
    assert "tolerations" in helm
    assert any(line.startswith("nodePools.l4.tolerations.0: ") and says in line
               for line in ours), ours  # fmt: skip


def test_the_tolerations_kubernetes_takes_render() -> None:
    allowed = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoExecute",
         "tolerationSeconds": 30},
        {"operator": "Exists"},  # every taint
        {"key": "", "operator": "Exists", "value": ""},
        {"key": "dedicated", "value": "ml"},  # operator Equal by default
    ]  # fmt: skip
    (job,) = of_kind(helm_render({"nodePools": {"l4": {"tolerations": allowed}}}), "RayJob")
    _, (group,) = rayjob_groups(job)
    assert group["template"]["spec"]["tolerations"] == allowed


SPOT_OR_ON_DEMAND = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "karpenter.sh/capacity-type", "operator": "In",
                 "values": ["spot", "on-demand"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "NotIn",
                 "values": ["g4dn.xlarge"]},
                {"key": "example.com/gpu-memory-gib", "operator": "Gt", "values": ["20"]},
                {"key": "example.com/draining", "operator": "DoesNotExist"},
            ]}],
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "preference": {"matchExpressions": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}},
        ],
    }
}  # fmt: skip


def test_a_pools_node_affinity_reaches_its_pods_alike_in_both_engines(tmp_path: Path) -> None:
    """What nodeSelector cannot say for a spot GPU pool (spot or on-demand, instance types, a
    preferred capacity type): the schema refused `affinity` (a red-team pass). The data pool
    takes it too; the head does not (it stays where head.nodeSelector puts it)."""
    from app.k8s.render import load_values, render_objects

    values = {
        "nodePools": {"l4": {"gpusPerWorker": 1, "affinity": SPOT_OR_ON_DEMAND}},
        "dataPool": {"enabled": True, "affinity": SPOT_OR_ON_DEMAND},
    }
    (job,) = of_kind(helm_render(values), "RayJob")
    head, groups = rayjob_groups(job)
    assert [g["template"]["spec"]["affinity"] for g in groups] == [SPOT_OR_ON_DEMAND] * 2
    assert "affinity" not in head["template"]["spec"]
    assert list(crd_validator("rayjobs").iter_errors(job)) == []
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    (objects,) = render_objects(load_values([path]), release="demo", namespace="ml").values()
    (ours,) = [o for o in objects if o["kind"] == "RayJob"]
    _, our_groups = rayjob_groups(ours)
    assert [g["template"]["spec"] for g in our_groups] == [g["template"]["spec"] for g in groups]
    plain = of_kind(helm_render({"nodePools": {"l4": {"gpusPerWorker": 1}}}), "RayJob")[0]
    assert plain["metadata"]["name"] != job["metadata"]["name"]  # another pod spec, another run


def _requirement(**given: object) -> dict:
    term = {"matchExpressions": [{"key": "karpenter.sh/capacity-type", **given}]}
    required = {"nodeSelectorTerms": [term]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


@pytest.mark.parametrize(
    ("affinity", "says"),
    [
        (_requirement(operator="In"), "operator In and NotIn need values"),
        (_requirement(operator="NotIn", values=[]), "operator In and NotIn need values"),
        (_requirement(operator="Exists", values=["spot"]), "operator Exists and DoesNotExist"),
        (_requirement(operator="Gt", values=["a lot"]), "operator Gt and Lt take exactly one"),
        (_requirement(operator="Lt", values=["1", "2"]), "operator Gt and Lt take exactly one"),
        (_requirement(operator="Near", values=["x"]), "operator"),
        ({"podAntiAffinity": {}}, "podAntiAffinity"),
        ({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 0, "preference": {"matchExpressions": []}}]}}, "weight"),
    ],
)  # fmt: skip
def test_node_affinity_kubernetes_refuses_in_pods_is_refused_at_render(
    affinity: dict, says: str, tmp_path: Path
) -> None:
    """The RayJob would be accepted and its pods refused inside KubeRay: the run would wait its
    whole preRunningDeadlineSeconds for pods that are never made."""
    values = {"nodePools": {"l4": {"gpusPerWorker": 1, "affinity": affinity}}}
    helm, ours = refusals(values, tmp_path)
    assert "affinity" in helm
    assert any(line.startswith("nodePools.l4.affinity") and says in line for line in ours), ours


@pytest.mark.parametrize(
    "values",
    [
        {"env": {"MLFLOW_TRACKING_URI": "https://bob:hunter2@mlflow.example.com"}},
        {"rayJob": {"runtimeEnv": {"env_vars": {"DATABASE_URL": "postgres://u:hunter2@db/x"}}}},
        {"env": {"ARGS": "--store=s3://AKIAX:hunter2@bucket/runs"}},
    ],
    ids=["env", "runtime-env", "inside-a-value"],
)
def test_a_password_in_a_plain_variable_is_refused_and_not_echoed(
    values: dict, tmp_path: Path
) -> None:
    """env: lands in a ConfigMap and runtimeEnv in the RayJob's text, both readable by whoever
    reads the namespace's objects: only the variable's name was checked for credentials."""
    helm, ours = refusals({"nodePools": {"l4": {"gpusPerWorker": 1}}, **values}, tmp_path)
    assert "env" in helm
    text = "\n".join(ours)
    assert "a URI with a password in it (user:password@)" in text and "secretEnv:" in text
    assert "hunter2" not in text, text  # the refusal is printed in CI and Argo CD logs


@pytest.mark.timeout(180)  # linear: a second or two; quadratic in Python's engine: hours
@pytest.mark.parametrize("filler", ["x", "a:", "a://" + ":" * 64], ids=["letters", "colons", "uri"])
def test_a_long_env_value_is_checked_for_credentials_without_rescanning_it(
    filler: str, tmp_path: Path
) -> None:
    """The password check searched a 128 KB env value in 48 s (each start position rescanned
    the run of letters after it), a 1 MiB one for hours: `render` and `submit` hung where Helm
    (RE2) took 0.2 s (a red-team pass). Both engines still render it, and still refuse it with
    a password at its end."""
    from app.k8s.render import load_values, render_objects

    value = filler * ((512 << 10) // len(filler))
    values = {"nodePools": {"l4": {"gpusPerWorker": 1}}, "env": {"APP_CONFIG": value}}
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    for objects in (
        *render_objects(load_values([path]), release="demo", namespace="ml").values(),
        helm_render(values),
    ):
        held = [o["data"].get("APP_CONFIG") for o in of_kind(objects, "ConfigMap")]
        assert value in held
    values["env"]["APP_CONFIG"] = value + " https://bob:hunter2@mlflow.example.com"
    helm, ours = refusals(values, tmp_path)
    assert "env" in helm and "a URI with a password in it (user:password@)" in "\n".join(ours)


CREDENTIALS_BY_FORM = {
    "pem": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n",
    "github": "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "hugging-face": "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345",
    "aws-key-id": "AKIAIOSFODNN7EXAMPLE",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
    "token-in-query": "https://mlflow.example.com/api?token=abcd1234",
    "inside-args": "--hub-token=x --header x-api: sk-abcdefghijklmnopqrstuvwx",
}


@pytest.mark.parametrize("value", CREDENTIALS_BY_FORM.values(), ids=CREDENTIALS_BY_FORM.keys())
def test_a_credential_by_its_form_is_refused_and_not_echoed(value: str, tmp_path: Path) -> None:
    """A PEM key, a GitHub or Hugging Face token, a JWT or a token in a URL's query passed
    env:'s checks under a harmless name (found by a red-team pass)."""
    for values in (
        {"env": {"ARGS": value}},
        {"rayJob": {"runtimeEnv": {"env_vars": {"X": value}}}},
    ):
        helm, ours = refusals({"nodePools": {"l4": {"gpusPerWorker": 1}}, **values}, tmp_path)
        assert "env" in helm
        text = "\n".join(ours)
        assert "a credential by its form" in text and "secretEnv:" in text, text
        secret = value.split("=")[-1].split(": ")[-1].strip().splitlines()[-1]
        assert secret not in text, text


@pytest.mark.parametrize("name", ["DB_PWD", "PGPASS", "PGPASSFILE", "LDAP_PASS", "PWD"])
def test_password_names_are_credential_like(name: str, tmp_path: Path) -> None:
    helm, ours = refusals({"nodePools": {"l4": {"gpusPerWorker": 1}}, "env": {name: "x"}}, tmp_path)
    assert f"invalid propertyName {name!r}" in helm
    assert any(f"env: {name!r} is not allowed" in line for line in ours), ours


def test_uris_without_a_password_stay_plain_variables() -> None:
    plain = {
        "MLFLOW_TRACKING_URI": "https://mlflow.example.com:5000/path",
        "PROFILE_URL": "https://host:8080/users/@me",  # an @ in the path: no userinfo
        "GIT_REMOTE": "ssh://git@github.com/org/repo",  # a user, no password
        "NOTE": "a:b@c",  # not a URI
        "MODEL": "mask-rcnn_resnet50_fpn",  # no token prefix at a word's start
        "WEIGHTS": "https://example.com/w.pt?version=2&task=sketch",  # no credential in the query
        "BYPASS": "1",  # PASS only as a word of its own
    }
    objects = helm_render({"nodePools": {"l4": {"gpusPerWorker": 1}}, "env": plain})
    (config,) = [o for o in of_kind(objects, "ConfigMap") if "MLFLOW_TRACKING_URI" in o["data"]]
    assert plain.items() <= config["data"].items()


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"image": {"tag": "1.0\nfoo: bar"}}, "image.tag"),
        ({"image": {"tag": "-rc1"}}, "image.tag"),
        ({"image": {"repository": "ghcr.io/Example/trainctl"}}, "image.repository"),
        ({"image": {"repository": "trainctl:0.1.0"}}, "image.repository"),  # the tag's place
        # Applied by kubectl or Argo CD, the chart took over the namespace's default account.
        ({"serviceAccount": {"create": True, "name": "default"}},
         "serviceAccount: serviceAccount.create with name default would take over"),
    ],
)  # fmt: skip
def test_images_and_accounts_that_fail_after_scheduling_are_refused_at_render(
    values: dict, says: str, tmp_path: Path
) -> None:
    """Each rendered and was refused only later: InvalidImageName once the GPU nodes were up."""
    _, ours = refusals({"nodePools": {"l4": {"gpusPerWorker": 1}}, **values}, tmp_path)
    assert any(line.startswith(says) for line in ours), ours
    assert "does not match" not in "\n".join(ours)  # the form, not a regex


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"labels": {"team name": "ml"}}, "labels: 'team name' is not allowed: a qualified name"),
        ({"labels": {"team": "a_b_"}}, "labels.team: 'a_b_' is not allowed: a label value"),
        ({"nodePools": {"l4": {"nodeSelector": {"a b": "x"}}}},
         "nodePools.l4.nodeSelector: 'a b' is not allowed: a qualified name"),
        ({"nodePools": {"l4": {"acceleratorType": "NVIDIA L4"}}},
         "nodePools.l4.acceleratorType: 'NVIDIA L4' is not allowed: Ray's accelerator type"),
    ],
)  # fmt: skip
def test_label_keys_values_and_accelerator_types_are_refused_in_words(
    values: dict, says: str, tmp_path: Path
) -> None:
    """A red-team pass: these were refused with the schema's regular expression quoted."""
    from app.k8s.values import coalesce

    helm, ours = refusals(coalesce({"nodePools": {"l4": {"gpusPerWorker": 1}}}, values), tmp_path)
    assert helm and any(line.startswith(says) for line in ours), ours
    assert "does not match" not in "\n".join(ours)


@pytest.mark.parametrize(
    "repository",
    [
        "trainctl", "rayproject/ray", "nvcr.io/nvidia/pytorch", "localhost:5000/trainctl",
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/team/trainctl",
        "us-docker.pkg.dev/project/repo/trainctl", "my_org/my__image",
    ],
)  # fmt: skip
def test_the_image_names_registries_use_render(repository: str) -> None:
    values = {"nodePools": {"l4": {}}, "image": {"repository": repository, "tag": "v1.2_rc-3"}}
    (job,) = of_kind(helm_render(values), "RayJob")
    head, _ = rayjob_groups(job)
    (container,) = containers(head["template"])
    assert container["image"] == f"{repository}:v1.2_rc-3"


def test_pull_secrets_take_names_or_kubernetes_own_form_in_both_engines(tmp_path: Path) -> None:
    """`imagePullSecrets: [{name: regcred}]` is the form most charts take: it was refused as
    "not of type 'string'"."""
    from app.k8s.render import load_values, render_objects

    values = {"nodePools": {"l4": {}}, "schedule": {"enabled": True},
              "imagePullSecrets": [{"name": "regcred"}, "mirror"]}  # fmt: skip
    expected = [{"name": "regcred"}, {"name": "mirror"}]
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    (ours,) = render_objects(load_values([path]), release="demo", namespace="ml").values()
    for objects in (helm_render(values, release="demo", namespace="ml"), ours):
        (job,) = of_kind(objects, "RayJob")
        head, (group,) = rayjob_groups(job)
        for template in (head["template"], group["template"]):
            assert template["spec"]["imagePullSecrets"] == expected
    (cronjob,) = of_kind(helm_render(values), "CronJob")
    assert cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["imagePullSecrets"] == (
        expected
    )
    values["imagePullSecrets"] = [{"name": "Bad_Name"}]
    _, ours = refusals(values, tmp_path)
    assert ours == [
        "imagePullSecrets.0: {'name': 'Bad_Name'} is not allowed: A Secret's name (lowercase "
        "letters, digits, '-' and '.', at most 253), given as regcred or as {name: regcred}."
    ]


def test_a_credential_under_a_credential_name_is_refused_in_whole_words(tmp_path: Path) -> None:
    """The value's refusal read `env.MY_TOKEN: *** allowed: a credential by its form`: the
    masking of `MY_TOKEN: <word>` took its "not" (a red-team pass)."""
    token = CREDENTIALS_BY_FORM["github"]
    values = {"nodePools": {"l4": {"gpusPerWorker": 1}}, "env": {"MY_TOKEN": token}}
    _, ours = refusals(values, tmp_path)
    assert any(
        line.startswith("env.MY_TOKEN holds a value that is not allowed: a credential by its form")
        for line in ours
    ), ours
    assert "env: 'MY_TOKEN' is not allowed: a credential-like name" in "\n".join(ours)
    assert token not in "\n".join(ours)


@pytest.mark.parametrize(
    "mount",
    ["/dev/shm", "/etc/trainctl", "/home/ray", "/home/ray/trainctl", "/tmp", "/usr/x", "/home"],
)
def test_the_volume_is_not_mounted_on_or_over_a_folder_the_pods_need(
    mount: str, tmp_path: Path
) -> None:
    """/dev/shm collided with the chart's own mount (the API server refuses the pod), the
    schedule's /etc/trainctl made every nightly Job's pod invalid, and /home/ray hid the
    image's Python: each rendered cleanly in both engines (a red-team pass)."""
    values = {"nodePools": {"l4": {"gpusPerWorker": 1}}, "storage": {"mountPath": mount}}
    helm, ours = refusals(values, tmp_path)
    assert "mountPath" in helm
    (problem,) = ours
    assert problem.startswith(
        f"storage.mountPath: {mount!r} is not allowed: the shared volume may not be mounted on a "
        "system folder or over one"
    )
    assert problem.endswith("mount it elsewhere, e.g. /mnt/trainctl"), problem


@pytest.mark.parametrize("mount", ["/mnt/shared", "/data", "/home/alice/runs", "/var/lib/runs"])
def test_a_volume_mounted_elsewhere_renders(mount: str) -> None:
    values = {"nodePools": {"l4": {"gpusPerWorker": 1}}, "storage": {"mountPath": mount}}
    job = next(o for o in helm_render(values) if o["kind"] == "RayJob")
    assert mount in json.dumps(job)


DELETION_REFUSED = {
    # (deletionStrategy, what trainctl says of it): each rendered in both engines, and the API
    # server refused the RayJob, failing the GitOps sync (a red-team pass).
    "unknown-policy": (
        {"deletionRules": [{"policy": "DeleteEverything", "condition": {"jobStatus": "FAILED"}}]},
        "'DeleteEverything' is not one of",
    ),
    "unknown-status": (
        {"deletionRules": [{"policy": "DeleteCluster", "condition": {"jobStatus": "DONE"}}]},
        "'DONE' is not one of ['SUCCEEDED', 'FAILED']",
    ),
    "unknown-key": ({"bogus": 1}, "'bogus' was unexpected"),
    "both-kinds": (
        {
            "onSuccess": {"policy": "DeleteCluster"},
            "onFailure": {"policy": "DeleteNone"},
            "deletionRules": [{"policy": "DeleteSelf", "condition": {"jobStatus": "FAILED"}}],
        },
        "the legacy onSuccess/onFailure policies and deletionRules cannot be used together",
    ),
    "half-legacy": ({"onSuccess": {"policy": "DeleteCluster"}}, "onSuccess and onFailure"),
    "both-conditions": (
        {
            "deletionRules": [
                {
                    "policy": "DeleteSelf",
                    "condition": {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed"},
                }
            ]
        },
        "a deletion condition takes jobStatus or jobDeploymentStatus, not both",
    ),
}


@pytest.mark.parametrize("case", DELETION_REFUSED)
def test_a_deletion_strategy_is_held_to_kuberays_crd(case: str, tmp_path: Path) -> None:
    strategy, says = DELETION_REFUSED[case]
    job = {"shutdownAfterJobFinishes": False, "ttlSecondsAfterFinished": 0}
    values = {
        "nodePools": {"l4": {"gpusPerWorker": 1}},
        "rayJob": {**job, "deletionStrategy": strategy},
    }
    helm, ours = refusals(values, tmp_path)
    assert "deletionStrategy" in helm
    assert any(line.startswith("rayJob.deletionStrategy") and says in line for line in ours), ours
    kept = {
        "deletionRules": [
            {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 60}},
            {"policy": "DeleteSelf", "condition": {"jobDeploymentStatus": "Failed"}},
        ]
    }
    values["rayJob"]["deletionStrategy"] = kept
    (rendered,) = of_kind(helm_render(values), "RayJob")
    assert rendered["spec"]["deletionStrategy"] == kept
    assert list(crd_validator("rayjobs").iter_errors(rendered)) == []


@pytest.mark.parametrize("size", ["0", "0Gi", "0.0Ti", ".0", 0])
def test_a_claim_of_no_storage_is_refused(size: object, tmp_path: Path) -> None:
    """`storage.size: "0"` rendered in both engines; the API server refuses such a claim and
    every Ray pod then waits for it until the run's deadline (a red-team pass)."""
    values = {"nodePools": {"l4": {"gpusPerWorker": 1}}, "storage": {"size": size}}
    helm, ours = refusals(values, tmp_path)
    assert "size" in helm
    (problem,) = ours
    assert problem.startswith("storage.size: ") and "0" in problem, problem
    sized = {**values, "storage": {"size": "0.5Ti"}}
    (claim,) = of_kind(helm_render(sized), "PersistentVolumeClaim")
    assert claim["spec"]["resources"]["requests"]["storage"] == "0.5Ti"


def test_the_notes_say_how_to_create_an_auth_secret_the_values_name() -> None:
    """The README's `helm install -f examples/values-three-pools.yaml` named a Secret no step
    created, and the notes said only that token auth was on: the Ray pods wait for it."""
    from tests.contract.k8s_support import helm_notes

    pool = {"nodePools": {"l4": {"gpusPerWorker": 1}}}
    notes = helm_notes({**pool, "rayAuth": {"existingSecret": "train-ray-auth"}})
    assert "the Ray pods do not start until it exists" in notes
    assert "kubectl -n ml create secret generic train-ray-auth --from-literal=auth_token=" in notes
    assert "create secret" not in helm_notes(pool)  # the chart creates its own


def test_every_object_says_the_chart_and_version_it_came_from_but_no_pod_template_does(
    three_pools: list[dict],
) -> None:
    """`helm.sh/chart`, as `helm create`'s charts set it: which chart release an object came
    from, for `kubectl get -l` after an upgrade. Not on pod templates, where a chart release
    alone would change every pod's spec."""
    import yaml

    chart = yaml.safe_load((Path(__file__).parents[2] / "charts/trainctl/Chart.yaml").read_text())
    expected = f"{chart['name']}-{chart['version']}"

    def pod_template_labels(node: object) -> list[dict]:
        if isinstance(node, list):
            return [labels for item in node for labels in pod_template_labels(item)]
        if not isinstance(node, dict):
            return []
        found = [node["template"]["metadata"].get("labels", {})] if isinstance(
            node.get("template"), dict) and "metadata" in node["template"] else []  # fmt: skip
        return found + [labels for value in node.values() for labels in pod_template_labels(value)]

    templates = [labels for obj in three_pools for labels in pod_template_labels(obj)]
    assert len(templates) >= 6, templates  # a head and a worker group in each of 3 RayJobs
    assert all("helm.sh/chart" not in labels for labels in templates)
    for obj in three_pools:
        assert obj["metadata"]["labels"]["helm.sh/chart"] == expected, obj["metadata"]


def test_every_pattern_of_the_schema_is_said_in_words() -> None:
    """A value a pattern refuses is told what it should be, never the pattern: a raw regex
    (`'Bad_Q' does not match '^([a-z0-9]([-a-z0-9]*...`) reached the user for a scheduler's
    queue (a red-team pass). Each shared definition with a pattern says it in words."""
    from tests.hostile.support import assert_refused, trainctl

    schema = json.loads(
        (Path(__file__).parents[2] / "charts/trainctl/values.schema.json").read_text()
    )
    unsaid = [name for name, rule in schema["definitions"].items()
              if "pattern" in rule and "description" not in rule]  # fmt: skip
    assert unsaid == []
    result = trainctl(
        "render", "--set", "scheduler.name=volcano,scheduler.queue=Bad_Q,nodePools.a.replicas=1"
    )
    assert_refused(result, 2, "scheduler.queue: 'Bad_Q' is not allowed: empty, or a name of")
    assert "does not match" not in result.text
