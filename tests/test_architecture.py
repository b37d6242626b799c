"""The package layers, checked from the source: viewmill's own modules (settings, registries) <
storage < augment, train < pipelines, and no
import cycles among viewmill modules (imports inside functions count: they are still a
dependency, only a later one)."""

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

LAYERS = {"storage": 0, "augment": 1, "train": 1, "pipelines": 2}
ROOT_LAYER = -1  # viewmill/*.py: cross-cutting, seen by every layer, importing none


def module_files() -> dict[str, Path]:
    files = {"viewmill": REPO / "viewmill" / "__init__.py"}
    roots = sorted((REPO / "viewmill").glob("*.py"))
    files.update({f"viewmill.{path.stem}": path for path in roots if path.stem != "__init__"})
    for package in LAYERS:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = (package, *path.relative_to(REPO / package).with_suffix("").parts)
            name = ".".join(("viewmill", *(parts[:-1] if parts[-1] == "__init__" else parts)))
            files[name] = path
    return files


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """viewmill modules `name` imports anywhere in its file ("from viewmill.x import y" counts
    as viewmill.x.y when that is a module, else viewmill.x)."""
    found: set[str] = set()
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return {module for module in found if module in known and module != name}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def layer(module: str) -> int | None:
    if (REPO / "viewmill" / f"{package_of(module)}.py").is_file():
        return ROOT_LAYER
    return LAYERS.get(package_of(module) or "")


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for child in sorted(graph[node]):
            if state.get(child) == 1:
                return [*path[path.index(child) :], child]
            if child not in state and (cycle := visit(child)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_sees_real_imports():
    graph = import_graph()
    assert "viewmill.storage.lake" in graph["viewmill.augment.views"]
    assert "viewmill.augment.engines" in graph["viewmill.augment.neural"]
    assert "viewmill.pipelines.run" in graph["viewmill.pipelines.orchestration.flows"]


def test_there_are_no_import_cycles_among_viewmill_modules():
    assert find_cycle(import_graph()) is None, f"import cycle: {' -> '.join(find_cycle(import_graph()) or [])}"


def test_lower_layers_never_import_higher_ones():
    wrong = [
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        for target in sorted(targets)
        if layer(module) is not None and layer(target) is not None and layer(target) > layer(module)
    ]
    assert wrong == []


def test_augment_and_train_do_not_import_each_other():
    graph = import_graph()
    crossing = [
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in sorted(targets)
        if {package_of(module), package_of(target)} == {"augment", "train"}
    ]
    assert crossing == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": set(), "c": {"b"}}, None),
    ],
)
def test_the_cycle_finder_finds_cycles(graph, expected):
    assert find_cycle(graph) == expected


def pipelines_part(module: str) -> str | None:
    """Within pipelines: `cli`, `orchestration`, `stages`, or `core` (the run, recipe and state modules)."""
    parts = module.split(".")
    if parts[:2] != ["viewmill", "pipelines"]:
        return None
    return parts[2] if len(parts) > 3 else "core"


def test_modules_under_sub_packages_are_in_the_graph():
    graph = import_graph()
    assert "viewmill.pipelines.stages.augment" in graph["viewmill.pipelines.run"]
    assert "viewmill.train.evaluation.sts" in graph["viewmill.train.evaluation.suite"]
    assert "viewmill.augment.ingest.sanitise" in graph["viewmill.augment.ingest.corpus"]
    assert "viewmill.spelling" in graph["viewmill.registry"]
    assert layer("viewmill.settings") < layer("viewmill.storage.lake")


def test_stages_and_the_run_know_neither_prefect_flows_nor_the_command_line():
    # What runs a recipe stays plain: Prefect and the CLI wrap it, never the other way round.
    allowed = {
        "core": {"core", "stages"},
        "stages": {"core", "stages"},
        "orchestration": {"core", "stages", "orchestration"},
    }
    wrong = [
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if pipelines_part(module) in allowed
        for target in sorted(targets)
        if pipelines_part(target) is not None and pipelines_part(target) not in allowed[pipelines_part(module)]
    ]
    assert wrong == []
