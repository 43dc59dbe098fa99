"""`trainctl submit` decisions, as pure functions: what to create, apply, keep or attach to;
where a run folder is; what an API failure means; which pod holds the logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.errors import (
    EXIT_CLUSTER,
    EXIT_INVALID,
    ClusterError,
    ConfigError,
    RunFailed,
    connection_cause,
)
from app.k8s.api_errors import ApiFailure, explain, no_config, unreachable
from app.k8s.plan import (
    bucket_run_dir,
    config_source,
    local_run_dir,
    plan_submit,
    pool_objects,
    resolve_namespace,
    resource_path,
)
from app.k8s.podlogs import log_target, pick_pod
from app.k8s.submit import _run_dir as submit_run_dir

NAME = "demo-a100-1a2b3c4d"


def _obj(kind: str, name: str, **extra: Any) -> dict[str, Any]:
    api = {"RayJob": "ray.io/v1", "NetworkPolicy": "networking.k8s.io/v1"}.get(kind, "v1")
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name}, **extra}


def _rayjob(mount: str = "/mnt/trainctl", submission_mode: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "rayClusterSpec": {
            "headGroupSpec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "ray-head",
                                "envFrom": [{"configMapRef": {"name": NAME}}],
                                "env": [{"name": "TRAIN_EPOCHS", "value": "7"}],
                                "volumeMounts": [
                                    {"name": "shared", "mountPath": mount},
                                    {"name": "dshm", "mountPath": "/dev/shm"},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "shared", "persistentVolumeClaim": {"claimName": "x"}},
                            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
                        ],
                    }
                }
            }
        }
    }
    if submission_mode:
        spec["submissionMode"] = submission_mode
    return _obj("RayJob", NAME, spec=spec)


def _pool(storage_path: str = "/mnt/trainctl/runs") -> list[dict[str, Any]]:
    return [
        _rayjob(),
        _obj("NetworkPolicy", NAME),
        _obj("ConfigMap", NAME, data={"TRAIN_RUN_NAME": NAME, "TRAIN_STORAGE_PATH": storage_path}),
        _obj("PersistentVolumeClaim", "demo-shared"),
        _obj(
            "Secret",
            "demo-ray-auth",
            metadata={"name": "demo-ray-auth"},
        ),
        _obj("ServiceAccount", "demo-ray"),
    ]


def _actions(steps: list[Any]) -> list[tuple[str, str, str]]:
    return [(s.action, s.kind, s.name) for s in steps]


def test_a_new_run_creates_dependencies_first_and_the_rayjob_last() -> None:
    steps = plan_submit(_pool(), rayjob_exists=False, existing=set())
    assert _actions(steps) == [
        ("apply", "ServiceAccount", "demo-ray"),
        ("create", "Secret", "demo-ray-auth"),
        ("apply", "ConfigMap", NAME),
        ("create", "PersistentVolumeClaim", "demo-shared"),
        ("apply", "NetworkPolicy", NAME),
        ("create", "RayJob", NAME),
    ]


def test_an_existing_rayjob_is_attached_to_and_nothing_else_is_touched() -> None:
    steps = plan_submit(_pool(), rayjob_exists=True, existing={("Secret", "demo-ray-auth")})
    assert _actions(steps) == [("attach", "RayJob", NAME)]
    assert "attaching" in steps[0].describe()


def test_existing_claim_and_secret_are_kept_never_overwritten() -> None:
    existing = {("Secret", "demo-ray-auth"), ("PersistentVolumeClaim", "demo-shared")}
    steps = plan_submit(_pool(), rayjob_exists=False, existing=existing)
    assert ("keep", "Secret", "demo-ray-auth") in _actions(steps)
    assert ("keep", "PersistentVolumeClaim", "demo-shared") in _actions(steps)
    assert steps[-1].action == "create" and steps[-1].kind == "RayJob"


def test_the_create_only_annotation_protects_any_kind() -> None:
    marked = _obj("ConfigMap", "tokens")
    marked["metadata"]["annotations"] = {"trainctl.io/create-only": "true"}
    steps = plan_submit(
        [_rayjob(), marked], rayjob_exists=False, existing={("ConfigMap", "tokens")}
    )
    assert ("keep", "ConfigMap", "tokens") in _actions(steps)


def test_a_kind_submit_cannot_apply_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"'Deployment'.*kinds it applies"):
        plan_submit([_rayjob(), _obj("Deployment", "x")], rayjob_exists=False, existing=set())


def test_a_pool_must_render_exactly_one_rayjob() -> None:
    with pytest.raises(ConfigError, match=r"exactly one RayJob.*produced 0"):
        plan_submit([_obj("ConfigMap", "x")], rayjob_exists=False, existing=set())


def test_an_unknown_pool_lists_the_enabled_ones() -> None:
    rendered = {"a100": [_rayjob()], "l4": []}
    assert pool_objects(rendered, "a100")[0]["kind"] == "RayJob"
    with pytest.raises(ConfigError, match=r"'t4' is not an enabled pool.*a100, l4"):
        pool_objects(rendered, "t4")
    with pytest.raises(ConfigError, match="none"):
        pool_objects({}, "t4")


@pytest.mark.parametrize(
    ("kind", "name", "path"),
    [
        ("RayJob", NAME, f"/apis/ray.io/v1/namespaces/ml/rayjobs/{NAME}"),
        ("RayJob", None, "/apis/ray.io/v1/namespaces/ml/rayjobs"),
        ("ConfigMap", "c", "/api/v1/namespaces/ml/configmaps/c"),
        ("PersistentVolumeClaim", "p", "/api/v1/namespaces/ml/persistentvolumeclaims/p"),
        ("NetworkPolicy", "n", "/apis/networking.k8s.io/v1/namespaces/ml/networkpolicies/n"),
        ("Role", "r", "/apis/rbac.authorization.k8s.io/v1/namespaces/ml/roles/r"),
    ],
)
def test_resource_paths(kind: str, name: str | None, path: str) -> None:
    assert resource_path(kind, "ml", name) == path


def test_namespace_flag_then_context_then_default() -> None:
    assert resolve_namespace("a", "b") == "a"
    assert resolve_namespace(None, "b") == "b"
    assert resolve_namespace(None, None) == "default"


def test_in_cluster_config_only_inside_a_pod_with_a_token() -> None:
    assert config_source({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, True) == "pod"
    assert config_source({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False) == "kubeconfig"
    assert config_source({}, True) == "kubeconfig"


def test_the_local_run_dir_follows_the_storage_path_inside_the_mount(tmp_path: Path) -> None:
    assert local_run_dir(_pool(), tmp_path) == tmp_path / "runs" / NAME
    assert local_run_dir(_pool("/mnt/trainctl"), tmp_path) == tmp_path / NAME
    with pytest.raises(ConfigError, match="not on the shared volume"):
        local_run_dir(_pool("/elsewhere/runs"), tmp_path)


def test_with_object_storage_the_run_dir_is_in_the_bucket(tmp_path: Path) -> None:
    assert bucket_run_dir(_pool()) is None  # a volume: --storage-mount finds it
    objects = _pool("s3://ml-runs/trainctl/runs")
    objects[2]["data"]["TRAIN_STORAGE_ENDPOINT"] = "http://minio.minio:9000"
    run_dir = bucket_run_dir(objects)
    assert str(run_dir) == f"s3://ml-runs/trainctl/runs/{NAME}"
    assert run_dir.endpoint == "http://minio.minio:9000"
    assert str(bucket_run_dir(_pool("gs://b_1/runs"))) == f"gs://b_1/runs/{NAME}"
    with pytest.raises(ConfigError, match="not on a volume"):
        submit_run_dir(objects, tmp_path)  # --storage-mount means nothing here
    assert submit_run_dir(objects, None) == run_dir
    with pytest.raises(ConfigError, match="TRAIN_STORAGE_PATH='s3://Bad/runs'"):
        bucket_run_dir(_pool("s3://Bad/runs"))


# --- API failures -----------------------------------------------------------------------------
def _status(code: int, message: str, reason: str, details: dict[str, Any] | None = None) -> str:
    body = {"kind": "Status", "status": "Failure", "message": message, "reason": reason}
    return json.dumps({**body, "details": details or {}, "code": code})


def _explain(code: int, body: str, kind: str = "RayJob") -> Any:
    failure = ApiFailure.parse(code, body)
    return explain(failure, verb="create", kind=kind, name=NAME, namespace="ml")


def test_missing_crd_says_to_install_kuberay() -> None:
    for body in (
        _status(404, "the server could not find the requested resource", "NotFound"),
        "404 page not found",
    ):
        err = _explain(404, body)
        assert isinstance(err, ClusterError) and err.exit_code == EXIT_CLUSTER
        assert "RayJob custom resource (ray.io/v1) is not installed" in str(err)
        assert "kuberay-operator --version 1.7.0" in str(err)


def test_a_404_from_a_server_that_is_not_kubernetes_says_so() -> None:
    """Any HTTP server answering 404 (a wrong port, an ingress) was said as "the RayJob custom
    resource is not installed: install the KubeRay operator" (a red-team pass)."""
    page = "<html><title>Error response</title><p>Error code: 404</p></html>"
    assert ApiFailure.parse(404, page).not_found() == "server"
    err = _explain(404, page)
    assert isinstance(err, ClusterError) and err.exit_code == EXIT_CLUSTER
    assert "does not look like a Kubernetes API server" in str(err)
    assert "Check the kubeconfig's server address" in str(err) and "KubeRay" not in str(err)
    assert ApiFailure.parse(500, page).not_found() is None


