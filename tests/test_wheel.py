"""An installed wheel plans a run outside the checkout: it carries the platform, accelerator and
performance files and the step-time fit as package data, and ``bench`` finds them there."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("bench", "platforms", "pyproject.toml", "setup.py", "LICENSE")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from a copy of the tree (the build writes build/ and egg-info beside
    its sources, which must not land in the checkout)."""
    root = tmp_path_factory.mktemp("wheel")
    tree = root / "src"
    for name in SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            tree.mkdir(exist_ok=True)
            shutil.copy(source, tree / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir",
                    str(root / "dist"), str(tree)], check=True, timeout=300)
    (built,) = (root / "dist").glob("megatron_bench_kit-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_carries_the_kits_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"bench/{path.relative_to(REPO).as_posix()}" for path in (
        *REPO.glob("platforms/*.toml"), *REPO.glob("platforms/accelerators/*.toml"),
        *REPO.glob("platforms/performance/*.toml"))}
    assert expected and expected <= names
    assert {"bench/platforms/performance/fit.json", "bench/config/presets/gpt3.toml"} <= names
    assert not any(name.startswith(("platforms/", "tests/")) for name in names)


@pytest.mark.slow
def test_a_run_is_planned_from_the_installed_wheel_outside_the_checkout(wheel: Path,
                                                                          tmp_path: Path) -> None:
    # The venv sees this Python's packages (pydantic) but its own bench: the installed wheel's.
    venv.create(tmp_path / "venv", system_site_packages=True, with_pip=False)
    python = tmp_path / "venv/bin/python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], check=True, timeout=300)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    def bench(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(tmp_path / "venv/bin/bench"), *argv], cwd=work, env=env,
                              capture_output=True, text=True, timeout=300, check=False)

    where = subprocess.run([str(python), "-c", "import bench.config.paths as p; print(p.PLATFORMS_DIR, "
                            "p.CHECKOUT)"], cwd=work, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.split() == [str(tmp_path / "venv/lib" / f"python{sys.version_info.major}."
                                        f"{sys.version_info.minor}/site-packages/bench/platforms"), "None"]
    local = bench("run", "1.3b", "tp1pp1", "--dry-run")
    assert local.returncode == 0, local.stderr
    assert "torchrun" in local.stdout and "memory estimate" in local.stderr
    cluster = bench("run", "13b", "tp2pp2", "--platform", "azure-h200", "--dry-run")
    assert cluster.returncode == 0, cluster.stderr
    assert "#SBATCH" in cluster.stdout and "TFLOP/s/GPU (±" in cluster.stdout  # the fit, the facts
    assert not any(work.iterdir())  # a dry run writes nothing
