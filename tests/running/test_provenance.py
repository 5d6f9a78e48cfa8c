"""The kit commit a record carries: a checkout's HEAD, marked when its tracked files were changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# A git clone of the kit and a Python child per commit read: seconds.
pytestmark = pytest.mark.slow


def _kit_commit(checkout: Path) -> str:
    return subprocess.run([sys.executable, "-c", "from bench.running.provenance import kit_commit; "
                           "print(kit_commit())"], cwd=checkout, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture(scope="module")
def committed_kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of the kit with the kit as it is here committed (this checkout may hold
    uncommitted work); made once, each test changes a copy of its own."""
    checkout = tmp_path_factory.mktemp("clone") / "kit"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{REPO}", str(checkout)],
                   check=True)
    shutil.rmtree(checkout / "bench")
    shutil.copytree(REPO / "bench", checkout / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "-C", str(checkout), "-c", "user.name=kit", "-c", "user.email=kit@localhost",
                    "commit", "-qam", "the kit as tested", "--allow-empty"], check=True)
    return checkout


def _checkout(tmp_path: Path, committed_kit: Path) -> Path:
    return Path(shutil.copytree(committed_kit, tmp_path / "kit", symlinks=True))


def test_a_changed_checkout_is_marked_dirty(tmp_path: Path, committed_kit: Path) -> None:
    checkout = _checkout(tmp_path, committed_kit)
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    (checkout / "scratch.txt").write_text("untracked files do not count\n")
    assert _kit_commit(checkout) == head
    with (checkout / "README.md").open("a") as readme:
        readme.write("\nan edit the commit does not hold\n")
    assert _kit_commit(checkout) == f"{head}-dirty"


def test_reading_the_commit_never_writes_the_checkouts_index(tmp_path: Path, committed_kit: Path) -> None:
    """git status refreshes the index when files' times changed, under index.lock; a run killed
    then (or stopped by a file-size limit) would leave the lock, and the user's next git command
    fails. The kit asks without optional locks, so the index is never written."""
    checkout = _checkout(tmp_path, committed_kit)
    index = checkout / ".git" / "index"
    before = index.stat().st_mtime_ns
    time.sleep(0.01)
    for path in (checkout / "README.md", checkout / "LICENSE"):
        os.utime(path)  # same content, new times: status would refresh the index
    _kit_commit(checkout)
    assert index.stat().st_mtime_ns == before and not (checkout / ".git" / "index.lock").exists()
