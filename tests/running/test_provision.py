"""Provisioning of the training venv with real pip from real wheelhouses, never an index."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.images.pins import load_pins
from bench.running import gpus as hardware
from bench.running import provision
from bench.running.provision import (
    STAMP,
    Stack,
    choose,
    download,
    ensure_venv,
    has_stack,
    training_stack,
    wheel_python,
    wheelhouse_problems,
)
from bench.running.pythons import find_python312
from bench.running.trainenv import facts, problems
from tests.conftest import megatron_python
from tests.testenv import ENABLE_HINT

SMALL = Stack(packages=("einops==0.8.1",), requirements=("six==1.17.0",))


def _offline_env() -> dict[str, str]:
    """pip with no config of this machine (its find-links, constraints): only what a test gives."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull}


@pytest.fixture(scope="module")
def small_wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two small real wheels, fetched the way `nox -s wheelhouse` fetches."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--dest",
                    str(folder), *SMALL.pins], check=True)
    return folder


def test_the_stack_is_the_cuda_images_pins() -> None:
    pins = load_pins()
    stack = training_stack(pins)
    assert stack.packages == ("megatron-core==0.19.2",)
    assert stack.requirements == pins.target("cuda").requirements


def test_creates_from_the_wheelhouse_without_an_index_then_reuses_it_at_once(
        tmp_path: Path, small_wheelhouse: Path) -> None:
    venv = tmp_path / "venv"
    logged: list[str] = []
    python = ensure_venv(sys.executable, SMALL, venv, small_wheelhouse, logged.append, _offline_env())
    assert python == str(venv / "bin" / "python")
    where = subprocess.run([python, "-c", "import six, einops; print(einops.__file__)"],
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(venv))  # six may come from the base: the venv sees its packages
    assert (venv / "bin" / "torchrun").read_text().startswith(f"#!{venv}/bin/python\n")
    assert any(line.startswith("provisioning the training venv") for line in logged)
    start = time.perf_counter()
    again = ensure_venv(sys.executable, SMALL, venv, small_wheelhouse, logged.append, _offline_env())
    elapsed = time.perf_counter() - start
    assert again == python and elapsed < 0.1, elapsed
    assert logged[-1] == f"training venv ready: {python}"  # nothing logged by the second call


def test_refuses_a_wheelhouse_without_the_pinned_version(tmp_path: Path,
                                                         small_wheelhouse: Path) -> None:
    other = Stack(packages=("einops==0.8.1",), requirements=("six==1.16.0", "tqdm==4.67.1"))
    base = tmp_path / "base"  # without six or tqdm: a base that has one keeps it (test below)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True)
    with pytest.raises(ValueError) as refused:
        ensure_venv(str(base / "bin" / "python"), other, tmp_path / "venv", small_wheelhouse, print,
                    _offline_env())
    assert str(refused.value) == (
        f"the wheelhouse {small_wheelhouse} does not hold the pinned six==1.16.0 (it has 1.17.0); "
        "tqdm==4.67.1 (it has none) (images/pins.toml); refill it on a connected machine with "
        "`nox -s wheelhouse -- cuda --dest DIR`")
    assert not (tmp_path / "venv").exists()  # refused before anything was made


def test_a_changed_pin_makes_the_venv_again(tmp_path: Path, small_wheelhouse: Path) -> None:
    venv = tmp_path / "venv"
    ensure_venv(sys.executable, SMALL, venv, small_wheelhouse, print, _offline_env())
    fewer = Stack(packages=(), requirements=("six==1.17.0",))
    ensure_venv(sys.executable, fewer, venv, small_wheelhouse, print, _offline_env())
    assert (venv / STAMP).read_text().strip() == fewer.key(sys.executable)
    gone = subprocess.run([str(venv / "bin" / "python"), "-c", "import einops"], check=False,
                          capture_output=True)
    assert gone.returncode != 0  # made again with --clear, not patched up


