"""Every run ends with exactly one record; every bad input is refused before anything starts.

One test (or parametrized group) per case found by trying the kit as a careful user or a hostile
file would. Runs go through the real runner; torchrun is replaced by
``tests/fixtures/launchers/fake_torchrun.py``, which prints captured logs of real runs
(``tests/fixtures/logs/``) and then ends as the real failure did (exit 1, silence, SIGTERM).
Bad input goes through ``python -m bench`` in a subprocess, as a user meets it: exit 2, one line
naming the problem, nothing written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.config.paths import PLATFORMS_DIR
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.measure.logparse import LOG_TAIL_LINES, parse_log
from bench.planning.plan import plan
from bench.records.evidence import read_log, text_sha256
from bench.records.record import Status, build_record
from bench.records.store import load_record, load_records, write_record
from bench.running import local as runner
from tests.conftest import options
from tests.inprocess import run_cli
from tests.record_factory import record_fields

TESTS = Path(__file__).parents[1]
REPO = TESTS.parent
LOGS = TESTS / "fixtures" / "logs"
FAKE_TORCHRUN = TESTS / "fixtures" / "launchers" / "fake_torchrun.py"
RESULTS_FIXTURES = TESTS / "fixtures" / "results"
OK_LOG = LOGS / "megatron_ok_1.3b_tp1pp1_h200.log"  # 15 iterations, 1.3b mbs 4 gbs 32, one H200




def refused(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit 2 with one ``error:`` line holding every fragment, and no traceback."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


# --- runs through the real runner, with a fake torchrun --------------------------------------

@pytest.fixture()
def launch():
    """1.3b tp1pp1 on one H200, as the run of OK_LOG was planned."""
    return plan(get_preset("1.3b"), "tp1pp1", load_platform("local"),
                options(gpus_present=1, gpu_name="NVIDIA H200", iters=15))


def run_fake(monkeypatch: pytest.MonkeyPatch, launch, tmp_path: Path, log: Path, *fake_args: str,
             timeout_s: float = 60.0, hang_s: float = 60.0):
    """Run ``launch`` with the fake torchrun replaying ``log``; returns (record, records on disk)."""
    argv = [sys.executable, str(FAKE_TORCHRUN), str(log), *fake_args]
    monkeypatch.setattr(runner.torchrun, "command", lambda plan: argv)
    record = runner.run_local(launch, tmp_path, tmp_path / "records", timeout_s, hang_s)
    records, problems = load_records(tmp_path / "records")
    assert not problems and [r.run_id for r in records] == [launch.run_id], "exactly one record"
    assert records[0] == record
    return record


def gone(pid: int, wait_s: float = 10.0) -> bool:
    """Whether process ``pid`` ends (or is a zombie) within ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split()[2] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def altered_log(tmp_path: Path, change) -> Path:
    """OK_LOG with ``change(line)`` applied to each line, as a new file."""
    path = tmp_path / "altered.log"
    lines = OK_LOG.read_text().splitlines(keepends=True)
    path.write_text("".join(change(line) for line in lines))
    return path


def test_a_real_ok_log_gives_an_ok_record(monkeypatch, launch, tmp_path: Path) -> None:
    record = run_fake(monkeypatch, launch, tmp_path, OK_LOG)
    assert record.status is Status.OK and record.reason is None
    # The record carries what it was computed from: the tail, every iteration, the kept log.
    assert record.log_tail == tuple(OK_LOG.read_text().splitlines()[-LOG_TAIL_LINES:])
    assert [p.iteration for p in record.series] == list(range(1, 16))
    assert read_log(tmp_path / "records", record.run_id, record.log.file) == OK_LOG.read_text()
    assert record.log.sha256 == text_sha256(OK_LOG.read_text()) and not record.log.truncated
    # About 1.24 s per step in the window: 1.3b at gbs 32 is ~45 % of an H200's 989 TFLOP/s.
    assert 1.2 < record.metrics.step_time_s_median < 1.3
    assert 0.4 < record.metrics.mfu < 0.5


