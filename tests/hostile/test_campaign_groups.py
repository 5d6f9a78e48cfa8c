"""A campaign group named like one of its runs is refused when the file is read: ``--only`` with
that word would select the run and the whole group."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.config.campaign import load_campaign

CAMPAIGN = """
[[run]]
name = "{first}"
model = "1.3b"
layout = "tp1pp1"

[[run]]
name = "second"
group = "{group}"
model = "1.3b"
layout = "dp2"
"""


def test_a_group_named_like_another_run_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text(CAMPAIGN.format(first="base", group="base"))
    with pytest.raises(ValueError, match=rf"^{path}: group 'base' is also a run's name, so --only base "
                                         "would select both: rename the group or the run$"):
        load_campaign(path)
    path.write_text(CAMPAIGN.format(first="base", group="ab"))
    assert [run.name for run in load_campaign(path).selected(["base"])] == ["base"]
