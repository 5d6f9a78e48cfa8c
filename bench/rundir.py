"""Run directories: ``runs/<run-id>/`` holding the exact script, config and plan of one run.

A run directory is created exclusively: an existing one is never reused or overwritten.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from bench.plan import LaunchPlan


def plan_summary(plan: LaunchPlan) -> dict[str, object]:
    """The plan as plain data (for plan.json and run records)."""
    return {
        "run_id": plan.run_id,
        "preset": asdict(plan.preset),
        "layout": {"name": plan.layout.name, **asdict(plan.layout)},
        "platform": plan.platform.name,
        "accelerator": plan.accelerator.name if plan.accelerator else None,
        "engine": plan.engine,
        "precision": plan.precision,
        "nodes": plan.nodes,
        "gpus_per_node": plan.gpus_per_node,
        "world_size": plan.world_size,
        "iters": plan.iters,
        "image": plan.image,
        "train_argv": list(plan.train_argv),
        "env": dict(plan.env),
        "variant": dict(plan.variant),
        "labels": dict(plan.labels),
    }


def create_run_dir(root: Path, plan: LaunchPlan, files: dict[str, str]) -> Path:
    """Make ``root/runs/<run-id>`` (refusing an existing one) and write ``files`` plus plan.json."""
    run_dir = root / plan.run_dir
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_dir.mkdir()
    except FileExistsError:
        raise FileExistsError(f"{run_dir} already exists; the kit never reuses a run directory "
                              "(wait a second for a new run id, or move the old one)") from None
    contents = dict(files)
    if plan.ds_config is not None:
        contents["ds_config.json"] = plan.ds_config
    contents["plan.json"] = json.dumps(plan_summary(plan), indent=2, sort_keys=True) + "\n"
    for name, text in contents.items():
        with (run_dir / name).open("x") as fh:
            fh.write(text)
    return run_dir