def test_missing_namespace_and_missing_object_are_told_apart() -> None:
    namespace = _status(
        404, 'namespaces "ml" not found', "NotFound", {"name": "ml", "kind": "namespaces"}
    )
    assert ApiFailure.parse(404, namespace).not_found() == "namespace"
    assert "namespace ml does not exist" in str(_explain(404, namespace))
    obj = _status(
        404, "not found", "NotFound", {"name": NAME, "kind": "rayjobs", "group": "ray.io"}
    )
    assert ApiFailure.parse(404, obj).not_found() == "object"
    assert ApiFailure.parse(500, obj).not_found() is None


def test_rbac_forbidden_quotes_the_server_and_names_the_verb() -> None:
    message = (
        'rayjobs.ray.io is forbidden: User "system:serviceaccount:ml:trainer" cannot create '
        'resource "rayjobs" in API group "ray.io" in the namespace "ml"'
    )
    err = _explain(403, _status(403, message, "Forbidden"))
    assert isinstance(err, ClusterError)
    assert str(err).startswith(f"forbidden by RBAC: cannot create rayjob/{NAME} in namespace ml")
    assert "system:serviceaccount:ml:trainer" in str(err)


def test_unauthorized_blames_the_credentials() -> None:
    assert "401 Unauthorized" in str(_explain(401, _status(401, "Unauthorized", "Unauthorized")))


