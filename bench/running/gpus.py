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


def detect_gpus() -> LocalGPUs:
    """NVIDIA GPUs visible to this process (honours CUDA_VISIBLE_DEVICES); none when no driver."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return LocalGPUs(0, "", "")
    try:
        out = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return LocalGPUs(0, "", "")
    rows = [[part.strip() for part in line.split(",")] for line in out.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = len(rows)
    if visible is not None:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    if not count:
        return LocalGPUs(0, "", "")
    return LocalGPUs(count, rows[0][0], rows[0][1] if len(rows[0]) > 1 else "")
