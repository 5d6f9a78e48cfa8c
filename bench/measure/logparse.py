"""Typed parsing of training logs: Megatron-LM / the kit's entry, and Megatron-DeepSpeed.

Both engines print one line per logged iteration, descended from Megatron-LM's ``training_log``:

    [2026-11-21 20:41:07.123456] iteration       12/      30 | consumed samples: ... |
        elapsed time per iteration (ms): 5412.3 | throughput per GPU (TFLOP/s/GPU): 478.1 |
        ... | lm loss: 9.871234E+00 | loss scale: 1.0 | grad norm: 3.210 | ... |
        number of skipped iterations:   0 | number of nan iterations:   0 |

Megatron-DeepSpeed adds ``samples per second`` and ``TFLOPs``. Every regex below is named for the
exact phrase it reads. A log that cannot be read gives a status, never an exception or a zero.

A checkpoint save (``--save``) is read from the line that starts it to Megatron's timer of it
(:func:`checkpoint_saves`); Megatron-Core 0.19.2 prints

    [2026-11-27 09:49:59.384435] saving checkpoint at iteration       5 to checkpoints/x4 in torch_dist format
    ...
    INFO:megatron.core.timers:(min, max) time across ranks (ms):
        save-checkpoint ................................: (31219.82, 31261.89)

and Megatron-DeepSpeed the first line without the format, then the same timer.
"""

from __future__ import annotations

import math
import re
import signal
from dataclasses import dataclass

from bench.measure.oom import oom_account
from bench.measure.status import Status

ITERATION = re.compile(r"\biteration\s+(?P<i>\d+)\s*/\s*(?P<n>\d+)\s*\|")
# A decimal number as Megatron prints one; never a bare "." or "1.2.3", which float() refuses.
_DECIMAL = r"(?P<v>\d+(?:\.\d*)?|\.\d+)"
ELAPSED_TIME_PER_ITERATION_MS = re.compile(r"elapsed time per iteration \(ms\):\s*" + _DECIMAL)
THROUGHPUT_PER_GPU = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*" + _DECIMAL)
LM_LOSS = re.compile(r"\blm loss:\s*(?P<v>[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:E[-+]?\d+)?|nan|inf))",
                     re.IGNORECASE)
GLOBAL_BATCH_SIZE = re.compile(r"global batch size:\s*(?P<v>\d+)")
NUMBER_OF_NAN_ITERATIONS = re.compile(r"number of nan iterations:\s*(?P<v>\d+)")
NUMBER_OF_SKIPPED_ITERATIONS = re.compile(r"number of skipped iterations:\s*(?P<v>\d+)")
SAMPLES_PER_SECOND = re.compile(r"samples per second:\s*" + _DECIMAL)  # Megatron-DeepSpeed
DS_TFLOPS = re.compile(r"\bTFLOPs:\s*" + _DECIMAL)  # Megatron-DeepSpeed
MAX_ALLOCATED_MB = re.compile(r"max allocated:\s*" + _DECIMAL)  # Megatron's memory report
GRAD_NORM = re.compile(r"\bgrad norm:\s*" + _DECIMAL)
# Megatron's memory report names the iteration it follows: "[Rank 0] (after 2 iterations) memory (MB)".
AFTER_ITERATIONS_MEMORY = re.compile(r"\(after (?P<i>\d+) iterations\) memory \(MB\)")
# The kit's entry after its first step (bench.train.memory_parts): bytes rank 0 holds per part.
MEMORY_BY_PART = re.compile(r"kit memory by part: parameters (?P<parameters>\d+) \| weights (?P<weights>\d+)"
                            r" \| gradients (?P<gradients>\d+) \| master (?P<master>\d+)"
                            r" \| moments (?P<moments>\d+)$")
# The line each engine prints as a save starts (Megatron-DeepSpeed names no format), and the
# save-checkpoint timer after it: "(min, max)" across ranks in ms (--timing-log-option minmax, the
# default of both engines) or the max alone ("max"). Megatron stops the timer after a barrier, so the
# max is the time the job waited on the save.
SAVING_CHECKPOINT = re.compile(r"\bsaving checkpoint at iteration\s+(?P<i>\d+) to (?P<directory>.+?)"
                               r"(?: in (?P<format>\w+) format)?\s*$")
_MS = r"\d+(?:\.\d*)?|\.\d+"
SAVE_CHECKPOINT_TIMER = re.compile(rf"^\s*save-checkpoint\s*\.*:\s*(?:\((?P<min>{_MS}),\s*(?P<max>{_MS})\)"
                                   rf"|(?P<only>{_MS}))\s*$")
