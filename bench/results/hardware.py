"""Hardware on the results page: accelerator names, and the GEMM ceilings the smoke check measured.

A record names its accelerator by the data file (``h200-sxm``) or, in older or hand-made records,
by a device name (``H200 SXM``); both resolve to the file in ``platforms/accelerators/``, whose
``model`` is the name shown. The smoke check (``python -m bench.train.smoke``, schema ``bench.smoke/1``)
measures the bf16 8192^3 GEMM rate per GPU: the most a GEMM-bound training step could reach on
that GPU, drawn as a line on the plots. Smoke files are ``*smoke*.json`` in a folder or its
subfolders (default ``docs/reports``, where each lies with the dated report of its campaign); one
whose GEMM check did not pass gives no ceiling, and of several for one accelerator the latest counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from bench.config.platforms import Accelerator, DataError, load_accelerator, match_accelerator

SMOKE_SCHEMA = "bench.smoke/1"


@cache
def accelerator_of(name: str) -> Accelerator | None:
    """The accelerator a record's or published row's accelerator text means, or None."""
    try:
        return load_accelerator(name)
    except DataError:
        return match_accelerator(name)


def hardware_name(name: str) -> str:
    """``h200-sxm`` -> ``NVIDIA H200 SXM 141GB``; text that names no known accelerator as is."""
    accelerator = accelerator_of(name)
    return accelerator.model if accelerator else name


@dataclass(frozen=True)
class Ceiling:
    """A measured GEMM rate: ``accelerator`` is the data file's name."""

    accelerator: str
    gpu_model: str
    dtype: str
    tflops_per_gpu: float
    date: str
    file: str


def load_ceilings(folder: Path | str) -> dict[str, Ceiling]:
    """Ceilings by accelerator name from the smoke files in ``folder`` (none if it is missing).

    A file that is not valid JSON or not a smoke report raises ValueError naming it.
    """
    found: dict[str, Ceiling] = {}
    folder = Path(folder)
    for path in sorted(folder.rglob("*smoke*.json")) if folder.is_dir() else []:
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"{path}: not a readable smoke report ({error})") from None
        if not isinstance(report, dict) or report.get("schema") != SMOKE_SCHEMA:
            raise ValueError(f"{path}: schema is not {SMOKE_SCHEMA!r}; only smoke reports "
                             "(python -m bench.train.smoke --out) belong under this name")
        gemm = (report.get("checks") or {}).get("gemm") or {}
        detail = gemm.get("detail") or {}
        accelerator = match_accelerator(str(report.get("gpu_model", "")))
        if not gemm.get("ok") or accelerator is None or "tflops_median" not in detail:
            continue
        ceiling = Ceiling(accelerator.name, str(report["gpu_model"]), str(detail.get("dtype")),
                          float(detail["tflops_median"]), str(report.get("started_at", ""))[:10],
                          path.name)
        if accelerator.name not in found or ceiling.date >= found[accelerator.name].date:
            found[accelerator.name] = ceiling
    return found
