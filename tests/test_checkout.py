"""The checkout as a newcomer meets it: CI runs the README's own lines in a fresh venv, and what the
kit writes by default into the checkout is not offered to git."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.cli import build_parser

REPO = Path(__file__).resolve().parents[1]


def _first_line_after(text: str, heading: str) -> str:
    """The first line of the first fenced block after ``heading``."""
    block = re.search(r"^```[^\n]*\n(.*?)^```", text[text.index(heading):], re.S | re.M)
    assert block, f"no fenced block after {heading!r}"
    return block.group(1).splitlines()[0]


@pytest.mark.parametrize("heading", ["## Run the benchmark", "## Run the tests"])
def test_ci_runs_the_readmes_line_verbatim_in_a_fresh_venv(heading: str) -> None:
    line = _first_line_after((REPO / "README.md").read_text(encoding="utf-8"), heading)
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    made, entered = ci.find('python3 -m venv "$venv"'), ci.find('. "$venv/bin/activate"')
    assert 0 <= made < entered, ".ci/run makes and enters no fresh venv"
    assert ci.find(line, entered) > entered, f".ci/run does not run {line!r} in its fresh venv"
    apt = (REPO / ".ci" / "apt-packages.txt").read_text(encoding="utf-8").split()
    assert "python3-venv" in apt  # Debian's python3 has no venv module without it


def test_bench_datas_default_output_is_ignored_by_git() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    data = build_parser().parse_args(["data", "x.jsonl", "--vocab-file", "v", "--merge-file", "m"])
    prefix = Path(data.out_dir) / "gpt2-0123456789abcdef_text_document.bin"
    done = subprocess.run(["git", "check-ignore", "-q", str(prefix)], cwd=REPO, check=False)
    assert done.returncode == 0, f"{prefix} (bench data's default) is not ignored by .gitignore"


def test_a_missing_upstream_snapshot_skips_naming_the_doc_that_explains_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.snapshots import HOW, SNAPSHOTS_ENV, snapshot_archive

    monkeypatch.delenv(SNAPSHOTS_ENV, raising=False)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=re.escape(HOW)):
        snapshot_archive("megatron-deepspeed")
    doc, _, anchor = HOW.split()[0].partition("#")
    text = (REPO / doc).read_text(encoding="utf-8")
    section = text[text.index(f"\n## {anchor.capitalize()}\n"):]
    section = section[:section.find("\n## ", 1)]
    assert SNAPSHOTS_ENV in section and "<name>-<commit>.tar.gz" in section
