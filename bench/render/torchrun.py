"""The local launcher: one ``torchrun`` over this machine's GPUs."""

from __future__ import annotations

from bench.plan import LaunchPlan
from bench.render.common import header, torchrun_tokens
from bench.render.shell import export_lines, wrap


def command(plan: LaunchPlan) -> list[str]:
    """The argv to execute (the environment comes from ``plan.env``)."""
    return [str(t) for t in torchrun_tokens(plan, ["--standalone"])]


def render(plan: LaunchPlan) -> str:
    """A shell snippet a user can paste: exports, then the torchrun line."""
    lines = [*header(plan), *export_lines(plan.env), wrap(list(command(plan)))]
    return "\n".join(lines) + "\n"
