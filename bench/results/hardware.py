"""Hardware on the results page: accelerator names, and the GEMM ceilings the smoke check measured.

A record names its accelerator by the data file (``h200-sxm``) or, in older or hand-made records,
by a device name (``H200 SXM``); both resolve to the file in ``platforms/accelerators/``, whose
``model`` is the name shown. The smoke check (``python -m bench.train.smoke``, schema ``bench.smoke/1``)
measures the bf16 8192^3 GEMM rate per GPU: the most a GEMM-bound training step could reach on
that GPU, drawn as a line on the plots. Smoke files are ``*smoke*.json`` in a folder or its
subfolders (default ``docs/reports``, where each lies with the dated report of its campaign); one
whose GEMM check did not pass gives no ceiling, and of several for one accelerator the latest counts.
Each smoke file is also a node check on the page: its all-reduce bus bandwidth per size beside the
accelerator's nominal link (``link`` in its data file) and its GEMM ceilings.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from bench.config.environment import VERSION_STAMPS
from bench.config.platforms import Accelerator, DataError, load_accelerator, match_accelerator
from bench.results.table import DASH, link, number, table, text

SMOKE_SCHEMA = "bench.smoke/1"


@cache
def accelerator_of(name: str) -> Accelerator | None:
    """The accelerator a record's or published row's accelerator text means, or None."""
    try:
        return load_accelerator(name)
    except DataError:
        return match_accelerator(name)


def hardware_id(name: str) -> str:
    """The accelerator file's name a record's accelerator text means (``H200 SXM`` and
    ``h200-sxm`` are one GPU model); text that names no known accelerator as is."""
    accelerator = accelerator_of(name)
    return accelerator.name if accelerator else name


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


def _smoke_reports(folder: Path | str) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(path, report) of each smoke file in ``folder`` and its subfolders, by path (none if the
    folder is missing). A file that is not valid JSON or not a smoke report raises ValueError
    naming it."""
    folder = Path(folder)
    for path in sorted(folder.rglob("*smoke*.json")) if folder.is_dir() else []:
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"{path}: not a readable smoke report ({error})") from None
        if not isinstance(report, dict) or report.get("schema") != SMOKE_SCHEMA:
            raise ValueError(f"{path}: schema is not {SMOKE_SCHEMA!r}; only smoke reports "
                             "(python -m bench.train.smoke --out) belong under this name")
        yield path, report


def _detail(report: dict[str, Any], check: str) -> dict[str, Any] | None:
    """The detail of a check that passed, else None."""
    result = (report.get("checks") or {}).get(check) or {}
    return (result.get("detail") or {}) if result.get("ok") else None


def load_ceilings(folder: Path | str) -> dict[str, Ceiling]:
    """Ceilings by accelerator name from the smoke files in ``folder`` (none if it is missing).

    A file that is not valid JSON or not a smoke report raises ValueError naming it.
    """
    found: dict[str, Ceiling] = {}
    for path, report in _smoke_reports(folder):
        detail = _detail(report, "gemm")
        accelerator = match_accelerator(str(report.get("gpu_model", "")))
        if detail is None or accelerator is None or "tflops_median" not in detail:
            continue
        ceiling = Ceiling(accelerator.name, str(report["gpu_model"]), str(detail.get("dtype")),
                          float(detail["tflops_median"]), str(report.get("started_at", ""))[:10],
                          path.name)
        if accelerator.name not in found or ceiling.date >= found[accelerator.name].date:
            found[accelerator.name] = ceiling
    return found


@dataclass(frozen=True)
class AllReduce:
    """One all-reduce size the NCCL check timed: bus bandwidth in GB/s (nccl-tests' convention)."""

    bytes: int
    busbw_gbps: float


@dataclass(frozen=True)
class NodeCheck:
    """What one smoke report measured of its machine. ``file`` is the report's path relative to
    the smoke folder; ``accelerator`` the data file its GPU name matches (None: unknown).
    ``all_reduce`` holds the bf16 sizes of a passed NCCL check over two GPUs or more (empty for a
    report before the check timed bf16 sizes, and for one GPU: nothing crosses a link).
    ``gemm_tflops`` is the bf16 8192³ median per GPU of a passed GEMM check; ``shapes`` its
    ``"<shape> <dtype>"`` rates, TFLOP/s (empty in reports before the check timed them).
    ``nccl_settings``: the ``NCCL_*`` variables the caller set (``NCCL_PROTO=Simple``), none for
    NCCL's defaults; ``gemm_checked``: whether the report ran the GEMM check at all."""

    file: str
    gpu_model: str
    accelerator: Accelerator | None
    gpus: int
    date: str
    nccl_version: str | None
    all_reduce: tuple[AllReduce, ...]
    gemm_tflops: float | None
    shapes: Mapping[str, float]
    nccl_settings: tuple[str, ...] = ()
    gemm_checked: bool = True


def _all_reduce(report: dict[str, Any]) -> tuple[AllReduce, ...]:
    detail = _detail(report, "nccl") or {}
    if detail.get("dtype") != "bf16" or int(detail.get("world_size", 1)) < 2:
        return ()
    return tuple(AllReduce(int(size["bytes"]), float(size["busbw_gbps"]))
                 for size in detail.get("sizes") or ())


