"""The host's side of a profiled step, read from a real torch-profiler trace of the GPU machine.

The fixture is rank 0's trace of a host-bound step: 345m fp8-delayed with Transformer Engine,
micro-batch 2 x 4, one H200, 2026-11-30 (record 345m_tp1pp1dp1_local_20261130T010846Z-668624,
docs/reports/2026-11-30-h200-host-side.md), cut to its first profiled step (ProfilerStep#17) and
to the fields the breakdown reads (phase, category, name, start, duration, process, thread): 600
KB instead of 2.8 MB. The older fixture, made when the kit kept only kernels, has no host side.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from bench.measure.host_side import LARGEST
from bench.measure.profile import CLASSES, breakdown, read_trace
from bench.records.metrics import Profile

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"
HOST_TRACE = TRACES / "345m_tp1pp1dp1_h200_te_fp8-delayed_host.trace.json.gz"
KERNELS_ONLY = TRACES / "6.7b_tp2pp1dp1sp_h100x2_te-apex_bf16.trace.json.gz"


@pytest.fixture(scope="module")
def profile():
    return breakdown(read_trace(HOST_TRACE))


def test_a_host_bound_step_spends_its_time_on_the_host(profile) -> None:
    host = profile.host
    gpu_busy = sum(getattr(profile, name) for name in CLASSES)
    assert profile.steps == 1 and profile.step_ms == pytest.approx(801.2, abs=0.1)
    assert gpu_busy < 0.1 * profile.step_ms  # the GPU worked 8 % of the step
    # the loop's thread (forward, loss, optimizer) and autograd's (backward) one after the other
    assert host.loop_ms == pytest.approx(251.1, abs=0.1)
    assert host.backward_ms == pytest.approx(380.0, abs=0.1)
    assert host.loop_ms + host.backward_ms < profile.step_ms  # the rest: the loop's Python between ops


def test_launch_calls_are_a_small_part_of_the_hosts_time(profile) -> None:
    host = profile.host
    # one launch call per kernel (the breakdown's count adds memory copies and sets)
    assert host.launches == 6757 and profile.kernels > host.launches
    assert host.launch_us == pytest.approx(8.47, abs=0.01)
    assert host.launch_ms < 0.1 * (host.loop_ms + host.backward_ms)


def test_megatrons_compiled_fusions_are_counted_on_both_threads(profile) -> None:
    host = profile.host
    assert host.compiled_ms == pytest.approx(112.9, abs=0.1)
    names = {(op.name, op.thread) for op in host.largest}
    assert ("Torch-Compiled Region: 1/2", "loop") in names
    assert ("autograd::engine::evaluate_function: CompiledFunctionBackward", "backward") in names


def test_the_largest_host_ops_come_first_with_their_calls(profile) -> None:
    largest = profile.host.largest
    assert len(largest) == LARGEST
    assert [op.ms for op in largest] == sorted((op.ms for op in largest), reverse=True)
    first = largest[0]
    # 24 layers x 4 micro-batches x 2 of Transformer Engine's LayerNorm + linear layers
    assert (first.name, first.thread, first.calls) == (
        "autograd::engine::evaluate_function: _LayerNormLinearBackward", "backward", 192)
    assert first.ms == pytest.approx(111.5, abs=0.1)


def test_a_trace_of_kernels_alone_has_no_host_side() -> None:
    assert breakdown(read_trace(KERNELS_ONLY)).host is None


def test_without_the_step_spans_no_thread_is_taken_for_the_loops() -> None:
    trace = read_trace(HOST_TRACE)
    events = [e for e in trace["traceEvents"] if not e.get("name", "").startswith("ProfilerStep#")]
    assert len(events) < len(trace["traceEvents"])
    assert breakdown({"traceEvents": events}).host is None


def test_a_record_keeps_the_host_side_and_older_records_have_none(profile) -> None:
    kept = Profile(**asdict(profile))
    again = Profile.model_validate(json.loads(kept.model_dump_json()))
    assert again == kept and again.host.launches == 6757
    older = {key: value for key, value in asdict(profile).items() if key != "host"}
    assert Profile(**older).host is None


def _with_host_side(profile):
    """The run the fixture's trace came from, its profile read again with the host's side."""
    from bench.records.store import load_record

    run = load_record(Path(__file__).parents[2] / "results" / "records"
                      / "345m_tp1pp1dp1_local_20261130T010846Z-668624.json")
    assert run.profile is not None and run.profile.host is None  # recorded before the kit read it
    return run.model_copy(update={"profile": Profile(**asdict(profile))})


def test_the_runs_closing_line_says_what_the_host_did(profile) -> None:
    from bench.running.local import _profile_line

    line = _profile_line(_with_host_side(profile).profile)
    assert line.endswith("; host in ops 251 ms (loop) + 380 ms (backward), compiled code 113 ms, "
                         "6757 launches (57 ms)")


def test_the_results_page_gives_the_host_side_its_own_line(profile) -> None:
    from bench.results.profiles import section, time_rows

    lines = section(time_rows([_with_host_side(profile)]), "records")
    host = [line for line in lines if " ms in ops (" in line]
    assert len(host) == 1 and host[0].startswith("- 345M tp1pp1dp1 fp8-delayed")
    assert ("631 ms in ops (251 loop, 380 backward) against 67 ms of kernels; 6757 launches, 9 % of "
            "the ops' time; compiled code 18 %; largest: autograd::engine::evaluate_function: "
            "\\_LayerNormLinearBackward (backward) 111.5 ms") in host[0]  # markdown escapes the _
