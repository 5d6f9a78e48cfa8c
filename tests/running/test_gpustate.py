"""What the driver says of a run's GPUs, read from nvidia-smi's own output as real GPU machines
printed it (tests/fixtures/nvidia-smi/README.md names each machine and command)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from bench.records.provenance import Conditions
from bench.running import gpustate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
H200 = "GPU-9c83bd0e-9328-f691-8ed5-ce7e132fcbb5"


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_four_h200s_are_linked_by_18_nvlinks_each_pair() -> None:
    links = gpustate.links_from_topo(_fixture("topo-h200x4.txt"), [0, 1, 2, 3])
    assert links == {"0-1": "NV18", "0-2": "NV18", "0-3": "NV18", "1-2": "NV18", "1-3": "NV18",
                     "2-3": "NV18"}


def test_only_the_runs_gpus_are_paired() -> None:
    assert gpustate.links_from_topo(_fixture("topo-h200x4.txt"), [3, 1]) == {"1-3": "NV18"}
    assert gpustate.links_from_topo(_fixture("topo-h100x2.txt"), [0, 1]) == {"0-1": "NV18"}


def test_one_gpu_has_no_pair() -> None:
    assert gpustate.links_from_topo(_fixture("topo-h100x1.txt"), [0]) == {}


@pytest.mark.parametrize("text,indices", [
    ("", [0, 1]),  # nvidia-smi printed nothing
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", [0, 1]),
    (None, [0, 4]),  # a GPU the matrix does not have
])
def test_a_matrix_that_does_not_say_gives_no_links(text: str | None, indices: list[int]) -> None:
    text = _fixture("topo-h100x2.txt") if text is None else text
    assert gpustate.links_from_topo(text, indices) is None


def test_static_fields_of_a_real_h200() -> None:
    rows = gpustate.rows_by_uuid(_fixture("static-h200.csv"), gpustate.STATIC_FIELDS)
    assert list(rows) == [H200]
    assert gpustate.static_of(rows[H200]) == gpustate.Static(0, 700.0, 1980, 3201, "enabled")


def test_samples_of_a_real_h200_idle_and_under_load() -> None:
    idle = gpustate.rows_by_uuid(_fixture("sample-h200-idle.csv"), gpustate.SAMPLE_FIELDS)
    assert gpustate.sample_of(idle[H200]).reasons == {"gpu_idle"}
    loaded = [gpustate.sample_of(row) for line in _fixture("sample-h200-load.csv").splitlines()
              for row in gpustate.rows_by_uuid(line, gpustate.SAMPLE_FIELDS).values()]
    assert len(loaded) == 3
    for sample in loaded:  # bf16 matmuls hold a 700 W H200 at its power cap, below 1980 MHz
        assert sample.reasons == {"sw_power_cap"}
        assert 1000 < sample.sm_clock_mhz < 1980 and sample.memory_clock_mhz == 3201
        assert 30 < sample.temperature_c < 90 and 0.5 < sample.memory_used_gib < 140


def test_nvml_and_nvidia_smi_made_the_same_conditions_on_a_real_h200() -> None:
    nvml, smi = (Conditions.model_validate_json(_fixture(f"conditions-h200-{name}.json"))
                 for name in ("nvml", "smi"))
    assert (nvml.source, smi.source) == ("nvml", "nvidia-smi")
    assert nvml.model_copy(update={"source": "nvidia-smi"}) == smi
    assert nvml.gpus[0].reasons == ["sw_power_cap"] and nvml.gpus[0].power_limit_w == 700.0


def test_words_for_unknown_are_none() -> None:
    fields = ("uuid", "index", "enforced.power.limit", "clocks.max.sm", "clocks.max.memory",
              "ecc.mode.current")
    row = dict(zip(fields, ["GPU-x", "0", "[N/A]", "[Not Supported]", "", "N/A"], strict=True))
    assert gpustate.static_of(row) == gpustate.Static(0, None, None, None, None)
    sample = dict.fromkeys(gpustate.SAMPLE_FIELDS, "[N/A]")
    assert gpustate.sample_of(sample) == gpustate.Sample(None, None, None, None, None)


def test_the_cpu_model_is_the_first_model_name() -> None:
    # /proc/cpuinfo of the H200 machine; an Arm host has no model name
    text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
    assert gpustate.cpu_model(text) == "Intel(R) Xeon(R) Processor"
    assert gpustate.cpu_model("processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\n") is None


class NoDriver:
    """nvidia-ml-py where the driver's library does not load (a host without GPUs)."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None:
        raise self.NVMLError("NVML Shared Library Not Found")


@pytest.mark.parametrize("nvml", [None, NoDriver()], ids=["not installed", "no driver library"])
def test_without_nvml_the_kit_asks_nvidia_smi(monkeypatch: pytest.MonkeyPatch, nvml: object) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    reader = gpustate.open_reader([H200])
    assert isinstance(reader, gpustate.SmiReader) and reader.source == "nvidia-smi"
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert gpustate.open_reader([H200]) is None
