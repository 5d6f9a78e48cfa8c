"""Graph and dropout flags typed after '--' are read as the --cuda-graphs and --dropout settings
(recorded as such, shown in the script's settings line); a mix with the settings is refused."""

from __future__ import annotations

from pathlib import Path

from bench.running.arguments import typed_settings
from tests.inprocess import run_cli

DEFAULTS = {"cuda_graphs": "none", "dropout": 0.1}


def test_the_flags_become_the_settings_they_are() -> None:
    extra = ("--cuda-graph-impl", "transformer_engine", "--attention-dropout", "0.0",
             "--hidden-dropout", "0.0", "--manual-gc")
    assert typed_settings(DEFAULTS, extra) == {"cuda_graphs": "te", "dropout": 0.0,
                                               "extra_args": ("--manual-gc",)}
    # One dropout flag alone, or a setting given too: the flags stay the user's, as typed.
    alone = ("--hidden-dropout", "0.0")
    assert typed_settings(DEFAULTS, alone) == {**DEFAULTS, "extra_args": alone}
    both = {**DEFAULTS, "dropout": 0.2}
    assert typed_settings(both, extra)["extra_args"] == extra


def test_a_dry_run_shows_typed_flags_as_settings(tmp_path: Path) -> None:
    args = ("run", "13b", "tp1pp4", "--gpus", "4", "--dry-run")
    lifted = run_cli(*args, "--", "--attention-dropout", "0.0", "--hidden-dropout", "0.0", cwd=tmp_path)
    assert lifted.returncode == 0, lifted.stderr
    assert "# settings: --cuda-graphs none --dropout 0\n" in lifted.stdout
    assert lifted.stdout.count("--hidden-dropout 0.0") == 1
    mixed = run_cli(*args, "--dropout", "0.2", "--", "--attention-dropout", "0.0",
                    "--hidden-dropout", "0.0", cwd=tmp_path)
    assert mixed.returncode == 2 and "error: the kit already sets --attention-dropout" in mixed.stderr
