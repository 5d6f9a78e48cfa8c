"""The exact source snapshots of the kit's GitHub upstreams, in the folder CI names.

CI has them (GitHub is unreachable from it) and passes their folder in ``BENCH_UPSTREAM_SNAPSHOTS``
(``.ci/run`` sets it); the patch series are checked against these real trees, never against
excerpts. Without the variable a test that needs a snapshot skips, saying so; under ``CI=true`` it
fails, so CI cannot pass without the checks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.images.context import local_upstream
from bench.images.pins import load_pins

SNAPSHOTS_ENV = "BENCH_UPSTREAM_SNAPSHOTS"
HOW = "docs/development.md#tests says what the folder holds and how to fill it"


def snapshot_archive(name: str) -> Path:
    """The snapshot of upstream ``name`` at its pinned commit (``<name>-<commit>.tar.gz`` in
    ``$BENCH_UPSTREAM_SNAPSHOTS``); skips the test where it is absent, fails it under CI."""
    upstream = load_pins().upstreams[name]
    folder = os.environ.get(SNAPSHOTS_ENV)
    archive = Path(folder or ".") / f"{name}-{upstream.commit}.tar.gz"
    if not (folder and archive.is_file()):
        why = (f"no source snapshot {archive.name} in {folder}" if folder else
               f"{SNAPSHOTS_ENV} is not set: it names the folder of the upstream source snapshots")
        why += f" ({HOW})"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return archive


def snapshot_tree(name: str) -> Path:
    """The unpacked snapshot (cached): read it, copy it, never modify it."""
    return local_upstream(load_pins().upstreams[name], snapshot_archive(name))
