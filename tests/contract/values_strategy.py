"""Hypothesis strategies for chart values files that values.schema.json accepts.

They reach every optional block of the chart (pools and pool defaults, storage modes: volume,
s3, gcs; head, RayJob options, auth, network policy, metrics, service account, Kueue, schedule)
with the inputs where two template engines drift apart: odd strings (quotes, colons, newlines,
template braces, non-ASCII), and numbers Go prints differently from Python (1e21, 0.1, 2^64 - 1,
1.0).
Some combinations are refused by the chart's rules (app/k8s/rules.py); both renderers must then
refuse them alike.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# Names Kubernetes accepts (DNS labels), short enough for every derived name.
NAME = st.from_regex(r"\A[a-z]([a-z0-9-]{0,10}[a-z0-9])?\Z")
LABEL_KEY = st.one_of(
    st.from_regex(r"\A[A-Za-z0-9]([-A-Za-z0-9_.]{0,12}[A-Za-z0-9])?\Z"),
    st.builds(
        lambda prefix, name: f"{prefix}/{name}", st.sampled_from(["example.com", "x.io"]), NAME
    ),
)
LABEL_VALUE = st.from_regex(r"\A([A-Za-z0-9]([-A-Za-z0-9_.]{0,12}[A-Za-z0-9])?)?\Z")
# Text that YAML, Go templates and jinja2 each treat specially.
ODD = st.sampled_from(
    ["", "yes", "null", "0x1F", "1e3", "'", '"', ": ", "#", "{{ .Values }}", "{% raw %}", "\n",
     "a\tb", "ünï", "\u2028", "- x", "[1]", "&a", "*a", "!!str", "%", "\\"]
)  # fmt: skip
ODD_TEXT = st.lists(st.one_of(ODD, st.text(max_size=3)), max_size=4).map("".join)
# Numbers whose text differs between Go and Python formatting, and plain ones.
NUMBER = st.sampled_from([0, 1, 2, 7, 0.5, 1.0, 0.1, 1.5, 100000000, 1e21, 1e-7, 3.25, 12.0])
QUANTITY = st.one_of(
    st.sampled_from(["500m", "1", "2", "8", "1.5", "32Gi", "100Mi", "1e3", "0.5Ti", "16G"]),
    st.sampled_from([1, 2, 4, 0.5, 1.5, 8, 100000000, 1e21]),
)
SMALL_INT = st.integers(min_value=1, max_value=5)


def _tolerations() -> st.SearchStrategy[list[dict[str, Any]]]:
    toleration = st.fixed_dictionaries(
        {"key": st.sampled_from(["nvidia.com/gpu", "dedicated", "x.io/pool"])},
        optional={
            "operator": st.sampled_from(["Exists", "Equal"]),
            "value": LABEL_VALUE,
            "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
            "tolerationSeconds": st.integers(min_value=0, max_value=10**9),
        },
    )
    return st.lists(toleration, max_size=2)


def _train() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "dataset": st.sampled_from(["digits", "synthetic", "cifar10", "parquet"]),
            "model": st.sampled_from(["cnn", "resnet18", "vit"]),
            "epochs": st.integers(min_value=1, max_value=100000),
            "global_batch_size": st.sampled_from([1, 64, 512, 16777216]),
            "lr": st.sampled_from([0.1, 0.001, 1e-5, 3e-4, 1, 10]),
            "weight_decay": st.sampled_from([0, 0.01, 0.5, 1]),
            "seed": st.sampled_from([0, 42, 2**31, 2**53 - 1, 2**53, 2**64 - 1]),
            "amp": st.sampled_from(["auto", "off", "bf16"]),
            "compile": st.sampled_from(["auto", "on", "off"]),
            "cpus_per_worker": st.sampled_from([1, 0.5, 2.5, 16]),
            "capacity_wait_s": st.sampled_from([0, 0.5, 600, 3600]),
            "max_failures": st.integers(min_value=-1, max_value=10),
            "checkpoints_to_keep": st.integers(min_value=1, max_value=20),
            "checkpoint_metric": st.sampled_from(["val_accuracy", "val_loss"]),
            "tensorboard": st.booleans(),
        },
    )


def _pool(*, complete: bool) -> st.SearchStrategy[dict[str, Any]]:
    fields = {
        "enabled": st.booleans(),
        "nodeSelector": st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=2),
        "tolerations": _tolerations(),
        "replicas": SMALL_INT,
        "gpusPerWorker": st.integers(min_value=0, max_value=8),
        "cpusPerWorker": QUANTITY,
        "memoryPerWorker": QUANTITY,
        "acceleratorType": st.sampled_from(["", "A100", "L4", "H100-80GB"]),
        "train": _train(),
    }
    if complete:
        del fields["enabled"]  # a pool that renders: disabled ones are covered by poolDefaults
        return st.fixed_dictionaries({"enabled": st.just(True)}, optional=fields)
    return st.fixed_dictionaries({}, optional=fields)


def _storage() -> st.SearchStrategy[dict[str, Any]]:
    """The volume (storage.type pvc, today's default), or a bucket (s3, gcs)."""
    sub_paths = {
        "runsSubPath": st.sampled_from(["runs", "a/b", "r.1"]),
        "dataSubPath": st.sampled_from(["data", "d_2/x"]),
    }
    volume = st.fixed_dictionaries(
        {},
        optional={
            # A bucket type without a bucket: refused by the schema, in both engines alike.
            "type": st.sampled_from(["pvc", "pvc", "pvc", "s3"]),
            "existingClaim": st.one_of(st.just(""), NAME),
            "storageClassName": st.sampled_from(["", "nfs", "efs-sc"]),
            "size": QUANTITY,
            "volumeName": st.sampled_from(["", "pv-1"]),
            "keepOnUninstall": st.booleans(),
            "mountPath": st.sampled_from(["/mnt/trainctl", "/data/x y", "/m"]),
            **sub_paths,
        },
    )
    common = {
        "prefix": st.sampled_from(["", "trainctl", "a/b.c", "x_1/-y"]),
        "credentialsSecret": st.one_of(st.just(""), NAME),
        "existingClaim": st.one_of(st.just(""), NAME),  # ignored with a bucket
        **sub_paths,
    }
    s3 = st.fixed_dictionaries(
        {"type": st.just("s3"), "bucket": st.sampled_from(["ml-runs", "a.b_c", "b12"])},
        optional={
            "endpoint": st.sampled_from(["", "http://minio.minio:9000", "https://s3.x.io"]),
            "region": st.sampled_from(["", "us-east-1"]),
            **common,
        },
    )
    gcs = st.fixed_dictionaries(
        {"type": st.just("gcs"), "bucket": st.sampled_from(["ml-runs", "a.b_c", "b12"])},
        # An endpoint (s3 only) with gcs is refused by the schema, in both engines alike.
        optional={"endpoint": st.sampled_from(["", "", "", "http://minio:9000"]), **common},
    )
    return st.one_of(volume, s3, gcs)


def _resources() -> st.SearchStrategy[dict[str, Any]]:
    pair = st.fixed_dictionaries({"cpu": QUANTITY, "memory": QUANTITY})
    return st.fixed_dictionaries({"requests": pair, "limits": pair})


def values_files() -> st.SearchStrategy[dict[str, Any]]:
    """A user's values file: only what they chose to set, the chart's defaults for the rest."""
    optional = {
        "image": st.fixed_dictionaries(
            {},
            optional={
                "repository": st.sampled_from(["trainctl", "registry.example.com:5000/ml/t"]),
                "tag": st.sampled_from(["", "1.2.3", "latest"]),
                "digest": st.sampled_from(["", "sha256:" + "ab" * 32]),
                "pullPolicy": st.sampled_from(["Always", "IfNotPresent", "Never"]),
            },
        ),
        "imagePullSecrets": st.lists(NAME, max_size=2),
        "train": _train(),
        "env": st.dictionaries(st.from_regex(r"\A[A-Z][A-Z0-9_]{0,8}\Z"), ODD_TEXT, max_size=3),
        "secretEnv": st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["HF_TOKEN", "WANDB_API_KEY"]),
                    "secretName": NAME,
                    "key": st.sampled_from(["token", "api-key"]),
                }
            ),
            max_size=2,
            unique_by=lambda item: item["name"],
        ),
        "secretEnvFrom": st.lists(NAME, max_size=2),
        "storage": _storage(),
        "sharedMemorySize": QUANTITY,
        "gpuResourceName": st.sampled_from(["nvidia.com/gpu", "amd.com/gpu"]),
        "head": st.fixed_dictionaries(
            {},
            optional={
                "nodeSelector": st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=2),
                "tolerations": _tolerations(),
                "cpu": QUANTITY,
                "memory": QUANTITY,
                "rayStartParams": st.dictionaries(
                    st.sampled_from(["num-cpus", "object-store-memory", "dashboard-host"]),
                    st.sampled_from(["0", "1000000000", "0.0.0.0", "a b"]),
                    max_size=2,
                ),
            },
        ),
        "poolDefaults": _pool(complete=False),
        "rayJob": st.fixed_dictionaries(
            {},
            optional={
                "runtimeEnv": st.dictionaries(
                    st.just("env_vars"), st.dictionaries(st.just("X"), ODD_TEXT), max_size=1
                ),
                "submissionMode": st.sampled_from(["K8sJobMode", "HTTPMode"]),
                "backoffLimit": st.integers(min_value=0, max_value=100),
                "preRunningDeadlineSeconds": st.integers(min_value=1, max_value=10**6),
                "activeDeadlineSeconds": st.integers(min_value=1, max_value=10**7),
                "shutdownAfterJobFinishes": st.booleans(),
                "ttlSecondsAfterFinished": st.integers(min_value=0, max_value=10**5),
                "submitter": st.fixed_dictionaries({"resources": _resources()}),
            },
        ),
        "rayAuth": st.fixed_dictionaries(
            {}, optional={"enabled": st.booleans(), "existingSecret": st.one_of(st.just(""), NAME)}
        ),
        "networkPolicy": st.fixed_dictionaries({}, optional={"enabled": st.booleans()}),
        "metrics": st.fixed_dictionaries(
            {},
            optional={
                "enabled": st.booleans(),
                "podMonitor": st.fixed_dictionaries(
                    {},
                    optional={
                        "enabled": st.booleans(),
                        "interval": st.sampled_from(["30s", "1m30s", "500ms"]),
                        "labels": st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=2),
                    },
                ),
            },
        ),
        "serviceAccount": st.fixed_dictionaries(
            {},
            optional={
                "create": st.booleans(),
                "name": st.one_of(st.just(""), NAME),
                "annotations": st.dictionaries(
                    st.one_of(
                        st.sampled_from(
                            ["eks.amazonaws.com/role-arn", "iam.gke.io/gcp-service-account"]
                        ),
                        LABEL_KEY,
                    ),
                    st.one_of(st.just("arn:aws:iam::1:role/r"), ODD_TEXT),
                    max_size=2,
                ),
            },
        ),
        "kueue": st.fixed_dictionaries(
            {},
            optional={
                "enabled": st.booleans(),
                "queueName": st.one_of(st.just(""), NAME),
                "priorityClass": st.sampled_from(["", "high"]),
            },
        ),
        "schedule": st.fixed_dictionaries(
            {},
            optional={
                "enabled": st.booleans(),
                "cron": st.sampled_from(["@daily", "0 3 * * 1", "*/15 * * * *"]),
                "timeZone": st.sampled_from(["", "Etc/UTC", "Europe/Paris"]),
                "concurrencyPolicy": st.sampled_from(["Allow", "Forbid", "Replace"]),
            },
        ),
        "runTag": st.sampled_from(["", "v2", "exp_1.a"]),
        "labels": st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=3),
        "runAnnotations": st.dictionaries(LABEL_KEY, ODD_TEXT, max_size=2),
    }
    pools = st.dictionaries(NAME, _pool(complete=True), min_size=1, max_size=3)
    return st.fixed_dictionaries({"nodePools": pools}, optional=optional)
