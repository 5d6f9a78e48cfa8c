"""The planner's flags for environments without Transformer Engine are the ones the entry demands."""

from bench.engines.megatron import WITHOUT_TE_FLAGS
from bench.train.spec import NO_TE_NO_APEX_FLAGS


def test_planner_and_entry_agree_on_the_flags_without_te() -> None:
    assert WITHOUT_TE_FLAGS == NO_TE_NO_APEX_FLAGS
