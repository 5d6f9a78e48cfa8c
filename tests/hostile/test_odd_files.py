"""Files of odd shape are named, never guessed at: a record without a ``schema`` key is not read
as the current version (which would split one configuration in two), a wheelhouse manifest that is
no object is one error, and a platform file whose name ``--platform`` cannot take is not listed
as a known platform."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.config.paths import PLATFORMS_DIR
from bench.records.store import load_records, write_record
from bench.running.airgap import FORMAT, MANIFEST, read_manifest
from tests.inprocess import run_cli
from tests.record_factory import make_record


def test_a_record_without_a_schema_key_is_a_problem_named(tmp_path: Path) -> None:
    record = make_record()
    data = json.loads(record.to_json())
    del data["schema"]
    (tmp_path / f"{record.run_id}.json").write_text(json.dumps(data))
    records, problems = load_records(tmp_path)
    assert records == []
    assert [str(p) for p in problems] == [
        f'{record.run_id}.json: no "schema" key, so the version it was written in is unknown: add '
        'the one its kit wrote ("bench.record/1" before the record held its data and implementation, '
        '"bench.record/2" before its variant named the older code it ran, else "bench.record/3")']
    write_record(tmp_path / "kept", record)  # the kit's own records name it
    assert load_records(tmp_path / "kept") == ([record], [])


@pytest.mark.parametrize("text,words", [
    ("[]", "format 'list', not "), ("{\"format\": 1, \"files\": []}", "format 1, not "),
    ("\"x\"", "format 'str', not "), ("{", "is not JSON"), ("[" * 100_000, "is not JSON")])
def test_a_wheelhouse_manifest_that_is_no_object_is_one_error(tmp_path: Path, text: str, words: str) -> None:
    (tmp_path / MANIFEST).write_text(text)
    with pytest.raises(ValueError, match="fill the wheelhouse again") as error:
        read_manifest(tmp_path)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_a_manifest_with_files_of_the_wrong_shape_is_one_error(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text(json.dumps({"format": FORMAT, "files": {"a.whl": 5}}))
    with pytest.raises(ValueError, match="its 'files' are not each a file's facts with its bytes"):
        read_manifest(tmp_path)


def test_a_platform_file_of_no_platform_name_is_not_known(tmp_path: Path) -> None:
    for name in ("my site.toml", "x.toml.toml", "-x.toml"):
        shutil.copy(PLATFORMS_DIR / "local.toml", tmp_path / name)
    env = {"BENCH_PLATFORMS_DIR": str(tmp_path)}
    listed = run_cli("platforms", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    assert "my site" not in listed.stdout.split("accelerators:")[0]
    assert f"not listed: {tmp_path}/my site.toml (--platform takes no such name" in listed.stdout
    refused = run_cli("run", "1.3b", "tp1pp1", "--platform", "nope", "--dry-run", cwd=tmp_path, env=env)
    known = refused.stderr.split("known: ")[1].split(" (")[0]
    assert known == ", ".join(sorted(path.stem for path in PLATFORMS_DIR.glob("*.toml")))
