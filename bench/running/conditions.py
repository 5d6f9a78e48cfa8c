"""The conditions a local run's GPUs ran under, for the record's ``conditions``
(:class:`bench.records.provenance.Conditions`).

:func:`watch` reads what does not change (power limit, highest clocks, ECC, how the GPUs are
linked, the host's CPU) when the run starts, and samples clocks, temperature, memory in use and
clock event reasons every :data:`SAMPLE_INTERVAL_S` seconds in a background thread while it goes
(one NVML call per field, or one nvidia-smi process: cheap beside a training step).
:meth:`Watch.stop` ends the sampling when the run ends, and :func:`observed` makes the record's
field. Nothing here may cost a run its record: whatever fails is said in the record's notes
(``conditions``) and the rest is kept.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from bench.measure.host_probe_line import read_probe_line
from bench.measure.memory_cap_line import read_cap_line
from bench.records.provenance import Conditions, GpuConditions
from bench.running.gpus import detect_gpus
from bench.running.gpustate import Reader, Sample, Static, cpu_model, open_reader, topology

SAMPLE_INTERVAL_S = 5.0
"""Seconds between samples; a run shorter than this is read once, at its start only."""
JOIN_TIMEOUT_S = 30.0  # a sample in flight when the run ends (nvidia-smi's own limit is 20 s)
NOTE = "conditions"  # the record's note of what could not be read
NOTE_CHARS = 500
CPUINFO = Path("/proc/cpuinfo")
T = TypeVar("T")


@dataclass
class _Seen:
    """What the samples of one GPU showed so far."""

    last: Sample | None = None
    temperature_max_c: int | None = None
    memory_used_max_gib: float | None = None
    reasons: set[str] | None = None

    def add(self, sample: Sample) -> None:
        self.last = sample
        self.temperature_max_c = _most(self.temperature_max_c, sample.temperature_c)
        self.memory_used_max_gib = _most(self.memory_used_max_gib, sample.memory_used_gib)
        if sample.reasons is not None:
            self.reasons = (self.reasons or set()) | sample.reasons


def _most(known: float | None, new: float | None) -> float | None:
    return new if known is None else known if new is None else max(known, new)


@dataclass
class Watch:
    """The sampling of one run's GPUs (UUIDs in CUDA's order); ``problems`` what failed."""

    uuids: tuple[str, ...]
    reader: Reader | None
    interval_s: float = SAMPLE_INTERVAL_S
    static: dict[str, Static] = field(default_factory=dict)
    links: dict[str, str] | None = None
    seen: dict[str, _Seen] = field(default_factory=dict)
    samples: int = 0
    problems: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Watch:
        if self.reader is None:
            self.problems.append("neither NVML (nvidia-ml-py) nor nvidia-smi is here to read the GPUs")
            return self
        self.static = self._try("reading the GPUs", self.reader.static) or {}
        if not self.static:  # nothing to sample against
            if not self.problems:
                self.problems.append("the driver named none of the run's GPUs")
            return self
        indices = [s.index for s in self.static.values() if s.index is not None]
        self.links = topology(indices) if len(indices) == len(self.uuids) else None
        self._thread = threading.Thread(target=self._loop, name="bench-conditions", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            found = self._try("sampling the GPUs", self.reader.sample)
            if found is None:
                return  # said once: a reader that fails once fails again
            for uuid, sample in found.items():
                self.seen.setdefault(uuid, _Seen()).add(sample)
            self.samples += 1

    def _try(self, what: str, call: Callable[[], T]) -> T | None:
        try:
            return call()
        except Exception as error:  # any failure of the driver's tools leaves the run its record
            self.problems.append(f"{what} failed ({type(error).__name__}: {error})")
            return None

    def stop(self) -> None:
        """End the sampling (the run has ended) and let the reader go."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                self.problems.append(f"a sample of the GPUs was still running {JOIN_TIMEOUT_S:.0f} s "
                                     "after the run ended; the samples before it are kept")
        if self.reader is not None:
            self._try("closing the GPU reader", self.reader.close)


def watch(gpus: int) -> Watch:
    """Start watching the first ``gpus`` GPUs this process sees (a local run's ranks take them in
    order); never raises."""
    try:
        uuids = detect_gpus().uuids[:gpus]
        if not uuids:  # no GPU that nvidia-smi names (a machine without one): nothing to read
            return Watch((), None)
        return Watch(uuids, open_reader(uuids)).start()
    except Exception as error:  # the record is made without conditions, and says why
        broken = Watch((), None)
        broken.problems.append(f"the GPUs could not be watched ({type(error).__name__}: {error})")
        return broken


def _gpu(static: Static, seen: _Seen | None) -> GpuConditions:
    last = seen.last if seen else None
    return GpuConditions(
        index=static.index, power_limit_w=static.power_limit_w, sm_clock_max_mhz=static.sm_clock_max_mhz,
        memory_clock_max_mhz=static.memory_clock_max_mhz, ecc=static.ecc,
        sm_clock_end_mhz=last.sm_clock_mhz if last else None,
        memory_clock_end_mhz=last.memory_clock_mhz if last else None,
        temperature_max_c=seen.temperature_max_c if seen else None,
        memory_used_max_gib=round(seen.memory_used_max_gib, 3)
        if seen and seen.memory_used_max_gib is not None else None,
        reasons=sorted(seen.reasons) if seen and seen.reasons is not None else None)


def observed(watched: Watch, cap_gb: float | None, log_text: str) -> tuple[Conditions | None, str | None]:
    """The record's ``conditions`` from a stopped watch, the run's ``--gpu-memory-cap`` (GB, None
    without one) and its log (the training entry's lines of what the cap leaves and of its host
    probe), and the note of what could not be read (None where everything was)."""
    problems = list(watched.problems)
    try:
        made = Conditions(
            source=watched.reader.source if watched.reader and watched.static else None,
            gpus=[_gpu(s, watched.seen.get(uuid)) for uuid in watched.uuids
                  if (s := watched.static.get(uuid)) is not None and s.index is not None],
            samples=watched.samples, sample_interval_s=watched.interval_s, links=watched.links,
            **_host(), **_cap(cap_gb, log_text), **_probe(log_text))
    except Exception as error:  # whatever was read, the run keeps its record
        problems.append(f"the conditions read do not make a record's field "
                        f"({type(error).__name__}: {error})")
        made = None
    note = "; ".join(problems)
    return made, (note[:NOTE_CHARS] if note else None)


def _host() -> dict[str, object]:
    try:
        model = cpu_model(CPUINFO.read_text(errors="replace"))
    except OSError:
        model = None
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpu_model": model, "cpu_count": os.cpu_count(), "cpu_affinity": affinity or None}


def _cap(cap_gb: float | None, log_text: str) -> dict[str, object]:
    line = read_cap_line(log_text) if cap_gb is not None else None
    return {"memory_cap_gb": cap_gb, "allocator_gib": line.allocator_gib if line else None,
            "outside_allocator_gib": line.outside_gib if line else None}


def _probe(log_text: str) -> dict[str, object]:
    line = read_probe_line(log_text)
    return {"host_op_us": line.op_us if line else None, "host_op_device": line.device if line else None}
