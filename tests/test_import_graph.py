"""The package layout follows the pipeline: no import cycles, and no import back up a stage.

Every ``import`` in ``bench/`` (function-level ones included) is read with ``ast``. A package may
import from its own stage and from earlier ones only, and from ``bench`` itself (the version); the
modules at the top (``bench.cli``, ``bench.__main__``) assemble the commands and may import anything.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
# The pipeline, earliest first. images, dataset and train stay beside it: images build the
# training environment from pinned data, dataset tokenizes text, train is what runs on the GPU
# node (it reads the capabilities and precisions, and parses its own logs).
STAGES = ("config", "measure", "images", "dataset", "train", "planning", "render", "records",
          "running", "results")
TOP = ("bench.cli", "bench.__main__")
ROOT = "bench"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(BENCH.rglob("*.py")):
        parts = path.relative_to(BENCH.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _target(name: str) -> str:
    """The kit module an imported name lives in (``bench.x.y.Name`` -> ``bench.x.y``)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(module: str) -> set[str]:
    found = set()
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            found |= {_target(a.name) for a in node.names if a.name.split(".")[0] == "bench"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from its package up
                base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1], base])
            if base.split(".")[0] == "bench":
                found |= {_target(f"{base}.{a.name}") for a in node.names}
    found.discard(module)
    return found


@cache  # parsed when a test first asks: every pytest-xdist worker collects this module
def graph() -> dict[str, set[str]]:
    """Each kit module's kit imports."""
    return {module: _imports(module) for module in MODULES}


def _group(module: str) -> str:
    """A module's unit for cycles: its sub-package inside a stage (``bench.running.jobs``), else
    itself, so that a module and a sub-package beside it cannot lean on each other."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) > 3 else module


def _stage(module: str) -> str | None:
    return None if module in (*TOP, ROOT) else module.split(".")[1]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_package_is_a_stage() -> None:
    stages = {_stage(m) for m in MODULES} - {None}
    assert stages <= set(STAGES), f"packages outside the pipeline: {sorted(stages - set(STAGES))}"


def test_every_package_says_what_it_owns() -> None:
    for path in BENCH.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and doc.splitlines()[0].endswith("."), f"{path.parent.name}: no one-line docstring"


def test_no_module_imports_another_that_imports_it_back() -> None:
    assert _cycles(graph()) == []


def test_no_sub_package_and_module_beside_it_import_each_other() -> None:
    grouped: dict[str, set[str]] = {}
    for module, targets in graph().items():
        grouped.setdefault(_group(module), set()).update(
            _group(t) for t in targets if _group(t) != _group(module))
    assert _cycles(grouped) == []


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_imports_only_itself_and_earlier_stages(stage: str) -> None:
    allowed = set(STAGES[:STAGES.index(stage) + 1])
    upward = sorted(f"{module} -> {target}" for module, targets in graph().items()
                    if _stage(module) == stage for target in targets
                    if target != ROOT and _stage(target) not in allowed)
    assert upward == []


def _third_party(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    return ({a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            | {n.module.split(".")[0] for n in ast.walk(tree)
               if isinstance(n, ast.ImportFrom) and n.module and not n.level})


def _loaded_with(module: str) -> set[str]:
    """The kit modules importing ``module`` loads: what it imports, in turn, and their packages."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        parts = current.split(".")
        for name in {current, *(".".join(parts[:i]) for i in range(1, len(parts)))} - seen:
            seen.add(name)
            todo += graph()[name]
    return seen


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _stage(m) == "train"))
def test_what_runs_on_the_gpu_node_needs_no_pydantic(module: str) -> None:
    """The training Python has torch and Megatron, not the kit's schema library."""
    assert sorted(m for m in _loaded_with(module) if "pydantic" in _third_party(m)) == []


def test_the_checks_see_the_kit() -> None:
    """The graph is not empty by mistake: the planner's imports are found."""
    assert {"bench.planning.options", "bench.planning.checks"} <= graph()["bench.planning.plan"]
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert "pydantic" in _third_party("bench.config.schema")
    assert "bench.config" in _loaded_with("bench.train.msamp")
