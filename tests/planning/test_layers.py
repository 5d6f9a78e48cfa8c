"""``--layers``: a Megatron-engine run builds the layers the environment has (auto), Transformer
Engine's (te) or megatron-core's local ones even where Transformer Engine imports (local); what
cannot run so is refused before anything launches, and a plan building either side of a pair of
layers measured against each other at its dropout quotes the pair (FASTER_LAYERS): the local layers
faster under the dropout-0 recipe, Transformer Engine's at Megatron's dropout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.config.run_options import DEFAULT_DROPOUT
from bench.planning.engines.setting_flags import lift
from bench.planning.faster_layers import FASTER_LAYERS, FasterLayers
from bench.planning.plan import LaunchPlan, layers_take_sp, plan
from bench.planning.tuning import Tuning
from bench.planning.winners import Side, gain_exceeds_noise
from bench.records.headline import is_headline_grade
from bench.records.identity import config_key
from bench.records.record import Record
from bench.records.store import load_record
from bench.running.arguments import options_from, parse_run_argv
from tests.conftest import options

RECORDS = Path(__file__).resolve().parents[2] / "results" / "records"
TE = Capabilities(transformer_engine=True)  # the one-H200 environment of 2026-11-29: no apex
TE_APEX = Capabilities(transformer_engine=True, apex_layer_norm=True, fused_wgrad=True,
                       fused_softmax=True)
QUOTE = "measured faster, not a default, for 2.7b tp1pp1 bf16: megatron-core's local layers"
BACKED = "measured faster, the layers this plan builds, for 2.7b tp1pp1 bf16: Transformer Engine's layers"
TE_FASTER = ("measured faster, not applied (--layers is yours to choose), for 2.7b tp1pp1 bf16: "
             "Transformer Engine's layers")
LOCAL_BACKED = ("measured faster, the layers this plan builds, for 2.7b tp1pp1 bf16: megatron-core's "
                "local layers")
LAYER_NOTES = (QUOTE, BACKED, TE_FASTER, LOCAL_BACKED)
RECIPE = {"tuning": {"dropout": 0.0}}


def _plan(layout: str = "tp1pp1", caps: Capabilities = TE, layers: str = "auto", preset: str = "2.7b",
          **kw: object) -> LaunchPlan:
    tuning = Tuning(**{"layers": layers, **kw.pop("tuning", {})})  # type: ignore[arg-type]
    gpus = 2 if "tp2" in layout else 1
    return plan(get_preset(preset), layout, load_platform("local"),
                options(**{"gpus_present": gpus, "gpu_name": "NVIDIA H200", "capabilities": caps,
                           "gbs": 32, "tuning": tuning, **kw}))


def _arg(launch: LaunchPlan, flag: str) -> str | None:
    args = list(launch.train_args)
    return args[args.index(flag) + 1] if flag in args else None


def test_auto_builds_what_the_environment_has() -> None:
    assert (_arg(_plan(), "--transformer-impl"), _plan().implementation) == ("transformer_engine", "te")
    bare = _plan(caps=Capabilities())
    assert (_arg(bare, "--transformer-impl"), bare.implementation) == ("local", "local")


def test_local_builds_the_local_layers_where_transformer_engine_imports() -> None:
    """The environment flags follow as without Transformer Engine; the run is no variant (its
    implementation says what built the layers) and the plan says so."""
    launch = _plan(layers="local")
    assert launch.implementation == "local" and _arg(launch, "--transformer-impl") == "local"
    assert {"--no-rope-fusion", "--no-persist-layer-norm"} <= set(launch.train_args)
    assert launch.variant == () and launch.capabilities == TE  # what the environment has, unchanged
    assert any(n.startswith("--layers local: megatron-core's local layers") for n in launch.notes)
    # with apex, its layer norm stays (no --no-persist-layer-norm) and its wgrad fusion too
    apex = _plan(caps=TE_APEX, layers="local")
    assert "--no-persist-layer-norm" not in apex.train_args
    assert "--no-gradient-accumulation-fusion" not in apex.train_args
    assert (_arg(_plan(layers="te"), "--transformer-impl"), _plan(layers="te").implementation) == (
        "transformer_engine", "te")


def test_local_without_transformer_engine_is_the_auto_plan() -> None:
    bare = Capabilities()
    assert _plan(caps=bare, layers="local").train_args == _plan(caps=bare).train_args


@pytest.mark.parametrize("layers,caps,layout,kw,refusal", [
    ("te", Capabilities(), "tp1pp1", {}, "--layers te builds Transformer Engine's layers, and this "
     "environment has no Transformer Engine"),
    ("local", TE, "tp1pp1", {"precision": "fp8-delayed"}, "--layers local with --precision "
     "fp8-delayed: its fp8 runs in Transformer Engine's layers"),
    ("local", TE, "tp1pp1", {"tuning": {"cuda_graphs": "te"}}, "--layers local with --cuda-graphs te"),
    ("local", TE, "tp2pp1sp", {}, "--layers local with layout tp2pp1dp1sp: megatron-core's local "
     "layers run sequence parallelism only with apex's layer norm"),
    ("te", Capabilities(transformer_engine=True, msamp=True), "tp1pp1", {"precision": "msamp-o2"},
     "--layers te with --precision msamp-o2"),
    ("local", TE, "tp1pp1", {"engine": "megatron-deepspeed"}, "--layers local chooses megatron-core's "
     "layer implementation; Megatron-DeepSpeed builds its own layers"),
], ids=["te-without-te", "local-fp8", "local-graphs", "local-sp-without-apex", "te-msamp", "deepspeed"])
def test_what_cannot_run_so_is_refused(layers: str, caps: Capabilities, layout: str, kw: dict,
                                       refusal: str) -> None:
    with pytest.raises(ValueError, match=None) as refused:
        _plan(layout, caps, layers, preset="1.3b", **kw)
    assert refusal in str(refused.value)


def test_sequence_parallel_local_layers_with_apex_plan() -> None:
    apex = Capabilities(transformer_engine=True, apex_layer_norm=True)
    launch = _plan("tp2pp1sp", apex, "local", preset="1.3b")
    assert launch.implementation == "local" and "--sequence-parallel" in launch.train_args


def test_a_sweep_offers_sequence_parallelism_only_where_the_chosen_layers_run_it() -> None:
    platform = load_platform("local")
    asked = {"capabilities": TE}
    assert layers_take_sp(platform, options(**asked))
    assert not layers_take_sp(platform, options(**asked, tuning=Tuning(layers="local")))


def test_the_command_line_and_a_campaign_set_it() -> None:
    command = parse_run_argv(["2.7b", "tp1pp1", "--layers", "local"])
    assert options_from(command, 1, "NVIDIA H200").tuning.layers == "local"
    assert options_from(parse_run_argv(["2.7b", "tp1pp1"]), 1, "").tuning.layers == "auto"
    with pytest.raises(ValueError, match="--layers bad: use one of auto, te, local"):
        Tuning(layers="bad")


# The faster layers are what their records measured, and a plan on the beaten layers quotes them.

def _runs(side: Side) -> list[Record]:
    return [load_record(RECORDS / f"{run_id}.json") for run_id, _ in side.runs]


def _dropout(run: Record) -> float:
    found = lift(run.argv).dropout
    return DEFAULT_DROPOUT if found is None else found


@pytest.mark.parametrize("entry", FASTER_LAYERS,
                         ids=lambda f: f"{f.preset}-{f.shape_name}-{f.precision}-dropout{f.dropout:g}")
def test_faster_layers_are_what_their_records_measured(entry: FasterLayers) -> None:
    """Each side's runs exist, ran the entry's shape, precision, micro-batch and dropout on its
    layers, measured the figures and steps it quotes, and are one configuration; its grade is the
    records' headline grade with the gain beyond two standard errors."""
    for side, layers in ((entry.record, entry.implementation_of_layers), (entry.against, entry.implementation)):
        runs = _runs(side)
        for run, (_, tflops) in zip(runs, side.runs, strict=True):
            raw = json.loads((RECORDS / f"{run.run_id}.json").read_text())["layout"]
            assert run.status == "ok" and run.implementation == layers and run.engine == entry.engine
            assert (run.preset.name, run.precision) == (entry.preset, entry.precision)
            assert (raw["tp"], raw["pp"], raw["vp"], raw["cp"], raw["sp"]) == entry.shape
            assert (run.layout.micro_batch, _dropout(run)) == (entry.micro_batch, entry.dropout)
            assert round(run.metrics.tflops_per_gpu, 1) == tflops
        assert min(run.metrics.window_iters for run in runs) == side.steps
        assert len({config_key(run) for run in runs}) == 1
    assert entry.record.mean > entry.against.mean
    graded = is_headline_grade(_runs(entry.record)) and is_headline_grade(_runs(entry.against))
    assert entry.headline == (graded and gain_exceeds_noise(entry.record, entry.against))


