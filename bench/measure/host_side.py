"""What the host did in a profiled step: the CPU side of the same torch-profiler trace.

Megatron's torch profiler records the host's ops (``cpu_op``) and CUDA API calls
(``cuda_runtime``, ``cuda_driver``) beside the kernels. In a host-bound step the GPU waits on them,
so they say where such a step goes. Per profiled step:

- ``loop_ms``: the ops of the training loop's thread (the one that holds the ``ProfilerStep#N``
  spans: the forward pass, the loss, the optimizer step), each instant once (outermost ops only);
- ``backward_ms``: the ops of autograd's threads, which run the backward pass while the loop's
  thread waits in it, so the two follow each other rather than overlap;
- ``launches`` and ``launch_ms``: the kernel launch calls and their host time (a small share in
  the two host-bound steps of docs/reports/2026-11-30-h200-host-side.md: 9-11 us each, 62-69 ms
  of 622-662 ms in ops; the modules' Python and autograd around each launch cost the rest);
- ``compiled_ms``: calls of ``torch.compile``'d code, forward (``Torch-Compiled Region``, with
  TorchDynamo's cache lookup) and backward (``CompiledFunctionBackward``): megatron-core 0.19
  compiles its bias-dropout-add and bias-GeLU fusions, 281-384 us a call forward on those hosts;
- ``largest``: the outermost host ops that took the most time, with their thread.

Ops are timed as the profiler saw them; the profiler slows the host (those steps: 799 and 836 ms
profiled against 532 and 615 ms measured), so a share says more than the milliseconds.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

_STEP = re.compile(r"^ProfilerStep#\d+$")
_LAUNCH = re.compile(r"LaunchKernel")
_COMPILED = ("Torch-Compiled Region", "TorchDynamo Cache Lookup",
             "autograd::engine::evaluate_function: CompiledFunctionBackward")
_BACKWARD = "autograd::engine::evaluate_function:"  # how autograd's thread names each of its ops
LARGEST = 8  # host ops a breakdown names
NAME_CHARS = 120


@dataclass(frozen=True)
class HostOp:
    """One outermost host op (by name) of the profiled steps: its thread (``loop`` or
    ``backward``), milliseconds per step and calls over all the profiled steps."""

    name: str
    thread: str
    ms: float
    calls: int


@dataclass(frozen=True)
class HostSide:
    """Milliseconds per profiled step on the host (see the module's docstring)."""

    loop_ms: float
    backward_ms: float
    launches: int  # per step
    launch_ms: float
    compiled_ms: float
    largest: list[HostOp] = field(default_factory=list)

    @property
    def launch_us(self) -> float:
        """Host time of one launch call, microseconds (0 without launches)."""
        return 1000 * self.launch_ms / self.launches if self.launches else 0.0


Op = tuple[float, float, str]  # start, end (microseconds), name


def host_side(events: list[dict], lo: float, hi: float, steps: int) -> HostSide | None:
    """The host's side of the window ``lo``-``hi`` (microseconds) of ``steps`` profiled steps, from
    a trace's ``traceEvents``; None where the trace holds no op of the loop's or autograd's
    threads (made without CPU activity) or no ``ProfilerStep#N`` span to tell the loop's thread by."""
    ops: dict[tuple, list[Op]] = defaultdict(list)
    loop_threads, launches, launch_us = set(), 0, 0.0
    for event in events:
        if event.get("ph") != "X" or "dur" not in event:
            continue
        start, name, cat = float(event["ts"]), str(event.get("name", "")), event.get("cat")
        if not lo <= start < hi:
            continue
        thread = (event.get("pid"), event.get("tid"))
        if cat == "cpu_op":
            ops[thread].append((start, start + float(event["dur"]), name))
        elif cat == "user_annotation" and _STEP.match(name):
            loop_threads.add(thread)
        elif cat in ("cuda_runtime", "cuda_driver") and _LAUNCH.search(name):
            launches += 1
            launch_us += float(event["dur"])
    if not ops or not loop_threads:  # without the step spans, no thread is known as the loop's
        return None
    spent = {"loop": 0.0, "backward": 0.0}
    compiled = 0.0
    time_of: Counter[tuple[str, str]] = Counter()
    calls: Counter[tuple[str, str]] = Counter()
    for thread, thread_ops in ops.items():
        outer = _outermost(thread_ops)
        role = "loop" if thread in loop_threads else "backward" if _mostly_backward(outer) else None
        if role is None:  # a helper thread (the loader's pinning): not the step's critical path
            continue
        for start, end, name in outer:
            spent[role] += end - start
            compiled += (end - start) if name.startswith(_COMPILED) else 0.0
            time_of[(name, role)] += end - start
            calls[(name, role)] += 1
    if not spent["loop"] + spent["backward"]:
        return None
    per_step = 1000.0 * steps
    largest = [HostOp(_short(name), role, us / per_step, calls[(name, role)])
               for (name, role), us in time_of.most_common(LARGEST)]
    return HostSide(loop_ms=spent["loop"] / per_step, backward_ms=spent["backward"] / per_step,
                    launches=round(launches / steps), launch_ms=launch_us / per_step,
                    compiled_ms=compiled / per_step, largest=largest)


def _outermost(ops: list[Op]) -> list[Op]:
    """The ops no other op of the thread encloses, so each instant counts once."""
    outer: list[Op] = []
    end = float("-inf")
    for op in sorted(ops, key=lambda op: (op[0], -op[1])):
        if op[0] >= end:
            outer.append(op)
            end = op[1]
    return outer


def _mostly_backward(outer: list[Op]) -> bool:
    """Whether most of a thread's op time is autograd's evaluation of backward functions."""
    total = sum(end - start for start, end, _ in outer)
    backward = sum(end - start for start, end, name in outer if name.startswith(_BACKWARD))
    return total > 0 and backward > total / 2


def _short(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "…"
