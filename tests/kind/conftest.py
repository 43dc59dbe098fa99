"""The kind suite runs only where docker, kind, kubectl and Helm exist and Docker answers.

Elsewhere every test here is skipped with one reason that names exactly what is missing. When
it runs, the session fixture brings the environment up (reusing what `make kind-up` made), and
a failing test leaves the operator, RayJob and pod logs in the output and in KIND_ARTIFACTS_DIR.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kind import kindenv

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if Path(str(item.fspath)).resolve().is_relative_to(HERE)]
    if not ours:
        return
    missing = kindenv.missing_tools()
    if missing:
        skip = pytest.mark.skip(reason="kind suite skipped: " + "; ".join(missing))
        for item in ours:
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def kind_env() -> Iterator[Path]:
    """The cluster with the operator, the app image and the shared volume; yields its host dir.

    A cluster that existed before the session (make kind-up) is kept; one made here is deleted
    at the end unless KIND_KEEP_CLUSTER=1, so a bare `pytest tests/kind` cleans up after itself.
    """
    existed = kindenv.cluster_exists()
    kindenv.up()
    yield kindenv.shared_host_dir()
    if not existed and os.environ.get("KIND_KEEP_CLUSTER") != "1":
        kindenv.down()


@pytest.fixture(autouse=True)
def dump_logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    failed = any(
        getattr(getattr(request.node, f"report_{when}", None), "failed", False)
        for when in ("setup", "call")
    )
    if failed and kindenv.KUBECONFIG.exists():
        path = kindenv.diagnose(request.node.name)
        print(f"\n----- cluster diagnostics ({path}) -----\n{path.read_text()}")
