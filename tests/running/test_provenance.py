"""The kit commit a record carries: a checkout's HEAD, marked when its tracked files were changed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _kit_commit(checkout: Path) -> str:
    return subprocess.run([sys.executable, "-c", "from bench.running.provenance import kit_commit; "
                           "print(kit_commit())"], cwd=checkout, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_changed_checkout_is_marked_dirty(tmp_path: Path) -> None:
    checkout = tmp_path / "kit"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{REPO}", str(checkout)],
                   check=True)
    # The kit as it is here, committed in the clone (this checkout may hold uncommitted work).
    shutil.rmtree(checkout / "bench")
    shutil.copytree(REPO / "bench", checkout / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "-C", str(checkout), "-c", "user.name=kit", "-c", "user.email=kit@localhost",
                    "commit", "-qam", "the kit as tested", "--allow-empty"], check=True)
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    (checkout / "scratch.txt").write_text("untracked files do not count\n")
    assert _kit_commit(checkout) == head
    with (checkout / "README.md").open("a") as readme:
        readme.write("\nan edit the commit does not hold\n")
    assert _kit_commit(checkout) == f"{head}-dirty"