# Case 1: metrics that fail the record's checks must not cost the run its record.
def test_implausible_metrics_give_a_failed_record_with_the_numbers(monkeypatch, launch,
                                                                  tmp_path: Path) -> None:
    def thousand_times_faster(line: str) -> str:
        return re.sub(r"(elapsed time per iteration \(ms\): )([\d.]+)",
                      lambda m: f"{m[1]}{float(m[2]) / 1000:.4f}", line)

    record = run_fake(monkeypatch, launch, tmp_path, altered_log(tmp_path, thousand_times_faster))
    assert record.status is Status.FAILED and record.metrics is None
    assert "implausible" in record.reason and "metrics.mfu" in record.reason
    assert "must be in (0, 1]" in record.reason
    assert record.notes["metrics.mfu"] > 100  # the computed numbers are kept, not dropped
    assert record.notes["metrics.step_time_s_median"] == pytest.approx(0.00124, rel=0.05)
    assert record.notes["metrics.window_iters"] == 10
    assert any("iteration       15/      15" in line for line in record.log_tail)


def test_zero_step_times_give_a_failed_record(monkeypatch, launch, tmp_path: Path) -> None:
    def no_time(line: str) -> str:
        return re.sub(r"(elapsed time per iteration \(ms\): )[\d.]+", r"\g<1>0.0", line)

    record = run_fake(monkeypatch, launch, tmp_path, altered_log(tmp_path, no_time))
    assert record.status is Status.FAILED and "cannot take no time" in record.reason


def test_a_finished_runs_record_survives_notes_that_json_cannot_hold() -> None:
    # The direct form of case 1: an infinite rate (kept as text) still gives a writable record.
    from bench.records.record import build_finished_record
    fields = record_fields()
    fields["metrics"] = {**fields["metrics"], "samples_per_s": float("inf")}
    record = build_finished_record(**{**fields, "log_tail": ["last line"]})
    assert record.status is Status.FAILED and record.log_tail == ("last line",)
    assert record.notes["metrics.samples_per_s"] == "inf"
    json.loads(record.to_json())


# Case 6: out of memory is the allocator's exception, not any line saying "out of memory".
def test_a_successful_run_mentioning_out_of_memory_is_ok(monkeypatch, launch,
                                                        tmp_path: Path) -> None:
    stray = ("UserWarning: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid running "
             "out of memory from fragmentation\n"
             "INFO: retrying the allocation after CUDA out of memory on a side stream\n")

    def with_stray_lines(line: str) -> str:
        return line + stray if "iteration        4/" in line else line

    record = run_fake(monkeypatch, launch, tmp_path, altered_log(tmp_path, with_stray_lines))
    assert record.status is Status.OK and record.metrics is not None


def test_a_real_oom_gives_an_oom_record(monkeypatch, tmp_path: Path) -> None:
    # The memory estimate refuses this plan; the real run was made before that check existed.
    oom_plan = plan(get_preset("13b"), "tp1pp1", load_platform("local"),
                    options(gpus_present=1, gpu_name="NVIDIA H200", force=True))
    record = run_fake(monkeypatch, oom_plan, tmp_path, LOGS / "megatron_oom_13b_tp1pp1_h200.log",
                      "--exit", "1")
    assert record.status is Status.OOM
    assert record.reason.startswith("out of memory: [rank0]: torch.OutOfMemoryError: CUDA out of "
                                    "memory. Tried to allocate 400.00 MiB")


OK_TEXT = OK_LOG.read_text()
CUT = OK_TEXT[:OK_TEXT.rindex("\n", 0, OK_TEXT.index("iteration        8/")) + 1]  # to iter. 7


@pytest.mark.parametrize("line", [
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 400.00 MiB.",
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",  # torch < 2.5
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB",  # torch < 1.13
    "[rank1]: torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.00 GiB",  # ROCm
    "0: RuntimeError: CUDA error: out of memory",  # srun --label prefix
    "[rank3]: torch.AcceleratorError: CUDA error: out of memory",  # torch >= 2.8
    "[rank2]: RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
    "`cublasCreate(handle)`",
    "node01:1234:1250 [0] include/alloc.h:125 NCCL WARN Cuda failure 2 'out of memory'",
])
def test_the_allocators_error_lines_are_oom(line: str) -> None:
    result = parse_log(CUT + line + "\n", exit_code=1)
    assert result.status is Status.OOM and line[:40] in result.reason


@pytest.mark.parametrize("line", [
    "UserWarning: to avoid running out of memory, lower the micro batch",
    "  data_path ....................................... ['/data/out of memory/corpus']",
    'print("RuntimeError: CUDA out of memory")',
])
def test_other_mentions_of_memory_are_not_oom(line: str) -> None:
    assert parse_log(CUT + line + "\n", exit_code=1).status is Status.CRASHED
    assert parse_log(OK_TEXT + line + "\n").status is Status.OK


