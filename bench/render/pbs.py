"""PBS Pro batch scripts (ALCF Polaris style): mpiexec with one rank per GPU."""

from __future__ import annotations

from bench.planning.plan import LaunchPlan
from bench.render.common import account, data_file_check, ds_config_line, environment, finish, header, rankenv, shown
from bench.render.shell import Token, wrap

_MASTER_ADDR = '"$(head -n 1 "$PBS_NODEFILE")"'


def directives(plan: LaunchPlan) -> list[str]:
    job = plan.platform.job
    select = f"select={plan.nodes}" + (f":{job.node_resources}" if job.node_resources else "")
    options = [("-N", plan.run_id)]
    if account(plan):
        options.append(("-A", account(plan)))
    if job.queue:
        options.append(("-q", job.queue))
    options += [("-l", select), ("-l", f"walltime={job.walltime}")]
    if job.filesystems:
        options.append(("-l", f"filesystems={job.filesystems}"))
    options += [("-j", "oe"), ("-o", f"{plan.run_dir}/job.out")]
    lines = [f"#PBS {flag} {shown(value)}" for flag, value in options]
    lines += [f"#PBS {extra}" for extra in job.extra_directives]
    return lines


def launcher_command(plan: LaunchPlan) -> list[Token]:
    command: list[Token] = ["mpiexec", "-n", str(plan.world_size), "--ppn",
                            str(plan.gpus_per_node)]
    if plan.platform.cpus_per_task:
        command += ["--depth", str(plan.platform.cpus_per_task), "--cpu-bind", "depth"]
    return command + rankenv(plan)


def render(plan: LaunchPlan) -> str:
    """The complete ``qsub`` script for ``plan``."""
    if plan.platform.scheduler != "pbs":
        raise ValueError(f"platform {plan.platform.name} uses {plan.platform.scheduler}, not PBS")
    lines = ["#!/bin/bash", *directives(plan), *header(plan), *ds_config_line(plan),
             'cd "$PBS_O_WORKDIR" || exit 1', *environment(plan, _MASTER_ADDR), "",
             *data_file_check(plan), wrap(launcher_command(plan)), *finish()]
    return "\n".join(lines) + "\n"
