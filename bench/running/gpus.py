"""What GPUs this machine has, read from the driver's tool (no torch needed on the host)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from bench.config.environment import env_value

# uuid last: a row's fields are read by position.
QUERY = "name,driver_version,memory.total,uuid"


@dataclass(frozen=True)
class LocalGPUs:
    count: int
    name: str  # the first GPU's name as the driver reports it, "" when none
    driver: str
    memory_gb: float = 0.0  # the first GPU's memory in GB (1e9 bytes), 0 when unknown
    # The visible GPUs' UUIDs ("GPU-8442300b-..."), in CUDA's order; () when unknown. They tell
    # one physical machine from another where host names do not (every VM is "vm").
    uuids: tuple[str, ...] = ()


def detect_gpus() -> LocalGPUs:
    """NVIDIA GPUs visible to this process (honours CUDA_VISIBLE_DEVICES); none when no driver."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return LocalGPUs(0, "", "")
    try:
        out = subprocess.run([smi, f"--query-gpu={QUERY}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return LocalGPUs(0, "", "")
    rows = [[part.strip() for part in line.split(",")] for line in out.splitlines() if line.strip()]
    rows = _visible(rows, env_value("CUDA_VISIBLE_DEVICES"))
    if not rows:
        return LocalGPUs(0, "", "")
    first = rows[0]
    uuids = tuple(row[3] for row in rows if len(row) > 3 and row[3].startswith("GPU-"))
    return LocalGPUs(len(rows), first[0], first[1] if len(first) > 1 else "",
                     _memory_gb(first[2]) if len(first) > 2 else 0.0,
                     uuids if len(uuids) == len(rows) else ())


def _visible(rows: list[list[str]], visible: str | None) -> list[list[str]]:
    """The rows CUDA_VISIBLE_DEVICES lets this process see: those it names by index or by UUID,
    in its order; where it names something else (a MIG device), as many as it lists, from the
    first."""
    if visible is None:
        return rows
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    picked = [_named(rows, entry) for entry in wanted]
    return [row for row in picked if row is not None] if all(picked) else rows[:len(wanted)]


def _named(rows: list[list[str]], entry: str) -> list[str] | None:
    """The row an entry of CUDA_VISIBLE_DEVICES names: an index, or a UUID or its prefix (CUDA
    accepts both)."""
    if entry.isdigit():
        return rows[int(entry)] if int(entry) < len(rows) else None
    if not entry.startswith("GPU-"):
        return None
    return next((row for row in rows if len(row) > 3 and row[3].startswith(entry)), None)


def _memory_gb(field: str) -> float:
    """nvidia-smi's ``81920 MiB`` in GB; 0 when it says something else ("[N/A]")."""
    number, _, unit = field.partition(" ")
    try:
        return float(number) * 2**20 / 1e9 if unit == "MiB" else 0.0
    except ValueError:
        return 0.0
