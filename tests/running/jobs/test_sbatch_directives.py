"""What survives an #SBATCH line, checked against the real sbatch (shared SLURM.md, `#` finding).

Finding (Slurm 22.05): an unquoted `#` inside an #SBATCH value starts a comment, so a pyxis image
`nvcr.io#nvidia/pytorch:25.03-py3` arrives as `nvcr.io`. Double quotes, single quotes and a
backslash before the `#` all keep it; quotes are removed, `$` and `%` are not expanded by sbatch.
Both `shlex.quote(value)` (single quotes) and the renderer's `directive_value` (double quotes) are
safe for `#`, spaces and single quotes, with one exception: sbatch treats a backslash as an escape
even inside quotes (`'a\\b'` arrives as `ab`), so values with a backslash must be refused.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from bench.render.shell import directive_value
from bench.running.jobs.scheduler import parse_scontrol_line

PYXIS_IMAGE = "nvcr.io#nvidia/pytorch:25.03-py3"


def _comment_seen_by_slurm(tmp_path: Path, env: dict[str, str], directive_value: str) -> str:
    """Submit a held job with `#SBATCH --comment=<directive_value>`; return Slurm's Comment."""
    script = tmp_path / "directive.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH --comment={directive_value}\n"
                      f"#SBATCH --output=/dev/null\ntrue\n")
    job_id = subprocess.run(["sbatch", "--parsable", "--hold", str(script)], env=env, check=True,
                            capture_output=True, text=True).stdout.strip().split(";")[0]
    try:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=env, check=True,
                               capture_output=True, text=True).stdout
    finally:
        subprocess.run(["scancel", job_id], env=env, check=True)
    return parse_scontrol_line(shown.strip()).get("Comment", "")


def test_unquoted_hash_is_cut_off(slurm_cluster, tmp_path: Path) -> None:
    assert _comment_seen_by_slurm(tmp_path, slurm_cluster.env, PYXIS_IMAGE) == "nvcr.io"


@pytest.mark.parametrize("written", [
    f'"{PYXIS_IMAGE}"',                       # double quotes
    f"'{PYXIS_IMAGE}'",                       # single quotes (what shlex.quote writes)
    PYXIS_IMAGE.replace("#", "\\#"),           # backslash escape
])
def test_quoting_or_escaping_keeps_hash(slurm_cluster, tmp_path: Path, written: str) -> None:
    assert _comment_seen_by_slurm(tmp_path, slurm_cluster.env, written) == PYXIS_IMAGE


@pytest.mark.parametrize("value", [
    PYXIS_IMAGE, "registry.example.org:5000#team/image:tag", "it's#odd", "with space#x",
    "$HOME#not-expanded", "100%#x", 'double"quote#x',
])
def test_shlex_quote_is_safe_for_sbatch_values(slurm_cluster, tmp_path: Path, value: str) -> None:
    assert _comment_seen_by_slurm(tmp_path, slurm_cluster.env, shlex.quote(value)) == value


def test_backslash_is_an_escape_even_in_single_quotes(slurm_cluster, tmp_path: Path) -> None:
    # Unlike a shell: 'a\b' reaches Slurm as "ab". A renderer must refuse backslashes in values.
    assert _comment_seen_by_slurm(tmp_path, slurm_cluster.env, shlex.quote("a\\b#c")) == "ab#c"


@pytest.mark.parametrize("value", [
    PYXIS_IMAGE, "registry.example.org:5000#team/image:tag", "it's#odd", "with space#x",
    "$HOME#not-expanded", "plain-value_1.0",
])
def test_renderer_directive_values_survive_sbatch(slurm_cluster, tmp_path: Path,
                                                   value: str) -> None:
    """What bench.render.shell.directive_value writes reaches Slurm unchanged."""
    assert _comment_seen_by_slurm(tmp_path, slurm_cluster.env, directive_value(value)) == value


def test_renderer_refuses_backslash_values() -> None:
    """sbatch reads a backslash as an escape even inside quotes, so the renderer refuses it."""
    with pytest.raises(ValueError, match="backslash"):
        directive_value("a\\b#c")
