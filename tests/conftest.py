"""Shared fixtures: a fixed clock for plans, and how tests treat missing system tools."""

from __future__ import annotations

import os
from datetime import UTC, datetime

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


def options(**kw: object) -> Options:
    return Options(now=FIXED_NOW, **kw)  # type: ignore[arg-type]
