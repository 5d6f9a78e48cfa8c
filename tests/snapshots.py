"""The exact source snapshots of the kit's GitHub upstreams, beside the checkout (../shared/upstreams/).

CI has them there (GitHub is unreachable from it); the patch series are checked against these real
trees, never against excerpts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.images.context import local_upstream
from bench.images.pins import REPO_ROOT, load_pins

SNAPSHOTS = REPO_ROOT.parent / "shared" / "upstreams"


def snapshot_archive(name: str) -> Path:
    """The snapshot of upstream ``name`` at its pinned commit; skips the test where it is absent."""
    upstream = load_pins().upstreams[name]
    archive = SNAPSHOTS / f"{name}-{upstream.commit}.tar.gz"
    if not archive.is_file():
        pytest.skip(f"no source snapshot {archive} (CI has it beside the checkout)")
    return archive


def snapshot_tree(name: str) -> Path:
    """The unpacked snapshot (cached): read it, copy it, never modify it."""
    return local_upstream(load_pins().upstreams[name], snapshot_archive(name))
