"""The measured defaults (bench.planning.winners): each stands on records that exist and say what
the table says, and a plan gets them only where the user set none of them and they fit. The faster
configurations the kit does not pick (BEYOND) are the fastest records with and without them, and a
plan names them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.plan import LaunchPlan, plan
from bench.planning.winners import BEYOND, WINNERS, Beyond, Winner
from tests.conftest import options

RECORDS = Path(__file__).resolve().parents[2] / "results" / "records"
TE = Capabilities(transformer_engine=True)
FOUR_H200 = {"gpus_present": 4, "gpu_name": "NVIDIA H200", "capabilities": TE, "gbs": 64}


def _record(run_id: str) -> dict:
    return json.loads((RECORDS / f"{run_id}.json").read_text())


def _shape(record: dict) -> tuple[int, int, int, int, bool]:
    layout = record["layout"]
    return layout["tp"], layout["pp"], layout["vp"], layout["cp"], layout["sp"]


@pytest.mark.parametrize("winner", WINNERS, ids=lambda w: f"{w.preset}-{w.shape_name}-{w.precision}")
def test_a_winner_is_what_its_records_measured(winner: Winner) -> None:
    best, beaten = _record(winner.record[0]), _record(winner.against[0])
    for record in (best, beaten):
        assert record["status"] == "ok"
        assert (record["preset"]["name"], _shape(record), record["precision"]) == (
            winner.preset, _shape(best), winner.precision)
        assert record["implementation"] == winner.implementation
    assert _shape(best) == winner.shape
    assert round(best["metrics"]["tflops_per_gpu"], 1) == winner.record[1]
    assert round(beaten["metrics"]["tflops_per_gpu"], 1) == winner.against[1]
    assert winner.record[1] > winner.against[1]
    argv = " ".join(best["argv"])
    assert " ".join(winner.megatron_args) in argv
    assert best["layout"]["micro_batch"] == winner.micro_batch
    if winner.recompute is None:
        assert "--recompute-granularity" not in argv
    else:
        assert f"--recompute-granularity {winner.recompute}" in argv
    if winner.rule_micro_batch:  # the kit's plan of its day: the rule's micro-batch, nothing added
        assert beaten["layout"]["micro_batch"] == winner.rule_micro_batch
        assert "--recompute-granularity" not in " ".join(beaten["argv"])
        assert beaten["variant"] == {"gpu_memory_cap_gb": "80"}


def _plan(layout: str = "tp2pp2sp", **kw: object) -> LaunchPlan:
    return plan(get_preset("13b"), layout, load_platform("local"), options(**{**FOUR_H200, **kw}))


def _arg(launch: LaunchPlan, flag: str) -> str | None:
    args = list(launch.train_args)
    return args[args.index(flag) + 1] if flag in args else None


def test_13b_tp2pp2sp_gets_its_measured_defaults_and_says_why() -> None:
    launch = _plan()
    assert launch.layout.micro_batch == 2 and launch.recompute == "selective"
    assert _arg(launch, "--cuda-graph-impl") == "transformer_engine"
    assert _arg(launch, "--attention-dropout") == "0.0" and _arg(launch, "--hidden-dropout") == "0.0"
    assert _arg(launch, "--recompute-granularity") == "selective"
    assert launch.variant == ()  # the default configuration, not an A/B
    note = next(n for n in launch.notes if n.startswith("measured defaults"))
    assert "468.9 TFLOP/s/GPU against 362.6 without the graphs" in note
    assert WINNERS[0].record[0] in note


def test_13b_tp4sp_gets_the_graphs_and_tp1pp4vp2_dropout_off() -> None:
    tp4 = _plan("tp4pp1sp")
    assert (tp4.layout.micro_batch, tp4.recompute) == (2, "selective")
    assert _arg(tp4, "--cuda-graph-impl") == "transformer_engine"
    assert any("440.0 TFLOP/s/GPU against 232.4" in n for n in tp4.notes)
    vp = _plan("tp1pp4vp2")
    assert (vp.layout.micro_batch, vp.recompute) == (1, None)
    assert _arg(vp, "--attention-dropout") == "0.0" and _arg(vp, "--hidden-dropout") == "0.0"
    assert _arg(vp, "--cuda-graph-impl") is None and _arg(vp, "--recompute-granularity") is None
    assert any("497.8 TFLOP/s/GPU against 484.8 without dropout 0.0" in n for n in vp.notes)
    assert _arg(_plan("tp1pp4vp2", precision="fp8-delayed", force=True), "--attention-dropout") is None


def test_13b_tp1pp4vp2_with_apex_also_defers_the_output_layers_gradient() -> None:
    vp = _plan("tp1pp4vp2", capabilities=Capabilities(transformer_engine=True, fused_wgrad=True))
    assert (vp.layout.micro_batch, vp.recompute) == (1, None)
    assert _arg(vp, "--attention-dropout") == "0.0" and "--defer-embedding-wgrad-compute" in vp.train_args
    assert any("516.3 TFLOP/s/GPU against 499.5 without the deferred output-layer weight gradient"
               in n for n in vp.notes)
    assert any(n.startswith("the memory estimate does not count the deferred output-layer inputs")
               for n in vp.notes)
    # Without apex Megatron refuses the deferral: the plain entry's dropout-off default stays.
    assert "--defer-embedding-wgrad-compute" not in _plan("tp1pp4vp2").train_args


def test_6_7b_data_parallel_gets_dropout_off_with_or_without_apex() -> None:
    for capabilities in (TE, Capabilities(transformer_engine=True, fused_wgrad=True)):
        launch = plan(get_preset("6.7b"), "tp1pp1", load_platform("local"),
                      options(**{**FOUR_H200, "capabilities": capabilities}))
        assert (launch.layout.micro_batch, launch.recompute) == (2, None)
        assert _arg(launch, "--attention-dropout") == "0.0" and _arg(launch, "--hidden-dropout") == "0.0"
        assert any("536.0 TFLOP/s/GPU against 507.4 without dropout 0.0" in n for n in launch.notes)


def test_6_7b_tp2sp_fp8_gets_the_graphs_at_80_gb_and_bf16_does_not() -> None:
    from bench.planning.tuning import Tuning
    two = {**FOUR_H200, "gpus_present": 2, "gbs": 16, "tuning": Tuning(gpu_memory_cap=80)}

    def tp2sp(**kw: object) -> LaunchPlan:
        return plan(get_preset("6.7b"), "tp2pp1sp", load_platform("local"), options(**{**two, **kw}))

    fp8 = tp2sp(precision="fp8-delayed")
    assert (fp8.layout.micro_batch, fp8.recompute) == (2, None)
    assert _arg(fp8, "--cuda-graph-impl") == "transformer_engine" and _arg(fp8, "--attention-dropout") is None
    assert any("610.3 TFLOP/s/GPU against 315.1 without the graphs" in n for n in fp8.notes)
    assert _arg(tp2sp(), "--cuda-graph-impl") is None
    # Uncapped, fp8's rule fits micro-batch 8, which the winner (measured at 80 GB) never met.
    whole = tp2sp(precision="fp8-delayed", tuning=Tuning())
    assert whole.layout.micro_batch == 8 and _arg(whole, "--cuda-graph-impl") is None


def test_13b_tp4sp_fp8_gets_the_graphs_over_the_rules_micro_batch_it_beat(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    import bench.planning.plan as plan_module
    from bench.planning.tuning import Tuning
    fp8 = _plan("tp4pp1sp", precision="fp8-delayed", tuning=Tuning(gpu_memory_cap=80))
    assert (fp8.layout.micro_batch, fp8.recompute) == (2, "selective")
    assert _arg(fp8, "--cuda-graph-impl") == "transformer_engine"
    assert any("581.0 TFLOP/s/GPU against 396.3 without the graphs (fp8's rule: micro-batch 4"
               in n for n in fp8.notes)
    # Had it not been measured against the rule's pick, the rule's micro-batch 4 would stand.
    winner = plan_module.winner_for
    monkeypatch.setattr(plan_module, "winner_for",
                        lambda *a: (w := winner(*a)) and replace(w, rule_micro_batch=0))
    unmeasured = _plan("tp4pp1sp", precision="fp8-delayed", tuning=Tuning(gpu_memory_cap=80))
    assert unmeasured.layout.micro_batch == 4 and _arg(unmeasured, "--cuda-graph-impl") is None


@pytest.mark.parametrize("kw", [{"mbs": 1}, {"recompute": "full"}, {"precision": "fp8-delayed"},
                                {"capabilities": Capabilities(apex_layer_norm=True)}])
def test_what_the_user_or_the_environment_sets_stands(kw: dict) -> None:
    launch = _plan(**kw)
    assert _arg(launch, "--cuda-graph-impl") is None
    assert not any(n.startswith("measured defaults") for n in launch.notes)


def test_the_users_own_graph_flags_replace_the_winners() -> None:
    from bench.planning.tuning import Tuning
    launch = _plan(tuning=Tuning(extra_args=("--cuda-graph-impl", "local")))
    assert list(launch.train_args).count("--cuda-graph-impl") == 1
    assert _arg(launch, "--cuda-graph-impl") == "local"
    assert launch.layout.micro_batch == 1  # the preset's


def test_a_winner_that_does_not_fit_is_not_taken() -> None:
    from bench.planning.tuning import Tuning
    # Capped at 40 GB, micro-batch 2 of 13b tp2pp2sp does not fit the estimate: the preset's stays
    # (and the plan is refused only for what the preset's own settings need, with --force here).
    launch = _plan(tuning=Tuning(gpu_memory_cap=40), force=True)
    assert launch.layout.micro_batch == 1 and launch.recompute is None
    assert _arg(launch, "--cuda-graph-impl") is None


def test_other_shapes_keep_the_presets_settings() -> None:
    launch = _plan("tp1pp4", force=True)
    assert launch.layout.micro_batch == 1 and _arg(launch, "--cuda-graph-impl") is None


def test_a_plan_with_cuda_graphs_says_the_estimate_leaves_them_out() -> None:
    note = "the memory estimate does not count CUDA graphs' static buffers (--cuda-graph-impl)"
    assert any(n.startswith(note) for n in _plan().notes)
    assert not any(n.startswith(note) for n in _plan(mbs=1).notes)


def _fastest(beyond: Beyond, on_them: bool) -> tuple[str, float]:
    """The fastest ok record of the entry's preset, shape, engine and precision, on the entry's
    optimizer states or on the default ones."""
    found = []
    for path in RECORDS.glob(f"{beyond.preset}_*.json"):
        record = json.loads(path.read_text())
        if (record["status"] == "ok" and record["preset"]["name"] == beyond.preset
                and _shape(record) == beyond.shape and record["engine"] == beyond.engine
                and record["precision"] == beyond.precision
                and (record.get("variant") or {}).get("optimizer_states", "default")
                == (beyond.optimizer_states if on_them else "default")):
            found.append((round(record["metrics"]["tflops_per_gpu"], 1), record["run_id"]))
    tflops, run_id = max(found)
    return run_id, tflops


@pytest.mark.parametrize("beyond", BEYOND, ids=lambda b: f"{b.preset}-{b.shape_name}-{b.precision}")
def test_a_faster_configuration_not_picked_is_the_fastest_with_and_without_it(beyond: Beyond) -> None:
    assert beyond.record == _fastest(beyond, on_them=True)
    assert beyond.against == _fastest(beyond, on_them=False)
    assert beyond.record[1] > beyond.against[1]
    best = _record(beyond.record[0])
    assert best["implementation"] == beyond.implementation
    asks, _, after = beyond.typed.partition(" -- ")
    assert f"--mbs {best['layout']['micro_batch']}" in asks
    assert after in " ".join(best["argv"])
    assert ("--recompute selective" in asks) == (best["variant"].get("recompute") == "selective")


def test_a_plan_names_the_faster_configuration_it_does_not_pick() -> None:
    from bench.planning.tuning import Tuning
    capped = Tuning(gpu_memory_cap=80)
    launch = _plan(precision="fp8-delayed", tuning=capped)
    note = next(n for n in launch.notes if n.startswith("measured faster, not a default"))
    assert "ran 760.8 TFLOP/s/GPU, the fastest run of this shape without it 395.1" in note
    assert "change the optimizer's numerics" in note and BEYOND[0].record[0] in note
    assert "--optimizer-states" not in launch.train_args  # named, not picked
    on_them = _plan(precision="fp8-delayed", tuning=Tuning(gpu_memory_cap=80, optimizer_states="paper-kit"))
    assert not any(n.startswith("measured faster") for n in on_them.notes)
    # Other states than the entry's are no reason to keep the note back.
    on_others = _plan(precision="fp8-delayed", tuning=Tuning(optimizer_states="paper"))  # 141 GB: it fits
    assert any(n.startswith("measured faster") for n in on_others.notes)
    assert not any(n.startswith("measured faster") for n in _plan().notes)  # bf16: none measured


@pytest.mark.parametrize("beyond", BEYOND, ids=lambda b: f"{b.preset}-{b.shape_name}-{b.precision}")
def test_what_a_faster_configuration_asks_plans_as_typed(beyond: Beyond, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from bench.cli import main
    monkeypatch.chdir(tmp_path)
    best = _record(beyond.record[0])
    before, _, after = beyond.typed.partition(" -- ")
    argv = ["run", beyond.preset, beyond.shape_name, "--gpus", str(best["gpus"]), "--gbs",
            str(best["layout"]["global_batch"]), "--precision", beyond.precision,
            "--platform", "azure-h100", "--dry-run", *before.split()]
    assert main([*argv, *(["--", *after.split()] if after else [])]) == 0
    notes = capsys.readouterr().err
    assert "note: memory estimate" in notes and "measured faster" not in notes  # on those states now
