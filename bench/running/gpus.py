"""What GPUs this machine has, read from the driver's tool (no torch needed on the host)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class LocalGPUs:
    count: int
    name: str  # the first GPU's name as the driver reports it, "" when none
    driver: str
    memory_gb: float = 0.0  # the first GPU's memory in GB (1e9 bytes), 0 when unknown


def detect_gpus() -> LocalGPUs:
    """NVIDIA GPUs visible to this process (honours CUDA_VISIBLE_DEVICES); none when no driver."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return LocalGPUs(0, "", "")
    try:
        out = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return LocalGPUs(0, "", "")
    rows = [[part.strip() for part in line.split(",")] for line in out.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = len(rows)
    if visible is not None:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    if not count:
        return LocalGPUs(0, "", "")
    first = rows[0]
    return LocalGPUs(count, first[0], first[1] if len(first) > 1 else "",
                     _memory_gb(first[2]) if len(first) > 2 else 0.0)


def _memory_gb(field: str) -> float:
    """nvidia-smi's ``81920 MiB`` in GB; 0 when it says something else ("[N/A]")."""
    number, _, unit = field.partition(" ")
    try:
        return float(number) * 2**20 / 1e9 if unit == "MiB" else 0.0
    except ValueError:
        return 0.0
