"""Run record schema: validation, atomic append-only writes, tolerant loading."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from bench.records import store as rec
from bench.records.migrate import OLDER
from bench.records.record import SCHEMA, RecordError, Status, build_record, record_from_dict
from bench.records.store import RecordExistsError, load_records, write_record
from tests.record_factory import failed_fields, make_record, record_fields


def test_ok_record_round_trips_through_json(tmp_path: Path) -> None:
    record = make_record()
    path = write_record(tmp_path / "records", record)
    assert path == tmp_path / "records" / f"{record.run_id}.json"
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA
    assert list(data) == [
        "schema", "run_id", "status", "reason", "started_at", "finished_at", "engine", "precision",
        "preset", "layout", "platform", "nodes", "gpus", "argv", "env", "provenance", "metrics",
        "log_tail", "notes", "log_errors", "variant", "engine_notes", "labels", "lm_losses",
        "implementation", "data", "patches", "profile", "memory_parts", "expected", "checkpoint",
        "series", "log", "conditions",
    ]  # fmt: skip
    assert record_from_dict(data) == record
    assert record.ok


def test_failed_run_is_recorded_as_failed(tmp_path: Path) -> None:
    record = build_record(**failed_fields())
    assert record.status is Status.OOM and record.metrics is None and not record.ok
    write_record(tmp_path, record)
    records, problems = load_records(tmp_path)
    assert records == [record] and problems == []
    assert json.loads((tmp_path / f"{record.run_id}.json").read_text())["metrics"] is None


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_failed_run_needs_a_reason(reason: str | None) -> None:
    # An empty string is rejected as a type problem, a missing/blank one as a rule problem.
    with pytest.raises(
        RecordError, match="(reason: required when status is 'oom'|key 'reason' must not be empty)"
    ):
        build_record(**failed_fields(reason=reason))


def test_failed_run_cannot_carry_metrics() -> None:
    with pytest.raises(RecordError, match="metrics: must be null when status is 'oom'"):
        build_record(**failed_fields(metrics=record_fields()["metrics"]))


def test_ok_run_needs_metrics() -> None:
    with pytest.raises(RecordError, match="metrics: required when status is 'ok'"):
        make_record(metrics=None)


def validate_record(data) -> list[str]:
    try:
        record_from_dict(data)
    except RecordError as error:
        return list(error.problems)
    return []


def test_validation_reports_every_problem_at_once() -> None:
    data = build_record(**record_fields()).to_dict()
    data["gpus"] = "4"
    data["layout"]["tp"] = 0
    data["status"] = "exploded"
    data["extra"] = 1
    problems = validate_record(data)
    assert any(p.startswith("unknown key(s) extra; allowed: schema, run_id,") for p in problems)
    assert "key 'gpus' must be an integer, got '4'" in problems
    assert "key 'layout.tp' Input should be greater than or equal to 1, got 0" in problems
    assert any(p.startswith("key 'status' is 'exploded', expected 'ok', 'incomplete'")
               for p in problems)
    data.pop("extra")
    data.pop("nodes")
    assert "missing key 'nodes'" in validate_record(data)


def test_cross_field_rules() -> None:
    metrics = dict(record_fields()["metrics"], mfu=1.3)
    with pytest.raises(
        RecordError, match="must be in \\(0, 1\\]; a value above 1 means the wrong peak"
    ):
        make_record(metrics=metrics)
    with pytest.raises(RecordError, match="tp 1 x pp 1 x cp 1 x dp 4 = 4, but gpus is 8"):
        make_record(gpus=8)
    with pytest.raises(RecordError, match="finished_at: .* is before started_at"):
        make_record(finished_at="2026-11-21T20:00:00Z")
    with pytest.raises(RecordError, match="started_at: '2026-11-21 20:15' must be UTC"):
        make_record(started_at="2026-11-21 20:15")
    with pytest.raises(RecordError, match=r"run_id: .*\(it is the file name\)"):
        make_record(run_id="../escape")


def test_records_are_never_overwritten(tmp_path: Path) -> None:
    first = make_record()
    path = write_record(tmp_path, first)
    before = path.read_bytes()
    second = make_record(notes={"attention": "local"})
    with pytest.raises(RecordExistsError, match="already exists; records are append-only"):
        write_record(tmp_path, second)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_link_never_replaces_a_file_that_appears_mid_write(tmp_path: Path, monkeypatch) -> None:
    # Another writer creates the final name after our existence check but before the link.
    record = make_record()
    final = tmp_path / f"{record.run_id}.json"
    real_fsync = os.fsync

    def racing_fsync(fd: int) -> None:
        real_fsync(fd)
        if not final.exists():
            final.write_text("{}\n")

    monkeypatch.setattr(rec.os, "fsync", racing_fsync)
    with pytest.raises(RecordExistsError):
        write_record(tmp_path, record)
    assert final.read_text() == "{}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [final.name]


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, OSError])
def test_interrupted_write_leaves_no_half_record(tmp_path: Path, monkeypatch, interrupt) -> None:
    def interrupted_fsync(fd: int) -> None:
        raise interrupt()

    monkeypatch.setattr(rec.os, "fsync", interrupted_fsync)
    with pytest.raises(interrupt):
        write_record(tmp_path, make_record())
    assert list(tmp_path.iterdir()) == []


def test_write_leaves_no_temporary_files_and_creates_the_directory(tmp_path: Path) -> None:
    records_dir = tmp_path / "a" / "records"
    for second in range(3):
        write_record(records_dir, make_record(run_id=f"13b_dp4_h200x4_20261121T20150{second}Z"))
    assert sorted(p.name for p in records_dir.iterdir()) == [
        f"13b_dp4_h200x4_20261121T20150{s}Z.json" for s in range(3)
    ]


def test_load_reports_and_skips_bad_files(tmp_path: Path) -> None:
    good = make_record()
    write_record(tmp_path, good)
    (tmp_path / "broken.json").write_text('{"schema": "bench.record/1", ')
    future = dict(good.to_dict(), schema="bench.record/4", run_id="future")
    (tmp_path / "future.json").write_text(json.dumps(future))
    (tmp_path / "foreign.json").write_text(json.dumps({"schema": "mlperf/4", "x": 1}))
    invalid = dict(good.to_dict(), run_id="invalid", gpus=3)
    (tmp_path / "invalid.json").write_text(json.dumps(invalid))
    renamed = dict(good.to_dict())
    (tmp_path / "renamed.json").write_text(json.dumps(renamed))
    (tmp_path / ".x.json.tmp").write_text("{")
    (tmp_path / "README.txt").write_text("not a record")

    records, problems = load_records(tmp_path)
    assert records == [good]
    by_file = {p.file: p.message for p in problems}
    assert sorted(by_file) == [
        ".x.json.tmp",
        "broken.json",
        "foreign.json",
        "future.json",
        "invalid.json",
        "renamed.json",
    ]
    assert by_file["broken.json"].startswith("not valid JSON")
    assert "schema 'bench.record/4' is not supported by this kit" in by_file["future.json"]
    assert "is not a run record" in by_file["foreign.json"]
    assert "but gpus is 3" in by_file["invalid.json"]
    assert "does not match the file name" in by_file["renamed.json"]
    assert "interrupted write" in by_file[".x.json.tmp"]


def test_missing_directory_holds_no_records(tmp_path: Path) -> None:
    assert load_records(tmp_path / "absent") == ([], [])


def test_write_takes_only_validated_records(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="takes a Record"):
        write_record(tmp_path, record_fields())  # type: ignore[arg-type]


# Values of every JSON type, and the edge cases of each check (bool is not a count, 0 is not > 0).
_ODD_VALUES = [None, True, False, 0, 1, -1, 3, 1.0, 0.5, -0.5, float("nan"), float("inf"), "",
               "x", "bf16", [], ["a"], [1], {}, {"a": "b"}, {"a": 1}, {"a": [1]}]


def _mutations():
    ok = make_record().to_dict()
    failed = build_record(**failed_fields()).to_dict()
    for base in (ok, failed):
        for key, value in base.items():
            for odd in _ODD_VALUES:
                yield {**base, key: odd}
            if isinstance(value, dict):
                for inner in value:
                    for odd in _ODD_VALUES:
                        yield {**base, key: {**value, inner: odd}}
                yield {**base, key: {k: v for k, v in value.items() if k != next(iter(value))}}
                yield {**base, key: {**value, "extra": 1}}
        yield {k: v for k, v in base.items() if k != "notes"}
        yield {**base, "extra": None}


def test_every_malformed_record_is_refused_with_named_problems() -> None:
    # A mutation either still makes a valid record (the value was allowed there) or is refused
    # with problems that each start with the JSON path at fault or the schema; none crash.
    count = refused = 0
    for data in _mutations():
        count += 1
        try:
            record = record_from_dict(data)
        except RecordError as error:
            refused += 1
            named = r"(key |missing key |(\[\w+\] )?unknown key|\w+[.:]|schema )"
            assert error.problems and all(re.match(named, p) for p in error.problems), data
            continue
        assert record.to_dict() == {**data, "notes": data.get("notes", {})}
    assert count > 1000 and refused > 900


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[2] / "results" / "records").glob(
    "*.json")), ids=lambda p: p.stem)
def test_every_kept_record_loads_unchanged(path: Path) -> None:
    # Every kept record loads and gives back the same JSON (keys added since it was written take
    # their defaults: null or empty; bench.record/1 and /2 are read as today's, bench.records.migrate).
    # One written before the notes' kinds has its notes sorted by
    # kind: none lost, none in two kinds; one written since keeps its kinds as written, but for
    # MS-AMP's scaling, which reads against today's default, and agrees with the run's environment,
    # and the chunked Adam step a paper-kit run before kit 74d8988 ran, which its variant names.
    record = rec.load_record(path)
    data = json.loads(path.read_text())
    kinds = ("notes", "variant", "engine_notes", "labels")
    loaded = record.model_dump(mode="json", exclude_unset=True)
    facts = ("implementation", "data", "patches")  # read from the argv where the file lacks them
    assert data["schema"] in (*OLDER, SCHEMA) and loaded["schema"] == SCHEMA
    assert {k: v for k, v in loaded.items() if k not in (*kinds, *facts, "schema")} == {
        k: v for k, v in data.items() if k not in (*kinds, *facts, "schema")}
    assert all(loaded[key] == data[key] for key in facts if key in data)
    if "MSAMP_FP8_SCALING" in data["env"]:
        assert record.variant.get("msamp_scaling", "in-time") == data["env"]["MSAMP_FP8_SCALING"]
    chunked = record.variant.get("optimizer_states") == "paper-kit" and record.started_at < "2026-11-26T11:27:50Z"
    assert record.variant.get("paper_adam") == ("chunked" if chunked else None)
    if set(kinds[1:]) & data.keys():
        read = {kind: dict(getattr(record, kind)) for kind in kinds}
        written = {kind: dict(data[kind]) for kind in kinds}
        for variant in (read["variant"], written["variant"]):
            variant.pop("msamp_scaling", None)
        read["variant"].pop("paper_adam", None)
        assert read == written
        return
    sorted_notes = [getattr(record, kind) for kind in kinds]
    assert sum(map(len, sorted_notes)) == len(data.get("notes", {}))
    assert {k: v for notes in sorted_notes for k, v in notes.items()} == data.get("notes", {})


def test_impossible_timestamp_is_a_record_problem(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="started_at: '2026-13-21T20:15:00Z' is not a date"):
        make_record(started_at="2026-13-21T20:15:00Z")
