"""The kit stays easy to read and change: no module of bench/ over 450 lines, no function over 60,
and one CUDA timer (bench.train.timing) for every microbenchmark, the reports' scripts included.
A module or function that grows past its bound is split into parts with names of their own."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODULE_LINES = 450
FUNCTION_LINES = 60
TIMER = REPO / "bench" / "train" / "timing.py"


def _modules() -> list[Path]:
    return sorted((REPO / "bench").rglob("*.py"))


def test_no_module_of_the_kit_is_over_450_lines() -> None:
    long = {str(p.relative_to(REPO)): n for p in _modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES}
    assert long == {}, f"modules over {MODULE_LINES} lines: split them by what their parts do"


def test_no_function_of_the_kit_is_over_60_lines() -> None:
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{path.relative_to(REPO)}:{node.lineno} {node.name}"] = lines
    assert long == {}, f"functions over {FUNCTION_LINES} lines: split them into named steps"


def test_cuda_events_are_read_by_the_one_timer() -> None:
    scripts = [*_modules(), *sorted((REPO / "docs" / "reports").rglob("*.py"))]
    copies = [str(p.relative_to(REPO)) for p in scripts
              if p != TIMER and "cuda.Event(" in p.read_text(encoding="utf-8")]
    assert copies == [], "time with bench.train.timing (median_seconds, loop_seconds)"
    assert "cuda.Event(" in TIMER.read_text(encoding="utf-8")
