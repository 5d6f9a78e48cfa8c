"""What the driver says of a run's GPUs: their power limit, clocks, ECC mode, temperature, memory in
use and clock event (throttle) reasons; how they are linked; and the host's CPU.

The GPUs are read through NVML with nvidia-ml-py (``import pynvml``, the ``gpu-state`` extra)
where it imports and the driver's library loads, else through nvidia-smi's CSV queries
(``--query-gpu=... --format=csv,noheader,nounits``), which every driver has. Both readers give the
same names and units: W, MHz, °C, GiB (2^30 bytes). Only how the GPUs are linked, ``nvidia-smi topo
-m``, is read from text: neither NVML nor the CSV query has that matrix as one field.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

SMI_TIMEOUT_S = 20
MIB_PER_GIB = 1024
# The clock event reasons by nvidia-smi's names. The queries say clocks_throttle_reasons.<name>
# (and NVML nvmlClocksThrottleReason<Name>): drivers before 535 know only those names, later ones
# still take them for clocks_event_reasons.<name> (580 does).
REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
           "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown", "sync_boost")
STATIC_FIELDS = ("uuid", "index", "enforced.power.limit", "clocks.max.sm", "clocks.max.memory",
                 "ecc.mode.current")
SAMPLE_FIELDS = ("uuid", "clocks.sm", "clocks.mem", "temperature.gpu", "memory.used",
                 *(f"clocks_throttle_reasons.{name}" for name in REASONS))
_UNKNOWN = {"", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # topo -m underlines its header
TOPO_GPU = re.compile(r"^GPU(?P<index>\d+)$")  # a row's or column's name in nvidia-smi topo -m


@dataclass(frozen=True)
class Static:
    """What a GPU says once: nvidia-smi's index, the enforced power limit (W), the highest SM and
    memory clocks (MHz), the ECC mode (``enabled``, ``disabled``); None where it does not say."""

    index: int | None
    power_limit_w: float | None
    sm_clock_max_mhz: int | None
    memory_clock_max_mhz: int | None
    ecc: str | None


@dataclass(frozen=True)
class Sample:
    """One reading of a GPU: SM and memory clocks (MHz), temperature (°C), memory in use (GiB) and
    the clock event reasons active, by nvidia-smi's names; None where it does not say."""

    sm_clock_mhz: int | None
    memory_clock_mhz: int | None
    temperature_c: int | None
    memory_used_gib: float | None
    reasons: frozenset[str] | None


class Reader(Protocol):
    """Reads the GPUs named by UUID; a reader's answers are keyed by UUID."""

    source: str

    def static(self) -> dict[str, Static]: ...

    def sample(self) -> dict[str, Sample]: ...

    def close(self) -> None: ...


def _number(text: str | None, kind: type = float) -> Any:
    """A CSV field as ``kind``; None for nvidia-smi's words for unknown, or what is no number."""
    if text is None or text.strip() in _UNKNOWN:
        return None
    try:
        return kind(float(text)) if kind is int else kind(text)
    except ValueError:
        return None


def _ecc(word: str | None) -> str | None:
    word = (word or "").strip().lower()
    return word if word in ("enabled", "disabled") else None


def rows_by_uuid(text: str, fields: Sequence[str]) -> dict[str, dict[str, str]]:
    """nvidia-smi's ``--format=csv,noheader,nounits`` answer for ``fields`` (``uuid`` among them),
    one mapping of field to text per GPU; a row of another length is left out."""
    rows = csv.reader(text.splitlines(), skipinitialspace=True)
    found = [dict(zip(fields, (cell.strip() for cell in row), strict=True))
             for row in rows if len(row) == len(fields)]
    return {row["uuid"]: row for row in found}


def static_of(row: dict[str, str]) -> Static:
    """A GPU's :class:`Static` from its row of the :data:`STATIC_FIELDS` query."""
    return Static(_number(row["index"], int), _number(row["enforced.power.limit"]),
                  _number(row["clocks.max.sm"], int), _number(row["clocks.max.memory"], int),
                  _ecc(row["ecc.mode.current"]))


def sample_of(row: dict[str, str]) -> Sample:
    """A GPU's :class:`Sample` from its row of the :data:`SAMPLE_FIELDS` query: each reason field
    says ``Active`` or ``Not Active``."""
    states = [row[f"clocks_throttle_reasons.{name}"] for name in REASONS]
    reasons = (frozenset(name for name, state in zip(REASONS, states, strict=True) if state == "Active")
               if all(state in ("Active", "Not Active") for state in states) else None)
    used = _number(row["memory.used"])
    return Sample(_number(row["clocks.sm"], int), _number(row["clocks.mem"], int),
                  _number(row["temperature.gpu"], int),
                  None if used is None else used / MIB_PER_GIB, reasons)


