"""``python -m bench verify``: every record's metrics computed again from its series and kept log,
its argv checked against the configuration it claims; real records and their real logs, tampered
one thing at a time, are each reported by run id and field, exit status 1, and nothing is written."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from bench.measure.logparse import parse_log
from bench.records import claims, evidence, recompute, verify
from bench.records.evidence import log_path, series_of
from bench.records.record import record_from_dict
from bench.records.store import load_record, record_path, write_record
from tests.inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]
RECORDS = REPO / "results" / "records"
KEPT_LOGS = RECORDS / "logs"  # the runs' real train logs, kept beside their records
PROFILED = "13b_tp2pp2dp1sp_local_20261127T065217Z-d16e9a-c1"  # megatron, sp, --profile after its window
DEEPSPEED = "13b_tp2pp2dp1_local_20261127T114748Z-585a97-c6"  # megatron-deepspeed
VIRTUAL = "13b_tp1pp4vp2dp1_local_20261127T094709Z-c995f3-c13"  # vp 2
CRASHED = "13b_tp2pp2dp1sp_local_20261127T071443Z-aecc15-c3"
PROFILED_BEFORE_LEAD_STEPS = "6.7b_tp2pp1dp1sp_local_20261125T215547Z-c6"


def _kept_log(run_id: str) -> str:
    return gzip.decompress((KEPT_LOGS / f"{run_id}.log.gz").read_bytes()).decode()


def _with_evidence(folder: Path, run_id: str) -> None:
    """The real record of ``run_id`` as a record made now would be: its log kept beside it (the
    kept copy), the series parsed from it and the log's tail."""
    data = json.loads(record_path(RECORDS, run_id).read_text())
    text = _kept_log(run_id)
    kept = evidence.write_log(folder, run_id, text)
    series = series_of(parse_log(text), data["layout"]["global_batch"], data["preset"]["seq_length"])
    data.update(series=[p.model_dump() for p in series], log=kept.model_dump(), log_tail=text.splitlines()[-200:])
    write_record(folder, record_from_dict(data))


def _as_written(folder: Path, run_id: str) -> None:
    """The real record as it is (no series, no log field) with its log found by run id."""
    shutil.copy(record_path(RECORDS, run_id), folder)
    log_path(folder, run_id).parent.mkdir(exist_ok=True)
    shutil.copy(KEPT_LOGS / f"{run_id}.log.gz", log_path(folder, run_id))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A records folder of real records: two with their evidence in the record, two as written
    before records carried it (the log found by run id), a crashed one with its log."""
    for run_id in (PROFILED, DEEPSPEED):
        _with_evidence(tmp_path, run_id)
    for run_id in (VIRTUAL, CRASHED):
        _as_written(tmp_path, run_id)
    return tmp_path


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _edit(folder: Path, run_id: str, change) -> None:
    """Rewrite a record's JSON in place with ``change(data)`` (a tampered record, by hand)."""
    path = record_path(folder, run_id)
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def _verify(folder: Path):
    before = _hashes(folder)
    done = run_cli("verify", "--records", str(folder), cwd=folder)
    assert _hashes(folder) == before, "verify wrote or changed a file"
    return done


def test_the_repositorys_records_agree_with_their_evidence(capsys: pytest.CaptureFixture[str]) -> None:
    lines, count = verify.report(*verify.verify_folder(RECORDS))
    with capsys.disabled():
        print(f"\nresults/records: {lines[-1]}")
    assert count == 0, "\n".join(lines)
    assert lines[-1].startswith("verified ") and lines[-1].endswith(" 0 mismatches")


def test_real_records_with_their_logs_verify(folder: Path) -> None:
    done = _verify(folder)
    assert done.returncode == 0, done.stdout
    assert done.stdout == "verified 4 with evidence, 0 without (no series, no log), 0 mismatches\n"


def test_a_record_without_evidence_is_counted_not_failed(folder: Path) -> None:
    log_path(folder, VIRTUAL).unlink()
    done = _verify(folder)
    assert done.returncode == 0
    assert "verified 3 with evidence, 1 without (no series, no log), 0 mismatches" in done.stdout


@pytest.mark.parametrize("run_id", [PROFILED, VIRTUAL])
def test_a_changed_metric_is_reported_with_run_id_and_field(folder: Path, run_id: str) -> None:
    recorded = load_record(record_path(folder, run_id)).metrics.step_time_s_median
    _edit(folder, run_id, lambda d: d["metrics"].update(step_time_s_median=recorded * 1.001))
    done = _verify(folder)
    assert done.returncode == 1
    source = "series" if run_id == PROFILED else "log"
    assert (f"{run_id}: metrics.step_time_s_median: record {recorded * 1.001!r}, {source} {recorded!r}"
            in done.stdout.splitlines())
    assert done.stdout.endswith(" 1 mismatches\n")


def test_a_changed_series_point_is_reported(folder: Path) -> None:
    _edit(folder, PROFILED, lambda d: d["series"][6].update(step_ms=d["series"][6]["step_ms"] + 100.0))
    done = _verify(folder)
    assert done.returncode == 1
    point = load_record(record_path(folder, PROFILED)).series[6]
    assert f"{PROFILED}: series[6].step_ms: record {point.step_ms!r}, log {point.step_ms - 100.0!r}" in done.stdout
    # the metrics computed from the changed series disagree with the record's too
    assert f"{PROFILED}: metrics.step_time_s_median: record 7.1921, series 7.2077" in done.stdout