def test_a_requirement_the_base_has_stays_the_bases(tmp_path: Path, small_wheelhouse: Path) -> None:
    """The venv sees the base's packages: a pinned older copy would shadow the version they need
    (on a GPU machine, the pinned regex 2024.11.6 broke that machine's transformers)."""
    base = tmp_path / "base"
    subprocess.run([sys.executable, "-m", "venv", str(base)], check=True)
    base_python = str(base / "bin" / "python")
    subprocess.run([base_python, "-m", "pip", "install", "-q", "--no-index", "--find-links",
                    str(small_wheelhouse), "six==1.17.0"], check=True, env=_offline_env())
    stack = Stack(packages=("einops==0.8.1",), requirements=("six==1.16.0",))
    assert not has_stack(base_python, stack)  # no einops: provision
    logged: list[str] = []
    # The wheelhouse has no six 1.16.0, and needs none: six is not installed.
    python = ensure_venv(base_python, stack, tmp_path / "venv", small_wheelhouse, logged.append,
                         _offline_env())
    six = subprocess.run([python, "-c", "import six; print(six.__version__, six.__file__)"],
                         capture_output=True, text=True, check=True).stdout
    assert six.startswith(f"1.17.0 {base}")
    assert ("kept from the base Python (its packages may need these versions): six 1.17.0 "
            "(pin 1.16.0)") in logged
    assert has_stack(python, stack)  # the packages at their pins, the requirement present


def test_pips_own_no_index_needs_find_links(tmp_path: Path) -> None:
    env = {**_offline_env(), "PIP_NO_INDEX": "1"}
    with pytest.raises(ValueError, match="PIP_NO_INDEX is set but PIP_FIND_LINKS names no wheelhouse"):
        ensure_venv(sys.executable, SMALL, tmp_path / "venv", None, print, env)


def test_pips_own_find_links_are_checked_like_a_wheelhouse(tmp_path: Path,
                                                           small_wheelhouse: Path) -> None:
    env = {**_offline_env(), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(small_wheelhouse)}
    python = ensure_venv(sys.executable, SMALL, tmp_path / "venv", None, print, env)
    subprocess.run([python, "-c", "import einops, six"], check=True)


def test_choose_current_venv_and_bad_env(tmp_path: Path, small_wheelhouse: Path) -> None:
    kit = ["125m", "tp1pp1", "--mbs", "1", "--", "--manual-gc"]
    current = choose(["--env", "current", *kit], sys.executable, stack=SMALL, venv=tmp_path / "v")
    assert (current.python, current.path_prefix, current.args) == (sys.executable, "", tuple(kit))
    dry = choose([*kit[:2], "--dry-run"], sys.executable, stack=SMALL, venv=tmp_path / "v")
    assert dry.python == sys.executable and not (tmp_path / "v").exists()
    forced = choose(["--env=venv", *kit[:2], "--wheelhouse", str(small_wheelhouse), *kit[2:]],
                    sys.executable, env=_offline_env(), stack=SMALL, venv=tmp_path / "v")
    assert forced.python == str(tmp_path / "v" / "bin" / "python")
    assert forced.path_prefix == str(tmp_path / "v" / "bin") and forced.args == tuple(kit)
    with pytest.raises(ValueError, match="--env conda is not one of auto, current, venv"):
        choose(["--env", "conda", *kit], sys.executable, stack=SMALL)


def test_the_real_stack_from_a_downloaded_wheelhouse_sees_the_machines_torch(tmp_path: Path) -> None:
    """`nox -s wheelhouse -- cuda` then provisioning with no index, from a Python whose torch lives
    in a venv of its own (the Megatron venv: torch CPU here): megatron-core at the pin, that torch."""
    base = megatron_python()
    wheels = tmp_path / "wheelhouse"
    download("cuda", wheels, python=base)
    stack = training_stack()
    assert wheelhouse_problems(stack, [wheels]) == []
    python = ensure_venv(base, stack, tmp_path / "venv", wheels, print, _offline_env())
    found = facts(python)
    assert found.megatron_core == "0.19.2" and found.torch is not None
    torch_dir = subprocess.run([python, "-c", "import torch; print(torch.__file__)"],
                               capture_output=True, text=True, check=True).stdout
    assert str(tmp_path) not in torch_dir  # the base's torch, never installed here
    assert [p for p in problems(found, "megatron", 1) if "torchrun" not in p] == [
        f"torch {found.torch} in {python} sees no GPU (built for CUDA {found.torch_cuda}), the run "
        "needs 1; check the driver (`nvidia-smi`) and CUDA_VISIBLE_DEVICES"]


