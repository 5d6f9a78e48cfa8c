"""Layout names parse; every impossible combination is refused with its numbers and alternatives."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.config.presets import get_preset
from bench.planning.layout import LayoutSpec, build_layout, parse_layout_name, valid_layouts
from tests.inprocess import run_cli


@pytest.mark.parametrize("name,expected", [
    ("tp2pp8", (2, 8, None, 1, 1, False, None)),
    ("tp4pp2dp2", (4, 2, 2, 1, 1, False, None)),
    ("tp1pp1", (1, 1, None, 1, 1, False, None)),
    ("tp2pp4vp4", (2, 4, None, 1, 4, False, None)),
    ("tp2cp2sp", (2, 1, None, 2, 1, True, None)),
    ("dp8zero1", (1, 1, 8, 1, 1, False, 1)),
    ("TP2PP2", (2, 2, None, 1, 1, False, None)),
])
def test_parse(name: str, expected: tuple) -> None:
    s = parse_layout_name(name)
    assert (s.tp, s.pp, s.dp, s.cp, s.vp, s.sp, s.zero) == expected


@pytest.mark.parametrize("name,message", [
    ("tp2pq8", "cannot read 'pq8'"), ("tp2tp4", "'tp' is given twice"), ("tp0", "at least 1"),
    ("", "empty layout"), ("zero4", "cannot read 'zero4'"),
])
def test_parse_errors(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_layout_name(name)


def test_dp_is_derived_from_gpus() -> None:
    lay = build_layout("tp2pp2", get_preset("13b"), 16, 8)
    assert (lay.dp, lay.name, lay.grad_accumulation) == (4, "tp2pp2dp4", 16)


# Each impossible layout with the phrase its refusal must contain (numbers included).
IMPOSSIBLE = [
    ("13b", "tp2pp8", 8, 8, {}, "tp2 x pp8 x cp1 x dp1 = 16 GPUs, but the run has 8 GPUs"),
    ("13b", "tp2pp2dp4", 8, 8, {}, "= 16 GPUs, but the run has 8 GPUs"),
    ("1.3b", "tp32pp1", 32, 8, {}, "16 attention heads, not divisible by tp32"),
    ("13b", "tp3pp1", 3, 8, {}, "40 attention heads, not divisible by tp3"),
    ("2.7b", "tp1pp3", 3, 8, {}, "32 layers, not divisible by pp3 x vp1 = 3"),
    ("13b", "tp1pp4vp4", 4, 8, {}, "40 layers, not divisible by pp4 x vp4 = 16"),
    ("13b", "tp1pp1vp2", 1, 8, {}, "vp2 (interleaved pipeline) needs pp of at least 2"),
    ("13b", "tp1pp1", 8, 8, {"gbs": 12}, "global batch 12 is not divisible by micro batch 1 x dp8"),
    ("6.7b", "tp8pp1", 8, 4, {}, "tp8 is larger than the 4 GPUs of one node"),
    ("6.7b", "tp1pp2sp", 2, 8, {}, "sp (sequence parallel) needs tensor parallelism"),
    ("13b", "tp1pp2zero2", 2, 8, {}, "zero2 shards gradients"),
    ("1.3b", "tp1cp3", 3, 8, {}, "sequence length 2048 is not divisible by 2 x cp3"),
]


@pytest.mark.parametrize("preset,name,gpus,per_node,batch,message", IMPOSSIBLE,
                         ids=[case[1] + "-" + case[0] for case in IMPOSSIBLE])
def test_impossible_layouts_are_refused(preset: str, name: str, gpus: int, per_node: int,
                                        batch: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        build_layout(name, get_preset(preset), gpus, per_node, **batch)
    text = str(err.value)
    assert message in text
    assert f"layout '{name}' is not possible" in text
    assert "nearest valid layouts" in text or "no layout" in text


def test_nearest_layouts_are_valid_and_close() -> None:
    with pytest.raises(ValueError) as err:
        build_layout("tp2pp8", get_preset("13b"), 8, 8)
    suggestions = str(err.value).split("gbs 64): ")[1].split(", ")
    assert suggestions[0] in ("tp2pp4dp1", "tp1pp8dp1")
    for name in suggestions:
        build_layout(name, get_preset("13b"), 8, 8)  # each suggestion is itself valid


def test_valid_layouts_enumerates_every_split() -> None:
    names = {lay.name for lay in valid_layouts(get_preset("13b"), 4, 4, 1, 64)}
    assert names == {"tp1pp1dp4", "tp1pp2dp2", "tp1pp4dp1", "tp2pp1dp2", "tp2pp2dp1", "tp4pp1dp1"}


def test_a_refusal_shows_the_layout_as_typed(tmp_path: Path) -> None:
    # through the planner, which parses the name first: not `LayoutSpec(tp=2, pp=8, ...)`
    refused = run_cli("run", "13b", "TP2pp8", "--platform", "lumi", "--gpus", "8", "--dry-run",
                      cwd=tmp_path)
    assert refused.returncode == 2
    assert "error: layout 'TP2pp8' is not possible" in refused.stderr
    assert "LayoutSpec" not in refused.stderr


def test_a_spec_built_in_code_reads_as_its_name() -> None:
    assert str(LayoutSpec(tp=2, pp=4, vp=2, dp=2, sp=True)) == "tp2pp4vp2dp2sp"


@pytest.mark.parametrize("layout,size", [("tp3pp8", 24), ("tp2pp12", 24), ("tp3pp1", 3)])
def test_a_gpu_count_the_user_never_gave_is_not_named(layout: str, size: int, tmp_path: Path) -> None:
    # without --gpus or --nodes the size comes from the bad layout itself: "no layout of 13b fits
    # 24 GPUs" would answer a question nobody asked; valid layouts at nearby sizes do
    refused = run_cli("run", "13b", layout, "--platform", "lumi", "--dry-run", cwd=tmp_path)
    assert refused.returncode == 2
    assert f"{size} GPUs" not in refused.stderr
    assert "nearest valid layouts for 13b (mbs 1, gbs 64): " in refused.stderr
    assert "--gpus or --nodes sets the run's size" in refused.stderr


def test_a_gpu_count_given_is_kept_in_the_refusal(tmp_path: Path) -> None:
    refused = run_cli("run", "13b", "tp3pp8", "--platform", "lumi", "--gpus", "24", "--dry-run",
                      cwd=tmp_path)
    assert "no layout of 13b fits 24 GPUs" in refused.stderr


def test_a_refused_layout_suggests_only_layouts_that_fit_the_gpus_memory(tmp_path: Path) -> None:
    # 175b on one node of eight 80 GB H100s: every valid split needs ~440 GB per GPU, so naming
    # one would only lead to the memory refusal; the refusal says none fits and why
    refused = run_cli("run", "175b", "tp8pp16", "--platform", "azure-h100", "--nodes", "1",
                      "--dry-run", cwd=tmp_path)
    assert refused.returncode == 2
    assert "nearest valid layouts" not in refused.stderr
    assert ("no layout of 175b on 8 GPUs fits their memory: tp1pp8dp1, tp2pp4dp1, tp4pp2dp1 and the "
            "other valid ones are refused by the memory estimate") in refused.stderr
    # where some fit, those are named, and each then plans
    refused = run_cli("run", "13b", "tp8pp16", "--platform", "azure-h100", "--nodes", "1",
                      "--dry-run", cwd=tmp_path)
    suggested = refused.stderr.split("(mbs 1, gbs 64): ")[1].split()[0].rstrip(",")
    planned = run_cli("run", "13b", suggested, "--platform", "azure-h100", "--nodes", "1",
                      "--dry-run", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr


def test_without_known_memory_the_suggestions_are_not_filtered() -> None:
    p = get_preset("175b")
    with pytest.raises(ValueError, match="nearest valid layouts for 175b on 8 GPUs"):
        build_layout("tp8pp16", p, 8, 8)
    with pytest.raises(ValueError, match="no layout of 175b on 8 GPUs fits their memory"):
        build_layout("tp8pp16", p, 8, 8, fits=lambda lay: False)


def test_without_a_size_the_suggestions_grow_until_they_fit(tmp_path: Path) -> None:
    # 175b tp5 (96 heads) implies no size; 4 and 8 H100s hold no 175b layout, 128 do
    refused = run_cli("run", "175b", "tp5pp1", "--platform", "azure-h100", "--dry-run", cwd=tmp_path)
    assert refused.returncode == 2
    assert "nearest valid layouts for 175b (mbs 1, gbs 512): tp4pp16dp2 (128 GPUs)" in refused.stderr
    planned = run_cli("run", "175b", "tp4pp16dp2", "--platform", "azure-h100", "--nodes", "16",
                      "--dry-run", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
