"""Shared fixtures: a fixed clock for plans, and how tests treat missing system tools."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.plan import Options

FIXED_NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
IN_CI = os.environ.get("CI") == "true"


def require(condition: bool, reason: str) -> None:
    """Skip locally when a system tool is missing; in CI the same gap is a failure."""
    if not condition:
        if IN_CI:
            pytest.fail(f"CI must provide this: {reason}")
        pytest.skip(reason)


def megatron_python() -> str:
    """The Python 3.12 with torch + megatron-core 0.19.2 (``BENCH_MEGATRON_PYTHON``); without one
    the test skips locally with the reason ``nox -s tests`` gave (how to enable it) and fails in CI."""
    python = os.environ.get("BENCH_MEGATRON_PYTHON", "")
    reason = os.environ.get("BENCH_MEGATRON_SKIP") or (
        f"BENCH_MEGATRON_PYTHON must name a Python 3.12 with torch and megatron-core 0.19.2 (got "
        f"{python!r}); `nox -s tests` makes one")
    require(bool(python) and Path(python).exists(), reason)
    return python


def options(**kw: object) -> Options:
    return Options(now=FIXED_NOW, **kw)  # type: ignore[arg-type]
