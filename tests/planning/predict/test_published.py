"""Published rows the step-time model is checked against: each carries its source, and the figures
the kit derives from a source agree with what the source prints beside them."""

from __future__ import annotations

import re

import pytest

from bench.config.presets import load_presets
from bench.measure.flops import flops_per_iteration
from bench.planning.predict import facts
from bench.planning.predict.published import SHAPE, published_case, row_platforms, row_preset
from bench.results.data import PublishedRow, load_published
from bench.results.generate import PUBLISHED_FILE

PUBLISHED = load_published(PUBLISHED_FILE)
# Sources of the NVIDIA rows added for the model's external check: each pinned to the commit or
# tag whose file states the figures (README_175b.md, performance_summary.md, model_table.png).
PINNED = ("megatron-readme", "megatron-readme-2021", "dgxc", "nemo-perf-2407")


def rows_of(source: str) -> list[PublishedRow]:
    return [row for row in PUBLISHED.rows if row.source == source]


@pytest.mark.parametrize("source", PINNED)
def test_every_new_row_names_a_source_pinned_to_the_version_that_states_it(source: str) -> None:
    assert rows_of(source), source
    link = PUBLISHED.sources[source].link or ""
    assert re.fullmatch(r"https://github\.com/NVIDIA/[\w.-]+/blob/[\w.]+/\S+", link), link
    assert PUBLISHED.sources[source].title and PUBLISHED.sources[source].date


def test_every_row_names_a_source_table() -> None:
    assert all(row.source in PUBLISHED.sources for row in PUBLISHED.rows)
    assert all(row.note or row.source in {"lumi-seed", "fp8-lm"} for row in PUBLISHED.rows)


def test_a_row_states_its_shape_whole_or_not_at_all() -> None:
    for row in PUBLISHED.rows:
        stated = [getattr(row, name) is not None for name in SHAPE[:4]]
        assert all(stated) or not any(stated), row
        assert not any(stated) or row.seq_length, row


def test_a_row_over_nodes_is_priced_on_a_platform_or_said_why_not() -> None:
    presets, performance = load_presets(), facts.load_all()
    platforms = row_platforms(PUBLISHED.rows)
    for row in PUBLISHED.rows:
        case = published_case(row, presets, performance, platforms)
        if case.case is not None and row.gpus > 8:
            assert row.priced_on and case.case.network is not None, case.label
    a100 = [row for row in rows_of("megatron-readme-2021")]
    assert [published_case(row, presets, performance, platforms).why_not for row in a100] == [
        "its 1024 GPUs span nodes and it names no kit platform (priced_on) whose links between nodes "
        "would price them"]


def test_dgxc_rows_agree_with_the_step_times_and_mfu_printed_beside_them() -> None:
    """samples/s is the table's tokens per second over sequence 2048: global batch over it is the
    printed step time, and the kit's non-causal count at that step is the printed MFU."""
    preset = load_presets()["175b"]
    rows = rows_of("dgxc")
    assert len(rows) == 10 and {row.gpus for row in rows} == {128, 256, 512, 1024, 2048}
    for row in rows:
        step = float(re.match(r"(\d+\.\d+) s a step", row.note or "")[1])  # type: ignore[index]
        assert row.global_batch / row.samples_per_s == pytest.approx(step, abs=0.006)
        assert row.global_batch == 2 * row.gpus and row.dp * 32 == row.gpus and row.sp and row.vp == 12
        peak = 989 if row.precision == "bf16" else 1979
        tflops = flops_per_iteration(preset, row.global_batch, causal=False) / step / row.gpus / 1e12
        assert tflops / peak * 100 == pytest.approx(row.percent_of_peak, abs=0.3)


def test_nemo_rows_tflops_over_tokens_match_the_noncausal_count_at_their_shape() -> None:
    """NeMo's Model TFLOP/s over its tokens/s is the non-causal count of the row's shape, to the
    printed digit: it fixes the vocabulary the table leaves unstated (51200)."""
    presets = load_presets()
    rows = rows_of("nemo-perf-2407")
    assert [row.model for row in rows] == ["5b", "20b", "175b", "175b"]
    for row in rows:
        preset = row_preset(row, presets)
        per_token = flops_per_iteration(preset, 1, causal=False) / preset.seq_length
        assert round(row.tokens_per_s_per_gpu * per_token / 1e12) == row.tflops_per_gpu, row.model


def test_megatron_2021_175b_row_is_the_readmes_32_second_iteration() -> None:
    """138 TFLOP/s/GPU in Narayanan et al.'s count (full recompute) on 1024 GPUs at global batch 1536
    is the README's "around 32 seconds" an iteration."""
    (row,) = rows_of("megatron-readme-2021")
    flops = flops_per_iteration(load_presets()["175b"], row.global_batch, causal=False, recompute=row.recompute)
    assert flops / (row.tflops_per_gpu * 1e12 * row.gpus) == pytest.approx(32, abs=0.5)
    assert row.tp * row.pp * row.dp == row.gpus


def test_megatron_readme_rows_carry_the_tables_shapes_and_say_no_micro_batch() -> None:
    """The shapes read off the table give the sizes it names; no row has an expectation."""
    presets, performance = load_presets(), facts.load_all()
    rows = rows_of("megatron-readme")
    assert [row.model for row in rows] == ["1.7b", "7.1b", "16b", "32b", "70b", "119b", "177b", "314b", "462b"]
    for row in rows:
        assert row.dp == 48 and row.tp * row.pp * row.dp == row.gpus and row.vocab_size == 131072
        # the size the table names: layers and untied input and output embeddings (12 l h^2 + 2 V h)
        params = 12 * row.layers * row.hidden ** 2 + 2 * row.vocab_size * row.hidden
        assert params / 1e9 == pytest.approx(float(row.model[:-1]), rel=0.03), row.model
        assert published_case(row, presets, performance).why_not == "micro_batch not stated"
