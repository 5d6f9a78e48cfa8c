"""The step-time model where decisions are made: the plan's expectation (and why there is none),
the refusal's layouts and the sweep's ranking by it, the record's ``expected`` beside its metrics,
the run summary's and the results page's flag of a run more than 15 % below it."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bench.config.platforms import load_platform
from bench.config.precisions import PRECISIONS
from bench.config.presets import get_preset
from bench.planning.engines.deepspeed import ZeroSettings
from bench.planning.layout import build_layout
from bench.planning.memory import Counted, check_fits
from bench.planning.plan import plan
from bench.planning.predict.case import case_of
from bench.planning.predict.expect import Asked, StepModel, band_for, expect, load_step_model, rate
from bench.planning.predict.model import predict
from bench.planning.predict.terms import TERMS
from bench.records.expected import Expected, expected_of, shortfall
from bench.records.record import record_from_dict
from bench.records.store import load_records, write_record
from bench.results import predicted
from bench.running.local import summary
from tests.conftest import options
from tests.inprocess import run_cli
from tests.record_factory import make_record, record_fields

RECORDS = Path(__file__).resolve().parents[3] / "results" / "records"
MODEL = load_step_model()


def test_a_plan_expects_the_models_step_of_its_own_case() -> None:
    launch = plan(get_preset("13b"), "tp2pp2", load_platform("azure-h200"), options(gpus=4))
    exp = launch.expected
    assert exp is not None and launch.expected_none_why == ""
    case = case_of("h200-sxm", launch.preset, launch.layout, launch.precision, launch.implementation,
                   launch.train_args, "default", graphs=False)
    step = predict(case, MODEL.performance["h200-sxm"], MODEL.factors).step_s
    assert exp.step_s == pytest.approx(step)
    # 13b counts 163.0 TFLOP per sample (causal): the throughput is the step's, per GPU.
    assert exp.tflops_per_gpu == pytest.approx(163.0e12 * launch.layout.global_batch / step / 4 / 1e12, rel=2e-3)
    assert exp.band == MODEL.validation["band:bf16 host-bound"]  # its launches outlast the GPU's stream
    assert sum(exp.share(name) for name in exp.dominant) >= 0.5
    band = round(MODEL.validation["band:bf16 host-bound"] * 100)
    assert re.match(rf"expected: \d+ TFLOP/s/GPU \(±{band} %; host-bound\), step \d+\.\d\d s: \w+ \d+ %",
                    exp.text())
    assert exp.beyond == ()


def test_the_band_is_that_of_the_records_priced_as_the_plan_is() -> None:
    """A plan quotes the group-held-out p90 of the records of its precision and kind (priced
    GPU-bound or host-bound; host-bound ones erred about twice as far), else of its precision
    (said so), else of its kind; a fit stored before the bands quotes the p90 of all records."""
    checked = MODEL.validation
    gpu = plan(get_preset("1.3b"), "tp1pp1", load_platform("azure-h200"), options(gpus=1)).expected
    host = plan(get_preset("13b"), "tp2pp2", load_platform("azure-h200"), options(gpus=4)).expected
    assert gpu is not None and host is not None
    assert (gpu.band, gpu.basis) == (checked["band:bf16 GPU-bound"], "")
    assert (host.band, host.basis) == (checked["band:bf16 host-bound"], "host-bound")
    assert checked["band:GPU-bound"] < checked["p90"] < checked["band:host-bound"]
    assert band_for(checked, "fp4", False) == (checked["band:fp4"], "the band of fp4's records")
    assert band_for({"p90": 0.2, "band:GPU-bound": 0.1}, "fp16", False) == (0.1, "")
    assert band_for({"p90": 0.2}, "bf16", True) == (0.2, "")


def test_without_a_model_a_plan_expects_nothing_and_says_nothing() -> None:
    launch = plan(get_preset("13b"), "tp2pp2", load_platform("azure-h200"), options(gpus=4, step_model=None))
    assert launch.expected is None and launch.expected_none_why == ""


# The model as it was before any card's figures came from datasheets: measured cards only.
MEASURED_ONLY = StepModel(MODEL.factors, {n: p for n, p in MODEL.performance.items() if p.measured},
                          MODEL.validation, {n: MODEL.peaks[n] for n, p in MODEL.performance.items() if p.measured})


def test_an_accelerator_without_figures_gets_no_expectation_and_why() -> None:
    launch = plan(get_preset("13b"), "tp2pp8", load_platform("lumi"),
                  options(engine="megatron", account="project_1", step_model=MEASURED_ONLY))
    assert launch.expected is None
    assert launch.expected_none_why.startswith("mi250x-gcd has no GEMM, memory and NCCL figures")
    polaris = plan(get_preset("13b"), "tp4pp2", load_platform("polaris"),
                   options(nodes=4, account="datascience", step_model=MEASURED_ONLY))
    assert polaris.expected_none_why.startswith("a100-sxm has no GEMM")
    assert "megatron-deepspeed" not in polaris.expected_none_why  # ZeRO-1: priced as megatron-core's


def test_megatron_deepspeed_is_priced_as_core_with_the_band_its_records_gave() -> None:
    """Megatron-DeepSpeed at ZeRO 0-2: megatron-core's local layers' step, never fitted on its
    records, with the band those records gave that pricing at the refit; its full recompute
    (--checkpoint-activations) is priced as such; ZeRO-3 and ZeRO-Offload get none, and why."""
    launch = plan(get_preset("13b"), "tp2pp2", load_platform("azure-h200"),
                  options(gpus=4, engine="megatron-deepspeed"))
    exp = launch.expected
    assert exp is not None and launch.expected_none_why == ""
    assert exp.band == MODEL.validation["core_priced_p90"] > MODEL.validation["p90"]
    records = round(MODEL.validation["core_priced_records"])
    assert exp.basis.startswith("megatron-deepspeed priced as megatron-core's local layers, never fitted on "
                                f"its records: {records} of them ")
    case = case_of("h200-sxm", launch.preset, launch.layout, launch.precision, None, launch.train_args,
                   "default", graphs=False)
    assert case.implementation == "local" and not case.overlap
    assert exp.step_s == pytest.approx(predict(case, MODEL.performance["h200-sxm"], MODEL.factors).step_s)
    full = plan(get_preset("13b"), "tp2pp2", load_platform("azure-h200"),
                options(gpus=4, engine="megatron-deepspeed", recompute="full"))
    assert "--checkpoint-activations" in full.train_args and full.expected is not None
    assert full.expected.step_s > exp.step_s  # a second forward a layer
    for layout, kw in (("tp1pp1dp4zero3", {}), ("tp1pp1dp4zero2", {"zero": ZeroSettings(offload="cpu")})):
        refused = plan(get_preset("1.3b"), layout, load_platform("azure-h200"),
                       options(gpus=4, engine="megatron-deepspeed", **kw))
        assert refused.expected is None
        assert refused.expected_none_why.startswith("the megatron-deepspeed engine is outside the model "
                                                    "at ZeRO-3 and with ZeRO-Offload")


@pytest.mark.parametrize(("platform", "layout", "nodes", "accelerator"),
                         [("lumi", "tp2pp8", 2, "mi250x-gcd"), ("polaris", "tp4pp2", 4, "a100-sxm")])
def test_a_card_the_kit_has_not_measured_expects_with_its_figures_sources(
        platform: str, layout: str, nodes: int, accelerator: str) -> None:
    launch = plan(get_preset("13b"), layout, load_platform(platform),
                  options(engine="megatron", nodes=nodes, account="project_1"))
    exp = launch.expected
    assert exp is not None and launch.expected_none_why == ""
    assert 0 < exp.tflops_per_gpu < MODEL.peaks[accelerator]["bf16"]
    assert exp.basis == (f"the factors fitted on H100/H200 records only; {accelerator}'s ceilings are "
                         f"datasheet and published figures, not measured by the kit: "
                         f"platforms/performance/{accelerator}.toml")
    assert f"(±{round(100 * exp.band)} %; the factors fitted on H100/H200 records only;" in exp.text()
    assert exp.beyond[-1].startswith(f"{nodes} nodes: links between nodes priced as HPE Slingshot")
    assert exp.beyond[-1].endswith(f"(datasheet figures, platforms/{platform}.toml [network])")


def test_context_parallelism_gets_no_expectation_and_why() -> None:
    launch = plan(get_preset("1.3b"), "tp1cp2", load_platform("azure-h200"), options(gpus=2))
    assert launch.expected is None
    assert launch.expected_none_why == ("context parallelism is outside the model: its exchange of "
                                        "keys and values has no term")


def test_a_run_beyond_the_records_says_so() -> None:
    launch = plan(get_preset("175b"), "tp8pp16sp", load_platform("azure-h100"), options(save=""))
    assert launch.expected is not None
    assert launch.expected.beyond == ("128 GPUs, the records up to 4",
                                      "16 nodes: links between nodes priced as InfiniBand NDR (ConnectX-7), "
                                      "8 x 400 Gb/s per node (datasheet figures, platforms/azure-h100.toml [network])")
    # H100's ceilings are the kit's own measurements: the basis says only that its band is that
    # of host-bound records.
    assert launch.expected.basis == "host-bound"


def test_the_dry_run_plans_in_under_a_second() -> None:
    preset, platform = get_preset("175b"), load_platform("azure-h100")
    start = time.perf_counter()
    plan(preset, "tp8pp16sp", platform, options(save=""))
    assert time.perf_counter() - start < 1.0


def test_the_refusals_layouts_that_fit_go_fastest_expected_first() -> None:
    p = get_preset("6.7b")
    lay = build_layout("tp2pp1", p, 2, 4)
    speeds = {"tp4pp1dp1": 100.0, "tp2pp2dp1": 300.0, "tp1pp4dp1": 200.0}
    with pytest.raises(ValueError) as refused:
        check_fits(Counted(p, lay), 40, "NVIDIA A100 SXM4 40GB", 4, rate=lambda other: speeds.get(other.name, 0.0))
    message = str(refused.value)
    names = re.findall(r"(tp\dpp\ddp\d) --gpus 4[^(]*\(~\d+ GB, ~(\d+) TFLOP/s/GPU expected\)", message)
    assert "nearest that fit, fastest expected first:" in message
    assert [float(v) for _, v in names] == sorted((float(v) for _, v in names), reverse=True)
    assert names[0] == ("tp2pp2dp1", "300")


def test_a_sweep_lists_its_layouts_by_expected_throughput(tmp_path: Path) -> None:
    done = run_cli("run", "13b", "--sweep", "--platform", "azure-h200", "--gpus", "4", "--dry-run",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stderr.splitlines() if x.startswith("expected, fastest first"))
    rates = [float(v) for v in re.findall(r"tp\dpp\d(?:vp\d)?dp\d(?:sp)? (\d+) \(\w+, \d+ GB\)", line)]
    assert len(rates) == 13 and rates == sorted(rates, reverse=True)  # six splits, seven shapes over them


def _expected(tflops: float) -> Expected:
    return Expected(tflops_per_gpu=tflops, step_time_s=1.0, band=0.21, terms={"host_te": 0.2, "gemm": 0.7})


def test_a_record_keeps_its_expectation_and_an_old_one_has_none(tmp_path: Path) -> None:
    launch = plan(get_preset("13b"), "tp2pp2", load_platform("azure-h200"), options(gpus=4))
    kept = expected_of(launch.expected)
    assert kept is not None and list(kept.terms) == [name for name, _ in launch.expected.parts]
    assert set(kept.terms) <= set(TERMS)
    record = make_record(expected=kept.model_dump())
    write_record(tmp_path, record)
    assert load_records(tmp_path)[0] == [record]
    old = json.loads(min(RECORDS.glob("13b_*.json"), key=lambda p: p.name.split("_local_")[-1]).read_text())
    assert "expected" not in old and record_from_dict(old).expected is None


def test_the_summary_flags_a_run_more_than_15_percent_below_its_expectation() -> None:
    measured = make_record().metrics.tflops_per_gpu  # 379 TFLOP/s/GPU
    low = make_record(expected=_expected(measured / 0.8).model_dump())
    fine = make_record(expected=_expected(measured / 0.9).model_dump())
    none = make_record()
    rows = summary([low, fine, none]).splitlines()
    assert "expected" in rows[0]
    assert rows[2].endswith("LOW: 20 % below its expected 474 TFLOP/s/GPU (largest term: gemm)")
    assert "LOW" not in rows[3] and "LOW" not in rows[4]
    assert shortfall(None, measured) == "" and shortfall(_expected(measured), None) == ""


def test_an_engine_priced_as_another_is_flagged_only_beyond_its_band() -> None:
    """Megatron-DeepSpeed's plan keeps what it was priced as in the record's ``expected``; its
    records ran a median 14 % below that pricing, so only a run beyond the band is LOW."""
    launch = plan(get_preset("13b"), "tp2pp2", load_platform("azure-h200"),
                  options(gpus=4, engine="megatron-deepspeed"))
    kept = expected_of(launch.expected)
    assert kept is not None and kept.priced_as == "megatron-core's local layers"
    assert expected_of(plan(get_preset("13b"), "tp2pp2", load_platform("azure-h200"),
                            options(gpus=4)).expected).priced_as is None
    proxy = Expected(tflops_per_gpu=100.0, step_time_s=1.0, band=0.38, terms={"gemm": 0.7},
                     priced_as="megatron-core's local layers")
    assert shortfall(proxy, 70.0) == ""  # 30 % below, within ±38 %
    assert shortfall(proxy, 55.0) == ("45 % below its expected 100 TFLOP/s/GPU, priced as megatron-core's "
                                      "local layers, beyond its ±38 % (largest term: gemm)")


def test_a_host_bound_shortfall_names_the_hosts_pace() -> None:
    """Hosts of one machine kind launched kernels 1.45x apart: a LOW whose largest term is the
    host's says so, with the run's measured pace where its conditions hold one."""
    bound = Expected(tflops_per_gpu=100.0, step_time_s=1.0, band=0.21, terms={"host_te": 0.7, "gemm": 0.2})
    assert shortfall(bound, 70.0).endswith("(largest term: host_te; a host-bound step goes at its host's pace)")
    assert shortfall(bound, 70.0, 4.126).endswith("its host's pace, here 4.13 us a torch op)")
    assert "pace" not in shortfall(_expected(100.0), 70.0, 4.126)  # gemm largest: no host words


def test_the_results_page_checks_the_model_on_the_records_and_flags_low_runs() -> None:
    runs, _ = load_records(RECORDS)
    found = predicted.checked(runs)
    assert found is not None
    assert found.median <= 0.08 and found.p90 <= 0.2440  # the stored validation (test_validate)
    assert found.low and all(item.below > 0.15 for item in found.low)
    assert [item.below for item in found.low] == sorted((item.below for item in found.low), reverse=True)
    assert len(found.plot.points) == found.count
    lines = predicted.section(found, "records")
    assert lines[0] == "## Step-time model against the records"
    assert any(line.startswith("| [") and "the stored fit" in line for line in lines)


def test_a_records_own_expectation_is_the_one_flagged() -> None:
    # Four runs alike on an accelerator with measured ceilings, each holding its own expectation
    # (the stored fit's would flag them all): only the one whose expectation is twice its
    # throughput is flagged.
    on_h200 = {**record_fields()["platform"], "accelerator": "h200-sxm"}
    met = _expected(make_record().metrics.tflops_per_gpu).model_dump()
    runs = [make_record(run_id=f"13b_dp4_h200x4_20261121T20150{i}Z", platform=on_h200, expected=met)
            for i in range(3)]
    flagged = make_record(run_id="13b_dp4_h200x4_20261121T201509Z", platform=on_h200,
                          expected=_expected(runs[0].metrics.tflops_per_gpu / 0.5).model_dump())
    found = predicted.checked([*runs, flagged])
    assert found is not None and [item.run.run_id for item in found.low] == [flagged.run_id]
    assert found.low[0].recorded and found.low[0].largest == "gemm"


def test_a_lumi_dry_run_prints_an_expectation_that_says_where_its_figures_come_from(tmp_path: Path) -> None:
    done = run_cli("run", "13b", "tp2pp8", "--platform", "lumi", "--engine", "megatron", "--nodes", "2",
                   "--account", "project_1", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("# expected: "))
    assert re.match(r"# expected: \d+ TFLOP/s/GPU \(±\d+ %; the factors fitted on H100/H200 records only; "
                    r"mi250x-gcd's ceilings are datasheet and published figures, not measured by the kit: "
                    r"platforms/performance/mi250x-gcd.toml\), step ", line), line
    assert line.endswith("2 nodes: links between nodes priced as HPE Slingshot-11, 4 x 200 Gb/s per node "
                         "(datasheet figures, platforms/lumi.toml [network])")


def test_a_platform_without_links_between_nodes_still_says_they_are_not_modelled() -> None:
    platform = load_platform("lumi").model_copy(update={"network": None})
    asked = options(engine="megatron", nodes=2, account="project_1")
    launch = plan(get_preset("13b"), "tp2pp8", platform, asked)
    assert launch.expected is not None
    assert launch.expected.beyond[-1] == "2 nodes: links between nodes are not modelled (counted as NVLink)"
    priced = plan(get_preset("13b"), "tp2pp8", load_platform("lumi"), asked).expected
    assert priced is not None and dict(priced.parts)["pp_net"] > 0  # its pipeline sends cross nodes
    assert priced.step_s > launch.expected.step_s and "pp_net" not in dict(launch.expected.parts)


def test_another_layout_of_a_plan_is_priced_over_the_nodes_it_spans() -> None:
    preset, lumi = get_preset("13b"), load_platform("lumi")
    asked = Asked("mi250x-gcd", "megatron", True, preset, PRECISIONS["fp16"], "local", (), "default",
                  nodes=1, platform="lumi", node_gpus=8, network=lumi.network)
    speed, unlinked = rate(MODEL, asked), rate(MODEL, replace(asked, network=None))
    assert speed is not None and unlinked is not None
    one_node = build_layout("tp2pp4", preset, 8, 8)
    assert speed(one_node) == unlinked(one_node)  # nothing crosses nodes
    two_nodes = build_layout("tp2pp8", preset, 16, 8)
    assert speed(two_nodes) < unlinked(two_nodes)  # the plan is one node; this layout spans two
    assert expect(MODEL, asked, two_nodes).beyond[-1].startswith("2 nodes: links between nodes priced as")
