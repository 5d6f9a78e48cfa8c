"""The local launcher: one ``torchrun`` over this machine's GPUs, inside ``docker run`` when the
plan runs in an image (``--image`` on a platform whose container runtime is docker)."""

from __future__ import annotations

from bench.planning.plan import LaunchPlan
from bench.render import docker
from bench.render.common import header, torchrun_tokens
from bench.render.shell import export_lines, wrap


def command(plan: LaunchPlan) -> list[str]:
    """The torchrun argv (the environment comes from ``plan.env``)."""
    return [str(t) for t in torchrun_tokens(plan, ["--standalone"])]


def launch_command(plan: LaunchPlan, workdir: str) -> list[str]:
    """The argv the runner executes in ``workdir`` (an absolute folder): torchrun, or
    ``docker run ... IMAGE torchrun ...`` with the environment passed as ``--env``."""
    if not plan.in_docker:
        return command(plan)
    prefix = docker.run_prefix(plan.image, workdir, plan.platform.binds, plan.env,
                               docker.container_name(plan.run_id))
    return [*prefix, *command(plan)]


def render(plan: LaunchPlan, workdir: str) -> str:
    """A shell snippet a user can paste: exports, then the torchrun line (or the docker line)."""
    exports = [] if plan.in_docker else export_lines(plan.env)
    lines = [*header(plan), *exports, wrap(launch_command(plan, workdir))]
    return "\n".join(lines) + "\n"
