"""Records of older shapes: each upgrade of ``bench.records.migrate`` on a real record of the shape
it upgrades (``tests/fixtures/records/migrate/``, copied from ``results/records/`` as first
committed), and the result validates as today's schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.config.run_options import (
    DEFAULT_MSAMP_SCALING,
    OLDER_CODE_KEYS,
    PAPER_ADAM_KEY,
    VARIANT_KEYS,
    variant_key,
)
from bench.records import migrate
from bench.records.record import SCHEMA, record_from_json
from bench.records.store import load_record
from tests.record_factory import make_record, read_old_record

FIXTURES = Path(__file__).parents[1] / "fixtures" / "records" / "migrate"
NOTES = FIXTURES / "1.3b_tp1pp1dp1_local_20261123T193706Z-c8.json"  # kit 67079e3, before 6fdfc48
FACTS_TE = FIXTURES / "1.3b_tp1pp1dp1_local_20261125T073420Z.json"  # kit e76d17e, before c1a456b
FACTS_DS = FIXTURES / "1.3b_tp1pp1dp2zero1_local_20261125T220401Z-c20.json"  # kit 460cbdc
DELAYED = FIXTURES / "1.3b_tp1pp1dp1_local_20261126T020114Z-67eab8-c14.json"  # kit 86553d5
CHUNKED = FIXTURES / "2.7b_tp1pp1dp2_local_20261126T095722Z-c0e8ac-c28.json"  # kit 56bf00c, before 74d8988
KERNEL = FIXTURES / "13b_tp1pp2dp2_local_20261127T174137Z-3c4d90-c13.json"  # kit 9aaabe0, bench.record/2
ALL = sorted(FIXTURES.glob("*.json"))


def _data(path: Path) -> dict:
    return json.loads(path.read_text())


def test_notes_are_sorted_by_kind() -> None:
    old = _data(NOTES)
    assert old["schema"] == "bench.record/1" and "variant" not in old
    new = migrate.notes_by_kind(old)
    assert new["labels"] == {"campaign": "h200-te-attention"}
    assert new["engine_notes"] == {"engine_tflops_per_gpu": 467.7, "engine_flops": old["notes"]["engine_flops"]}
    assert new["variant"] == {"megatron_args": "--kit-attention sdpa"}
    assert new["notes"] == {}
    assert migrate.notes_by_kind(new) == new  # a record of a later shape is left as it is


@pytest.mark.parametrize(("path", "implementation", "patches"), [
    (FACTS_TE, "te", []),
    (FACTS_DS, None, [{"upstream": "megatron-deepspeed", "sha256": "7c5051a71637d60d", "applied": True,
                       "why": None}]),
])
def test_layers_data_and_patches_are_read_from_the_argv_and_engine_notes(
        path: Path, implementation: str | None, patches: list) -> None:
    old = _data(path)
    assert not {"implementation", "data", "patches"} & old.keys()
    new = migrate.facts_from_argv(old)
    assert (new["implementation"], new["patches"]) == (implementation, patches)
    assert new["data"]["kind"] == "real" and new["data"]["name"] == "gpt2-16f7ac508eec6fde_text_document"
    assert migrate.facts_from_argv(new) == new


def test_msamp_scaling_of_a_delayed_default_commit_becomes_its_variant() -> None:
    old = _data(DELAYED)
    assert old["precision"] == "msamp-o2" and "MSAMP_FP8_SCALING" not in old["env"]
    assert migrate.msamp_scaling_explicit(old)["variant"] == {"msamp_scaling": "delayed"}
    in_time = {**old, "env": {**old["env"], "MSAMP_FP8_SCALING": "in-time"}}
    assert migrate.msamp_scaling_explicit(in_time)["variant"] == {}
    earlier = {**old, "provenance": {**old["provenance"], "kit_commit": "e76d17e3223790e1"}}
    assert migrate.msamp_scaling_explicit(earlier)["variant"] == {}


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_each_old_record_is_read_as_today_s_schema(path: Path) -> None:
    text = path.read_text()
    record = load_record(path)
    assert json.loads(text)["schema"] in migrate.OLDER and record.schema_ == SCHEMA
    assert record == record_from_json(json.dumps(migrate.upgrade(json.loads(text), SCHEMA)))
    assert record_from_json(record.to_json()) == record  # written today, read back unchanged
    assert path.read_text() == text  # the file is not rewritten


def test_the_upgrades_run_in_order_and_end_at_today_s_schema() -> None:
    upgraded = migrate.upgrade(_data(DELAYED), SCHEMA)
    assert upgraded["schema"] == SCHEMA
    assert [version for version, _ in migrate.STEPS] == list(migrate.OLDER) == ["bench.record/1",
                                                                                 "bench.record/2"]
    assert migrate.upgrade(_data(KERNEL), SCHEMA)["schema"] == SCHEMA


def test_a_paper_kit_run_of_the_chunked_step_names_it_in_its_variant() -> None:
    """PaperAdamW stepped in chunks of torch ops before kit 74d8988, with its Triton kernel since:
    a run that started before it gets ``paper_adam = "chunked"``, one that started after does not."""
    chunked, kernel = _data(CHUNKED), _data(KERNEL)
    assert chunked["started_at"] < "2026-11-26T11:27:50Z" < kernel["started_at"]
    assert chunked["variant"] == {"optimizer_states": "paper-kit"} and kernel["schema"] == "bench.record/2"
    assert migrate.older_code_explicit(chunked)["variant"] == {"optimizer_states": "paper-kit",
                                                               PAPER_ADAM_KEY: "chunked"}
    assert migrate.upgrade(chunked, SCHEMA)["variant"] == {"optimizer_states": "paper-kit",
                                                           PAPER_ADAM_KEY: "chunked"}
    assert migrate.older_code_explicit(kernel) == kernel
    assert migrate.upgrade(kernel, SCHEMA) == {**kernel, "schema": SCHEMA}
    assert load_record(CHUNKED).variant[PAPER_ADAM_KEY] == "chunked"
    assert PAPER_ADAM_KEY not in load_record(KERNEL).variant
    other = {**chunked, "variant": {"optimizer_states": "paper"}}  # TE's FusedAdam: no other code
    assert migrate.older_code_explicit(other) == other
    named = {**chunked, "variant": {"optimizer_states": "paper-kit", PAPER_ADAM_KEY: "x"}}
    assert migrate.older_code_explicit(named) == named  # a variant that names it keeps its value


def test_the_older_code_is_named_by_its_declared_variant_keys() -> None:
    for key, _, _, (setting, _) in migrate.CODE_CHANGES:
        assert key in VARIANT_KEYS and setting in OLDER_CODE_KEYS
    assert [change[0] for change in migrate.CODE_CHANGES] == [variant_key("optimizer_states")]


def test_a_new_default_needs_a_new_schema_version() -> None:
    # bench.record/3's variants are against its defaults: a kit whose default changes must name a
    # new version and upgrade bench.record/3 records to it (bench/records/migrate.py says how).
    assert migrate.MSAMP_SCALING_DEFAULT == DEFAULT_MSAMP_SCALING


def test_malformed_old_records_reach_the_schema_with_their_problems() -> None:
    old = _data(FACTS_TE)
    for bad in ({**old, "argv": "python x"}, {**old, "engine_notes": []}, {**old, "precision": ["x"]},
                {**old, "notes": [1], "variant": None}, {**old, "env": None}):
        data = migrate.upgrade(bad, SCHEMA)
        with pytest.raises(ValueError, match=r"argv|engine_notes|precision|notes|variant|env"):
            record_from_json(json.dumps(data))


def test_a_record_built_today_runs_no_upgrade(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upgrades run only where an older record is read: one built from today's fields is stored
    as given (MS-AMP's scaling in the environment alone is no variant of today's record, nor is
    the chunked Adam step of a paper-kit run that started before kit 74d8988)."""
    monkeypatch.setattr(migrate, "STEPS", ())  # any upgrade on the write path would now fail
    fields = {"precision": "msamp-o2", "env": {"MSAMP_FP8_SCALING": "delayed"}}
    assert make_record(**fields).variant == {"attention": "sdpa"}
    paper_kit = {"variant": {"optimizer_states": "paper-kit"}, "started_at": "2026-11-26T10:00:00Z",
                 "finished_at": "2026-11-26T10:10:00Z"}
    assert make_record(**paper_kit).variant == {"optimizer_states": "paper-kit"}
    monkeypatch.undo()
    assert read_old_record(**fields).variant == {"attention": "sdpa", "msamp_scaling": "delayed"}
    assert read_old_record(**paper_kit).variant == {"optimizer_states": "paper-kit", PAPER_ADAM_KEY: "chunked"}
