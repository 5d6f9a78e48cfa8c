"""The watch of a run's GPUs: the sampling thread and what a failure of it leaves the record.

A stand-in reader takes the driver's place here: these tests are evidence of the threading and of
a run keeping its record whatever the reader does, not of any value (test_gpustate.py reads
nvidia-smi's real output).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bench.measure.host_probe_line import probe_line
from bench.records.provenance import Conditions
from bench.records.record import record_from_json
from bench.records.store import load_record
from bench.running import conditions
from bench.running.gpustate import Sample, Static
from tests.record_factory import make_record

UUIDS = ("GPU-a", "GPU-b")
CAP_LINE = ("> bench kit: gpu memory cap 80 GiB: torch's allocator may hold 78.7 of the GPU's "
            "79.2 GiB (0.52 GiB held outside it)\n")
# A record of 2026-11-29 with conditions, written before the host probe: its conditions lack the keys.
BEFORE_THE_PROBE = (Path(__file__).resolve().parents[2] / "results" / "records"
                    / "1.3b_tp1pp1dp1_local_20261129T042947Z-eb31a9.json")


class StandIn:
    """A reader answering from a script of samples; ``fail`` or ``hang`` make sampling break."""

    source = "nvidia-smi"

    def __init__(self, samples: list[dict[str, Sample]], fail: bool = False, hang: bool = False):
        self.samples, self.fail, self.hang, self.closed = list(samples), fail, hang, False
        self.release = threading.Event()

    def static(self) -> dict[str, Static]:
        return {uuid: Static(i, 700.0, 1980, 3201, "enabled") for i, uuid in enumerate(UUIDS)}

    def sample(self) -> dict[str, Sample]:
        if self.fail:
            raise OSError("nvidia-smi --query-gpu: exit 15: GPU is lost")
        if self.hang:
            self.release.wait(10)
        return self.samples.pop(0) if len(self.samples) > 1 else self.samples[0]

    def close(self) -> None:
        self.closed = True


def _sample(sm: int, temperature: int, used: float, *reasons: str) -> Sample:
    return Sample(sm, 3201, temperature, used, frozenset(reasons))


def _watch(reader: StandIn, monkeypatch: pytest.MonkeyPatch) -> conditions.Watch:
    monkeypatch.setattr(conditions, "topology", lambda indices: {"0-1": "NV18"})
    return conditions.Watch(UUIDS, reader, interval_s=0.01).start()


def _until(predicate, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_samples_become_the_highest_temperature_the_last_clocks_and_every_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    script = [{"GPU-a": _sample(1980, 40, 1.0, "gpu_idle"), "GPU-b": _sample(1980, 41, 1.0, "gpu_idle")},
              {"GPU-a": _sample(1500, 66, 70.2, "sw_power_cap"), "GPU-b": _sample(1515, 64, 70.0)},
              {"GPU-a": _sample(1545, 63, 69.0, "sw_power_cap"), "GPU-b": _sample(1530, 62, 69.0)}]
    reader = StandIn(script)
    watched = _watch(reader, monkeypatch)
    _until(lambda: watched.samples >= 3)
    watched.stop()
    made, note = conditions.observed(watched, 80.0, "loading\n" + CAP_LINE)
    assert note is None and reader.closed
    first, second = made.gpus
    assert (first.index, second.index) == (0, 1)
    assert first.temperature_max_c == 66 and first.memory_used_max_gib == 70.2
    assert (first.sm_clock_end_mhz, second.sm_clock_end_mhz) == (1545, 1530)
    assert first.reasons == ["gpu_idle", "sw_power_cap"] and second.reasons == ["gpu_idle"]
    assert made.links == {"0-1": "NV18"} and made.source == "nvidia-smi"
    assert (made.memory_cap_gb, made.allocator_gib, made.outside_allocator_gib) == (80.0, 78.7, 0.52)
    assert made.cpu_count and made.samples >= 3
    assert "sw_power_cap" in made.describe() and "700 W" in made.describe()


def test_a_reader_that_fails_leaves_a_note_and_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    watched = _watch(StandIn([], fail=True), monkeypatch)
    _until(lambda: watched.problems)
    watched.stop()
    made, note = conditions.observed(watched, None, "")
    assert "GPU is lost" in note and made.samples == 0
    assert [gpu.power_limit_w for gpu in made.gpus] == [700.0, 700.0]  # read before it broke
    assert made.gpus[0].reasons is None and made.memory_cap_gb is None


def test_a_hung_sample_does_not_hold_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    reader = StandIn([{"GPU-a": _sample(1500, 60, 1.0)}], hang=True)
    monkeypatch.setattr(conditions, "JOIN_TIMEOUT_S", 0.2)
    watched = _watch(reader, monkeypatch)
    time.sleep(0.1)  # the first sample is in flight
    start = time.monotonic()
    watched.stop()
    assert time.monotonic() - start < 2
    assert "still running" in conditions.observed(watched, None, "")[1]
    reader.release.set()


def test_a_watch_that_cannot_start_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken():
        raise RuntimeError("the driver's tool crashed")
    monkeypatch.setattr(conditions, "detect_gpus", broken)
    watched = conditions.watch(4)
    watched.stop()
    made, note = conditions.observed(watched, None, "")
    assert "crashed" in note and made.gpus == [] and made.source is None


def test_no_reader_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    watched = conditions.Watch(UUIDS, None).start()
    watched.stop()
    assert "neither NVML" in conditions.observed(watched, None, "")[1]


def test_the_record_keeps_its_conditions_and_older_records_read_without() -> None:
    gpu = {"index": 0, "power_limit_w": 700.0, "sm_clock_max_mhz": 1980, "memory_clock_max_mhz": 3201,
           "ecc": "enabled", "sm_clock_end_mhz": 1500, "memory_clock_end_mhz": 3201,
           "temperature_max_c": 66, "memory_used_max_gib": 70.2, "reasons": ["sw_power_cap"]}
    made = {"source": "nvml", "gpus": [gpu], "samples": 3, "sample_interval_s": 5.0, "links": {},
            "cpu_model": "Intel(R) Xeon(R) Processor", "cpu_count": 16, "cpu_affinity": 16,
            "memory_cap_gb": None, "allocator_gib": None, "outside_allocator_gib": None}
    record = make_record(conditions=made)
    assert record_from_json(record.to_json()).conditions == Conditions(**made)
    assert make_record().conditions is None
    for broken in ({**made, "gpus": [{**gpu, "reasons": ["Sw Power Cap"]}]},  # not nvidia-smi's name
                   {key: value for key, value in made.items() if key != "links"}):  # every key present
        with pytest.raises(ValueError, match="reasons|links"):
            make_record(conditions=broken)


def test_the_host_probe_line_of_the_log_fills_the_host_figure() -> None:
    watched = conditions.Watch((), None)  # no GPU read: the log alone
    log = f"loading\n{probe_line(4.126, 'cuda', 2000, 5)}\n iteration 1/ 10 |\n"
    made, _ = conditions.observed(watched, None, log)
    assert (made.host_op_us, made.host_op_device) == (4.13, "cuda")
    assert made.describe().endswith("not sampled; host 4.13 us a torch op on cuda")
    made, _ = conditions.observed(watched, 80.0, CAP_LINE)
    assert (made.host_op_us, made.host_op_device) == (None, None) and made.allocator_gib == 78.7


def test_a_record_written_before_the_probe_reads_with_no_host_figure() -> None:
    assert '"host_op_us"' not in BEFORE_THE_PROBE.read_text()
    record = load_record(BEFORE_THE_PROBE)
    assert record.conditions is not None and record.conditions.cpu_model
    assert (record.conditions.host_op_us, record.conditions.host_op_device) == (None, None)


def test_the_host_figure_comes_with_its_device() -> None:
    made = conditions.observed(conditions.Watch((), None), None, "")[0].model_dump()
    assert Conditions(**{**made, "host_op_us": 4.1, "host_op_device": "cuda"}).host_op_us == 4.1
    for half in ({"host_op_us": 4.1}, {"host_op_device": "cuda"}):
        with pytest.raises(ValueError, match="set together"):
            Conditions(**{**made, **half})