def test_server_side_validation_is_invalid_input() -> None:
    body = _status(422, 'RayJob "x" is invalid: spec.backoffLimit: Invalid value', "Invalid")
    err = _explain(422, body)
    assert isinstance(err, ConfigError) and err.exit_code == EXIT_INVALID
    assert "spec.backoffLimit: Invalid value" in str(err)


def test_other_server_errors_keep_status_and_message() -> None:
    err = _explain(503, _status(503, "etcd is down", "ServiceUnavailable"))
    assert "(503 ServiceUnavailable): etcd is down" in str(err)


def test_unreachable_and_missing_config_give_the_root_cause() -> None:
    inner = ConnectionRefusedError(111, "Connection refused")

    class Wrapper(Exception):
        def __init__(self) -> None:
            super().__init__("HTTPSConnectionPool(host='h', port=6443): Max retries exceeded")
            self.reason = inner

    assert connection_cause(Wrapper()) == "[Errno 111] Connection refused"
    assert "at https://h:6443: [Errno 111]" in str(unreachable("https://h:6443", Wrapper()))
    # urllib3's leftover budget, to the tenth (it printed 29.999718081999163: a red-team pass).
    slow = TimeoutError("HTTPSConnectionPool(host='h', port=6443): Read timed out. "
                        "(read timeout=29.999718081999163)")  # fmt: skip
    said = connection_cause(slow)
    assert said.endswith("Read timed out. (read timeout=30.0)"), said
    err = no_config(False, "/nowhere/config", FileNotFoundError("No such file."))
    assert "kubeconfig /nowhere/config could not be loaded (No such file)" in str(err)
    assert "service account" in str(no_config(True, "", OSError("token missing")))


# --- logs -----------------------------------------------------------------------------------
def _with_status(rayjob: dict[str, Any], cluster: str = "") -> dict[str, Any]:
    return {**rayjob, "status": {"rayClusterName": cluster}}


def test_logs_default_to_the_submitter_job_pods() -> None:
    target = log_target(_with_status(_rayjob()), None)
    assert target.label_selector == f"job-name={NAME}" and target.container is None


def test_head_logs_need_the_ray_cluster_name() -> None:
    target = log_target(_with_status(_rayjob(), "c-1"), "head")
    assert target.label_selector == "ray.io/cluster=c-1,ray.io/node-type=head"
    with pytest.raises(RunFailed, match="no Ray cluster yet"):
        log_target(_with_status(_rayjob()), "head")


def test_sidecar_submitter_is_a_container_of_the_head_pod() -> None:
    target = log_target(_with_status(_rayjob(submission_mode="SidecarMode"), "c-1"), "submitter")
    assert target.container == "ray-job-submitter"
    assert "ray.io/node-type=head" in target.label_selector


def test_http_mode_has_no_submitter_and_defaults_to_the_head() -> None:
    rayjob = _with_status(_rayjob(submission_mode="HTTPMode"), "c-1")
    assert log_target(rayjob, None).label_selector.startswith("ray.io/cluster=c-1")
    with pytest.raises(ConfigError, match="no submitter pod; use --head"):
        log_target(rayjob, "submitter")


def test_the_newest_pod_wins_and_none_is_explained() -> None:
    pods = [
        {"metadata": {"name": "old", "creationTimestamp": "2030-01-01T00:00:00Z"}},
        {"metadata": {"name": "new", "creationTimestamp": "2030-01-01T00:05:00Z"}},
    ]
    target = log_target(_with_status(_rayjob()), None)
    assert pick_pod(pods, target)["metadata"]["name"] == "new"
    with pytest.raises(RunFailed, match="no pod found for the submitter") as gone:
        pick_pod([], target)
    # Where the logs are once the pods are gone (it named only metrics.jsonl and summary.json).
    name = _rayjob()["metadata"]["name"]
    assert f"`trainctl logs {name} --storage <the volume's mount, or the bucket> --driver`" in str(
        gone.value
    )