def test_a_kept_log_with_another_text_is_reported_by_its_hash(folder: Path) -> None:
    kept = log_path(folder, DEEPSPEED)
    kept.chmod(0o644)
    kept.write_bytes(gzip.compress(_kept_log(PROFILED).encode(), mtime=0))  # another run's real log
    done = _verify(folder)
    assert done.returncode == 1
    recorded = load_record(record_path(folder, DEEPSPEED)).log.sha256
    assert f"{DEEPSPEED}: log.sha256: record {recorded}, log " in done.stdout
    assert f"{DEEPSPEED}: series: record " in done.stdout


def test_an_argv_that_runs_another_layout_is_reported(folder: Path) -> None:
    def other_tp(data: dict) -> None:
        at = data["argv"].index("--tensor-model-parallel-size")
        data["argv"][at + 1] = "4"

    _edit(folder, DEEPSPEED, other_tp)
    done = _verify(folder)
    assert done.returncode == 1
    assert f"{DEEPSPEED}: layout.tp: record 2, argv --tensor-model-parallel-size 4" in done.stdout.splitlines()


def test_a_log_file_outside_the_logs_folder_is_not_read(folder: Path) -> None:
    _edit(folder, PROFILED, lambda d: d["log"].update(file="../../elsewhere.log.gz"))
    done = _verify(folder)
    assert done.returncode == 1
    assert f"{PROFILED}: log.file: record ../../elsewhere.log.gz, expected a file under logs/" in done.stdout


def test_a_kept_log_that_is_gone_or_no_gzip_is_reported(folder: Path) -> None:
    log_path(folder, PROFILED).unlink()
    log_path(folder, VIRTUAL).write_bytes(b"not gzip")
    done = _verify(folder)
    assert done.returncode == 1
    assert f"{PROFILED}: log.file: record logs/{PROFILED}.log.gz, which is missing" in done.stdout
    assert f"{VIRTUAL}: log.file: record (by run id), which is unreadable" in done.stdout


def test_control_characters_in_a_value_are_shown_escaped(folder: Path) -> None:
    def escape(data: dict) -> None:
        at = data["argv"].index("--tensor-model-parallel-size")
        data["argv"][at + 1] = "2\x1b[2J"

    _edit(folder, DEEPSPEED, escape)
    done = _verify(folder)
    assert "\x1b" not in done.stdout
    assert f"{DEEPSPEED}: layout.tp: record 2, argv --tensor-model-parallel-size 2\\x1b[2J" in done.stdout


def test_a_file_that_is_no_record_fails_the_check(folder: Path) -> None:
    (folder / "broken.json").write_text("{")
    done = _verify(folder)
    assert done.returncode == 1
    assert "broken.json: " in done.stdout and "not a record, so not verified" in done.stdout


def test_no_records_folder_is_one_error_line(tmp_path: Path) -> None:
    done = run_cli("verify", "--records", str(tmp_path / "none"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == f"error: {tmp_path / 'none'} is not a records folder; give one with --records DIR\n"


def test_a_run_profiled_before_the_lead_steps_measured_up_to_the_profiler() -> None:
    record = load_record(record_path(RECORDS, PROFILED_BEFORE_LEAD_STEPS))
    start = int(claims.flag_value(record.argv, "--profile-step-start"))
    assert recompute.last_measured(record) == start
    assert recompute.last_measured(load_record(record_path(RECORDS, PROFILED))) == 10


def test_the_claims_read_the_flags_as_megatron_does() -> None:
    virtual, deepspeed = (load_record(record_path(RECORDS, r)) for r in (VIRTUAL, DEEPSPEED))
    assert claims.disagreements(virtual) == [] and claims.disagreements(deepspeed) == []
    assert claims.flag_value(["--x", "1", "--x=2"], "--x") == "2"  # the last one wins
    split = virtual.model_copy(update={"layout": virtual.layout.model_copy(update={"vp": 4, "sp": True})})
    assert [(d.field, d.flag, d.found) for d in claims.disagreements(split)] == [
        ("layout.vp", "--num-layers-per-virtual-pipeline-stage", "2"),
        ("layout.sp", "--sequence-parallel", "absent")]
    fp8 = virtual.model_copy(update={"precision": "fp8-delayed"})
    assert [(d.field, d.flag, d.found) for d in claims.disagreements(fp8)] == [
        ("precision", "--fp8-recipe", "absent")]


def test_a_log_cut_to_its_budget_is_checked_but_for_memory(folder: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # The real log cut as a log past its budget is: its memory reports after iterations 1 and 2
    # (lines 1502-1522) fall between the head and the tail and are left out.
    run_id = "13b_tp2pp2dp1sp_local_20261127T100153Z-84cc29-c4"
    with monkeypatch.context() as small:  # kept as a run past the budget would keep it
        small.setattr(evidence, "LOG_BUDGET_BYTES", 1024)
        small.setattr(evidence, "HEAD_LINES", 1000)
        small.setattr(evidence, "TAIL_LINES", 10)
        _with_evidence(folder, run_id)
    record = load_record(record_path(folder, run_id))
    assert record.log.truncated and record.series[0].mem_mb is not None
    assert verify.verify_record(record, folder).mismatches == ()
    _edit(folder, run_id, lambda d: d["series"][7].update(step_ms=1.0))
    found = verify.verify_record(load_record(record_path(folder, run_id)), folder).mismatches
    assert [m.field for m in found][:1] == ["series[7].step_ms"]


def test_a_changed_loss_is_reported(folder: Path) -> None:
    _edit(folder, VIRTUAL, lambda d: d["lm_losses"].__setitem__(3, 1.5))
    done = _verify(folder)
    assert done.returncode == 1
    assert f"{VIRTUAL}: lm_losses[3]: record 1.5, log " in done.stdout