@pytest.mark.slow  # waits on real timeouts or runs real pip/nox: seconds each
# Case 11: a hang says that no output came, and for how long.
def test_a_hang_is_recorded_as_silence(monkeypatch, tmp_path: Path) -> None:
    hung_plan = plan(get_preset("13b"), "tp4pp1", load_platform("local"),
                     options(gpus_present=4, gpu_name="NVIDIA H200"))
    child = tmp_path / "child.pid"
    record = run_fake(monkeypatch, hung_plan, tmp_path,
                      LOGS / "megatron_killed_13b_tp4pp1_h200x4.log", "--then", "hang",
                      "--child-pid", str(child), hang_s=2.0)
    assert record.status is Status.TIMEOUT
    assert "no output came for 2 s" in record.reason and "time limit" not in record.reason
    assert "after 0 logged iterations" in record.reason
    assert gone(int(child.read_text())), "a rank of the hung run outlived it"


@pytest.mark.slow  # waits on real timeouts or runs real pip/nox: seconds each
def test_a_wall_clock_stop_says_so(monkeypatch, launch, tmp_path: Path) -> None:
    record = run_fake(monkeypatch, launch, tmp_path, LOGS / "megatron_killed_13b_tp4pp1_h200x4.log",
                      "--then", "hang", timeout_s=3.0)
    assert record.status is Status.TIMEOUT and "wall-clock limit of 3 s" in record.reason


def test_a_rank_killed_by_sigterm_is_recorded_as_crashed(monkeypatch, tmp_path: Path) -> None:
    killed = plan(get_preset("13b"), "tp4pp1", load_platform("local"),
                  options(gpus_present=4, gpu_name="NVIDIA H200"))
    record = run_fake(monkeypatch, killed, tmp_path,
                      LOGS / "megatron_killed_13b_tp4pp1_h200x4.log", "--then", "sigterm")
    assert record.status is Status.CRASHED and record.reason.startswith("exit code -15")


def test_a_nan_loss_is_recorded_as_nan(monkeypatch, launch, tmp_path: Path) -> None:
    def nan_at_9(line: str) -> str:
        if "iteration        9/" not in line:
            return line
        line = re.sub(r"lm loss: \S+", "lm loss: nan", line)
        return line.replace("number of nan iterations:   0", "number of nan iterations:   1")

    record = run_fake(monkeypatch, launch, tmp_path, altered_log(tmp_path, nan_at_9))
    assert record.status is Status.NAN and "iteration 9" in record.reason


# Case 5: a records directory that cannot take the record is refused before the run starts.
@pytest.mark.parametrize("where", ["file", "under-a-file", "read-only"])
def test_an_unusable_records_dir_is_refused_before_the_run(monkeypatch, launch, tmp_path: Path,
                                                           where: str) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    records_dir = {"file": blocker, "under-a-file": blocker / "records",
                   "read-only": tmp_path / "ro"}[where]
    if where == "read-only" and os.geteuid() == 0:
        # Modes do not stop root; sysfs takes no new entries from anyone.
        if not Path("/sys/kernel").is_dir():
            pytest.skip("no sysfs here, and root writes into a read-only directory")
        records_dir = Path("/sys/megatron-bench-records")
    elif where == "read-only":
        records_dir.mkdir()
        records_dir.chmod(0o500)
    started = tmp_path / "started"
    monkeypatch.setattr(runner.torchrun, "command", lambda plan: [
        sys.executable, "-c", f"open({str(started)!r}, 'w')"])
    with pytest.raises(ValueError, match=f"records directory {re.escape(str(records_dir))} "
                       "cannot hold records .*--records$"):
        runner.run_local(launch, tmp_path, records_dir, 60.0, 60.0)
    assert not started.exists(), "the training command ran although its record would be lost"
    assert not (tmp_path / "runs").exists()


def test_a_records_dir_lost_during_the_run_keeps_the_record_in_the_run_dir(monkeypatch, launch,
                                                                         tmp_path: Path) -> None:
    records_dir = tmp_path / "records"
    monkeypatch.setattr(runner.torchrun, "command", lambda plan: [
        sys.executable, "-c", f"import shutil; shutil.rmtree({str(records_dir)!r}); "
        f"open({str(records_dir)!r}, 'w')"])
    with pytest.raises(ValueError, match=f"could not be written to {re.escape(str(records_dir))}"
                       r" .*it is in .*runs/.*\.json: move it there"):
        runner.run_local(launch, tmp_path, records_dir, 60.0, 60.0)
    kept = load_record(tmp_path / launch.run_dir / f"{launch.run_id}.json")
    assert kept.status is Status.INCOMPLETE


