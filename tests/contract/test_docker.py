"""The image definition: the pinned Ray base, the pinned installs, the non-root ray user."""

from __future__ import annotations

import re
import tomllib

import yaml

from tests.contract.k8s_support import CHART, REPO

DOCKERFILE = REPO / "docker" / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    lines = []
    for raw in DOCKERFILE.read_text().replace("\\\n", " ").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            lines.append((word.upper(), rest.strip()))
    return lines


def _pinned(name: str) -> str:
    text = (REPO / "requirements" / "constraints.txt").read_text()
    match = re.search(rf"^{re.escape(name)}==(\S+)$", text, re.MULTILINE | re.IGNORECASE)
    assert match, f"{name} is not pinned in requirements/constraints.txt"
    return match.group(1)


def test_base_image_is_the_ray_gpu_image_of_the_pinned_ray_and_python() -> None:
    (base,) = [rest for word, rest in _instructions() if word == "FROM"]
    match = re.fullmatch(r"rayproject/ray:(\d+\.\d+\.\d+)-py(\d)(\d+)-gpu", base)
    assert match, base
    assert match.group(1) == _pinned("ray")
    python = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert f">={match.group(2)}.{match.group(3)}" in python


def test_chart_pins_the_same_ray_and_app_version() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["rayVersion"] == _pinned("ray")
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]


def test_installs_with_the_development_constraints() -> None:
    runs = [rest for word, rest in _instructions() if word == "RUN"]
    assert any(re.search(r"pip install .*-c requirements/constraints\.txt \.", r) for r in runs)


def test_runs_as_the_ray_user_without_an_entrypoint() -> None:
    words = [word for word, _ in _instructions()]
    assert "ENTRYPOINT" not in words and "CMD" not in words
    users = [rest for word, rest in _instructions() if word == "USER"]
    assert users[-1] in ("ray", "1000", "1000:100")


def test_build_context_is_filtered() -> None:
    ignore = (REPO / "docker" / "Dockerfile.dockerignore").read_text().splitlines()
    assert "*" in ignore  # deny by default, then allow what `pip install .` needs
    copied = [rest for word, rest in _instructions() if word == "COPY"]
    for source in ("pyproject.toml", "requirements/constraints.txt", "app"):
        assert any(source in c for c in copied)
        assert f"!{source}" in ignore or f"!{source}/" in ignore
