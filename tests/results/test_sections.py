"""The results page's sections: each is one module's ``section``, and the page lists every one."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from bench.results import markdown

RESULTS = Path(markdown.__file__).parent


def test_every_section_module_has_its_line_in_the_page_order() -> None:
    modules = sorted(path.stem for path in RESULTS.glob("*.py")
                     if any(isinstance(node, ast.FunctionDef) and node.name == "section"
                            for node in ast.parse(path.read_text()).body))
    assert modules == ["best", "checkpoints", "fits", "fourgpu", "hardware", "losses", "memory", "precisions",
                       "predicted", "profiles", "scaling", "targets"]
    order = inspect.getsource(markdown.render)
    assert all(f"{module}.section(" in order for module in modules)

