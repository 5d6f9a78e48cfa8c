"""Issue 48, item 7: one job folder that this kit cannot read (a tampered ``plan.json`` or
``submit.json``, a folder in a file's place) is skipped with a warning naming it; ``collect``
records every other finished job."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from bench.records.store import load_records
from tests.hostile.test_one_record import _finished_run
from tests.inprocess import run_cli
from tests.running.test_reliability import OK_LOG


def _json_edit(name: str, key: str, value: object):
    """An edit of one key of a run folder's JSON file (plan.json, submit.json)."""
    def edit(run: Path) -> None:
        data = json.loads((run / name).read_text())
        data[key] = value
        (run / name).write_text(json.dumps(data))
    return edit


def _plan_edit(key: str, value: object):
    return _json_edit("plan.json", key, value)


def _replace(name: str, data: bytes | None):
    def edit(run: Path) -> None:
        (run / name).unlink()
        if data is None:
            (run / name).mkdir()
        else:
            (run / name).write_bytes(data)
    return edit


def _submit_edit(key: str, value: object):
    return _json_edit("submit.json", key, value)


TAMPERED = {
    "plan: not JSON": _replace("plan.json", b"{not json"),
    "plan: a list": _replace("plan.json", b"[]"),
    "plan: not UTF-8": _replace("plan.json", b"\xff\xfe"),
    "plan: a folder": _replace("plan.json", None),
    "plan: zero GPUs": _plan_edit("world_size", 0),
    "plan: a run id of another run": _plan_edit("run_id", "../x"),
    "plan: iterations as text": _plan_edit("iters", "many"),
    "submit: not JSON": _replace("submit.json", b"{"),
    "submit: no scheduler": _submit_edit("scheduler", None),
    "submit: a time of a number": _submit_edit("submitted_at", 7),
    "submit: unknown kind": _submit_edit("kind", ["bench"]),
    "submit: an output path of a number": _submit_edit("output", 12),
    "state: a list": _replace("state.json", b"[1]"),
}


@pytest.mark.parametrize("tamper", TAMPERED.values(), ids=TAMPERED)
def test_one_tampered_job_folder_is_skipped_with_a_warning(tmp_path: Path, launch, tamper) -> None:
    bad = _finished_run(tmp_path, replace(launch, run_id=launch.run_id + "-bad"), OK_LOG)
    good = _finished_run(tmp_path, launch, OK_LOG)
    os.utime(bad / "submit.json")
    tamper(bad)
    result = run_cli("collect", "--root", str(tmp_path), cwd=tmp_path)
    assert "Traceback" not in result.stderr
    records, problems = load_records(tmp_path / "results" / "records")
    assert not problems and [r.run_id for r in records] == [good.name], result.stderr
    warnings = [line for line in result.stderr.splitlines() if bad.name in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: ") and "skipped" in warnings[0]
    assert len(warnings[0]) < 2_200
    assert result.returncode == 1  # something was left unrecorded


@pytest.mark.parametrize("name", TAMPERED)
def test_jobs_lists_the_others_and_warns_of_a_tampered_folder(tmp_path: Path, launch, name: str) -> None:
    """A tampered submit.json or state.json: skipped with a warning. A tampered plan.json is skipped
    so, or listed with its log's verdict (``collect`` names the plan)."""
    bad = _finished_run(tmp_path, replace(launch, run_id=launch.run_id + "-bad"), OK_LOG)
    good = _finished_run(tmp_path, launch, OK_LOG)
    TAMPERED[name](bad)
    for args in ((), ("--json",)):
        result = run_cli("jobs", "--root", str(tmp_path), *args, cwd=tmp_path)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        warnings = [line for line in result.stderr.splitlines() if bad.name in line]
        assert len(warnings) <= 1 and all(line.startswith("warning: ") and "skipped" in line
                                          and len(line) < 2_200 for line in warnings)
        listed = (json.loads(result.stdout) if args else
                  [{"run_id": line.split()[0]} for line in result.stdout.splitlines()[1:]])
        expected = [good.name] if warnings else sorted([bad.name, good.name])
        assert sorted(row["run_id"] for row in listed) == expected, result.stdout
        if not name.startswith("plan:"):
            assert warnings, result.stderr
