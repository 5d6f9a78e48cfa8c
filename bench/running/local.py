"""Run a plan on this machine: torchrun under a watchdog, a live progress line, one record.

The training processes run in their own process group, so a timeout (wall-clock limit, or no
output for ``hang_s`` seconds: a hung rank) or Ctrl-C stops all of them; should the runner itself
be killed (SIGKILL), the launcher gets SIGTERM from the kernel and ends its ranks. A plan in an image runs
as ``docker run ... IMAGE torchrun ...`` (``bench.render.docker``); its container is removed after
the engine has said which image it started (``bench.running.docker``). Whatever happens, the run
ends as exactly one record, written atomically; a failed run is recorded as failed, with its reason
and the last log lines, never with numbers.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from bench.config.environment import VERSION_STAMPS
from bench.config.text import visible
from bench.measure.flops import flops_per_iteration
from bench.measure.logparse import ParseResult, parse_iteration, parse_log
from bench.measure.profile import PROFILE_DIR, PROFILE_DIR_ENV, TRACE_NAME, breakdown, read_trace
from bench.planning.plan import LaunchPlan
from bench.records.build import PlanSummary, build_run_record, plan_summary
from bench.records.engine_notes import run_notes
from bench.records.evidence import LogFile, keep_log
from bench.records.expected import shortfall
from bench.records.identity import CAP_KEY
from bench.records.record import Conditions, JsonScalar, Profile, Record, Status
from bench.records.store import check_records_dir, write_record
from bench.render import docker, torchrun
from bench.running import conditions as watching
from bench.running import docker as dockerrun
from bench.running import provenance
from bench.running.patches import applied_series
from bench.running.rundir import create_run_dir

KILL_GRACE_S = 15.0
SLIM_TAIL_LINES = 40  # a record's log tail where the whole record does not fit the disk
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# Loaded here, not in the forked child, where loading a library could deadlock on a lock.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


class Terminated(Exception):
    """The runner itself got SIGTERM (a batch system's time limit, ``timeout``, ``kill``)."""


class LogUnwritable(Exception):
    """The run's log could not be written (a full disk, a file-size limit): the run was stopped."""


def _die_with_runner() -> Callable[[], None] | None:
    """For ``Popen(preexec_fn=...)``: the launcher gets SIGTERM when the runner dies, even of
    SIGKILL, and torchrun ends its ranks on SIGTERM; without it they would hold the GPUs. Linux
    only (elsewhere None). The signal follows the thread that started the child: the runner's
    main thread."""
    if _LIBC is None:
        return None
    runner = os.getpid()

    def arm() -> None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != runner:  # the runner died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)
    return arm


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Progress:
    """One status line per run: redrawn in place on a terminal, a line per iteration otherwise."""

    def __init__(self, launch: LaunchPlan, stream: IO[str] | None = None):
        self.launch = launch
        self.stream = stream or sys.stderr  # looked up now: stderr may have been replaced since import
        self.tty = self.stream.isatty()

    def iteration(self, line: str) -> None:
        it = parse_iteration(line)
        if it is None or it.elapsed_ms <= 0:  # a zero step time has no rate; the record says why
            return
        lay = self.launch.layout
        seconds = it.elapsed_ms / 1000.0
        tflops = flops_per_iteration(self.launch.preset, lay.global_batch) / seconds / (
            self.launch.world_size * 1e12)
        loss = f" | loss {it.lm_loss:.3f}" if it.lm_loss is not None else ""
        text = (f"{self.launch.preset.name} {lay.name}: iteration {it.index}/{it.total} | step "
                f"{seconds:.2f} s | {tflops:.0f} TFLOP/s/GPU{loss}")
        self.stream.write(f"\r\033[K{text}" if self.tty else text + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")


def _reader(pipe: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in pipe:
        lines.put(line)
    lines.put(None)


def _stop(proc: subprocess.Popen[str]) -> None:
    """Stop the whole process group: SIGTERM, then SIGKILL after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def execute(argv: list[str], env: dict[str, str], log_path: Path, timeout_s: float,
            hang_s: float, on_line: callable = lambda line: None) -> tuple[int | None, str | None]:
    """Run ``argv`` writing its output to ``log_path``.

    Returns (exit code, why the watchdog stopped it: None when it ended by itself).
    Raises :class:`LogUnwritable` (after stopping the run) when the log cannot be written.
    """
    log = log_path.open("a")
    try:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1, start_new_session=True,
                                preexec_fn=_die_with_runner())
    except BaseException:  # nothing started: the log is not left open
        log.close()
        raise
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    start = last_output = time.monotonic()
    stopped = None
    try:
        while True:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                line = ""
            now = time.monotonic()
            if line is None:
                break
            if line:
                last_output = now
                _write_log(log, log_path, line)
                on_line(line)
            if now - start > timeout_s or now - last_output > hang_s:
                stopped = (f"it reached the wall-clock limit of {timeout_s:.0f} s (--timeout)"
                           if now - start > timeout_s else
                           f"no output came for {hang_s:.0f} s, so a rank is taken to hang "
                           "(--hang-timeout)")
                _write_log(log, log_path, f"bench: stopping the run: {stopped}\n")
                _stop(proc)
                break
    except BaseException:
        _stop(proc)  # Ctrl-C or any error here must not leave ranks running
        raise
    finally:
        # Every line was flushed, so closing writes nothing, except after a failed write, whose
        # error was raised already: a second one would only repeat it.
        with contextlib.suppress(OSError):
            log.close()
    try:
        return proc.wait(timeout=30), stopped
    except subprocess.TimeoutExpired:  # the output closed, but the process lives on
        _stop(proc)
        return None, "its output closed, but it did not exit within 30 s"


def _write_log(log: IO[str], path: Path, text: str) -> None:
    try:
        log.write(text)
        log.flush()
    except OSError as error:
        raise LogUnwritable(f"the run was stopped because its log {path} could not be written "
                            f"({error.strerror or error}: a full disk or a file-size limit)") from None


def make_record(launch: LaunchPlan, result: ParseResult, started: float, finished: float,
                log_text: str, failure: tuple[Status, str] | None = None,
                origin: dict[str, object] | None = None,
                summary: PlanSummary | None = None, run_dir: Path | None = None,
                kept: tuple[LogFile | None, str | None] = (None, None),
                conditions: tuple[Conditions | None, str | None] = (None, None)) -> Record:
    """The run's record from its parsed log; ``failure`` overrides the status (e.g. Ctrl-C);
    ``origin``: :func:`provenance.collect`'s arguments for a run in an image; ``summary``: the
    plan's, where the caller has made it already; ``run_dir``: where a profiled run left its
    trace; ``kept``: the train log as kept beside the records, or why it is not
    (:func:`bench.records.evidence.keep_log`); ``conditions``: what the GPUs and host were, and what
    of it could not be read (:func:`bench.running.conditions.observed`)."""
    status, reason = failure or (result.status, result.reason)
    log, not_kept = kept
    observed, unread = conditions
    notes: dict[str, JsonScalar] = {"log": not_kept} if not_kept else {}
    if unread:
        notes[watching.NOTE] = unread
    profiled = None
    if launch.profile_steps and run_dir is not None and status is Status.OK:
        profiled, problem = _profile(run_dir)
        if problem:
            notes["profile"] = problem
    return build_run_record(summary or plan_summary(launch), status, reason, _utc(started), _utc(finished),
                            result, log_text, provenance.collect(**(origin or {})), notes,
                            engine_notes=run_notes(launch, result),
                            patches=applied_series(launch.patched_trees), profile=profiled, log=log,
                            conditions=observed)


def _profile(run_dir: Path) -> tuple[Profile | None, str | None]:
    """The breakdown of the trace a profiled run left, or why there is none."""
    trace = run_dir / PROFILE_DIR / TRACE_NAME
    try:
        return Profile(**asdict(breakdown(read_trace(trace)))), None
    except FileNotFoundError:
        return None, f"--profile: the run left no trace at {trace}"
    except Exception as error:  # a cut, foreign or malformed file (a truncated gzip raises
        # EOFError, a list has no .get): whatever the profiler left, the run keeps its one record
        why = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        return None, f"--profile: the trace {trace} could not be read ({why[:500]})"


# Variables a shell may carry that change how a run performs (the allocator, NCCL's algorithms
# and channels, Transformer Engine's kernels, CUDA's launch queue); the plan's own win.
# OMP_NUM_THREADS: DeepSpeed's CPU Adam (ZeRO-Offload) runs on that many cores a rank.
_RUN_CHANGING = ("NCCL_", "TORCH_NCCL_", "PYTORCH_", "NVTE_", "CUDA_DEVICE_MAX_CONNECTIONS",
                 "CUDA_LAUNCH_BLOCKING", "CUBLAS_WORKSPACE_CONFIG", "TORCH_CUDNN_", "OMP_NUM_THREADS")


def shell_variant(summary: PlanSummary, launch: LaunchPlan) -> PlanSummary:
    """The plan summary with the run-changing variables of this shell (not set by the plan) in its
    environment and, as ``env:NAME``, in its variant: such a run is a configuration of its own.
    A run in an image gets only the plan's environment, so nothing is added there."""
    found = shell_variables(launch)
    if not found:
        return summary
    return summary.model_copy(update={
        "env": {**summary.env, **found},
        "variant": {**summary.variant, **{f"env:{name}": value for name, value in found.items()}}})


def shell_variables(launch: LaunchPlan) -> dict[str, str]:
    """The run-changing variables of this shell that reach a run of ``launch`` here: those the
    plan does not set itself; none for a run in an image."""
    if launch.in_docker:
        return {}
    planned = dict(launch.env)
    return {name: value for name, value in sorted(os.environ.items())
            if name.startswith(_RUN_CHANGING) and name not in planned and name not in VERSION_STAMPS}


def profile_env(launch: LaunchPlan, run_dir: Path) -> dict[str, str]:
    """Where the training entry puts a profiled run's trace (its profile folder), if profiled."""
    return {PROFILE_DIR_ENV: str((run_dir / PROFILE_DIR).resolve())} if launch.profile_steps else {}


def run_local(launch: LaunchPlan, runs_root: Path, records_dir: Path, timeout_s: float,
              hang_s: float, verbose: bool = False, summary: PlanSummary | None = None) -> Record:
    """Run ``launch`` with torchrun here and write its record; returns the record.

    Everything that would lose the record is checked first: the GPU model must be known (for
    MFU: :func:`bench.records.build.plan_summary` refuses otherwise) and ``records_dir`` must take a
    file (:func:`bench.records.record.check_records_dir`). ``summary``: the plan's, where the
    caller has made it already.
    """
    summary = shell_variant(summary or plan_summary(launch), launch)  # plan.json and the record
    check_records_dir(records_dir)
    workdir = str(runs_root.resolve())  # a container sees it at the same path
    run_dir = create_run_dir(runs_root, launch, {"command.sh": torchrun.render(launch, workdir)},
                             summary)
    log_path = run_dir / "train.log"
    # For docker, the plan's environment goes in as --env options; this is the client's.
    env = {**os.environ, **dict(launch.env), "PYTHONUNBUFFERED": "1", **profile_env(launch, run_dir)}
    progress = Progress(launch)

    def on_line(line: str) -> None:
        if verbose:
            sys.stdout.write(line)
        progress.iteration(line)

    started = time.time()
    origin = None
    watched = watching.watch(launch.gpus_per_node)  # never raises: what fails is a note
    try:
        code, stopped, failure, stop = _execute_stoppable(
            torchrun.launch_command(launch, workdir), env, log_path, timeout_s, hang_s, on_line)
    finally:
        progress.done()
        watched.stop()
        if launch.in_docker:
            origin = _docker_origin(launch, workdir)
    log_text = log_path.read_text(errors="replace")
    result = parse_log(log_text, timed_out=stopped is not None, exit_code=code,
                       stop_reason=stopped)
    kept = keep_log(records_dir, launch.run_id, log_text)
    cap = summary.variant.get(CAP_KEY)
    record = make_record(launch, result, started, time.time(), log_text, failure, origin, summary,
                         run_dir, kept, watching.observed(watched, cap and float(cap), log_text))
    written = _write_or_keep(record, records_dir, run_dir)
    if stop is not None:  # the user asked to stop: after the record, not before
        print(f"record: {written} ({record.status.value}: {record.reason})", file=sys.stderr)
        raise stop
    return record


def _execute_stoppable(
    argv: list[str], env: dict[str, str], log_path: Path, timeout_s: float, hang_s: float,
    on_line: Callable[[str], None],
) -> tuple[int | None, str | None, tuple[Status, str] | None, BaseException | None]:
    """:func:`execute` with Ctrl-C, SIGTERM and an unwritable log turned into a failure.

    Returns (exit code, why the watchdog stopped it, the failure, the exception to raise once
    the record is written: Ctrl-C's and SIGTERM's, so the user's stop still stops the caller).
    """
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return (*execute(argv, env, log_path, timeout_s, hang_s, on_line), None, None)
    except KeyboardInterrupt:
        return (None, None, (Status.FAILED, "interrupted by the user (Ctrl-C)"),
                KeyboardInterrupt())
    except Terminated:
        return (None, None,
                (Status.FAILED, "the benchmark was terminated (SIGTERM) before the run ended"),
                SystemExit(128 + signal.SIGTERM))
    except LogUnwritable as error:
        return None, None, (Status.FAILED, str(error)), None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _slimmed(record: Record) -> Record:
    """The record with only the last :data:`SLIM_TAIL_LINES` of its log tail, and a note saying
    so: what a disk that cannot take the whole record (full, or under a file-size limit) may."""
    notes = {**record.notes, "log_tail": f"cut to its last {SLIM_TAIL_LINES} lines: the whole record did not fit"}
    return record.model_copy(update={"log_tail": record.log_tail[-SLIM_TAIL_LINES:], "notes": notes})


def _write_or_keep(record: Record, records_dir: Path, run_dir: Path) -> Path:
    """Write the record to ``records_dir``, else with a shorter log tail (:func:`_slimmed`), or,
    should both fail, keep it in the run's folder."""
    try:
        return write_record(records_dir, record)
    except OSError as error:  # the directory went away or filled up during the run
        record = _slimmed(record)
        with contextlib.suppress(OSError):
            return write_record(records_dir, record)
        try:
            kept = write_record(run_dir, record)
        except OSError as again:  # the disk is full: said once, with what the record would say
            raise ValueError(
                f"the record could not be written to {records_dir} ({error.strerror or error}) "
                f"nor to {run_dir} ({again.strerror or again}): free some space; the run ended "
                f"{record.status.value}" + (f": {record.reason}" if record.reason else "")) from None
        raise ValueError(f"the record could not be written to {records_dir} "
                         f"({error.strerror or error}); it is in {kept}: move it there") from None


def _docker_origin(launch: LaunchPlan, workdir: str) -> dict[str, object]:
    """What the engine says the run's container started (then the container is removed), and
    the command that reads the image's software versions."""
    name = docker.container_name(launch.run_id)
    try:
        digest = dockerrun.started_image(name, launch.image)
    finally:
        dockerrun.remove(name)
    python = [*docker.run_prefix(launch.image, workdir, launch.platform.binds), "python"]
    return {"python": python, "image": launch.image, "digest": digest}


def summary(records: list[Record]) -> str:
    """A fixed-width table of runs, for the end of a benchmark or sweep: a run's expected TFLOP/s/GPU
    beside its own, and a flag where it came in more than 15 % below it (bench.records.expected);
    below it, a line for each run that timed checkpoint saves (bench.records.checkpoint), one for
    each run whose GPUs were watched (bench.records.provenance.Conditions) and one for each profiled
    run: its step's shares and the largest kernels outside the GEMMs."""
    head = (f"{'preset':>6} {'layout':<14} {'status':<10} {'step s':>7} {'samples/s':>9} "
            f"{'tok/s/GPU':>9} {'TFLOP/s/GPU':>11} {'expected':>8} {'MFU %':>6} {'mem GB':>6}")
    rows = [head, "-" * len(head)]
    for r in records:
        m = r.metrics
        if m is None:
            rows.append(f"{r.preset.name:>6} {r.layout.name:<14} {r.status.value:<10} "
                        f"{visible((r.reason or '')[:60])}")  # a log's words, never raw
            continue
        mem = f"{m.peak_mem_gb:6.1f}" if m.peak_mem_gb is not None else f"{'-':>6}"
        expected = f"{r.expected.tflops_per_gpu:8.1f}" if r.expected else f"{'-':>8}"
        low = shortfall(r.expected, m.tflops_per_gpu, r.conditions.host_op_us if r.conditions else None)
        rows.append(f"{r.preset.name:>6} {r.layout.name:<14} {r.status.value:<10} "
                    f"{m.step_time_s_median:7.3f} {m.samples_per_s:9.2f} "
                    f"{m.tokens_per_s_per_gpu:9.0f} {m.tflops_per_gpu:11.1f} {expected} "
                    f"{100 * m.mfu:6.1f} {mem}" + (f"  LOW: {low}" if low else ""))
    rows += [f"{r.preset.name} {r.layout.name}: {r.checkpoint.describe()}" for r in records if r.checkpoint]
    rows += [f"{r.preset.name} {r.layout.name}: GPUs {r.conditions.describe()}" for r in records
             if r.conditions and r.conditions.gpus]
    rows += [f"{r.preset.name} {r.layout.name}: profile {_profile_line(r.profile)}" for r in records
             if r.profile]
    return "\n".join(rows)


def _profile_line(profile: Profile) -> str:
    """``gemm 68.5 %, attention 13.5 %, ...; largest besides GEMMs: <kernel> 12.3 ms, ...; host in
    ops ...`` (the host's side where the trace had it: :mod:`bench.measure.host_side`)."""
    shares = ", ".join(f"{name.replace('_', ' ')} {100 * getattr(profile, name) / profile.step_ms:.1f} %"
                       for name in ("gemm", "attention", "other", "optimizer", "comm_exposed", "idle"))
    besides = [f"{k.name[:60]} {k.ms:.1f} ms" for k in profile.largest if k.cls != "gemm"][:3]
    host = profile.host
    return shares + (f"; largest besides GEMMs: {', '.join(besides)}" if besides else "") + (
        f"; host in ops {host.loop_ms:.0f} ms (loop) + {host.backward_ms:.0f} ms (backward), compiled "
        f"code {host.compiled_ms:.0f} ms, {host.launches} launches ({host.launch_ms:.0f} ms)" if host else "")