class SmiReader:
    """The GPUs through nvidia-smi's CSV queries (a process per query, about 0.1 s)."""

    source = "nvidia-smi"

    def __init__(self, smi: str, uuids: Sequence[str]):
        self.smi, self.uuids = smi, tuple(uuids)

    def _query(self, fields: Sequence[str]) -> dict[str, dict[str, str]]:
        out = subprocess.run([self.smi, f"--id={','.join(self.uuids)}",
                              f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
        if out.returncode != 0:
            raise OSError(f"nvidia-smi --query-gpu: exit {out.returncode}: "
                          f"{(out.stderr or out.stdout).strip()[:200]}")
        return rows_by_uuid(out.stdout, fields)

    def static(self) -> dict[str, Static]:
        return {uuid: static_of(row) for uuid, row in self._query(STATIC_FIELDS).items()}

    def sample(self) -> dict[str, Sample]:
        return {uuid: sample_of(row) for uuid, row in self._query(SAMPLE_FIELDS).items()}

    def close(self) -> None:
        pass


def _camel(name: str) -> str:
    """``sw_power_cap`` -> ``SwPowerCap``: NVML's name of a reason after ``nvmlClocksThrottleReason``."""
    return "".join(word.capitalize() for word in name.split("_"))


class NvmlReader:
    """The GPUs through NVML (nvidia-ml-py), in this process: no process per sample."""

    source = "nvml"

    def __init__(self, nvml: Any, uuids: Sequence[str]):
        nvml.nvmlInit()
        self.nvml = nvml
        self.handles = {uuid: nvml.nvmlDeviceGetHandleByUUID(uuid) for uuid in uuids}
        self.bits = {name: getattr(nvml, f"nvmlClocksThrottleReason{_camel(name)}") for name in REASONS}

    def _ask(self, call: str, *args: Any) -> Any:
        """``nvml.<call>(*args)``; None where the GPU does not support it."""
        try:
            return getattr(self.nvml, call)(*args)
        except self.nvml.NVMLError:
            return None

    def static(self) -> dict[str, Static]:
        n, found = self.nvml, {}
        for uuid, h in self.handles.items():
            power, ecc = self._ask("nvmlDeviceGetEnforcedPowerLimit", h), self._ask("nvmlDeviceGetEccMode", h)
            found[uuid] = Static(self._ask("nvmlDeviceGetIndex", h), None if power is None else power / 1000,
                                 self._ask("nvmlDeviceGetMaxClockInfo", h, n.NVML_CLOCK_SM),
                                 self._ask("nvmlDeviceGetMaxClockInfo", h, n.NVML_CLOCK_MEM),
                                 None if ecc is None else ("enabled" if ecc[0] else "disabled"))
        return found

    def sample(self) -> dict[str, Sample]:
        n, found = self.nvml, {}
        for uuid, h in self.handles.items():
            bits = self._ask("nvmlDeviceGetCurrentClocksThrottleReasons", h)
            found[uuid] = Sample(self._ask("nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_SM),
                                 self._ask("nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_MEM),
                                 self._ask("nvmlDeviceGetTemperature", h, n.NVML_TEMPERATURE_GPU),
                                 self._memory_used_gib(h),
                                 None if bits is None else
                                 frozenset(name for name, bit in self.bits.items() if bits & bit))
        return found

    def _memory_used_gib(self, handle: Any) -> float | None:
        """Memory in use as nvidia-smi counts it: NVML's version 2 answer, which leaves out what
        the driver reserves (version 1 counts it as used: 0.6 GiB on an idle H200)."""
        try:
            info = self.nvml.nvmlDeviceGetMemoryInfo(handle, version=self.nvml.nvmlMemory_v2)
        except (self.nvml.NVMLError, TypeError, AttributeError):  # an nvidia-ml-py before version 2
            return None
        return info.used / 2**30

    def close(self) -> None:
        self._ask("nvmlShutdown")


def open_reader(uuids: Sequence[str]) -> Reader | None:
    """NVML where nvidia-ml-py imports and the driver's library loads, else nvidia-smi, else None."""
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            return NvmlReader(pynvml, uuids)
        except pynvml.NVMLError:  # no driver library (a host without GPUs): nvidia-smi says why
            pass
    smi = shutil.which("nvidia-smi")
    return SmiReader(smi, uuids) if smi else None


def links_from_topo(text: str, indices: Sequence[int]) -> dict[str, str] | None:
    """How each pair of the GPUs ``indices`` is linked, ``{"0-1": "NV18"}``, from ``nvidia-smi topo
    -m``'s matrix (tab-separated; its header names the columns); None where a pair is missing."""
    lines = [_ANSI.sub("", line).split("\t") for line in text.splitlines()]
    header = next(([cell.strip() for cell in cells] for cells in lines
                   if len(cells) > 1 and not cells[0].strip() and TOPO_GPU.match(cells[1].strip())), None)
    if header is None:
        return None
    columns = {int(m["index"]): at for at, name in enumerate(header) if (m := TOPO_GPU.match(name))}
    rows = {int(m["index"]): cells for cells in lines if (m := TOPO_GPU.match(cells[0].strip()))}
    wanted = sorted(indices)
    links = {}
    for i, first in enumerate(wanted):
        for second in wanted[i + 1:]:
            row, at = rows.get(first), columns.get(second)
            if row is None or at is None or at >= len(row) or not row[at].strip():
                return None
            links[f"{first}-{second}"] = row[at].strip()
    return links


def topology(indices: Sequence[int]) -> dict[str, str] | None:
    """:func:`links_from_topo` of this machine's ``nvidia-smi topo -m``; None where it cannot say."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return links_from_topo(out.stdout, indices) if out.returncode == 0 else None


def cpu_model(cpuinfo: str) -> str | None:
    """The first ``model name`` of ``/proc/cpuinfo``'s text; None where it has none (Arm hosts)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return None
