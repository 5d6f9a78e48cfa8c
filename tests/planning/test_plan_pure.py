"""The planner is pure: it reads no file (the platform comes with its accelerators loaded) and
has no branch per engine (the engines are a table)."""

from __future__ import annotations

import builtins
import io
import os
import pathlib
import re

import pytest

from bench.config.capabilities import Capabilities
from bench.config.platforms import ENGINE_NAMES, load_platform
from bench.config.presets import get_preset
from bench.planning import plan as planner
from bench.planning.engines.registry import ENGINES
from tests.conftest import options

CASES = [
    ("local", "1.3b", "tp1pp1", {"gpus_present": 1, "gpu_name": "NVIDIA H200"}),
    ("local", "345m", "tp4pp1zero3", {"gpus_present": 4, "gpu_name": "NVIDIA H200",
                                      "engine": "megatron-deepspeed", "data_path": "d/text",
                                      "vocab_file": "v.json", "merge_file": "m.txt"}),
    # fp8's default micro-batch is picked by the memory estimate, from data already loaded.
    ("local", "1.3b", "tp1pp1", {"gpus_present": 2, "gpu_name": "NVIDIA H100 80GB HBM3",
                                 "precision": "fp8-delayed",
                                 "capabilities": Capabilities(transformer_engine=True)}),
    ("lumi", "13b", "tp2pp8", {"account": "project_1"}),
    ("azure-h200", "6.7b", "tp1pp1", {"nodes": 1}),
    ("polaris", "13b", "tp4pp2", {"account": "project_1"}),
]


@pytest.mark.parametrize("name,preset,layout,opts", CASES,
                         ids=[f"{c[0]}-{c[2]}-{c[3].get('precision', 'default')}" for c in CASES])
def test_plan_reads_no_file(monkeypatch: pytest.MonkeyPatch, name: str, preset: str, layout: str,
                            opts: dict) -> None:
    platform, model = load_platform(name), get_preset(preset)  # loaded before planning

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"plan() read a file: {args}")

    for target, attr in ((builtins, "open"), (io, "open"), (os, "open"), (os, "listdir"),
                         (os, "scandir"), (pathlib.Path, "read_text"),
                         (pathlib.Path, "read_bytes"), (pathlib.Path, "open"),
                         (pathlib.Path, "glob"), (pathlib.Path, "iterdir")):
        monkeypatch.setattr(target, attr, refuse)
    launch = planner.plan(model, layout, platform, options(**opts))
    monkeypatch.undo()
    assert launch.accelerator is not None and launch.accelerator.peak(launch.precision) > 0


# The results page (bench/results/) picks records to show by their engine's name, a record's field.
ENGINE_BRANCHES_ALLOWED = ("planning/engines/",)


def test_no_module_outside_the_engines_branches_on_an_engine() -> None:
    """What differs between engines is asked of the engine object (bench.planning.engines.base)."""
    bench = pathlib.Path(planner.__file__).parents[1]
    branching = [str(path.relative_to(bench)) for path in sorted(bench.rglob("*.py"))
                 if not str(path.relative_to(bench)).startswith(ENGINE_BRANCHES_ALLOWED)
                 and re.search(r'(?<![\w-])engine\s*[!=]=|[!=]= "megatron(-deepspeed)?"', path.read_text())]
    # (a package pin such as transformer-engine==2.20.2 is no branch)
    assert branching == []
    assert set(ENGINES) == set(ENGINE_NAMES) == {"megatron", "megatron-deepspeed"}
