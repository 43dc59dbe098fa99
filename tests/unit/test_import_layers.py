"""Imports run one way (CONTRIBUTING.md, "Where the code lives"), and tests share helpers
through support modules only.

Every module of app/ belongs to one layer; a module may import its own layer and those below
it, never one above. Every import counts: at the top, inside a function (the lazy imports that
keep torch off the CLI's path) and under TYPE_CHECKING, since each is a dependency a reader
has to follow. Within a layer imports must not go round in a circle, between modules or
between the packages (and top-level modules) of app/. A module that fits no layer fails too:
say where it belongs here, in the one list.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "app"
TESTS = REPO / "tests"

# Top to bottom. A module is in the layer whose prefix names it (the longest prefix wins).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("command line", ("app.__main__", "app.cli", "app.cli_exit", "app.cli_target", "app.envdoc")),
    # A sweep runs preflight and the run driver for each of its trials.
    ("sweeps", ("app.sweep",)),
    ("preflight", ("app.preflight",)),
    ("orchestration", ("app.run",)),
    (
        "what a run does",
        (
            "app.training",
            "app.data",
            "app.tracking",
            "app.promotion",
            "app.export",
            "app.evaluation",
            "app.k8s",
            "app.ray_cluster",
            "app.sweep_capacity",
        ),
    ),
    ("settings", ("app.settings",)),
    ("run-folder records", ("app.runfolder",)),
    ("storage", ("app.storage",)),
    (
        "leaf helpers",
        (
            "app",
            "app.errors",
            "app.redact",
            "app.formatting",
            "app.cpus",
            "app.dns",
            "app.envfile",
            "app.held_signals",
            "app.process_tree",
        ),
    ),
)


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def app_modules(app: Path = APP) -> dict[str, Path]:
    return {module_name(p, app.parent): p for p in sorted(app.rglob("*.py"))}


def imported(path: Path, name: str) -> Iterator[tuple[str, int]]:
    """Every module name `path` (module `name`) imports, anywhere in it, with its line."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            yield base, node.lineno
            for alias in node.names:  # `from app.run import driver` imports app.run.driver
                yield f"{base}.{alias.name}", node.lineno


def app_imports(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {app module it imports: first line}, each name resolved to a module of app/."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for target, line in imported(path, name):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and target not in edges:
                edges[target] = line
    return graph


def layer_of(name: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, (_label, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), index)
    return None if best is None else best[1]


def upward_imports(
    graph: dict[str, dict[str, int]], modules: dict[str, Path], root: Path = REPO
) -> list[str]:
    problems = []
    for name, edges in sorted(graph.items()):
        here = layer_of(name)
        if here is None:
            problems.append(f"{modules[name].relative_to(root)}: in no layer (add it to LAYERS)")
            continue
        for target, line in sorted(edges.items()):
            there = layer_of(target)
            if there is not None and there < here:
                problems.append(
                    f"{modules[name].relative_to(root)}:{line} imports {target}: layer "
                    f"'{LAYERS[here][0]}' may not import layer '{LAYERS[there][0]}' above it"
                )
    return problems


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def package_of(name: str) -> str:
    """app.data.kinds.digits -> app.data; app.cli -> app.cli: the parts of app/."""
    return ".".join(name.split(".")[:2])


def package_graph(graph: dict[str, dict[str, int]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for name, edges in graph.items():
        here = package_of(name)
        packages.setdefault(here, set()).update(
            package_of(t) for t in edges if package_of(t) != here and t != "app"
        )
    return packages


def described(component: list[str], graph: dict[str, set[str]]) -> str:
    inside = set(component)
    ties = [f"{a} -> {b}" for a in component for b in sorted(graph.get(a, ())) if b in inside]
    return f"{', '.join(component)} ({'; '.join(ties)})"


def test_every_app_module_imports_only_its_layer_and_those_below() -> None:
    modules = app_modules()
    assert len(modules) > 100, sorted(modules)  # the scan found the package
    problems = upward_imports(app_imports(modules), modules)
    assert not problems, "\n".join(problems)


def test_no_module_of_app_imports_itself_round_a_circle() -> None:
    graph = {name: set(edges) for name, edges in app_imports(app_modules()).items()}
    found = circles(graph)
    assert not found, "\n".join(described(c, graph) for c in found)


def test_the_packages_of_app_import_each_other_one_way() -> None:
    graph = package_graph(app_imports(app_modules()))
    assert {"app.run", "app.runfolder", "app.settings", "app.data"} <= set(graph)
    found = circles(graph)
    assert not found, "\n".join(described(c, graph) for c in found)


def test_the_scan_sees_lazy_and_relative_imports_and_names_both_layers(tmp_path: Path) -> None:
    """The scan itself: a lazy import inside a function and a relative import are seen, and an
    import that points up, or round a circle, is named with both layers."""
    (tmp_path / "app" / "settings").mkdir(parents=True)
    (tmp_path / "app" / "run").mkdir()
    for package in ("app", "app/settings", "app/run"):
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "app" / "settings" / "train.py").write_text(
        "def f():\n    from app.run.driver import run_training\n"
    )
    (tmp_path / "app" / "run" / "driver.py").write_text("from ..settings import train\n")
    modules = app_modules(tmp_path / "app")
    graph = app_imports(modules)
    assert graph["app.settings.train"] == {"app.run.driver": 2}
    assert graph["app.run.driver"] == {"app.settings": 1, "app.settings.train": 1}
    assert upward_imports(graph, modules, tmp_path) == [
        "app/settings/train.py:2 imports app.run.driver: layer 'settings' may not import layer "
        "'orchestration' above it"
    ]
    assert circles({n: set(e) for n, e in graph.items()}) == [
        ["app.run.driver", "app.settings.train"]
    ]


def test_test_modules_share_helpers_through_support_modules_only() -> None:
    """A test module imported by another runs its tests twice and ties the two together:
    shared helpers live in support modules (tests/*_support.py, tests/*/support.py, ...)."""
    problems = []
    for path in sorted(TESTS.rglob("*.py")):
        name = module_name(path)
        for target, line in imported(path, name):
            if target.startswith("tests.") and target.rpartition(".")[2].startswith("test_"):
                problems.append(f"{path.relative_to(REPO)}:{line} imports test module {target}")
    assert not problems, "\n".join(problems)
