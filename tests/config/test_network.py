"""The links between nodes as platform data (``[network]``) and the ceilings of cards the kit has
not measured (``platforms/performance/``, ``figures = "datasheet and published"``): every figure
says where it comes from, and a bad one is refused in one line naming the file and the field."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench.config.paths import PERFORMANCE_DIR, PLATFORMS_DIR
from bench.config.platforms import load_platform, load_platform_file
from bench.config.presets import load_presets
from bench.config.tomlfile import DataError
from bench.planning.predict.facts import load_all, load_performance
from bench.planning.predict.published import published_case, row_platforms
from bench.planning.predict.terms import TERMS, network_terms, step_terms
from bench.results.data import load_published
from bench.results.generate import PUBLISHED_FILE

# The platforms' NICs per node and Gb/s each, as their operators' documents give them.
NETWORKS = {"azure-h100": (8, 400.0), "azure-h200": (8, 400.0), "lumi": (4, 200.0), "polaris": (2, 200.0)}


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_each_cluster_names_its_links_between_nodes_with_their_sources(name: str) -> None:
    network = load_platform(name).network
    assert network is not None and (network.nics, network.gbits) == NETWORKS[name]
    assert network.source.startswith("datasheet: ")
    assert network.latency_source.startswith(("datasheet: ", "published: "))


def test_one_machine_has_no_links_between_nodes() -> None:
    assert load_platform("local").network is None


def _refused(tmp_path: Path, source: Path, old: str, new: str, load) -> str:
    text = source.read_text()
    assert old in text
    path = tmp_path / source.name
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(DataError) as refused:
        load(path)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(str(path))
    return message.removeprefix(str(path)).removeprefix(": ").removeprefix(" ")


@pytest.mark.parametrize(("old", "new", "said"), [
    ('source = "datasheet: LUMI', 'source = "LUMI',
     "network.source: 'LUMI documentation"),
    ("nics = 4", "nics = 0", "key 'network.nics' "),
    ("gbits = 200.0", 'gbits = "200"', "key 'network.gbits' must be a number"),
    ("latency_us = 9.6\n", "", "missing key 'network.latency_us'"),
    ('latency_source = "published: ', 'latency_source = "', "network.latency_source: "),
    ("nics = 4", "nics = 4\nspeed = 1", "[network] unknown key(s) speed"),
])
def test_a_bad_network_is_one_line_naming_the_file_and_field(tmp_path: Path, old: str, new: str,
                                                             said: str) -> None:
    message = _refused(tmp_path, PLATFORMS_DIR / "lumi.toml", old, new, load_platform_file)
    assert message.startswith(said)
    if "source" in said:
        assert message.endswith("must say what the figure is and where it comes from: "
                                "'datasheet: <document>', 'published: <where>' or 'measured: <how>'")


@pytest.mark.parametrize("accelerator", ["mi250x-gcd", "a100-sxm", "a100-sxm-80gb"])
def test_cards_the_kit_has_not_measured_say_where_their_ceilings_come_from(accelerator: str) -> None:
    perf = load_performance(accelerator)
    assert not perf.measured and perf.figures == "datasheet and published"
    sources = [perf.hbm_source, perf.gemm.source, *(a.source for a in perf.allreduce)]
    assert all(s.startswith(("datasheet: ", "published: ")) for s in sources), sources
    assert perf.allreduce  # a multi-GPU plan needs a collective figure
    with pytest.raises(ValueError, match="no fp8 GEMM figure"):
        perf.gemm_tflops(4096, 4096, fp8=True)


@pytest.mark.parametrize("accelerator", ["h100-sxm", "h200-sxm"])
def test_the_kits_own_measurements_stay_measured(accelerator: str) -> None:
    assert load_performance(accelerator).measured


@pytest.mark.parametrize(("old", "new", "said"), [
    ('figures = "datasheet and published"', 'figures = "guessed"', "key 'figures' is 'guessed', expected "),
    ("bf16 = 147.0 }", "bf16 = 147.0, fp8 = 0.0 }", "key 'gemm.shapes.0.fp8' "),
    ("bf16 = 147.0 }", "bf16 = -1.0 }", "key 'gemm.shapes.0.bf16' "),
])
def test_a_bad_performance_file_is_one_line_naming_the_file_and_field(tmp_path: Path, old: str, new: str,
                                                                      said: str) -> None:
    message = _refused(tmp_path, PERFORMANCE_DIR / "mi250x-gcd.toml", old, new,
                       lambda path: load_performance(path.stem, path.parent))
    assert message.startswith(said)


def test_fp8_figures_for_some_shapes_only_are_refused(tmp_path: Path) -> None:
    text = (PERFORMANCE_DIR / "h200-sxm.toml").read_text()
    path = tmp_path / "h200-sxm.toml"
    path.write_text(text.replace(", fp8 = 1413.0 }", " }", 1))
    with pytest.raises(DataError, match=r"h200-sxm.toml: gemm.shapes: some shapes give an fp8 figure"):
        load_performance("h200-sxm", tmp_path)


def test_a_published_row_over_nodes_is_priced_on_its_platforms_links() -> None:
    rows = [r for r in load_published(PUBLISHED_FILE).rows if r.priced_on and r.model == "13b"]
    assert rows and {r.priced_on for r in rows} == {"azure-h100"}
    presets, performance, platforms = load_presets(), load_all(), row_platforms(rows)
    priced = published_case(rows[0], presets, performance, platforms)
    assert priced.case is not None
    one_node = replace(priced.case, node_gpus=0, network=None)
    ceilings = performance[one_node.accelerator]
    assert priced.terms == tuple(step_terms(one_node, ceilings)[n] for n in TERMS)
    assert network_terms(one_node, ceilings) == {"pp_net": 0.0, "dp_net": 0.0}
    assert dict(priced.network)["dp_net"] > 0  # tp2 dp16 on four nodes of eight: the ring crosses them
    # without its platform the row's 32 GPUs would be priced over NVLink alone: it has no expectation
    unplaced = published_case(rows[0].model_copy(update={"priced_on": None}), presets, performance)
    assert unplaced.why_not.startswith("its 32 GPUs span nodes and it names no kit platform")
    nowhere = published_case(rows[0].model_copy(update={"priced_on": "nowhere"}), presets, performance, platforms)
    assert nowhere.why_not == "priced_on names platform 'nowhere', not one of azure-h100"
