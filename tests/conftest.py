"""Shared fixtures: a fixed clock for plans, the markers, and the one gate for missing tools.

Markers (``pyproject.toml``): ``slow`` (real dockerd, Slurm or Megatron: minutes), ``needs_root``
(starts dockerd or slurmd), ``needs_megatron`` (the Python named by ``BENCH_MEGATRON_PYTHON``). A
test gets them from the fixtures it uses (:data:`FIXTURE_MARKERS`) or says them itself;
``pytest -m "not slow"`` is the quick run. What a marked test lacks goes through :func:`require`:
skipped here, a failure in CI (``CI=true``), where everything must be present.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.planning.options import Options
from bench.planning.predict.expect import load_step_model

FIXED_NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
IN_CI = os.environ.get("CI") == "true"


# Fixtures that start a real container runtime, Slurm or registry, or need the Megatron Python,
# and the markers they imply.
FIXTURE_MARKERS = {
    "megatron_python": ("slow", "needs_megatron"),
    "slurm_cluster": ("slow", "needs_root"),
    "runtime": ("slow", "needs_root"),
    "registry": ("slow", "needs_root"),
    "small_wheelhouse": ("slow",),  # real pip into real venvs: seconds each
}


@pytest.fixture(autouse=True, scope="session")
def _own_temp_folder(tmp_path_factory: pytest.TempPathFactory) -> object:
    """A temporary folder of this test run's own, for it and every child it starts, and a folder of
    GPU locks (bench.running.gpulock) in it: the stand-in GPUs' locks then stay apart from another
    test run's."""
    folder = tmp_path_factory.mktemp("tmp")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(folder))
        patch.setenv("BENCH_GPU_LOCK_DIR", str(folder / "gpu-locks"))
        patch.setattr(tempfile, "tempdir", str(folder))
        yield


@pytest.fixture(autouse=True, scope="session")
def _matplotlib_imported() -> None:
    """matplotlib imported once in this test process. Each results page forks a drawing process
    (bench.results.drawing) that imports it, about 0.45 s a page, unless the process forked has
    it already. The bytes drawn are the same; without matplotlib the tests that draw say what is
    missing."""
    if importlib.util.find_spec("matplotlib") is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.backends.backend_agg
    import matplotlib.figure
    import matplotlib.style  # noqa: F401  (what the drawing process imports)
    from PIL import Image

    Image.preinit()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, marks in FIXTURE_MARKERS.items():
            if fixture in item.fixturenames:
                for mark in marks:
                    item.add_marker(mark)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("needs_megatron"):
        megatron_python()
    if item.get_closest_marker("needs_root"):
        require(os.geteuid() == 0, "needs root: it starts dockerd or slurmd")


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
    """The planner's options at a fixed time, with the step-time model loaded as the command line
    loads it (``step_model=None`` plans without it)."""
    return Options(now=FIXED_NOW, **{"step_model": load_step_model(), **kw})  # type: ignore[arg-type]


GOLDEN = Path(__file__).with_name("golden")
"""The one home of golden files: job scripts, the Singularity definition, the results page."""


def assert_golden(name: str, text: str) -> None:
    """``text`` must equal ``tests/golden/<name>`` byte for byte.

    Regenerating is deliberate: ``BENCH_UPDATE_GOLDEN=1 pytest ...`` writes the file; review the diff.
    """
    path = GOLDEN / name
    if os.environ.get("BENCH_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden {name}: run with BENCH_UPDATE_GOLDEN=1 and review"
    assert text == path.read_text(), f"{name} differs from its golden (BENCH_UPDATE_GOLDEN=1 to update)"


@pytest.fixture(scope="session")
def patched_tree(tmp_path_factory) -> Path:
    """Megatron-DeepSpeed at its pinned commit (the snapshot) with the kit's whole series applied."""
    from bench.images.series import run_series
    from tests.snapshots import snapshot_tree

    tree = tmp_path_factory.mktemp("mds") / "Megatron-DeepSpeed"
    shutil.copytree(snapshot_tree("megatron-deepspeed"), tree)
    run_series(Path(__file__).parents[1] / "patches/megatron-deepspeed/series", tree, "apply")
    return tree