# The exception line a failed allocation ends a traceback with, after any launcher prefix
# ("[rank0]: ", srun's "0: "): torch's caching allocator ("torch.OutOfMemoryError: CUDA out of
# memory. Tried to allocate ...", torch.cuda.OutOfMemoryError before torch 2.5, RuntimeError before
# 1.13; "HIP out of memory" on ROCm), a CUDA call that found no memory ("RuntimeError: CUDA error:
# out of memory", torch.AcceleratorError since torch 2.8; cuBLAS's CUBLAS_STATUS_ALLOC_FAILED), and
# NCCL's own "NCCL WARN Cuda failure 'out of memory'". Text that merely mentions memory (a
# warning, a path, a help string) is not one.
OUT_OF_MEMORY = re.compile(
    r"^(?:[^\s:]+:\s*)*"  # launcher prefixes
    r"(?:(?:torch\.(?:cuda\.)?)?OutOfMemoryError|RuntimeError|(?:torch\.)?AcceleratorError): "
    r"(?:(?:CUDA|HIP|XPU) out of memory|(?:CUDA|HIP) error: out of memory"
    r"|CUDA error: CUBLAS_STATUS_ALLOC_FAILED)"
    r"|NCCL WARN Cuda failure (?:\d+ )?'out of memory'")
NCCL_WATCHDOG_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout|"
                                   r"ProcessGroupNCCL.*[Tt]imeout")
# torchrun's line for a worker that died of a signal (a negative exit code): a segfault in a C++
# extension leaves no traceback, and the launcher's ChildFailedError says nothing of the cause.
WORKER_KILLED = re.compile(r"failed \(exitcode: -(?P<signal>\d+)\) local_rank: (?P<rank>\d+)")
# "ERROR:logger:message" or "SomethingError: message"; Megatron's argument dump ("name ..... value")
# is excluded by the dots.
FIRST_ERROR = re.compile(r"^(?!.*\.\.\.\.)(?:.*\bERROR:|\s*\w*Error: |.*\berror: )")
# Any line that names an error, for a failed run's record (``log_errors``): broader than FIRST_ERROR,
# so that "nvcc fatal : ..." or "make: *** ... Error 1" are kept too.
# "TypeError: ..." names its error inside a word, so the error words may end one: no \b before
# them. A leading \w* would say the same and backtrack over every run of word characters
# (quadratic: a 40 KB line took 16 s).
ERROR_LINE = re.compile(r"(?:error|exception)\b|\b(?:traceback|fatal|failed)\b", re.IGNORECASE)
# A worker's exception as torchrun prefixes it ("[rank0]: RuntimeError: ..."). The last one is the
# cause: Python prints a chained exception ("During handling of the above exception...") last.
RANK_EXCEPTION = re.compile(r"^\[\w*?\d+\]:\s*(?P<error>[\w.]*(?:Error|Exception)\b:?.*)")
# An exception whose name says neither (torch._dynamo.exc.Unsupported): a traceback's last line, so
# unindented after the rank prefix, and named with its module, which log lines are not.
RANK_QUALIFIED_EXCEPTION = re.compile(r"^\[\w*?\d+\]: (?P<error>(?:[a-z_]\w*\.)+[A-Z]\w*: .*)")
MAX_LINE_CHARS = 10_000
"""A log line is read (and kept in a record) up to this many characters. The default is 10,000:
Megatron's longest lines are a few hundred, and a carriage-return progress bar or a dumped tensor
must not make the patterns' work grow with the square of a line's length."""
LOG_TAIL_LINES = 200
"""How many last log lines a run's record keeps (``log_tail``), whatever its status. The default is
200: enough for a measured window of Megatron's lines with its memory reports, and for a crash's
traceback behind the launcher's."""
LOG_ERROR_LINES = 10
"""How many first error lines before the tail a failed run's record keeps (``log_errors``). The
default is 10: the first error often explains a crash and scrolls out of the tail behind the
launcher's own traceback."""
# One frame of a Python traceback: ``File "/path/x.py", line 352, in forward``.
TRACEBACK_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<function>[\w<>.]+)')
# Where an installed package's own path starts: what the failing call is named by.
_PACKAGE_ROOT = re.compile(r".*/(?:site|dist)-packages/")
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|ChildFailedError|"
                       r"Segmentation fault|core dumped|RuntimeError:|AssertionError")


@dataclass(frozen=True)
class Iteration:
    """One logged iteration; fields an engine does not print are None."""

    index: int
    total: int
    elapsed_ms: float
    tflops_per_gpu: float | None  # as the engine itself counted it
    lm_loss: float | None
    global_batch: int | None
    nan_iterations: int
    skipped_iterations: int
    samples_per_s: float | None
    grad_norm: float | None = None


@dataclass(frozen=True)
class MemoryParts:
    """Bytes one rank held per part after the first step, and its parameter count."""

    parameters: int
    weights: int
    gradients: int
    master: int
    moments: int


