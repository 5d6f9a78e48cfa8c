"""A command whose extra is not installed says so in one ``error:`` line naming the extra, and a
command that does not need an extra runs without it. Each runs in a fresh Python where the module
is made absent (``sys.modules[name] = None`` makes its import fail as if it were not installed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _without(module: str, code: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    hide = f"import sys; sys.modules[{module!r}] = None\n"
    return subprocess.run([sys.executable, "-c", hide + code], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("module,code,extra", [
    ("numpy", "from bench.cli import main; sys.exit(main(['data', 'in.jsonl', '--vocab-file', 'v', "
              "'--merge-file', 'm']))", "data"),
    ("tiktoken", "from bench.cli import main; sys.exit(main(['data', 'in.jsonl', '--vocab-file', "
                 "'v', '--merge-file', 'm']))", "data"),
    ("matplotlib", "from bench.results.perf import main; sys.exit(main(['10']))", "results"),
])
def test_a_missing_extra_is_one_line_naming_it(module: str, code: str, extra: str) -> None:
    done = _without(module, code)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert f"needs {module}, which is not installed: pip install 'megatron-bench-kit[{extra}]'" in done.stderr


def test_results_csv_needs_no_matplotlib(tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    done = _without("matplotlib", "from bench.cli import main; sys.exit(main(['results', '--csv', "
                    f"'--records', {str(records)!r}]))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("published,model,platform,")
