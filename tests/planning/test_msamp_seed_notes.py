"""Seed 000 (MS-AMP's GPT-3 examples): where a run of the fp8 or MS-AMP precisions differs from
the MS-AMP seed's by the kit's defaults (fp8-delayed's amax history, the micro-batch of the seed's
script for that model, dropout), the plan says so in a note, and so ``--dry-run`` shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.plan import LaunchPlan, plan
from bench.planning.tuning import Tuning
from tests.conftest import options
from tests.inprocess import run_cli

CAPS = Capabilities(transformer_engine=True, apex_layer_norm=True, msamp=True)
AMAX = ("fp8-delayed keeps Transformer Engine's delayed-scaling default, an amax history of 1024 steps "
        "reduced by max; the MS-AMP seed's te runs Megatron-LM's own defaults, a history of 1, "
        "most_recent (the kit has no option for it: docs/precisions.md)")


def _plan(precision: str, preset: str = "1.3b", **kw: object) -> LaunchPlan:
    return plan(get_preset(preset), "tp1pp1", load_platform("local"),
                options(gpus_present=1, gpu_name="NVIDIA H100 80GB HBM3", capabilities=CAPS,
                        precision=precision, **kw))


def _node(precision: str, preset: str, **kw: object) -> LaunchPlan:
    """On one node of eight H200s (141 GB), where 6.7b and 13b plan at the seed's micro-batch."""
    return plan(get_preset(preset), "tp1pp1", load_platform("azure-h200"),
                options(nodes=1, capabilities=CAPS, precision=precision, **kw))


def _seed_notes(launch: LaunchPlan) -> list[str]:
    return [note for note in launch.notes if "MS-AMP seed" in note]


def test_fp8_delayed_states_its_amax_history() -> None:
    # 1.3b on one H100: the kit picks micro-batch 8, the seed's, so only the recipe differs.
    launch = _plan("fp8-delayed")
    assert launch.layout.micro_batch == 8 and _seed_notes(launch) == [AMAX]


@pytest.mark.parametrize("precision", ["msamp-o1", "msamp-o2", "fp8-delayed"])
def test_a_micro_batch_the_kit_picked_other_than_the_seeds_is_stated(precision: str) -> None:
    # The seed's 345m script runs micro-batch 8; on one H100 the kit picks 32 by its rule.
    launch = _plan(precision, "345m")
    assert launch.layout.micro_batch == 32
    assert _seed_notes(launch)[-1] == ("the MS-AMP seed's 345m script uses micro-batch 8, the kit's "
                                       f"{precision} default picked 32 (--mbs 8 gives the seed's)")


@pytest.mark.parametrize("preset", ["6.7b", "13b"])
def test_the_seeds_large_scripts_run_micro_batch_1_and_following_the_note_plans(preset: str) -> None:
    # pretrain_6b7_megatron.sh and pretrain_13b_megatron.sh: --micro-batch-size 1 in every mode;
    # a note that said 8 for every model led to the memory refusal
    launch = _node("fp8-delayed", preset)
    note = (f"the MS-AMP seed's {preset} script uses micro-batch 1, the kit's fp8-delayed default "
            f"picked {launch.layout.micro_batch} (--mbs 1 gives the seed's)")
    assert note in _seed_notes(launch)
    followed = _node("fp8-delayed", preset, mbs=1)
    assert followed.layout.micro_batch == 1
    assert not any("micro-batch" in note for note in _seed_notes(followed))


def test_a_preset_the_seed_has_no_script_for_gets_no_micro_batch_note() -> None:
    launch = _plan("msamp-o2", "2.7b")
    assert launch.layout.micro_batch == 4
    assert not any("micro-batch" in note for note in _seed_notes(launch))


@pytest.mark.parametrize("precision", ["fp8-delayed", "fp8-current"])
def test_the_seeds_large_scripts_train_without_dropout_in_every_mode(precision: str) -> None:
    dropout = "the MS-AMP seed's 6.7b script trains without dropout in every mode; this run keeps 0.1 " \
              "(--dropout 0 gives the seed's)"
    assert dropout in _seed_notes(_node(precision, "6.7b"))
    seedlike = _node(precision, "6.7b", tuning=Tuning(dropout=0.0))
    assert not any("dropout" in note for note in _seed_notes(seedlike))
    assert "--hidden-dropout" in seedlike.train_args and "--attention-dropout" in seedlike.train_args
    # the seed's 345m script keeps Megatron's dropout: nothing to say
    assert not any("dropout" in note for note in _seed_notes(_plan(precision, "345m")))


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
    assert not any("script uses micro-batch" in line for line in notes)  # --mbs given
