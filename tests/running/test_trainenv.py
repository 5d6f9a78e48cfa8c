"""The preflight of the Python that will train, asked of real Pythons: a bare venv, the Megatron
venv (torch without a GPU here), and views of it with one piece taken away."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.images.pins import PINS_FILE, load_pins
from bench.running.arguments import RunCommand
from bench.running.machine import Machine
from bench.running.run import environment_ready, launches_for
from bench.running.trainenv import describe, facts, problems
from tests.conftest import megatron_python


def _venv(folder: Path, base: str) -> str:
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True)
    return str(folder / "bin" / "python")


def _site(python: str) -> Path:
    out = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _megatron_without(tmp_path: Path, *left_out: str) -> str:
    """A venv that sees the Megatron venv's packages, less those whose names start with
    ``left_out`` (real torch and megatron-core, with one piece really missing)."""
    base = megatron_python()
    base_site = _site(base)
    view = tmp_path / "view"
    view.mkdir()
    for entry in base_site.iterdir():
        if not entry.name.lower().startswith(left_out):
            (view / entry.name).symlink_to(entry)
    real_base = subprocess.run([base, "-c", "import sys; print(sys._base_executable)"],
                               capture_output=True, text=True, check=True).stdout.strip()
    python = _venv(tmp_path / "venv", real_base)
    (_site(python) / "view.pth").write_text(f"{view}\n")
    return python


def test_bare_python_lacks_torch_and_is_told_how_to_install_it(tmp_path: Path) -> None:
    python = _venv(tmp_path / "bare", sys.executable)
    found = facts(python)
    assert found.torch is None
    assert problems(found, "megatron", 1) == [
        f"torch does not import in {python} (No module named 'torch'); the kit never installs "
        "torch: install your machine's CUDA build (https://pytorch.org/get-started/locally/), "
        f"e.g. `{python} -m pip install torch`"]


def test_megatron_venv_torch_sees_no_gpu_and_megatron_is_at_the_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    python = megatron_python()
    monkeypatch.setenv("PATH", f"{Path(python).parent}:/usr/bin:/bin")  # its torchrun
    found = facts(python)
    assert found.megatron_core == load_pins().upstreams["megatron-core"].version == "0.19.2"
    assert found.cuda_devices == 0 and found.capabilities is not None  # detected, all absent here
    assert problems(found, "megatron", 1) == [
        f"torch {found.torch} in {python} sees no GPU (built for CUDA {found.torch_cuda}), the run "
        "needs 1; check the driver (`nvidia-smi`) and CUDA_VISIBLE_DEVICES"]
    assert "megatron-core 0.19.2" in describe(found) and "Transformer Engine no" in describe(found)


def test_megatron_core_at_another_version_than_the_pin(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    python = megatron_python()
    monkeypatch.setenv("PATH", f"{Path(python).parent}:/usr/bin:/bin")
    pins_file = tmp_path / "pins.toml"
    pins_file.write_text(PINS_FILE.read_text().replace('version = "0.19.2"', 'version = "0.19.1"'))
    trouble = problems(facts(python), "megatron", 0, pins=load_pins(pins_file))
    assert trouble == [f"megatron-core 0.19.2 in {python}, but the kit pins 0.19.1 "
                       f"(images/pins.toml); `{python} -m pip install --no-deps megatron-core==0.19.1`"]


def test_megatron_core_missing(tmp_path: Path) -> None:
    python = _megatron_without(tmp_path, "megatron")
    trouble = problems(facts(python), "megatron", 0)
    assert trouble[0] == (f"megatron-core is not installed in {python}; `{python} -m pip install "
                          "--no-deps megatron-core==0.19.2`, or run through `nox -s bench`, which "
                          "provisions a venv with the pins")


def test_megatron_core_installed_but_a_dependency_missing(tmp_path: Path) -> None:
    python = _megatron_without(tmp_path, "numpy")
    found = facts(python)
    assert found.megatron_core == "0.19.2" and found.missing_module == "numpy"
    assert [line for line in problems(found, "megatron", 0) if "does not import" in line] == [
        f"megatron-core 0.19.2 is installed in {python} but does not import ({found.megatron_error}); "
        f"`{python} -m pip install numpy`"]


def test_megatron_deepspeed_engine_needs_deepspeed_and_the_tree(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    python = megatron_python()
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no torchrun on it
    tree = tmp_path / "Megatron-DeepSpeed"
    commit = load_pins().upstreams["megatron-deepspeed"].commit
    assert problems(facts(python, str(tree)), "megatron-deepspeed", 0, str(tree)) == [
        f"deepspeed is not installed in {python}; `{python} -m pip install deepspeed==0.18.2`, or "
        "run through `nox -s bench`, which provisions a venv with the pins",
        f"Megatron-DeepSpeed is not at {tree} (no pretrain_gpt.py); check out the pinned tree: "
        f"`git clone https://github.com/deepspeedai/Megatron-DeepSpeed {tree} && git -C {tree} "
        f"checkout {commit}`, or use the kit's image",
        f"torchrun is not on PATH; put the bin folder of {python}'s environment on PATH"]


def test_run_stops_before_launch_and_says_no_record(capsys: pytest.CaptureFixture[str]) -> None:
    """The kit's own Python here has no torch: the run is refused, and says nothing was written."""
    from bench.cli import build_parser

    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("this Python has torch")
    args = build_parser().parse_args(["run", "125m", "tp1pp1", "--dry-run"])
    machine, given = Machine(), dict(vars(args))
    (launch,) = launches_for(RunCommand(args), machine=machine)
    assert vars(args) == given  # the probe's answers stay with the machine, not on the arguments
    assert environment_ready(launch, machine.training_facts(None, launch.platform, True)) is False
    err = capsys.readouterr().err
    assert "error: torch does not import in" in err
    assert err.rstrip().endswith("the training environment is incomplete, so nothing was run and "
                                 "no record was written")

