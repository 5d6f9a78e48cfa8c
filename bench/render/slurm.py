"""Slurm batch scripts: srun per rank (pyxis or Singularity containers, optionally CPU-bound per
GPU) or torchrun per node."""

from __future__ import annotations

import shlex

from bench.planning.plan import LaunchPlan
from bench.render.common import (
    account,
    data_file_check,
    ds_config_line,
    environment,
    finish,
    header,
    image_digest_lines,
    image_file_check,
    rankenv,
    shown,
    torchrun_tokens,
)
from bench.render.shell import Raw, Token, directive_value, wrap

_MASTER_ADDR = '"$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"'
# The job's working folder (runs/, relative data paths): bound into containers explicitly rather
# than trusting a runtime's default mounts.
_SUBMIT_DIR = '"$SLURM_SUBMIT_DIR"'


def directives(plan: LaunchPlan) -> list[str]:
    job = plan.platform.job
    per_node_tasks = plan.gpus_per_node if plan.platform.launcher == "srun" else 1
    options = [("job-name", plan.run_id), ("nodes", str(plan.nodes)),
               ("ntasks-per-node", str(per_node_tasks)),
               ("gpus-per-node", str(plan.gpus_per_node))]
    if plan.platform.cpus_per_task:
        options.append(("cpus-per-task", str(plan.platform.cpus_per_task)))
    for key, value in (("account", account(plan)), ("partition", job.partition),
                       ("qos", job.qos)):
        if value:
            options.append((key, value))
    options += [("time", job.walltime), ("output", f"{plan.run_dir}/slurm-%j.out")]
    lines = [f"#SBATCH --{key}={shown(value)}" for key, value in options]
    lines += [f"#SBATCH {directive_value(extra)}" for extra in job.extra_directives]
    return lines


def _list_with_submit_dir(prefix: str, items: list[str], submit_dir: str) -> Raw:
    """``prefix`` + comma-separated ``items`` (quoted) + the submit folder (a scheduler variable)."""
    return Raw(shlex.quote(prefix + "".join(f"{item}," for item in items)) + submit_dir)


def container(plan: LaunchPlan) -> tuple[list[Token], list[Token]]:
    """(srun options, command prefix) that run the rest of the line inside the platform's image."""
    platform = plan.platform
    if platform.container_runtime == "pyxis":
        # pyxis lets an image's own ENV win over the job's; --container-env names the variables
        # whose job values must win (the seed's 04-gpt175B.sh does so for its own three).
        names = [name for name, _ in plan.env]
        return [f"--container-image={plan.image}",
                _list_with_submit_dir("--container-mounts=", list(platform.binds),
                                      f"{_SUBMIT_DIR}:{_SUBMIT_DIR}"),
                Raw(f"--container-workdir={_SUBMIT_DIR}"),
                *([f"--container-env={','.join(names)}"] if names else [])], []
    if platform.container_runtime == "singularity":
        return [], ["singularity", "exec", "--bind",
                    _list_with_submit_dir("", list(platform.binds), _SUBMIT_DIR),
                    "--pwd", Raw(_SUBMIT_DIR), plan.image]
    return [], []


def launcher_command(plan: LaunchPlan) -> list[Token]:
    """The srun line: one task per GPU (srun) or one torchrun per node."""
    platform = plan.platform
    srun_options, inside = container(plan)
    if platform.launcher == "srun":
        if platform.cpu_bind:
            srun_options.insert(0, f"--cpu-bind={platform.cpu_bind}")
        return ["srun", *srun_options, *inside, *rankenv(plan)]
    rdzv: list[Token] = [Raw('--rdzv-id="$SLURM_JOB_ID"'), "--rdzv-backend=c10d",
                         Raw('--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"')]
    return ["srun", *srun_options, *inside, *torchrun_tokens(plan, rdzv)]


def render(plan: LaunchPlan) -> str:
    """The complete ``sbatch`` script for ``plan``."""
    if plan.platform.scheduler != "slurm":
        raise ValueError(f"platform {plan.platform.name} uses {plan.platform.scheduler}, not Slurm")
    lines = ["#!/bin/bash", *directives(plan), *header(plan), *ds_config_line(plan),
             "set -uo pipefail", *environment(plan, _MASTER_ADDR), "",
             *image_file_check(plan), *data_file_check(plan), *image_digest_lines(plan),
             wrap(launcher_command(plan)), *finish()]
    return "\n".join(lines) + "\n"
