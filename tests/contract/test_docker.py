"""The image definition: the pinned Ray base, the pinned installs, the non-root ray user."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib

import pytest
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


def _args() -> dict[str, str]:
    """Every ARG with its default ("" when it has none)."""
    args = {}
    for word, rest in _instructions():
        if word == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default.strip('"')
    return args


def _assert_ray_image_of_the_pins(image: str, flavour: str) -> None:
    match = re.fullmatch(rf"rayproject/ray:(\d+\.\d+\.\d+)-py(\d)(\d+){flavour}", image)
    assert match, f"{image} is not a rayproject/ray image tagged <ray>-py<python>{flavour}"
    assert match.group(1) == _pinned("ray"), (
        f"{image}: Ray {match.group(1)}, pinned {_pinned('ray')}"
    )
    python = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert f">={match.group(2)}.{match.group(3)}" in python, f"{image}: Python vs {python}"


def test_base_image_is_the_ray_gpu_image_of_the_pinned_ray_and_python() -> None:
    (base,) = [rest for word, rest in _instructions() if word == "FROM"]
    # The base is a build argument whose default is the GPU image; the ARG comes before FROM.
    assert base in ("${BASE_IMAGE}", "$BASE_IMAGE"), base
    words = [word for word, _ in _instructions()]
    assert words.index("ARG") < words.index("FROM")
    _assert_ray_image_of_the_pins(_args()["BASE_IMAGE"], "-gpu")


def test_the_kind_suites_build_arguments_exist_and_keep_the_pinned_ray() -> None:
    from tests.kind.kindenv import BUILD_ARGS

    # An unknown --build-arg would be ignored with a warning, and the build would silently use
    # the default (GPU) base instead of the one the suite asked for.
    assert set(BUILD_ARGS) <= set(_args()), set(BUILD_ARGS) - set(_args())
    _assert_ray_image_of_the_pins(BUILD_ARGS["BASE_IMAGE"], "")  # the CPU image
    assert BUILD_ARGS["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"


def test_torch_index_is_an_extra_index_and_the_pair_is_checked() -> None:
    """The CPU index lacks ray and the rest, so it must not replace PyPI; a mixed torch and
    torchvision (one +cpu, one not) must fail the build instead of the first training run."""
    assert _args()["TORCH_INDEX_URL"] == ""  # default: the standard PyPI pair of the pins
    (install,) = [rest for word, rest in _instructions() if word == "RUN" and "pip install" in rest]
    assert '${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"}' in install
    assert "--index-url" not in install.replace("--extra-index-url", "")
    assert re.search(r'&&\s+python -c "[^"]+"\s+&&', install), install


def _pair_check() -> str:
    """The Python one-liner the image build runs after `pip install`, as the shell gets it."""
    text = DOCKERFILE.read_text().replace("\\\n", "")  # Docker's line continuation
    (code,) = re.findall(r'python -c "([^"]+)"', text)
    return code


def test_the_pair_check_passes_on_the_pinned_pair_and_refuses_a_mixed_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _pair_check()
    exec(code, {})  # this environment's installed pair, really imported
    printed = capsys.readouterr().out.split()
    assert [word.partition("+")[0] for word in printed] == [
        "torch", _pinned("torch"), "torchvision", _pinned("torchvision")
    ]  # fmt: skip
    installed = {"torch": "2.13.0+cpu", "torchvision": "0.28.0"}  # what a torch-only mirror gives
    monkeypatch.setattr(importlib.metadata, "version", installed.__getitem__)
    with pytest.raises(AssertionError, match=r"torch 2\.13\.0\+cpu with torchvision 0\.28\.0"):
        exec(code, {})
    installed["torchvision"] = "0.28.0+cpu"  # both from the CPU index
    exec(code, {})


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
