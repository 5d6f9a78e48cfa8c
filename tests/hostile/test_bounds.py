"""Issue 35, item 12: unbounded or unreadable input is one ``error:`` line before anything is
submitted or written, never a traceback, a ``MemoryError`` or a busy loop."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.running.run import MAX_REPEAT
from tests.inprocess import run_cli
from tests.running.test_reliability import RESULTS_FIXTURES, refused

DEEP = 5_000


def _campaign(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "deep.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("args", [
    ["1.3b", "tp1pp1", "--repeat", str(MAX_REPEAT + 1)],
    ["1.3b", "--sweep", "--repeat", str(MAX_REPEAT + 1)],
])
def test_repeat_has_an_upper_bound(tmp_path: Path, args: list[str]) -> None:
    refused(run_cli("run", *args, "--dry-run", cwd=tmp_path),
            f"--repeat must be at least 1 and at most {MAX_REPEAT}, got {MAX_REPEAT + 1}")


def test_a_campaigns_repeat_has_the_same_bound(tmp_path: Path) -> None:
    # Just over the bound: without it, 10**9 would be planned until the memory ran out.
    path = _campaign(tmp_path, f'[[run]]\nmodel = "1.3b"\nlayout = "tp1pp1"\n'
                     f'repeat = {MAX_REPEAT + 1}\n')
    refused(run_cli("run", "--campaign", str(path), "--dry-run", cwd=tmp_path),
            f"--repeat must be at least 1 and at most {MAX_REPEAT}, got {MAX_REPEAT + 1}")


@pytest.mark.parametrize("text", [
    "description = 'x'\n[defaults]\nx = " + "[" * DEEP + "]" * DEEP + "\n",  # the parser recurses
    "description = 'x'\n[defaults]\n" + "x." * DEEP + "y = 1\n",  # the tables it builds nest
], ids=["nested arrays", "dotted keys"])
def test_a_campaign_nested_5000_deep_is_named(tmp_path: Path, text: str) -> None:
    path = _campaign(tmp_path, text)
    refused(run_cli("run", "--campaign", str(path), "--dry-run", cwd=tmp_path),
            f"{path}", "nested too deeply")


def test_a_campaign_that_is_a_folder_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "campaigns"
    folder.mkdir()
    refused(run_cli("run", "--campaign", str(folder), "--dry-run", cwd=tmp_path),
            f"{folder}: is a folder, not a TOML file")


def test_a_folder_named_like_a_preset_file_is_named(tmp_path: Path) -> None:
    presets = tmp_path / "presets"
    (presets / "d.toml").mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    refused(run_cli("run", "1.3b", "tp1pp1", cwd=work, env={"BENCH_PRESETS_DIR": str(presets)}),
            f"{presets / 'd.toml'}: is a folder, not a TOML file")
    assert not list(work.iterdir())


def test_results_into_a_read_only_folder_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "ro"
    if os.geteuid() == 0:  # modes do not stop root; sysfs takes no new entries from anyone
        if not Path("/sys/kernel").is_dir():
            pytest.skip("no sysfs here, and root writes into a read-only directory")
        out = Path("/sys/kernel")
    else:
        out.mkdir()
        out.chmod(0o500)
    result = run_cli("results", "--records", str(RESULTS_FIXTURES / "records"), "--out", str(out),
                     "--published", str(RESULTS_FIXTURES / "published.toml"),
                     "--ranges", str(RESULTS_FIXTURES / "reference_ranges.toml"), cwd=tmp_path)
    refused(result, f"the results cannot be written to {out}", "--out")


@pytest.mark.parametrize("value", ["1e400", "inf", "nan"])
def test_a_bucket_size_that_is_no_number_of_elements_is_refused(tmp_path: Path,
                                                                 value: str) -> None:
    result = run_cli("run", "1.3b", "tp1pp1", "--engine", "megatron-deepspeed",
                     "--reduce-bucket", value, "--dry-run", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"argument --reduce-bucket: '{value}' must be a whole number of elements" in result.stderr


@pytest.mark.parametrize("poll", ["nan", "0", "-1", "0.01", "inf"])
def test_poll_is_checked_before_a_job_is_submitted(tmp_path: Path, poll: str) -> None:
    # Not a dry run: without the check, the job would be submitted (and the run folder made).
    refused(run_cli("run", "1.3b", "tp1pp1", "--platform", "lumi", "--account", "project_1",
                    "--wait", "--poll", poll, cwd=tmp_path),
            "--poll must be 0.5 to 3600 seconds, got ")
    refused(run_cli("check", "--platform", "lumi", "--account", "project_1", "--poll", poll,
                    "--root", str(tmp_path), cwd=tmp_path), "--poll must be 0.5 to 3600 seconds")
    assert not list(tmp_path.iterdir())


def test_only_without_a_campaign_is_refused(tmp_path: Path) -> None:
    refused(run_cli("run", "1.3b", "tp1pp1", "--only", "x4", "--dry-run", cwd=tmp_path),
            "--only selects runs of a campaign: give --campaign FILE with it")


def test_a_system_check_on_the_local_platform_says_what_to_run_instead(tmp_path: Path) -> None:
    result = run_cli("check", "--platform", "local", "--dry-run", cwd=tmp_path)
    refused(result, "the system check is a job on a cluster", "platform local has no scheduler",
            "nox -s smoke")
    assert "--gbs" not in result.stderr


def test_a_system_check_of_no_nodes_names_nodes(tmp_path: Path) -> None:
    refused(run_cli("check", "--platform", "lumi", "--nodes", "0", "--dry-run", cwd=tmp_path),
            "--nodes must be at least 1, got 0")
