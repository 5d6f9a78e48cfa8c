"""CUDA graphs and dropout: the flags the engines render from the settings, and the settings read
back out of hand-written Megatron flags (after '--', and in older records' argv)."""

from __future__ import annotations

import pytest

from bench.config.run_options import BY_NAME, CUDA_GRAPHS, DEFAULT_DROPOUT, variant_key
from bench.planning.engines.setting_flags import dropout_flags, graph_flags, lift


def test_the_settings_are_rows_of_the_run_option_table() -> None:
    graphs, dropout = BY_NAME["cuda_graphs"], BY_NAME["dropout"]
    assert (graphs.default, graphs.choices, graphs.field, graphs.engine) == (
        "none", CUDA_GRAPHS, "tuning.cuda_graphs", "megatron")
    assert (dropout.default, dropout.field, dropout.engine) == (0.1, "tuning.dropout", None)
    assert (variant_key("cuda_graphs"), variant_key("dropout")) == ("cuda_graphs", "dropout")
    assert dropout.variant_text(0.0) == "0"
    with pytest.raises(KeyError):
        variant_key("platform")


def test_rendered_flags_are_those_the_records_were_run_with() -> None:
    assert graph_flags("te") == ["--cuda-graph-impl", "transformer_engine"]
    assert graph_flags("none") == []
    assert dropout_flags(0.0, DEFAULT_DROPOUT) == ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    assert dropout_flags(DEFAULT_DROPOUT, DEFAULT_DROPOUT) == []


@pytest.mark.parametrize(("argv", "graphs", "dropout", "rest"), [
    (["--cuda-graph-impl", "transformer_engine", "--attention-dropout", "0.0", "--hidden-dropout",
      "0.0", "--manual-gc"], "te", 0.0, ("--manual-gc",)),
    (["--attention-dropout", "0.0", "--hidden-dropout", "0.0"], None, 0.0, ()),
    # one of the two, or two values: no one setting, the flags stay the user's
    (["--hidden-dropout", "0.0"], None, None, ("--hidden-dropout", "0.0")),
    (["--attention-dropout", "0.1", "--hidden-dropout", "0.0"], None, None,
     ("--attention-dropout", "0.1", "--hidden-dropout", "0.0")),
    (["--cuda-graph-impl", "local"], None, None, ("--cuda-graph-impl", "local")),
    ([], None, None, ()),
])
def test_lift_reads_the_settings_out_of_flags(argv: list[str], graphs: str | None,
                                              dropout: float | None, rest: tuple[str, ...]) -> None:
    found = lift(argv)
    assert (found.cuda_graphs, found.dropout, found.rest) == (graphs, dropout, rest)


def test_lift_inverts_the_rendering() -> None:
    flags = graph_flags("te") + dropout_flags(0.0, DEFAULT_DROPOUT)
    assert lift(flags).cuda_graphs == "te" and lift(flags).dropout == 0.0 and lift(flags).rest == ()
