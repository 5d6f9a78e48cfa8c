"""Where a step's time goes: a breakdown of a torch-profiler trace of a few steady-state steps.

``bench run --profile`` has Megatron's training loop capture ``PROFILE_STEPS`` steps, trained
``PROFILE_LEAD_STEPS`` after the measured ones, with the torch profiler (host ops and CUDA
kernels; no stacks, no shapes) on rank 0; the trace is a Chrome trace
(``torch_profile/rank-0.json.gz``). This module reads its kernels and answers, per step (the
host's ops: :mod:`bench.measure.host_side`):

- ``gemm``: matrix multiplies (cuBLAS/cuBLASLt, CUTLASS, Transformer Engine's fp8 GEMMs);
- ``attention``: core attention (flash, cuDNN fused attention, torch SDPA kernels);
- ``optimizer``: the optimizer step: multi-tensor Adam by name, and every kernel that runs within
  the GPU span of torch's ``Optimizer.step#...`` annotation (the casts and copies of an optimizer
  with scaled fp16/fp8 states, e.g. Transformer Engine's FusedAdam under the paper's states);
- ``other``: every other kernel (layer norm, GeLU, casts, the loss, ...) and the GPU's memory
  copies and sets;
- ``comm_exposed``: communication (NCCL, userbuffers) while no other kernel runs: the part not
  hidden behind compute;
- ``idle``: no kernel at all on the GPU (the host is late: launch-bound, synchronisation).

The six add up to the window. ``largest`` names the kernels that took the most time (whole
durations, overlapped or not), so that a class as wide as ``other`` says what is in it. Kernels on
several streams overlap, so each instant of the window is given to one class only, in the order
above (a GEMM overlapping an all-reduce counts as GEMM; the all-reduce's time then is hidden).
``comm_total`` is the union of the communication kernels, hidden or not. The window runs from the
first profiled step's start to the last one's end (the ``ProfilerStep#N`` spans the profiler
writes); without them, from the first kernel to the last.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.measure.host_side import HostSide, host_side

PROFILE_STEPS = 2  # steps captured after the measured ones (their step times are not measured)
# Steps between the measured ones and the captured ones: the profiler arms during the first (it
# ran 20 % slower on two H100) and warms up in the second; neither is measured.
PROFILE_LEAD_STEPS = 2
PROFILE_DIR = "profile"  # in the run folder
PROFILE_DIR_ENV = "BENCH_PROFILE_DIR"  # the runner tells the training entry that folder
# Megatron writes the trace to <tensorboard dir>/../torch_profile/rank-<rank>.json.gz; the entry
# sets the tensorboard dir to <profile folder>/tensorboard.
TRACE_NAME = "torch_profile/rank-0.json.gz"

# Classes in the order an instant is given to them when kernels overlap; communication is last
# among kernels, so it only gets the time nothing else covers.
CLASSES = ("gemm", "attention", "optimizer", "other", "comm_exposed")

_COMMUNICATION = re.compile(r"nccl|userbuffers|\bub_|all_?gather|reduce_?scatter|allreduce", re.I)
_ATTENTION = re.compile(r"flash|fmha|fused_attn|attn|attention|sdpa|softmax_?warp", re.I)
_OPTIMIZER = re.compile(r"multi_tensor|adam|lbadam", re.I)
_GEMM = re.compile(r"gemm|cutlass|xmma|nvjet|cublas|matmul|wgmma|_mma_|sm90_.*tn|sm90_.*nt", re.I)
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_OPTIMIZER_STEP = "Optimizer.step#"  # torch's annotation of every torch.optim.Optimizer.step
LARGEST = 12  # kernels a breakdown names: the GEMMs and attention take a few, the rest is ``other``
NAME_CHARS = 160  # of a kernel's name kept (C++ template names run to thousands)


# A step launches the same few hundred kernels tens of thousands of times, under names of up to
# thousands of characters (C++ templates): each name is matched once.
@functools.lru_cache(maxsize=8192)
def kernel_class(name: str) -> str:
    """The class of one CUDA kernel by its name (communication first: NCCL kernels name ops)."""
    for label, pattern in (("comm", _COMMUNICATION), ("attention", _ATTENTION),
                           ("optimizer", _OPTIMIZER), ("gemm", _GEMM)):
        if pattern.search(name):
            return label
    return "other"


@dataclass(frozen=True)
class KernelTime:
    """One kernel (by name) of the profiled steps: its class, milliseconds per step and launches."""

    name: str  # without a leading "void ", cut to NAME_CHARS
    cls: str  # kernel_class's (``comm`` for communication, hidden or not), ``optimizer`` within its step
    ms: float
    launches: int  # over all the profiled steps


@dataclass(frozen=True)
class Breakdown:
    """Milliseconds per profiled step in each class; they add up to ``step_ms``."""

    steps: int
    step_ms: float
    gemm: float
    attention: float
    optimizer: float
    other: float
    comm_exposed: float
    idle: float
    comm_total: float
    kernels: int
    largest: list[KernelTime] = field(default_factory=list)
    host: HostSide | None = None  # the host's side of the same steps, where the trace has it

    def fractions(self) -> dict[str, float]:
        """Each class's share of the step, the six adding up to 1."""
        return {name: getattr(self, name) / self.step_ms for name in (*CLASSES, "idle")}