@dataclass(frozen=True)
class CheckpointSave:
    """One timed checkpoint save: after ``iteration``, into ``directory``, in ``format`` (None:
    Megatron-DeepSpeed does not say); Megatron's save-checkpoint timer across ranks in ms, the
    min None where the timer printed the max alone."""

    iteration: int
    directory: str
    format: str | None
    ms_max: float
    ms_min: float | None


@dataclass(frozen=True)
class ParseResult:
    """What a log says: the status, a reason when not ok, every iteration, peak memory."""

    status: Status
    reason: str | None
    iterations: tuple[Iteration, ...]
    train_iters: int | None
    peak_mem_mb: float | None  # MiB, as Megatron prints it
    memory_parts: MemoryParts | None = None  # the kit's entry prints it; other engines do not
    checkpoint_saves: tuple[CheckpointSave, ...] = ()
    # The largest "max allocated" (MiB) of any rank's memory report after each iteration that has one.
    memory_after: dict[int, float] | None = None

    @property
    def peak_mem_gb(self) -> float | None:
        """Peak memory in GB (10^9 bytes), as records store it; Megatron prints MiB."""
        return self.peak_mem_mb * 2**20 / 1e9 if self.peak_mem_mb is not None else None

    @property
    def losses(self) -> list[float]:
        return [it.lm_loss for it in self.iterations if it.lm_loss is not None]


def _number(pattern: re.Pattern[str], line: str) -> float | None:
    match = pattern.search(line)
    return float(match.group("v")) if match else None


def parse_iteration(line: str) -> Iteration | None:
    """The iteration a log line reports, or None when it is not an iteration line."""
    head = ITERATION.search(line)
    elapsed = _number(ELAPSED_TIME_PER_ITERATION_MS, line)
    if head is None or elapsed is None:
        return None
    nan = _number(NUMBER_OF_NAN_ITERATIONS, line)
    skipped = _number(NUMBER_OF_SKIPPED_ITERATIONS, line)
    batch = _number(GLOBAL_BATCH_SIZE, line)
    tflops = _number(THROUGHPUT_PER_GPU, line)
    return Iteration(
        index=int(head.group("i")), total=int(head.group("n")), elapsed_ms=elapsed,
        tflops_per_gpu=tflops if tflops is not None else _number(DS_TFLOPS, line),
        lm_loss=_number(LM_LOSS, line), global_batch=int(batch) if batch is not None else None,
        nan_iterations=int(nan or 0), skipped_iterations=int(skipped or 0),
        samples_per_s=_number(SAMPLES_PER_SECOND, line), grad_norm=_number(GRAD_NORM, line))


def log_lines(text: str) -> list[str]:
    """The lines of a log, each cut to ``MAX_LINE_CHARS``: what every pattern here reads."""
    return [line[:MAX_LINE_CHARS] for line in text.splitlines()]


def memory_parts(lines: list[str]) -> MemoryParts | None:
    """The first ``kit memory by part`` line's numbers; None without one."""
    found = next((m for m in map(MEMORY_BY_PART.search, lines) if m), None)
    return MemoryParts(**{key: int(value) for key, value in found.groupdict().items()}) if found else None


def memory_after_iterations(lines: list[str]) -> dict[int, float]:
    """Iteration -> the largest ``max allocated`` (MiB) across the ranks' reports after it."""
    found: dict[int, float] = {}
    for line in lines:
        after = AFTER_ITERATIONS_MEMORY.search(line)
        allocated = _number(MAX_ALLOCATED_MB, line) if after else None
        if after and allocated is not None:
            index = int(after["i"])
            found[index] = max(found.get(index, 0.0), allocated)
    return found


def checkpoint_saves(lines: list[str]) -> tuple[CheckpointSave, ...]:
    """Every save the log times, in order: a save's first line, then its timer before the next
    save or logged iteration. A save without one is no measurement and is left out: Megatron's save
    after the last iteration (when the save interval did not fall on it) is not timed, and a run
    can die saving."""
    found: list[CheckpointSave] = []
    started: re.Match[str] | None = None
    for line in lines:
        saving, timer = SAVING_CHECKPOINT.search(line), SAVE_CHECKPOINT_TIMER.search(line)
        if saving or ITERATION.search(line):
            started = saving
        elif timer and started:
            low, high = timer["min"], timer["max"] or timer["only"]
            found.append(CheckpointSave(
                iteration=int(started["i"]), directory=started["directory"],
                format=started["format"], ms_max=float(high),
                ms_min=float(low) if low is not None else None))
            started = None
    return tuple(found)


def _first(pattern: re.Pattern[str], lines: list[str]) -> str | None:
    return next((line.strip() for line in lines if pattern.search(line)), None)