def _pair(dropout: float) -> FasterLayers:
    (entry,) = (f for f in FASTER_LAYERS if f.dropout == dropout)
    return entry


def test_the_one_h200_pairs_are_headline_grade_the_faster_layers_by_dropout() -> None:
    """Under the dropout-0 recipe the local layers were faster; at Megatron's dropout, with
    Transformer Engine installed on both sides, Transformer Engine's."""
    recipe, default = _pair(0.0), _pair(DEFAULT_DROPOUT)
    assert (recipe.headline, recipe.recipe, recipe.layers) == (True, True, "local")
    assert recipe.record.spread == "n=3, 529.8-531.3, 20 measured steps"
    assert recipe.against.spread == "n=3, 520.5-525.1, 20 measured steps"
    assert (default.headline, default.recipe, default.layers) == (True, False, "te")
    assert (default.implementation_of_layers, default.implementation) == ("te", "local")
    assert default.record.spread == "n=3, 485.8-486.1, 20 measured steps"
    assert default.against.spread == "n=3, 474.8-475.1, 20 measured steps"
    assert f"{default.record.mean / default.against.mean:.2f}" == "1.02"


def _note(launch: LaunchPlan, start: str) -> str:
    return next(n for n in launch.notes if n.startswith(start))


def test_a_recipe_plan_on_transformer_engines_layers_quotes_the_faster_local_ones() -> None:
    launch = _plan(**RECIPE)
    note = _note(launch, QUOTE)
    assert ("(--layers local --mbs 8 --dropout 0) ran 530.6 TFLOP/s/GPU (n=3, 529.8-531.3, 20 "
            "measured steps) against 522.1 (n=3, 520.5-525.1, 20 measured steps) on Transformer "
            "Engine's layers, 1.02x, beyond two standard errors, both sides with dropout 0") in note
    assert "the local side before Transformer Engine was installed, so its Adam was torch's fused AdamW" in note
    assert "2.7b_tp1pp1dp1_local_20261129T060521Z-1dcf15" in note
    assert "2.7b_tp1pp1dp1_local_20261129T062132Z-5fcc80-r2" in note
    # quoted, never applied: the plan keeps TE's layers and the user's settings
    # the user's recipe, not the entry's settings
    assert launch.implementation == "te" and launch.variant == (("dropout", "0"),)
    assert _arg(launch, "--hidden-dropout") == "0.0" and _arg(launch, "--transformer-impl") == "transformer_engine"
    assert _plan(layers="te", **RECIPE).notes == launch.notes
    assert not any(n.startswith((BACKED, TE_FASTER)) for n in launch.notes)


