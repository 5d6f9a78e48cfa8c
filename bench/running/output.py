"""What ``python -m bench run`` prints of a plan: the script or command (``--dry-run``), the notes on
stderr, and a plan's entry of ``--json``."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.planning.engines.registry import ENGINES
from bench.planning.plan import LaunchPlan
from bench.records.build import PlanSummary, plan_preview
from bench.render.scripts import render_script

NO_GPU = ("error: no NVIDIA GPU on this machine, so nothing was run and no record was written. "
          "Above is the exact command the kit would run; use --platform NAME --dry-run for a "
          "cluster's job script.")


def dry_run_text(launch: LaunchPlan, workdir: Path | None = None) -> str:
    """What ``--dry-run`` prints: the script or command, then the DeepSpeed config if any."""
    name, text = render_script(launch, workdir)
    out = f"# {name} for run {launch.run_id}\n{text}"
    if launch.ds_config is not None:
        out += f"# ds_config.json\n{launch.ds_config}"
    return out


def print_plan(launch: LaunchPlan, to_json: bool = False) -> None:
    """The plan's script (not with ``--json``, whose entry holds it), then its notes."""
    if not to_json:
        print(dry_run_text(launch), end="")
    print_notes(launch)


def print_notes(launch: LaunchPlan) -> None:
    """What the plan assumed of the environment, and what the user should know (stderr)."""
    if ENGINES[launch.engine].chooses_layers:
        source = ("detected in this Python" if launch.platform.capabilities is None
                  else f"from {launch.platform.name}'s platform file")
        print(f"assumed ({source}): {launch.capabilities.describe()}", file=sys.stderr)
    for note in launch.notes:
        print(f"note: {note}", file=sys.stderr)


def plan_json(launch: LaunchPlan, made: PlanSummary | None = None) -> dict[str, object]:
    """A plan for ``--json``: the plan as plan.json holds it (``made``: its summary, where the
    caller has made it already), and its script."""
    name, text = render_script(launch)
    return {"plan": plan_preview(launch, made), "script": {"name": name, "text": text},
            "ds_config": launch.ds_config, "notes": list(launch.notes)}