def parse_log(text: str, timed_out: bool = False, exit_code: int | None = 0,
              stop_reason: str | None = None) -> ParseResult:
    """Parse a whole log. ``timed_out``/``exit_code`` are what the runner saw of the process;
    ``stop_reason`` says why a timed-out run was stopped (e.g. no output for N seconds)."""
    lines = log_lines(text)
    iterations = tuple(it for it in map(parse_iteration, lines) if it is not None)
    total = iterations[-1].total if iterations else None
    peaks = [v for v in (_number(MAX_ALLOCATED_MB, line) for line in lines) if v is not None]
    peak = max(peaks) if peaks else None
    parts, saves, after = memory_parts(lines), checkpoint_saves(lines), memory_after_iterations(lines)

    def result(status: Status, reason: str | None) -> ParseResult:
        return ParseResult(status, reason, iterations, total, peak, parts, saves, after)

    finished = bool(iterations) and iterations[-1].index == iterations[-1].total
    oom = _first(OUT_OF_MEMORY, lines)
    # A run that logged its last iteration and exited 0 had no fatal allocation failure.
    if oom and not (finished and exit_code == 0 and not timed_out):
        account = oom_account(oom)
        if account is not None and account.fragmented:
            # The fix first: a run's summary row shows a reason's first 60 characters.
            return result(Status.OOM, f"out of memory, fragmented (fix: --allocator expandable): "
                          f"{account.figures()}; {oom[:300]}")
        return result(Status.OOM, f"out of memory: {oom[:300]}")
    bad = next((it for it in iterations if it.nan_iterations > 0 or (
        it.lm_loss is not None and not math.isfinite(it.lm_loss))), None)
    if bad:
        return result(Status.NAN, f"loss is not finite at iteration {bad.index} "
                      f"(lm loss {bad.lm_loss}, nan iterations {bad.nan_iterations})")
    if timed_out:
        why = stop_reason or "it exceeded its time limit"
        return result(Status.TIMEOUT, f"the run was stopped because {why}, after "
                      f"{len(iterations)} logged iterations")
    watchdog = _first(NCCL_WATCHDOG_TIMEOUT, lines)
    if watchdog:
        return result(Status.TIMEOUT, f"NCCL collective timed out: {watchdog[:300]}")
    if exit_code not in (0, None) or (_first(TRACEBACK, lines) and not finished):
        error = crash_cause(lines)
        call = failing_call(lines, error) if error else None
        return result(Status.CRASHED, f"exit code {exit_code}" + (f": {error[:300]}" if error else "")
                      + (f" (at {call})" if call else ""))
    if not finished:
        seen = f"{iterations[-1].index}/{iterations[-1].total}" if iterations else "none"
        return result(Status.INCOMPLETE, f"the log ends before the last iteration "
                      f"(logged iterations: {seen})")
    return result(Status.OK, None)


def failing_call(lines: list[str], error: str) -> str | None:
    """``path:line in function`` of the innermost frame of the traceback that ends in ``error``
    (its last occurrence), the path from the package's root (``transformer_engine/...``, or the
    last three parts for a source tree): the call to look at, with the record's versions."""
    end = next((i for i in range(len(lines) - 1, -1, -1) if error in lines[i]), None)
    if end is None:
        return None
    for line in reversed(lines[max(0, end - 40):end]):  # a frame is a few lines above the error
        frame = TRACEBACK_FRAME.search(line)
        if frame:
            path = _PACKAGE_ROOT.sub("", frame["path"])
            if path == frame["path"]:
                path = "/".join(path.split("/")[-3:])
            return f"{path}:{frame['line']} in {frame['function']}"
    return None


def crash_cause(lines: list[str]) -> str | None:
    """The line that says why a run crashed: a worker killed by a signal, else the worker's last
    exception (the cause of a chained one), else the first error line, else the last traceback
    line (the launcher's ChildFailedError, which names no cause, comes last for that reason)."""
    return (_killed(lines) or _last_rank_exception(lines) or _first(FIRST_ERROR, lines)
            or _first(TRACEBACK, list(reversed(lines))))


def _last_rank_exception(lines: list[str]) -> str | None:
    found = [m["error"].strip() for m in (RANK_EXCEPTION.search(line) or RANK_QUALIFIED_EXCEPTION.search(line)
                                           for line in lines) if m]
    return found[-1] if found else None


def _killed(lines: list[str]) -> str | None:
    """"local rank R was killed by signal N (SIGNAME)" from torchrun's report, if a worker was."""
    found = next((m for m in map(WORKER_KILLED.search, lines) if m), None)
    if found is None:
        return None
    number = int(found["signal"])
    try:
        name = f" ({signal.Signals(number).name})"
    except ValueError:
        name = ""
    return f"local rank {found['rank']} was killed by signal {number}{name}"


def first_error_lines(lines: list[str]) -> list[str]:
    """The first ``LOG_ERROR_LINES`` of ``lines`` that name an error."""
    return [line for line in lines if ERROR_LINE.search(line)][:LOG_ERROR_LINES]