SIX_RUNS = ("runs 2.7b_tp1pp1dp1_local_20261129T115459Z-ed466c-c4-r1, "
            "2.7b_tp1pp1dp1_local_20261129T115459Z-ed466c-c4-r2, "
            "2.7b_tp1pp1dp1_local_20261129T115459Z-ed466c-c4-r3, "
            "2.7b_tp1pp1dp1_local_20261129T120007Z-e5c3d5-c5-r1, "
            "2.7b_tp1pp1dp1_local_20261129T120007Z-e5c3d5-c5-r2, "
            "2.7b_tp1pp1dp1_local_20261129T120007Z-e5c3d5-c5-r3")
DEFAULT_FIGURES = ("(--layers te --mbs 8) ran 485.9 TFLOP/s/GPU (n=3, 485.8-486.1, 20 measured steps) "
                   "against 474.9 (n=3, 474.8-475.1, 20 measured steps) on megatron-core's local "
                   "layers (SDPA attention), 1.02x, beyond two standard errors, both sides with "
                   "Megatron's dropout (0.1); one H200, no apex, Transformer Engine installed on both "
                   "sides, so both stepped Adam with its FusedAdam; " + SIX_RUNS)


def test_a_default_dropout_plan_on_transformer_engines_layers_cites_the_records_behind_them() -> None:
    """auto builds Transformer Engine's layers where it imports: at Megatron's dropout the records
    measured them faster, and the plan says so; the dropout-0 pair is not quoted to it."""
    launch = _plan()
    assert launch.implementation == "te"
    assert _note(launch, BACKED) == f"{BACKED} {DEFAULT_FIGURES}"
    assert not any(n.startswith((QUOTE, TE_FASTER)) for n in launch.notes)
    assert _plan(layers="te").notes == launch.notes


def test_a_default_dropout_plan_on_the_local_layers_quotes_transformer_engines() -> None:
    launch = _plan(layers="local")
    assert launch.implementation == "local" and _arg(launch, "--transformer-impl") == "local"
    assert _note(launch, TE_FASTER) == f"{TE_FASTER} {DEFAULT_FIGURES}"
    assert not any(n.startswith((QUOTE, BACKED)) for n in launch.notes)


def test_a_recipe_plan_on_the_local_layers_cites_the_recipe_pair() -> None:
    launch = _plan(layers="local", **RECIPE)
    note = _note(launch, LOCAL_BACKED)
    assert "ran 530.6 TFLOP/s/GPU" in note and "both sides with dropout 0" in note
    assert not any(n.startswith((QUOTE, BACKED, TE_FASTER)) for n in launch.notes)


@pytest.mark.parametrize("why,kw", [
    ("a dropout neither pair was measured at", {"tuning": {"dropout": 0.2}}),
    ("the local layers at another dropout", {"layers": "local", "tuning": {"dropout": 0.2}}),
    ("TE with apex's fusions is another configuration", {"caps": TE_APEX}),
    ("TE with apex's fusions under the recipe", {"caps": TE_APEX, **RECIPE}),
    ("micro-batch 8 does not divide the batch", {"gbs": 36}),
    ("micro-batch 8 does not divide the batch, recipe", {"gbs": 36, **RECIPE}),
    ("another precision", {"precision": "fp8-delayed"}),
    ("no Transformer Engine, so its layers are no choice", {"caps": Capabilities()}),
])
def test_no_quote_elsewhere(why: str, kw: dict) -> None:
    assert not any(n.startswith(LAYER_NOTES) for n in _plan(**kw).notes), why
