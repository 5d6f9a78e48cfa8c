"""Issue 35, item 10: preset names are checked when presets load, and run ids do not collide.

A preset's name becomes part of the run id, hence of ``runs/<run id>/`` and of the record's file
name: a name with ``../``, a newline, a control or a bidi character made a folder outside ``runs/``
(or one that prints as another) and trained to the end before the record refused the run id.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from bench.config.presets import load_presets
from bench.config.tomlfile import DataError
from bench.records.record import build_record
from bench.records.store import load_records, write_record
from bench.running import arguments
from tests.conftest import FIXED_NOW
from tests.inprocess import run_cli
from tests.record_factory import record_fields
from tests.running.test_reliability import refused

PRESET_TABLE = ("layers = 2\nhidden = 64\nheads = 4\nseq_length = 128\nvocab_size = 512\n"
                "micro_batch = 1\nglobal_batch = 8\n")

HOSTILE_NAMES = {
    "a path up": "../../escape",
    "a path down": "a/b",
    "a newline": "a\\nb",  # TOML escapes, as a hostile file would spell them
    "an escape code": "a\\u001b[31mb",
    "a right-to-left override": "gpt\\u202Eb3.1",
    "a dot first": ".hidden",
    "a space": "1.3b x",
    "a non-ASCII letter": "b\\u00e9",
    "too long": "x" * 65,
}


def _presets_dir(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "presets"
    folder.mkdir()
    (folder / "mine.toml").write_text(f'[presets."{name}"]\n{PRESET_TABLE}')
    return folder


@pytest.mark.parametrize("name", HOSTILE_NAMES.values(), ids=HOSTILE_NAMES)
def test_a_hostile_preset_name_is_refused_when_presets_load(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            name: str) -> None:
    folder = _presets_dir(tmp_path, name)
    monkeypatch.setenv("BENCH_PRESETS_DIR", str(folder))
    with pytest.raises(DataError, match=f"^{re.escape(str(folder / 'mine.toml'))}: preset name "):
        load_presets()
    work = tmp_path / "work"
    work.mkdir()
    # Any run is refused, before anything is made (not only one of the hostile preset).
    refused(run_cli("run", "1.3b", "tp1pp1", cwd=work, env={"BENCH_PRESETS_DIR": str(folder)}),
            "mine.toml: preset name ", "is not a name")
    assert not list(work.iterdir())


def test_the_error_shows_a_hostile_name_escaped(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_PRESETS_DIR", str(_presets_dir(tmp_path, "a\\nb\\u202Ec")))
    with pytest.raises(DataError) as error:
        load_presets()
    assert "'a\\nb\\u202ec'" in str(error.value) and str(error.value).isprintable()


@pytest.mark.parametrize("name", ["125m", "1.3b", "my-gpt_2.7b", "X" * 64])
def test_plain_preset_names_still_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       name: str) -> None:
    monkeypatch.setenv("BENCH_PRESETS_DIR", str(_presets_dir(tmp_path, name)))
    assert load_presets()[name].layers == 2


class _Frozen(datetime):
    """``datetime.now`` stuck at one second: two checkouts planning the same run at once."""

    @classmethod
    def now(cls, tz=None) -> datetime:  # type: ignore[override]
        return FIXED_NOW


def test_run_ids_planned_in_the_same_second_differ(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arguments, "datetime", _Frozen)
    ids = []
    for checkout in ("a", "b"):
        (tmp_path / checkout).mkdir()
        result = run_cli("run", "1.3b", "tp1pp1", "--dry-run", "--json", cwd=tmp_path / checkout)
        assert result.returncode == 0, result.stderr
        ids.append(json.loads(result.stdout)["runs"][0]["plan"]["run_id"])
    assert all(re.fullmatch(r"1\.3b_tp1pp1dp1_local_20261121T120000Z-[0-9a-f]{6}", i) for i in ids)
    assert ids[0] != ids[1]


def test_records_with_run_ids_of_the_old_form_still_load(tmp_path: Path) -> None:
    old = build_record(**record_fields(run_id="13b_dp4_h200x4_20261121T201500Z"))
    new = build_record(**record_fields(run_id="13b_dp4_h200x4_20261121T201500Z-3f9a1c-r2"))
    for record in (old, new):
        write_record(tmp_path, record)
    records, problems = load_records(tmp_path)
    assert not problems and {r.run_id for r in records} == {old.run_id, new.run_id}