Kernel = tuple[float, float, str, str]  # start, end (microseconds), class, name


def _spans(events: list[dict]) -> tuple[list[Kernel], list[tuple[float, float]]]:
    """(kernels as (start, end, class, name), profiled steps as (start, end)), microseconds."""
    kernels, steps, optimizer = [], [], []
    for event in events:
        if event.get("ph") != "X" or "dur" not in event:
            continue
        start, end = float(event["ts"]), float(event["ts"]) + float(event["dur"])
        name = str(event.get("name", ""))
        if event.get("cat") == "kernel":
            kernels.append((start, end, kernel_class(name), name))
        elif event.get("cat") in ("gpu_memcpy", "gpu_memset"):
            kernels.append((start, end, "other", name))
        elif _STEP.match(name) and event.get("cat") in ("user_annotation", "cpu_op"):
            steps.append((start, end))
        elif name.startswith(_OPTIMIZER_STEP) and event.get("cat") == "gpu_user_annotation":
            optimizer.append((start, end))
    return [(start, end, "optimizer" if label != "comm" and _within(start, end, optimizer) else label, name)
            for start, end, label, name in kernels], steps


def _within(start: float, end: float, spans: list[tuple[float, float]]) -> bool:
    """Whether a kernel's middle lies in one of ``spans`` (the optimizer steps: a handful)."""
    middle = (start + end) / 2
    return any(lo <= middle <= hi for lo, hi in spans)


def at_step(profile: Breakdown, step_ms: float) -> dict[str, float]:
    """The busy classes against a measured (unprofiled) step time, milliseconds: the profiler's
    own overhead makes profiled steps longer, which shows as idle, while the kernels' durations
    hardly change; so GPU idle at the measured step is what the busy classes leave of it (0 when
    they overlap it)."""
    busy = {name: getattr(profile, name) for name in CLASSES}
    return {**busy, "idle": max(step_ms - sum(busy.values()), 0.0)}


def breakdown(trace: dict) -> Breakdown:
    """The per-step breakdown of a Chrome trace (the JSON object torch's profiler exports).

    Raises ValueError when the trace holds no CUDA kernel (a trace of the wrong rank, or one made
    without CUDA activity).
    """
    events = trace.get("traceEvents", [])
    kernels, steps = _spans(events)
    if not kernels:
        raise ValueError("the trace holds no CUDA kernel: it was not made with CUDA activity")
    if steps:
        lo, hi = min(s for s, _ in steps), max(e for _, e in steps)
    else:
        lo, hi = min(k[0] for k in kernels), max(k[1] for k in kernels)
    count = max(len(steps), 1)
    # Sweep line over kernel starts and ends, clipped to the window.
    points: list[tuple[float, int, str]] = []
    for start, end, label, _ in kernels:
        start, end = max(start, lo), min(end, hi)
        if end > start:
            label = "comm_exposed" if label == "comm" else label  # it owns only what nothing else does
            points += [(start, 1, label), (end, -1, label)]
    points.sort(key=lambda p: (p[0], p[1]))
    active = dict.fromkeys(CLASSES, 0)
    spent = dict.fromkeys((*CLASSES, "idle"), 0.0)
    comm_total = 0.0
    now = lo
    for at, delta, label in points:
        if at > now:
            owner = next((c for c in CLASSES if active[c] > 0), "idle")
            spent[owner] += at - now
            comm_total += (at - now) if active["comm_exposed"] > 0 else 0.0
            now = at
        active[label] += delta
    spent["idle"] += hi - now
    per_step = {k: v / count / 1000.0 for k, v in spent.items()}
    return Breakdown(steps=count, step_ms=(hi - lo) / count / 1000.0, comm_total=comm_total / count / 1000.0,
                     kernels=len(kernels), largest=_largest(kernels, lo, hi, count),
                     host=host_side(events, lo, hi, count), **per_step)


def _largest(kernels: list[Kernel], lo: float, hi: float, steps: int) -> list[KernelTime]:
    """The LARGEST kernels by their time within the window, per step."""
    spent: Counter[str] = Counter()
    launches: Counter[str] = Counter()
    classes: dict[str, str] = {}
    for start, end, label, name in kernels:
        start, end = max(start, lo), min(end, hi)
        if end > start:
            spent[name] += end - start
            launches[name] += 1
            classes[name] = label
    return [KernelTime(_short(name), classes[name], us / steps / 1000.0, launches[name])
            for name, us in spent.most_common(LARGEST)]


def _short(name: str) -> str:
    name = name.removeprefix("void ")
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "…"


def read_trace(path: Path) -> dict:
    """A Chrome trace file, gzipped or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)
