"""The measured defaults (bench.planning.winners): each stands on records that exist and say what
the table says; a plan gets one only where it passes the evidence rule and is no recipe, the user
set none of its settings and it fits, and quotes the others. The faster
configurations the kit does not pick (BEYOND) are the fastest records with and without them, and a
plan names them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.config.run_options import DEFAULT_DROPOUT
from bench.planning.engines.setting_flags import lift
from bench.planning.plan import LaunchPlan, plan
from bench.planning.tuning import Tuning
from bench.planning.winners import BEYOND, WINNERS, Beyond, Side, Winner, gain_exceeds_noise
from bench.records.headline import is_headline_grade
from bench.records.identity import config_key, normalised_argv
from bench.records.record import Record
from bench.records.store import load_record
from tests.conftest import options

RECORDS = Path(__file__).resolve().parents[2] / "results" / "records"
TE = Capabilities(transformer_engine=True)
FOUR_H200 = {"gpus_present": 4, "gpu_name": "NVIDIA H200", "capabilities": TE, "gbs": 64}


def _record(run_id: str) -> dict:
    return json.loads((RECORDS / f"{run_id}.json").read_text())


def _shape(record: dict) -> tuple[int, int, int, int, bool]:
    layout = record["layout"]
    return layout["tp"], layout["pp"], layout["vp"], layout["cp"], layout["sp"]


def _plan(layout: str = "tp2pp2sp", **kw: object) -> LaunchPlan:
    return plan(get_preset("13b"), layout, load_platform("local"), options(**{**FOUR_H200, **kw}))


def _arg(launch: LaunchPlan, flag: str) -> str | None:
    args = list(launch.train_args)
    return args[args.index(flag) + 1] if flag in args else None


def _runs(side: Side) -> list[Record]:
    return [load_record(RECORDS / f"{run_id}.json") for run_id, _ in side.runs]


@pytest.mark.parametrize("winner", WINNERS, ids=lambda w: f"{w.preset}-{w.shape_name}-{w.precision}")
def test_a_winner_is_what_its_records_measured(winner: Winner) -> None:
    """Each side's runs exist, ran the entry's shape, precision and layers, measured the figures
    and steps the entry quotes, and are one configuration; the winner ran its settings."""
    for side in (winner.record, winner.against):
        runs = _runs(side)
        for run, (_, tflops) in zip(runs, side.runs, strict=True):
            assert run.status == "ok" and run.implementation == winner.implementation
            assert (run.preset.name, _shape(run.model_dump(mode="json")), run.precision) == (
                winner.preset, winner.shape, winner.precision)
            assert round(run.metrics.tflops_per_gpu, 1) == tflops
        assert min(run.metrics.window_iters for run in runs) == side.steps
        assert len({config_key(run) for run in runs}) == 1
    best, beaten = _runs(winner.record)[0], _runs(winner.against)[0]
    assert winner.record.mean > winner.against.mean
    assert best.layout.micro_batch == winner.micro_batch
    if winner.global_batch:  # what won is the batch: the sides differ in it
        assert best.layout.global_batch == winner.global_batch != beaten.layout.global_batch
    lifted = lift(best.argv)
    assert (lifted.cuda_graphs or "none", DEFAULT_DROPOUT if lifted.dropout is None else lifted.dropout) == (
        winner.cuda_graphs, winner.dropout)
    assert " ".join(winner.megatron_args) in " ".join(best.argv)
    recompute = dict(normalised_argv(best.argv)).get("--recompute-granularity")
    assert recompute == ((winner.recompute,) if winner.recompute else None)
    if winner.rule_micro_batch:  # the kit's plan of its day: the rule's micro-batch, nothing added
        assert beaten.layout.micro_batch == winner.rule_micro_batch
        assert beaten.variant == {"gpu_memory_cap_gb": "80"}


@pytest.mark.parametrize("winner", WINNERS, ids=lambda w: f"{w.preset}-{w.shape_name}-{w.precision}")
def test_the_evidence_rule_is_the_records_headline_grade(winner: Winner) -> None:
    """A winner is headline grade only where both sides are (n >= 3 runs of >= 20 measured steps,
    one key) and its gain is beyond two standard errors."""
    graded = is_headline_grade(_runs(winner.record)) and is_headline_grade(_runs(winner.against))
    assert winner.headline == (graded and gain_exceeds_noise(winner.record, winner.against))


def test_only_the_2_7b_pairs_pass_the_rule_and_they_are_recipes() -> None:
    """Global batch 128 over 32, micro-batch 8 over 4 and dropout 0 over Megatron's, one H200:
    headline grade, all with dropout 0, so quoted; a plan at global batch 128 gets the first, a
    batch micro-batch 8 divides the second, another the third."""
    assert [(w.preset, w.global_batch, w.micro_batch, w.headline, w.recipe, w.applied)
            for w in WINNERS if w.headline] == [
        ("2.7b", 128, 8, True, True, False), ("2.7b", 0, 8, True, True, False),
        ("2.7b", 0, 4, True, True, False)]
    gbs128, mbs8, mbs4 = (w for w in WINNERS if w.headline)
    assert gbs128.record.spread == "n=3, 533.5-534.3, 20 measured steps"
    assert mbs8.record.spread == "n=3, 529.8-531.3, 20 measured steps"
    assert mbs4.record.spread == "n=3, 504.4-505.8, 20 measured steps"

    def quoted(gbs: int) -> str:
        launch = plan(get_preset("2.7b"), "tp1pp1", load_platform("local"),
                      options(gpus_present=1, gpu_name="NVIDIA H200", capabilities=Capabilities(), gbs=gbs))
        assert _arg(launch, "--hidden-dropout") is None and launch.variant == ()
        return next(n for n in launch.notes if n.startswith("measured faster, not a default"))

    assert "--mbs 8 --dropout 0 ran 534.0 TFLOP/s/GPU (n=3, 533.5-534.3" in quoted(128)
    assert "against 525.4 (n=3, 524.8-526.6, 20 measured steps) without global batch 128" in quoted(128)
    assert "--mbs 8 --dropout 0 ran 530.6 TFLOP/s/GPU (n=3, 529.8-531.3" in quoted(32)
    assert "--mbs 4 --dropout 0 ran 505.1 TFLOP/s/GPU (n=3, 504.4-505.8" in quoted(36)
    assert "not applied: a recipe: dropout 0 changes the training math" in quoted(32)


def test_the_gain_must_exceed_two_standard_errors() -> None:
    def side(*figures: float) -> Side:
        return Side(tuple((f"r{i}", f) for i, f in enumerate(figures)), 20)

    assert gain_exceeds_noise(side(105, 106, 104), side(100, 101, 99))
    assert not gain_exceeds_noise(side(105, 95, 100), side(99, 100, 101))
    assert not side(1, 2).long_enough and not Side((("r", 1.0),) * 3, 19).long_enough


def test_a_quick_entry_is_quoted_with_its_n_and_never_applied() -> None:
    launch = _plan()
    assert (launch.layout.micro_batch, launch.recompute) == (1, None)  # the preset's
    assert _arg(launch, "--cuda-graph-impl") is None and _arg(launch, "--attention-dropout") is None
    note = next(n for n in launch.notes if n.startswith("measured faster, not a default"))
    assert ("--mbs 2 --recompute selective --cuda-graphs te --dropout 0 ran 468.9 TFLOP/s/GPU "
            "(n=1, 468.9, 5 measured steps) against 362.6") in note
    assert "not applied: not headline grade" in note
    assert not any(n.startswith("measured defaults") for n in launch.notes)


def _headline(winner: Winner, **settings: object) -> Winner:
    """``winner`` as if each side had three runs of 20 steps close to its figure."""
    def three(side: Side) -> Side:
        (run, tflops), = side.runs
        return Side(tuple((f"{run}-r{i}", tflops + d) for i, d in enumerate((-0.5, 0.0, 0.5))), 20)
    return replace(winner, record=three(winner.record), against=three(winner.against), **settings)


@pytest.fixture
def graphs_winner(monkeypatch: pytest.MonkeyPatch) -> Winner:
    """The 13b tp2pp2sp entry as a headline-grade default with no recipe: graphs without recompute
    (graphed selective recompute needs dropout 0), dropout kept."""
    import bench.planning.defaults as defaults_module
    winner = _headline(next(w for w in WINNERS if w.preset == "13b"), recompute=None,
                       dropout=DEFAULT_DROPOUT)
    monkeypatch.setattr(defaults_module, "winner_for", lambda *a: winner)
    return winner


def test_an_applied_winner_sets_typed_settings(graphs_winner: Winner) -> None:
    launch = _plan()
    assert (launch.layout.micro_batch, launch.recompute) == (2, None)
    assert _arg(launch, "--cuda-graph-impl") == "transformer_engine"
    assert dict(launch.variant)["cuda_graphs"] == "te" and _arg(launch, "--hidden-dropout") is None
    note = next(n for n in launch.notes if n.startswith("measured defaults"))
    assert "(n=3, 468.4-469.4, 20 measured steps)" in note
    assert any(n.startswith("the memory estimate does not count CUDA graphs' static buffers "
                            "(--cuda-graphs)") for n in launch.notes)


@pytest.mark.parametrize("kw", [{"mbs": 1}, {"recompute": "full"},
                                {"tuning": Tuning(dropout=0.2)}])
def test_what_the_user_sets_stands(graphs_winner: Winner, kw: dict) -> None:
    launch = _plan(**kw)
    assert _arg(launch, "--cuda-graph-impl") is None
    assert not any(n.startswith("measured defaults") for n in launch.notes)


def test_the_users_own_graph_flags_replace_the_winners(graphs_winner: Winner) -> None:
    launch = _plan(tuning=Tuning(extra_args=("--cuda-graph-impl", "local")))
    assert list(launch.train_args).count("--cuda-graph-impl") == 1
    assert _arg(launch, "--cuda-graph-impl") == "local"
    assert launch.layout.micro_batch == 1  # the preset's


def test_a_winner_that_does_not_fit_is_not_taken(graphs_winner: Winner) -> None:
    # Capped at 40 GB, micro-batch 2 of 13b tp2pp2sp does not fit the estimate: the preset's stays
    # (and the plan is refused only for what the preset's own settings need, with --force here).
    launch = _plan(tuning=Tuning(gpu_memory_cap=40), force=True)
    assert launch.layout.micro_batch == 1 and launch.recompute is None
    assert _arg(launch, "--cuda-graph-impl") is None


def test_graphs_are_refused_where_megatron_core_would_refuse_them() -> None:
    with pytest.raises(ValueError, match=r"--cuda-graphs te with --recompute selective needs --dropout 0"):
        _plan(recompute="selective", tuning=Tuning(cuda_graphs="te"))
    with pytest.raises(ValueError, match=r"captures Transformer Engine's layers"):
        _plan("tp2pp2", capabilities=Capabilities(), tuning=Tuning(cuda_graphs="te"))
    launch = _plan(recompute="selective", tuning=Tuning(cuda_graphs="te", dropout=0.0))
    assert _arg(launch, "--hidden-dropout") == "0.0" and _arg(launch, "--cuda-graph-impl") == "transformer_engine"
    assert {"cuda_graphs": "te", "dropout": "0"}.items() <= dict(launch.variant).items()


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
    assert not any("not picked:" in n for n in _plan().notes)  # bf16: none measured


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
