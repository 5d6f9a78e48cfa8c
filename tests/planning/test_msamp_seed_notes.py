"""Issue 48, item 6 (seed 000): where a run of the fp8 or MS-AMP precisions differs from the MS-AMP
seed's by the kit's defaults (fp8-delayed's amax history, the micro-batch), the plan says so in a
note, and so ``--dry-run`` shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.plan import LaunchPlan, plan
from tests.conftest import options
from tests.inprocess import run_cli

CAPS = Capabilities(transformer_engine=True, apex_layer_norm=True, msamp=True)
AMAX = ("fp8-delayed keeps Megatron's delayed-scaling recipe, an amax history of 1024 steps reduced "
        "by max; the MS-AMP seed's te runs a history of 1, most_recent (the kit has no option for "
        "it: docs/precisions.md)")


def _plan(precision: str, preset: str = "1.3b", **kw: object) -> LaunchPlan:
    return plan(get_preset(preset), "tp1pp1", load_platform("local"),
                options(gpus_present=1, gpu_name="NVIDIA H100 80GB HBM3", capabilities=CAPS,
                        precision=precision, **kw))


def _seed_notes(launch: LaunchPlan) -> list[str]:
    return [note for note in launch.notes if "MS-AMP seed" in note]


def test_fp8_delayed_states_its_amax_history() -> None:
    # 1.3b on one H100: the kit picks micro-batch 8, the seed's, so only the recipe differs.
    launch = _plan("fp8-delayed")
    assert launch.layout.micro_batch == 8 and _seed_notes(launch) == [AMAX]


@pytest.mark.parametrize("precision", ["msamp-o1", "msamp-o2", "fp8-delayed"])
def test_a_micro_batch_the_kit_picked_other_than_the_seeds_is_stated(precision: str) -> None:
    # 2.7b on one H100: micro-batch 8 does not fit by the estimate, so the kit picks 4.
    launch = _plan(precision, "2.7b")
    assert launch.layout.micro_batch == 4
    assert _seed_notes(launch)[-1] == ("the MS-AMP seed's scripts use micro-batch 8, the kit's "
                                       f"{precision} default picked 4 (--mbs 8 gives the seed's)")


@pytest.mark.parametrize("precision,kw", [("msamp-o2", {"mbs": 4}), ("bf16", {}), ("fp4", {}),
                                          ("fp8-current", {"mbs": 4})])
def test_no_note_where_the_user_chose_or_the_seed_has_no_default(precision: str, kw: dict) -> None:
    assert _seed_notes(_plan(precision, "2.7b", **kw)) == []


def test_a_dry_run_shows_the_notes(tmp_path: Path) -> None:
    result = run_cli("run", "1.3b", "tp1pp1", "--platform", "azure-h100", "--precision",
                     "fp8-delayed", "--mbs", "4", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    notes = result.stderr.splitlines()
    assert f"note: {AMAX}" in notes
    assert not any("seed's scripts use micro-batch" in line for line in notes)  # --mbs given