# --- bad input: refused by `python -m bench run` before anything is planned or written -------

@pytest.mark.parametrize("args,fragments", [
    # Case 3: zero is not "the default".
    (["--mbs", "0"], ["--mbs must be at least 1, got 0"]),
    (["--gbs", "0"], ["--gbs must be at least 1, got 0"]),
    (["--gpus", "0"], ["--gpus must be at least 1, got 0"]),
    (["--nodes", "0"], ["--nodes must be at least 1, got 0"]),
    (["--iters", "0"], ["--iters 0 is too few", "at least 10"]),
    # Case 4: fewer iterations than the warm-up and the window cannot be measured.
    (["--iters", "9"], ["--iters 9 is too few", "at least 10", "5 warm-up", "window of 5",
                        "bench/measure/protocol.py"]),
    # Local-run limits of zero would stop the run at once.
    (["--timeout", "0"], ["--timeout must be more than 0 seconds"]),
    (["--hang-timeout", "-5"], ["--hang-timeout must be more than 0 seconds"]),
    # Case 7: options that do not apply are refused with the reason, not dropped.
    (["--platform", "lumi", "--queue", "q"], ["--queue does not apply on platform lumi",
                                              "Slurm has partitions, not queues"]),
    (["--platform", "polaris", "--partition", "p"], ["--partition does not apply on platform "
                                                     "polaris", "PBS has queues"]),
    (["--platform", "lumi", "--engine", "megatron", "--vocab-file", "v.json"],
     ["--vocab-file does not apply to the megatron engine", "megatron-deepspeed"]),
    (["--merge-file", "m.txt"], ["--merge-file does not apply to the megatron engine"]),
    (["--account", "a"], ["--account does not apply on platform local", "no scheduler"]),
    (["--walltime", "01:00:00"], ["--walltime does not apply on platform local", "--timeout"]),
    (["--platform", "lumi", "--records", "r"], ["--records apply to runs on this machine",
                                                "python -m bench collect"]),
    (["--platform", "lumi", "--records-dir", "r"], ["--records apply to runs on this machine"]),
    (["--platform", "lumi", "--timeout", "60", "--verbose"], ["--timeout, --verbose apply"]),
    (["--wait"], ["--wait applies to a job on a cluster"]),
    # Case 8: a value that looks like a flag would become one.
    (["--data-path=--load"], ["--data-path '--load' looks like a flag", "./--load"]),
    (["--platform", "lumi", "--engine", "megatron-deepspeed", "--data-path", "d",
      "--vocab-file=--x", "--merge-file", "m"], ["--vocab-file '--x' looks like a flag"]),
    (["--platform", "lumi", "--image=-v"], ["--image '-v' looks like a flag"]),
    (["--platform", "polaris", "--account=-q"], ["--account '-q' looks like a flag"]),
    # An empty value (an unset shell variable) would read as not given: mock data, unasked.
    (["--data-path", ""], ["--data-path is empty", "leave --data-path out"]),
    # Case 9: platforms are names, not paths.
    (["--platform", "../platforms/lumi"], ["--platform '../platforms/lumi' is not a platform "
                                           "name", "BENCH_PLATFORMS_DIR"]),
    (["--platform", "/etc/passwd"], ["is not a platform name"]),
    (["--platform", "lumi.toml"], ["is not a platform name"]),
    # Case 12: walltime is a duration.
    (["--platform", "lumi", "--walltime", "99:99:99"], ["walltime '99:99:99' is not a duration"]),
    (["--platform", "lumi", "--walltime", "1-24:00:00"], ["is not a duration"]),
    (["--platform", "lumi", "--walltime", "00:00:00"], ["walltime '00:00:00' is zero"]),
])
def test_bad_input_is_refused_in_one_line_writing_nothing(tmp_path: Path, args: list[str],
                                                          fragments: list[str]) -> None:
    refused(run_cli("run", "1.3b", "tp1pp1", *args, cwd=tmp_path), *fragments)
    assert not list(tmp_path.iterdir())


