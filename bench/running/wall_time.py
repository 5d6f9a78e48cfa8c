"""How long a run here should take, from its expected step, against its ``--timeout``.

A run cut by its wall-clock limit is a failed record and lost GPU time; a limit that the expected
step says cannot be met is refused before anything is launched, one that only the slow end of the
expectation's band would pass is warned about. The estimate: the steps the run trains (``--iters``,
and under ``--profile`` the lead and profiled steps after them) at the expected step, plus what a
run spends outside its steps.
"""

from __future__ import annotations

from bench.measure.profile import PROFILE_LEAD_STEPS
from bench.planning.plan import LaunchPlan

# Seconds a run spends outside its training steps, from the start of `bench run` to its record:
# the environment's probe and the plan (about 20 s on the GPU machine), then from the launch to
# the record (the ok one-GPU records of 2026-11-27/29: 20-50 s beyond their steps, median 28;
# profiled runs write their trace in that time too).
OUTSIDE_STEPS_S = (40.0, 70.0)


def steps_trained(launch: LaunchPlan) -> int:
    """The training steps the run takes: the measured ones' ``--iters``, and under ``--profile`` the
    lead steps and the profiled ones after them."""
    return launch.iters + (PROFILE_LEAD_STEPS + launch.profile_steps if launch.profile_steps else 0)


def expected_wall_s(launch: LaunchPlan) -> tuple[float, float] | None:
    """(fastest, slowest) seconds the run should take within its expectation's band; None where the
    model expects nothing."""
    expected = launch.expected
    if expected is None:
        return None
    steps_s = steps_trained(launch) * expected.step_s
    return (OUTSIDE_STEPS_S[0] + steps_s * max(1.0 - expected.band, 0.0),
            OUTSIDE_STEPS_S[1] + steps_s * (1.0 + expected.band))


def timeout_problem(launch: LaunchPlan, timeout_s: float) -> tuple[str, str] | None:
    """("error" or "warning", the words) where ``timeout_s`` leaves the run no room or too little;
    None where it does, or where nothing is expected."""
    wall, expected = expected_wall_s(launch), launch.expected
    if wall is None or expected is None:
        return None
    fastest, slowest = wall
    what = (f"{launch.preset.name} {launch.layout.name}: --timeout {timeout_s:.0f} s, but its "
            f"{steps_trained(launch)} steps at the expected {expected.step_s:.2f} s "
            f"(±{100 * expected.band:.0f} %) and its start take {fastest:.0f}-{slowest:.0f} s")
    if timeout_s < fastest:
        return "error", f"{what}: it would be cut and recorded as failed; give --timeout {slowest:.0f} or more"
    if timeout_s < slowest:
        return "warning", f"{what}: a run at the slow end would be cut; --timeout {slowest:.0f} leaves room"
    return None
