"""What every MS-AMP tuning option must do on the command line and in a campaign file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench.config.campaign import load_campaign
from bench.config.run_options import CAMPAIGN_KEYS
from bench.records.build import plan_summary
from bench.running.arguments import options_from, parse_run_argv


def check_option_and_campaign_key(tmp_path: Path, key: str, value: str, default: str, bad: str) -> None:
    """``--<key> value`` on an msamp-o2 run parses into the tuning (``default`` without it, ``bad``
    refused), and the campaign key ``key = "value"`` gives the same options."""
    flag = "--" + key.replace("_", "-")
    line = ["345m", "tp1pp1", "--precision", "msamp-o2", flag, value]
    from_line = options_from(parse_run_argv(line), 0, "")
    assert getattr(from_line.tuning, key) == value
    assert getattr(options_from(parse_run_argv(line[:4]), 0, "").tuning, key) == default
    with pytest.raises(ValueError, match="is not valid"):
        parse_run_argv([*line[:4], flag, bad])
    assert key in CAMPAIGN_KEYS
    path = tmp_path / "c.toml"
    path.write_text('[[run]]\nmodel = "345m"\nlayout = "tp1pp1"\nprecision = "msamp-o2"\n'
                    f'{key} = "{value}"\n')
    (run,) = load_campaign(path).runs
    from_file = options_from(parse_run_argv(list(run.argv)), 0, "")
    assert dataclasses.replace(from_file, now=from_line.now, nonce=from_line.nonce) == from_line


def check_env_variant(default, chosen, env: str, value: str, key: str, setting: str) -> None:
    """``chosen`` (a plan with ``key = setting``) sets ``env=value``, is the variant ``key`` in
    the plan and its summary, and trains with ``default``'s arguments: the environment alone
    carries the setting."""
    assert dict(chosen.env)[env] == value
    assert chosen.variant == ((key, setting),)
    summary = plan_summary(chosen)
    assert summary.env[env] == value
    assert summary.variant == {key: setting}
    assert default.train_args == chosen.train_args