def load_node_checks(folder: Path | str) -> tuple[NodeCheck, ...]:
    """A :class:`NodeCheck` per smoke file in ``folder`` (none if it is missing), by date and
    path. A file that is not valid JSON or not a smoke report raises ValueError naming it."""
    checks = []
    for path, report in _smoke_reports(folder):
        gpu_model = str(report.get("gpu_model", ""))
        gemm = _detail(report, "gemm") or {}
        median = gemm.get("tflops_median")
        nccl = _detail(report, "nccl") or {}
        checks.append(NodeCheck(
            file=path.relative_to(folder).as_posix(), gpu_model=gpu_model,
            accelerator=match_accelerator(gpu_model), gpus=int(report.get("gpus", 1)),
            date=str(report.get("started_at", ""))[:10],
            nccl_version=str(nccl["nccl_version"]) if "nccl_version" in nccl else None,
            all_reduce=_all_reduce(report), gemm_tflops=None if median is None else float(median),
            shapes={str(k): float(v) for k, v in (gemm.get("shapes") or {}).items()},
            # The four-H200 reports were written before the smoke check left the image's version
            # stamps out of nccl_settings: they are dropped here too.
            nccl_settings=tuple(f"{k}={v}" for k, v in sorted((report.get("nccl_settings") or {}).items())
                                if k not in VERSION_STAMPS),
            gemm_checked="gemm" in (report.get("checks") or {})))
    return tuple(sorted(checks, key=lambda c: (c.date, c.file)))


def _size(n: int) -> str:
    """Bytes as ``64 MiB`` / ``1 GiB`` (binary units, as the smoke check sizes its tensors)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _machine(check: NodeCheck) -> str:
    return text(check.accelerator.model if check.accelerator else check.gpu_model)


def _report_link(check: NodeCheck, smoke_link: str) -> str:
    return link(check.file.rsplit("/", 1)[-1], f"{smoke_link}/{check.file}")


def _link_cells(check: NodeCheck) -> list[str]:
    """The nominal link and the largest size's bus bandwidth as a share of it."""
    nominal = check.accelerator.link if check.accelerator else None
    if nominal is None:
        return [DASH, DASH]
    share = (f"{100 * max(check.all_reduce, key=lambda a: a.bytes).busbw_gbps / nominal.gbps:.1f}"
             if check.all_reduce else DASH)
    return [f"{nominal.gbps:.0f} ({text(nominal.name)})", share]


def _all_reduce_table(checks: Sequence[NodeCheck], smoke_link: str) -> list[str]:
    sizes = sorted({a.bytes for check in checks for a in check.all_reduce})
    header = (("machine", False), ("GPUs", True), ("date", False), ("NCCL", False),
              *((f"{_size(n)} (GB/s)", True) for n in sizes),
              ("link, one way (GB/s)", True), ("largest size / link (%)", True), ("report", False))
    rows = []
    for check in checks:
        measured = {a.bytes: a.busbw_gbps for a in check.all_reduce}
        nccl = ", ".join(filter(None, (check.nccl_version, *check.nccl_settings))) or None
        rows.append([_machine(check), str(check.gpus), text(check.date), text(nccl),
                     *(number(measured.get(n), 1) for n in sizes), *_link_cells(check),
                     _report_link(check, smoke_link)])
    return table(header, rows)


def _gemm_table(checks: Sequence[NodeCheck], smoke_link: str) -> list[str]:
    checks = [check for check in checks if check.gemm_checked]  # an all-reduce A/B ran no GEMMs
    shapes = list(dict.fromkeys(name for check in checks for name in check.shapes))
    header = (("machine", False), ("GPUs", True), ("date", False),
              ("bf16 8192³, median per GPU", True), *((text(name), True) for name in shapes),
              ("report", False))
    rows = [[_machine(check), str(check.gpus), text(check.date), number(check.gemm_tflops, 1),
             *(number(check.shapes.get(name), 1) for name in shapes),
             _report_link(check, smoke_link)] for check in checks]
    return table(header, rows)


def _link_sources(checks: Sequence[NodeCheck]) -> list[str]:
    accelerators = {c.accelerator.name: c.accelerator for c in checks if c.accelerator}
    return [f"- {text(a.model)}: {text(a.link.name)}, {a.link.gbps:.0f} GB/s each way "
            f"({text(a.link.source)})"
            for _, a in sorted(accelerators.items()) if a.link is not None]


def section(checks: Sequence[NodeCheck], smoke_link: str) -> list[str]:
    """The node checks: all-reduce bandwidth beside the link, then the GEMM ceilings."""
    if not checks:
        return []
    return ["## Node checks", "",
            ("From the smoke check's reports (`python -m bench.train.smoke`, kept with the dated "
             "report of the campaign that ran it), one row per report. All-reduce: the bus "
             "bandwidth (nccl-tests' convention) of bf16 all-reduces over all the machine's GPUs "
             "per size (the NCCL column names the `NCCL_*` settings a report ran with, if any), "
             "set beside the link's nominal bandwidth per GPU in one direction from the "
             "accelerator's data file: NCCL's bus bandwidth counts what each GPU sends one way, so "
             "the one-way figure, not the bidirectional one datasheets headline, is its ceiling. "
             f"`{DASH}`: not measured (one GPU crosses no link; reports before the check timed bf16 "
             "sizes) or no link figure in the data."), "",
            *_all_reduce_table(checks, smoke_link), "", *_link_sources(checks), "",
            ("GEMM ceilings, TFLOP/s: the bf16 8192³ product's median over the GPUs, then, where "
             "the report has them, the preset shapes (`2.7b fc1`: the 2.7b preset's first MLP "
             "GEMM at 8192 tokens) in bf16 and fp8 on the first GPU."), "",
            *_gemm_table(checks, smoke_link), ""]