def test_an_image_without_docker_is_refused_before_anything_is_written(tmp_path: Path,
                                                                       tmp_path_factory) -> None:
    """--image on the local platform runs in docker: where there is none, one line with the fix
    (the runtime's own answers are tests/images/test_local_docker.py's)."""
    no_tools = tmp_path_factory.mktemp("empty-bin")
    refused(run_cli("run", "1.3b", "tp1pp1", "--image", "nvcr.io/nvidia/pytorch:25.03-py3",
                    cwd=tmp_path, env={"PATH": str(no_tools)}),
            "--image runs the benchmark with `docker run --gpus all`, but docker is not on PATH",
            "NVIDIA Container Toolkit", "leave out --image")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("args", [
    ["--iters", "10"],  # exactly the warm-up and the window
    ["--platform", "lumi", "--walltime", "48:00:00", "--account", "project_1"],  # Slurm and PBS take hours beyond 24
    ["--platform", "lumi", "--walltime", "1-23:59:59", "--account", "project_1"],
    # One node: ALCF's prod queue takes 10 or more (platforms/polaris.toml [job] queues).
    ["--platform", "polaris", "--queue", "debug", "--account", "datascience", "--mbs", "2"],
    ["--platform", "lumi", "--partition", "dev-g", "--account", "project_1"],
])
def test_valid_input_still_plans(tmp_path: Path, args: list[str]) -> None:
    result = run_cli("run", "1.3b", "tp1pp1", *args, "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


# Case 10: a platform file that is not UTF-8 is named.
def test_a_platform_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    platforms = tmp_path / "platforms"
    shutil.copytree(PLATFORMS_DIR, platforms)
    text = (PLATFORMS_DIR / "lumi.toml").read_bytes()
    (platforms / "latin1.toml").write_bytes(text.replace(b"LUMI", "LUMI \u00e9t\u00e9".encode(
        "latin-1"), 1))
    work = tmp_path / "work"
    work.mkdir()
    result = run_cli("run", "1.3b", "tp1pp1", "--platform", "latin1", "--dry-run", cwd=work,
                     env={"BENCH_PLATFORMS_DIR": str(platforms)})
    refused(result, f"{platforms / 'latin1.toml'}: not UTF-8 text")
    assert "Traceback" not in run_cli("platforms", cwd=work, env={
        "BENCH_PLATFORMS_DIR": str(platforms)}).stderr


# Case 7, in a platform file: a [job] key its scheduler's scripts would drop is refused by name.
@pytest.mark.parametrize("platform,old,new,key", [
    ("lumi", 'partition = "standard-g"', 'queue = "standard-g"', "'queue' does not apply to "
     "scheduler 'slurm'"),
    ("polaris", 'account_required = true', 'partition = "debug"\naccount_required = true',
     "'partition' does not apply to scheduler 'pbs'"),
    ("lumi", 'account_required = true', 'account_required = true\nqueues = [{name = "q", '
     'max_nodes = 2}]', "'queues' does not apply to scheduler 'slurm'"),
])
def test_a_platform_job_key_its_scheduler_ignores_is_refused(tmp_path: Path, platform: str,
                                                             old: str, new: str, key: str) -> None:
    platforms = tmp_path / "platforms"
    shutil.copytree(PLATFORMS_DIR, platforms)
    text = (platforms / f"{platform}.toml").read_text()
    assert old in text
    (platforms / f"{platform}.toml").write_text(text.replace(old, new))
    work = tmp_path / "work"
    work.mkdir()
    result = run_cli("run", "1.3b", "tp1pp1", "--platform", platform, "--dry-run", cwd=work,
                     env={"BENCH_PLATFORMS_DIR": str(platforms)})
    refused(result, f"{platforms / platform}.toml [job]: {key}")


# --- the results page survives any file in records/ ------------------------------------------

def _results(records: Path, out: Path) -> subprocess.CompletedProcess:
    return run_cli("results", "--records", str(records), "--out", str(out),
                   "--published", str(RESULTS_FIXTURES / "published.toml"),
                   "--ranges", str(RESULTS_FIXTURES / "reference_ranges.toml"), cwd=out)


# Case 2: each hostile file is named and skipped; the good record is still on the page.
def test_hostile_record_files_are_named_and_skipped(tmp_path: Path) -> None:
    records = tmp_path / "records"
    good = build_record(**record_fields())
    write_record(records, good)
    valid = json.loads(good.to_json())
    (records / "digits.json").write_text(json.dumps({**valid, "run_id": "digits"}).replace(
        '"nodes": 1', '"nodes": ' + "9" * 5000))
    (records / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (records / "latin1.json").write_bytes('{"run_id": "\u00e9"}'.encode("latin-1"))
    (records / "dir.json").mkdir()
    os.mkfifo(records / "fifo.json")  # would block a plain open() for ever
    out = tmp_path / "out"
    out.mkdir()
    result = _results(records, out)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    skipped = dict(line.removeprefix("skipped ").split(": ", 1)
                   for line in result.stderr.splitlines() if line.startswith("skipped "))
    assert set(skipped) == {"digits.json", "deep.json", "latin1.json", "dir.json", "fifo.json"}
    assert "digits" in skipped["digits.json"] and "JSON" in skipped["digits.json"]
    assert "nested too deeply" in skipped["deep.json"]
    assert "not valid JSON" in skipped["latin1.json"]
    assert skipped["fifo.json"] == skipped["dir.json"] == "not a regular file"
    page = (out / "README.md").read_text()
    assert "1 ok and" in result.stdout and "5 record file(s) skipped" in result.stdout
    assert page.split("## Skipped files")[1].count("\n- `") == 5


# Case 13: a file name or a record's contents cannot write Markdown into the page.
def test_file_names_and_contents_cannot_inject_markdown(tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    (records / "a\n## Injected heading\n[click](x.md).json").write_text("{")
    (records / "``tick`.json").write_text("{")
    hostile = {**json.loads(build_record(**record_fields()).to_json()),
               "run_id": "x](http://evil) <img src=x> *bold* _em_"}
    (records / "content.json").write_text(json.dumps(hostile))
    out = tmp_path / "out"
    out.mkdir()
    result = _results(records, out)
    assert result.returncode == 0, result.stderr
    page = (out / "README.md").read_text()
    skipped = page.split("## Skipped files\n\n", 1)[1].splitlines()
    assert skipped[:3] == [
        "- ``` ``tick`.json ```: not valid JSON (Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1))",
        "- `a\\n## Injected heading\\n[click](x.md).json`: not valid JSON (Expecting property "
        "name enclosed in double quotes: line 1 column 2 (char 1))",
        "- `content.json`: run\\_id: 'x\\](http://evil) \\<img src=x\\> \\*bold\\* \\_em\\_' "
        "must be letters, digits, '.', '\\_' or '-' (it is the file name)",
    ]
    assert "\n## Injected" not in page
    # On the terminal too, a file name cannot start a line of its own.
    assert "skipped 'a\\n## Injected heading\\n[click](x.md).json': " in result.stderr
    assert not any(line.startswith("## Injected") for line in result.stderr.splitlines())


def test_a_hostile_record_does_not_stop_the_jobs_table(tmp_path: Path) -> None:
    # Two submitted runs, recorded; one record file is hostile. The table lists both.
    for run_id, record_text in (("good_run", None), ("bad_run", "[" * 100_000)):
        run_dir = tmp_path / "runs" / run_id
        run_dir.mkdir(parents=True)
        (run_dir / "submit.json").write_text(json.dumps({
            "kind": "bench", "scheduler": "slurm", "job_id": "7", "output": str(run_dir / "o"),
            "submitted_at": "2026-11-21T12:00:00Z"}))
        records = tmp_path / "results" / "records"
        if record_text is None:
            write_record(records, build_record(**record_fields(run_id=run_id)))
        else:
            (records / f"{run_id}.json").write_text(record_text)
    result = run_cli("jobs", "--root", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("good_run") and "recorded ok" in line for line in lines)
    assert any(line.startswith("bad_run") and "record unreadable: " in line
               and "bad_run.json: not a record: JSON nested too deeply" in line for line in lines)



def test_data_outside_the_container_of_a_local_image_run_is_refused() -> None:
    """A run in an image sees the working folder and the platform's binds, nothing else."""
    local = load_platform("local")
    with pytest.raises(ValueError, match=r"^--data-path /data/d is outside every folder bound "
                       r"into the container on local \(none\): use a folder under one of them or "
                       r"relative to the submit \(working\) folder"):
        plan(get_preset("1.3b"), "tp1pp1", local, options(image="x:1", data_path="/data/d"))
    assert plan(get_preset("1.3b"), "tp1pp1", local, options(data_path="/data/d")).image == ""
