"""Records made before CUDA graphs and dropout were settings (the flags typed after '--', kept as
``megatron_args``, or set by a measured default in the argv alone) read as those settings: on the
page, in the recipe and in the configuration key, with the record file unchanged."""

from __future__ import annotations

from pathlib import Path

from bench.planning.engines.setting_flags import dropout_flags, graph_flags
from bench.records.identity import config_key, settings
from bench.records.store import load_record
from bench.results.words import recipe, variant_text
from tests.record_factory import make_record

RECORDS = Path(__file__).resolve().parents[2] / "results" / "records"
BASE = ["python", "-m", "bench.train.pretrain_gpt", "--num-layers", "40"]
FLAGS = [*graph_flags("te"), *dropout_flags(0.0, 0.1)]


def test_an_old_records_flags_are_todays_settings_and_key() -> None:
    typed = make_record(argv=[*BASE, *FLAGS, "--manual-gc"],
                        variant={"megatron_args": " ".join([*FLAGS, "--manual-gc"])})
    today = make_record(argv=[*BASE, *FLAGS, "--manual-gc"],
                        variant={"cuda_graphs": "te", "dropout": "0", "megatron_args": "--manual-gc"})
    assert settings(typed) == settings(today) == {
        "cuda_graphs": "te", "dropout": "0", "megatron_args": "--manual-gc"}
    assert config_key(typed) == config_key(today)
    assert recipe(typed) == recipe(today) == "dropout 0"
    assert variant_text(typed) == "cuda_graphs=te, dropout=0, megatron_args=--manual-gc"
    assert typed.variant["megatron_args"].startswith("--cuda-graph-impl")  # the record as it was


def test_a_measured_defaults_flags_in_the_argv_alone_are_settings_too() -> None:
    applied = make_record(argv=[*BASE, *FLAGS], variant={})
    assert settings(applied) == {"cuda_graphs": "te", "dropout": "0"}
    # One of the two dropout flags is no setting of the kit's: it stays the user's flag.
    one = make_record(argv=[*BASE, "--hidden-dropout", "0.0"], variant={"megatron_args": "--hidden-dropout 0.0"})
    assert settings(one) == {"megatron_args": "--hidden-dropout 0.0"} and recipe(one) == ""


def test_the_2_7b_dropout_runs_are_one_key_and_a_recipe() -> None:
    runs = [load_record(RECORDS / f"2.7b_tp1pp1dp1_local_20261129T031755Z-85efdb-r{i}.json")
            for i in (1, 2, 3)]
    assert len({config_key(run) for run in runs}) == 1
    assert {recipe(run) for run in runs} == {"dropout 0"}
    assert all(run.variant == {"megatron_args": "--attention-dropout 0.0 --hidden-dropout 0.0"}
               for run in runs)


def test_attention_in_fp8_is_a_recipe_of_its_own() -> None:
    """The three 1.3b runs with --kit-fp8-attention (their loss jumped mid-run) are a recipe row;
    the same key without the flag is not."""
    runs = {path.name: load_record(path) for path in sorted(RECORDS.glob("1.3b_tp1pp1dp1_local_20261130T*.json"))}
    with_flag = [run for run in runs.values() if "--kit-fp8-attention" in run.argv]
    without = [run for run in runs.values() if "--kit-fp8-attention" not in run.argv]
    assert len(with_flag) == len(without) == 3
    assert {recipe(run) for run in with_flag} == {"dropout 0, FP8 attention"}
    assert {recipe(run) for run in without} == {"dropout 0"}
    assert max(max(run.lm_losses[-10:]) for run in with_flag) > 11.0
    assert max(max(run.lm_losses[-10:]) for run in without) < 9.6
