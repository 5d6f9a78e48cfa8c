"""Issue 48, item 7: every environment variable the kit reads is checked when set. A bad value is
one error line naming the variable and the fix, before anything is planned or written; the tables
of bench/config/environment.py name every variable the code reads, and docs/running.md names them
all."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.config.environment import CHECKED, FREE_TEXT, env_value
from bench.running.provision import cache_dir
from tests.inprocess import run_cli
from tests.running.test_reliability import refused

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"


def _bad_values(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """variable -> (a bad value, the error's words)."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    return {
        "BENCH_PRESETS_DIR": (str(a_file), f"BENCH_PRESETS_DIR={a_file} is not a folder: point it"),
        "BENCH_PLATFORMS_DIR": (str(tmp_path / "nowhere"), "BENCH_PLATFORMS_DIR="),
        "BENCH_CACHE_DIR": (str(a_file), f"BENCH_CACHE_DIR={a_file} is not a folder"),
        "BENCH_IMAGE": ("my image", "BENCH_IMAGE=my image is not an image name"),
        "BENCH_KIT_COMMIT": ("main", "BENCH_KIT_COMMIT=main is not a git commit"),
        "CUDA_VISIBLE_DEVICES": ("-1", "CUDA_VISIBLE_DEVICES=-1 is not a comma-separated list of "
                                       "GPU indexes or UUIDs (0,1 or GPU-...); an empty value hides "
                                       "every GPU"),
        "BENCH_GPU_LOCK": ("yes", "BENCH_GPU_LOCK=yes is not one of fail, wait, off"),
        "BENCH_GPU_LOCK_DIR": (str(a_file), f"BENCH_GPU_LOCK_DIR={a_file} is not a folder"),
        "BENCH_ACCOUNT": ("project\n#SBATCH --x", "BENCH_ACCOUNT=project\\n#SBATCH --x holds a "
                                                  "control character (shown escaped)"),
        "BENCH_PLATFORM": ("x" * 5000, "BENCH_PLATFORM=" + "x" * 200 + "... is longer than 4096"),
    }


@pytest.mark.parametrize("variable", ["BENCH_PRESETS_DIR", "BENCH_PLATFORMS_DIR", "BENCH_CACHE_DIR",
                                      "BENCH_IMAGE", "BENCH_KIT_COMMIT", "CUDA_VISIBLE_DEVICES",
                                      "BENCH_GPU_LOCK", "BENCH_GPU_LOCK_DIR", "BENCH_ACCOUNT",
                                      "BENCH_PLATFORM"])
def test_a_bad_value_is_one_error_line_before_anything_is_written(tmp_path: Path,
                                                                  variable: str) -> None:
    value, words = _bad_values(tmp_path)[variable]
    work = tmp_path / "work"
    work.mkdir()
    refused(run_cli("run", "1.3b", "tp1pp1", "--dry-run", cwd=work, env={variable: value}), words)
    refused(run_cli("results", "--csv", cwd=work, env={variable: value}), words)
    assert not list(work.iterdir())


def test_every_checked_variable_has_a_bad_value_tested(tmp_path: Path) -> None:
    named = {name for name in CHECKED if not re.fullmatch(r"BENCH_(PARTITION|QUEUE|WALLTIME)", name)}
    assert named == set(_bad_values(tmp_path))


def test_a_read_in_the_code_is_checked_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    monkeypatch.setenv("BENCH_CACHE_DIR", str(a_file))
    with pytest.raises(ValueError, match="^BENCH_CACHE_DIR=.* is not a folder"):
        cache_dir()


@pytest.mark.parametrize("variable,value", [
    ("BENCH_CACHE_DIR", "not-made-yet"), ("BENCH_IMAGE", "ghcr.io/x/megatron-bench:cuda-0123abcd"),
    ("BENCH_KIT_COMMIT", "0123abc-dirty"), ("BENCH_KIT_COMMIT", "unknown"),
    ("CUDA_VISIBLE_DEVICES", ""), ("CUDA_VISIBLE_DEVICES", "0,1"),
    ("CUDA_VISIBLE_DEVICES", "GPU-1c2d3e4f,MIG-0b7f1c2d-aaaa"), ("BENCH_GPU_LOCK", "wait"),
    ("BENCH_WALLTIME", "01:00:00")])
def test_good_values_pass(variable: str, value: str) -> None:
    assert env_value(variable, {variable: value}) == value


# A read of the environment in bench/ outside the training entry (which reads what its launcher
# sets): os.environ.get("X"), os.environ["X"], getenv("X"), and any of them with a name made at
# run time.
_LITERAL_READ = re.compile(r"""(?:environ\.get|getenv)\(\s*["']([A-Za-z0-9_]+)["']"""
                           r"""|environ\[["']([A-Za-z0-9_]+)["']\]""")
_ANY_READ = re.compile(r"(?:environ\.get|getenv)\(|environ\[")
_CHECKED_READ = re.compile(r"""env_value\(\s*f?["']([^"']+)["']""")


def _sources() -> list[Path]:
    return [path for path in sorted(BENCH.rglob("*.py")) if "train" not in path.parts
            and path.name != "environment.py"]


def test_every_read_in_the_code_is_in_a_table() -> None:
    free = {name for key in FREE_TEXT for name in re.findall(r"[A-Z0-9_]+", key)}
    for path in _sources():
        text = path.read_text()
        literal = [a or b for a, b in _LITERAL_READ.findall(text)]
        assert len(literal) == len(_ANY_READ.findall(text)), f"{path}: a name made at run time"
        unknown = set(literal) - free
        assert not unknown, f"{path} reads {unknown} without env_value or a FREE_TEXT entry"
        for name in _CHECKED_READ.findall(text):
            names = [f"BENCH_{key}" for key in ("ACCOUNT", "PARTITION", "QUEUE", "WALLTIME")] \
                if "{" in name else [name]
            assert set(names) <= set(CHECKED), f"{path}: {name}"


def test_the_docs_name_every_variable() -> None:
    text = (REPO / "docs" / "running.md").read_text()
    names = set(CHECKED) | {name for key in FREE_TEXT for name in re.findall(r"[A-Z0-9_]+\*?", key)}
    missing = [name for name in sorted(names) if f"`{name}`" not in text]
    assert not missing, f"docs/running.md names no {missing}"