@pytest.mark.slow  # real nox in a child process
def test_nox_bench_with_env_current_runs_the_kit_in_place_without_the_option() -> None:
    """nox as the README's run line installs it (``pip install nox pydantic``): in a Python with
    the kit's pydantic, which reads the pins to choose the training Python. This Python has both
    (the test extra brings nox); the nox a bare ``pip install nox`` gives would say pydantic is
    missing instead (test_noxfile.py)."""
    from tests.conftest import require

    require(importlib.util.find_spec("nox") is not None,
            "nox is not installed in this Python (pip install -e '.[test]')")
    repo = Path(__file__).resolve().parents[2]
    # The session's `python` is the one on PATH: this one, as in the tests session's venv.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    out = subprocess.run([sys.executable, "-m", "nox", "-f", str(repo / "noxfile.py"), "-s", "bench",
                          "--", "125m", "tp1pp1", "--env", "current", "--dry-run"],
                         capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, "PATH": path})
    assert "Session bench was successful" in out.stderr, out.stderr
    assert "-m bench run 125m tp1pp1 --dry-run" in out.stderr and "--env" not in out.stdout


@pytest.mark.slow  # real pip into a real venv
def test_a_pip_failure_is_one_clear_error_and_leaves_no_stamp(tmp_path: Path) -> None:
    broken = tmp_path / "wheelhouse"
    broken.mkdir()
    (broken / "einops-0.8.1-py3-none-any.whl").write_bytes(b"not a zip file")  # a cut download
    (broken / "six-1.17.0-py2.py3-none-any.whl").write_bytes(b"not a zip file")
    venv = tmp_path / "venv"
    with pytest.raises(ValueError, match=r"^pip could not install .* into .*: no network\? give "
                       r"--wheelhouse DIR"):
        ensure_venv(sys.executable, Stack(packages=("einops==0.8.1",), requirements=()), venv,
                    broken, print, _offline_env())
    assert not (venv / STAMP).exists()  # the next start tries again rather than trusting it


def test_a_run_in_an_image_provisions_nothing_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """--image on the local platform trains in the image's Python: no venv for this one."""
    monkeypatch.setattr(hardware, "detect_gpus", lambda: hardware.LocalGPUs(1, "NVIDIA H200", ""))
    kit = ["1.3b", "tp1pp1"]
    assert provision._runs_here(kit, {}, "bench")
    assert not provision._runs_here([*kit, "--image", "megatron-bench-kit/cuda:1"], {}, "bench")
    assert not provision._runs_here([*kit, "--image=megatron-bench-kit/cuda:1"], {}, "bench")


def test_the_training_stack_needs_python_312() -> None:
    assert training_stack().python == (3, 12)  # megatron-core 0.19's Requires-Python


def test_provisioning_from_too_old_a_python_is_one_line_before_pip(tmp_path: Path) -> None:
    """`--env venv` from a Python older than the stack needs: refused before any venv or pip (a
    stack needing 3.99 makes every Python here too old)."""
    future = Stack(packages=SMALL.packages, requirements=SMALL.requirements, python=(3, 99))
    started = time.monotonic()
    with pytest.raises(ValueError) as refused:
        choose(["--env", "venv", "125m", "tp1pp1"], sys.executable, env=_offline_env(),
               stack=future, venv=tmp_path / "v")
    assert time.monotonic() - started < 30 and not (tmp_path / "v").exists()
    message = str(refused.value)
    assert message.startswith(f"einops==0.8.1 needs Python >= 3.99, and {sys.executable} (it makes "
                              f"the training venv, which trains with its torch) is Python "
                              f"{sys.version_info[0]}.{sys.version_info[1]}: start nox from a Python "
                              "3.12 with the machine's CUDA torch")
    assert "\n" not in message


def test_a_wheelhouse_from_a_python_that_does_not_run_is_one_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "wheels"
    assert provision.main(["wheelhouse", "cuda", "--dest", str(dest), "--python",
                           str(tmp_path / "no-python")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: megatron-core==0.19.2 needs Python >= 3.12, and ")
    assert "does not run: give --python PYTHON3.12" in err and err.count("\n") == 1
    assert not dest.exists()  # nothing downloaded, not even the folder


@pytest.mark.skipif(sys.version_info[:2] >= (3, 12), reason="this Python is new enough itself")
def test_a_wheelhouse_from_an_older_python_takes_a_312_found_here() -> None:
    found = find_python312(os.environ)
    if found is None:
        pytest.skip(ENABLE_HINT)
    logged: list[str] = []
    assert wheel_python(training_stack(), None, dict(os.environ), logged.append) == found
    assert logged == [f"downloading for Python 3.12 with {found} (this one is "
                      f"{sys.version_info[0]}.{sys.version_info[1]})"]
    with pytest.raises(ValueError, match=rf"is Python 3\.\d+: give --python PYTHON3\.12 .*; a "
                                         rf"Python 3\.12 here: {re.escape(found)}$"):
        wheel_python(training_stack(), sys.executable, dict(os.environ))
