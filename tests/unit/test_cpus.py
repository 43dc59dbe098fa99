"""This process's usable CPUs (app/cpus.py), from real cgroup-format files the tests write in
the layouts the kernel and container runtimes give them, and what `check` and the local Ray
cluster make of them (no Ray cluster started)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.cpus import cgroup_quota, usable_cpus
from app.ray_cluster import DATA_CPUS, local_num_cpus, local_resources
from app.settings import TrainSettings
from tests import parquet_support as parquet
from tests.hostile.support import trainctl_with
from tests.support import trainctl_env

ONLINE = os.cpu_count() or 1


def _machine(root: Path, proc_cgroup: str, files: dict[str, str]) -> Path:
    """root/proc/self/cgroup and root/sys/fs/cgroup/<files>, as /proc and cgroupfs show them."""
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(proc_cgroup)
    for relative, text in files.items():
        path = root / "sys/fs/cgroup" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_cgroup_v2_quota_in_a_container(tmp_path: Path) -> None:
    """Kubernetes `limits.cpu: 1500m` in a pod: the namespace's root is the container's cgroup."""
    root = _machine(tmp_path, "0::/\n", {"cpu.max": "150000 100000\n"})
    assert cgroup_quota(root) == (1.5, "cgroup cpu.max 150000 100000")
    cpus = usable_cpus(root, affinity=64)
    assert cpus.usable == 1  # whole CPUs, as Ray takes them
    if ONLINE > 1:
        assert cpus.describe() == f"1 usable CPU (of {ONLINE}: cgroup cpu.max 150000 100000)"


def test_cgroup_v2_quota_set_on_a_parent_of_the_process_cgroup(tmp_path: Path) -> None:
    """A systemd slice limited to 2 CPUs, the process in a unit below it without a limit."""
    root = _machine(
        tmp_path,
        "0::/batch.slice/job.service\n",
        {
            "cpu.max": "max 100000\n",
            "batch.slice/cpu.max": "200000 100000\n",
            "batch.slice/job.service/cpu.max": "max 100000\n",
        },
    )
    assert cgroup_quota(root) == (2.0, "cgroup cpu.max 200000 100000")
    assert usable_cpus(root, affinity=ONLINE).usable == min(2, ONLINE)


def test_cgroup_v1_cfs_quota(tmp_path: Path) -> None:
    root = _machine(
        tmp_path,
        "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n",
        {
            "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "300000\n",
            "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
        },
    )
    assert cgroup_quota(root) == (3.0, "cgroup cpu.cfs_quota_us 300000 / period 100000")
    # Inside the container the mount is the container's own cgroup: its files count.
    inside = _machine(
        tmp_path / "inside",
        "4:cpu,cpuacct:/docker/abc\n",
        {"cpu,cpuacct/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
    )
    assert cgroup_quota(inside) == (0.5, "cgroup cpu.cfs_quota_us 50000 / period 100000")
    assert usable_cpus(inside, affinity=ONLINE).usable == 1  # at least one


def test_no_quota_leaves_the_affinity_mask(tmp_path: Path) -> None:
    root = _machine(tmp_path, "0::/\n", {"cpu.max": "max 100000\n"})
    assert cgroup_quota(root) is None
    assert usable_cpus(root, affinity=ONLINE).describe() == (
        f"{ONLINE} usable CPU{'' if ONLINE == 1 else 's'}"
    )
    if ONLINE > 1:  # `taskset -c 0 trainctl ...`
        assert usable_cpus(root, affinity=1).describe() == (
            f"1 usable CPU (of {ONLINE}: affinity mask of 1)"
        )


@pytest.mark.parametrize(
    ("proc_cgroup", "files"),
    [
        ("", {}),
        ("garbage without colons\n", {"cpu.max": "100000 100000"}),
        ("0::/\n", {"cpu.max": "lots 100000"}),
        ("0::/\n", {"cpu.max": "0 100000"}),
        ("0::/../../etc\n", {"cpu.max": "max 100000"}),
        ("4:cpu:/x\n", {"cpu/cpu.cfs_quota_us": "fast", "cpu/cpu.cfs_period_us": "100000"}),
        ("4:cpu:/x\n", {"cpu/cpu.cfs_quota_us": "100000", "cpu/cpu.cfs_period_us": "0"}),
    ],
)
def test_unreadable_or_odd_files_mean_no_quota(
    tmp_path: Path, proc_cgroup: str, files: dict[str, str]
) -> None:
    root = _machine(tmp_path, proc_cgroup, files)
    assert cgroup_quota(root) is None
    assert usable_cpus(root, affinity=ONLINE).usable == ONLINE


def test_this_machine(tmp_path: Path) -> None:
    """Whatever this machine is: no more than its online CPUs nor its affinity mask."""
    cpus = usable_cpus()
    assert 1 <= cpus.usable <= min(ONLINE, len(os.sched_getaffinity(0)))


def test_a_local_cluster_gets_the_usable_cpus_or_the_workers_plus_data_reading(
    tmp_path: Path,
) -> None:
    settings = TrainSettings(_env_file=None, num_workers="2", cpus_per_worker=1.5)
    assert local_num_cpus(settings) == max(usable_cpus().usable, 3 + DATA_CPUS)
    resources = local_resources(settings)
    assert resources is not None, "Ray's node-resource resolution is gone: see local_resources"
    assert resources["CPU"] == local_num_cpus(settings)


def test_check_judges_the_local_cluster_without_starting_it(tmp_path: Path) -> None:
    import ray

    parquet.good(tmp_path / "data")
    base = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env = trainctl_env(
        base, dataset="parquet", model="cnn", data_path=str(tmp_path / "data"),
        storage_path=str(tmp_path / "runs"), global_batch_size="2",
    )  # fmt: skip
    started = ray.is_initialized()
    result = trainctl_with(env, tmp_path, "check")
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("ok    cluster: "))
    need = 2 + DATA_CPUS
    machine = usable_cpus()
    if machine.usable < need:
        held = f"{need} CPU slots (2 workers x 1 CPU + {DATA_CPUS} for reading data)"
        assert f"{held} on {machine.describe()}, 0 GPUs" in line, line
    else:
        assert f"{machine.usable} CPUs ({machine.describe()}), 0 GPUs" in line, line
    assert "started by `trainctl train`, not by check" in line
    assert ray.is_initialized() == started  # no cluster was started, none joined
    # Sized to hold them all, the local cluster takes 64 workers on a few cores: said, not
    # refused (a red-team pass: `ok` for 64 torch processes on a 2-core machine).
    many = str(2 * machine.usable + 1)
    env_many = {**env, "TRAIN_NUM_WORKERS": many, "TRAIN_GLOBAL_BATCH_SIZE": "64"}
    result = trainctl_with(env_many, tmp_path, "check")
    line = next(x for x in result.stdout.splitlines() if x.startswith("WARN  cluster: "))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"but {many} training workers on {machine.describe()}: each is a process" in line
    assert f"set TRAIN_NUM_WORKERS to {machine.usable} or fewer here" in line, line
    assert ray.is_initialized() == started
    # The capacity rules are the running cluster's: no GPU here, no such accelerator.
    for extra, said in (
        ({"TRAIN_USE_GPU": "true"}, "needs 2 GPUs; the Ray cluster has 0"),
        ({"TRAIN_ACCELERATOR_TYPE": "H100"}, "H100: no node of that type in the Ray cluster"),
    ):
        result = trainctl_with({**env, **extra}, tmp_path, "check")
        assert result.returncode == 2 and "FAIL  cluster: " in result.stdout, result.stdout
        assert said in result.stdout, result.stdout
