"""Slurm batch scripts: srun per rank (pyxis containers) or torchrun per node (Singularity)."""

from __future__ import annotations

from bench.plan import LaunchPlan
from bench.render.common import (
    ds_config_line,
    environment,
    finish,
    header,
    rankenv,
    torchrun_tokens,
)
from bench.render.shell import Raw, Token, directive_value, wrap

_MASTER_ADDR = '"$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"'


def directives(plan: LaunchPlan) -> list[str]:
    job = plan.platform.job
    per_node_tasks = plan.gpus_per_node if plan.platform.launcher == "srun" else 1
    options = [("job-name", plan.run_id), ("nodes", str(plan.nodes)),
               ("ntasks-per-node", str(per_node_tasks)),
               ("gpus-per-node", str(plan.gpus_per_node))]
    if plan.platform.cpus_per_task:
        options.append(("cpus-per-task", str(plan.platform.cpus_per_task)))
    for key, value in (("account", job.account), ("partition", job.partition),
                       ("qos", job.qos)):
        if value:
            options.append((key, value))
    options += [("time", job.walltime), ("output", f"{plan.run_dir}/slurm-%j.out")]
    lines = [f"#SBATCH --{key}={directive_value(value)}" for key, value in options]
    lines += [f"#SBATCH {directive_value(extra)}" for extra in job.extra_directives]
    return lines


def launcher_command(plan: LaunchPlan) -> list[Token]:
    """The srun line: one task per GPU (srun) or one torchrun per node."""
    platform = plan.platform
    runtime: list[Token] = []
    if platform.container_runtime == "pyxis":
        runtime = [f"--container-image={plan.image}"]
        if platform.binds:
            runtime.append(f"--container-mounts={','.join(platform.binds)}")
        runtime.append(Raw('--container-workdir="$SLURM_SUBMIT_DIR"'))
    if platform.launcher == "srun":
        return ["srun", *runtime, *rankenv(plan)]
    command: list[Token] = ["srun", *runtime]
    if platform.container_runtime == "singularity":
        command += ["singularity", "exec"]
        if platform.binds:
            command += ["--bind", ",".join(platform.binds)]
        command.append(plan.image)
    rdzv: list[Token] = [Raw('--rdzv-id="$SLURM_JOB_ID"'), "--rdzv-backend=c10d",
                         Raw('--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"')]
    return command + torchrun_tokens(plan, rdzv)


def render(plan: LaunchPlan) -> str:
    """The complete ``sbatch`` script for ``plan``."""
    if plan.platform.scheduler != "slurm":
        raise ValueError(f"platform {plan.platform.name} uses {plan.platform.scheduler}, not Slurm")
    lines = ["#!/bin/bash", *directives(plan), *header(plan), *ds_config_line(plan),
             "set -uo pipefail", *environment(plan, _MASTER_ADDR), "",
             wrap(launcher_command(plan)), *finish()]
    return "\n".join(lines) + "\n"
