"""The GPU lock folder is writable by every user, so nothing in it is trusted: a symbolic link, hard
link or folder planted at a lock file's name stops the run with an error naming it and is never
written through; the folder is the machine's whatever a run's ``$TMPDIR``; what a lock file says of
its holder reaches the terminal with its control characters escaped."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from bench.running import gpulock
from bench.running.gpulock import gpus_locked, lock_folder

KEY = "GPU-test-hostile"


@pytest.fixture()
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The lock folder of these tests, as a run makes it."""
    made = tmp_path / "locks"
    monkeypatch.setenv("BENCH_GPU_LOCK_DIR", str(made))
    with gpus_locked([KEY], "a first run", "fail"):
        pass
    os.unlink(made / f"{KEY}.lock")
    return made


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text("a user's file\n")
    victim.chmod(0o600)
    return victim


def test_a_planted_symbolic_link_is_refused_and_its_target_untouched(folder: Path, tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    (folder / f"{KEY}.lock").symlink_to(victim)
    with pytest.raises(ValueError, match=rf"^the GPU lock file {folder}/{KEY}.lock is a symbolic "
                                         "link, which no run makes, so nothing was run: remove it"):
        with gpus_locked([KEY], "run x", "fail"):
            pytest.fail("the run went ahead")
    assert victim.read_text() == "a user's file\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600


def test_a_planted_hard_link_is_refused_and_its_file_untouched(folder: Path, tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    os.link(victim, folder / f"{KEY}.lock")
    with pytest.raises(ValueError, match=r"is a file with 2 names \(a hard link\)"):
        with gpus_locked([KEY], "run x", "fail"):
            pytest.fail("the run went ahead")
    assert victim.read_text() == "a user's file\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600


def test_a_lock_path_that_is_a_folder_is_named_as_one(folder: Path) -> None:
    (folder / f"{KEY}.lock").mkdir()
    with pytest.raises(ValueError, match=rf"^the GPU lock file {folder}/{KEY}.lock is a folder, "):
        with gpus_locked([KEY], "run x", "fail"):
            pytest.fail("the run went ahead")


def test_a_lock_folder_that_is_a_link_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "locks").symlink_to(elsewhere)
    monkeypatch.setenv("BENCH_GPU_LOCK_DIR", str(tmp_path / "locks"))
    with pytest.raises(ValueError, match="is not a folder but a link or a file"):
        with gpus_locked([KEY], "run x", "fail"):
            pytest.fail("the run went ahead")
    assert list(elsewhere.iterdir()) == []


def test_runs_with_two_tmpdirs_share_one_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_GPU_LOCK_DIR")
    monkeypatch.setattr(gpulock, "FOLDER", tmp_path / "machine")  # the machine's /tmp folder
    monkeypatch.setenv("TMPDIR", str(tmp_path / "job-1"))
    with gpus_locked([KEY], "run of job 1", "fail"):
        monkeypatch.setenv("TMPDIR", str(tmp_path / "job-2"))
        with pytest.raises(ValueError, match=f"^GPU {KEY} is in use by run of job 1 "):
            with gpus_locked([KEY], "run of job 2", "fail"):
                pytest.fail("two runs took one GPU")
    assert lock_folder() == tmp_path / "machine"


def test_a_holder_text_is_shown_escaped_while_waiting(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def wait() -> None:
        with gpus_locked([KEY], "run z", "wait"):
            pass

    said: list[str] = []
    with gpus_locked([KEY], "run x", "fail"):
        (folder / f"{KEY}.lock").write_text("\x1b[2J\x1b[Hrun y\nerror: forged")
        waiting = threading.Thread(target=wait)
        waiting.start()
        deadline = time.monotonic() + 30
        while "waiting" not in "".join(said) and time.monotonic() < deadline:
            said.append(capsys.readouterr().err)
            time.sleep(0.05)
    waiting.join(timeout=30)
    err = "".join(said) + capsys.readouterr().err
    assert err == (f"waiting for GPU {KEY}, in use by \\x1b[2J\\x1b[Hrun y\\nerror: forged "
                   "(BENCH_GPU_LOCK=wait)\n"), repr(err)
    assert not waiting.is_alive()
