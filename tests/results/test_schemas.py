"""The JSON Schemas in results/schema/ are current, and real data files validate against them.

The schemas are checked with ``jsonschema`` (an independent validator, as a site would use it), on
every kept record and every platform and accelerator file of the kit.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jsonschema
import pytest

from bench.config.paths import PLATFORMS_DIR
from bench.images.pins import PINS_FILE
from bench.records.record import SCHEMA
from bench.records.store import load_record
from bench.results.schemas import OLDER_RECORDS, SCHEMA_DIR, json_schemas

ROOT = Path(__file__).resolve().parents[2]


def test_json_schemas_are_current() -> None:
    expected = json_schemas()
    assert sorted(p.name for p in SCHEMA_DIR.glob("*.json")) == sorted([*expected, *OLDER_RECORDS.values()])
    for name, text in expected.items():
        assert (SCHEMA_DIR / name).read_text() == text, f"{name} is stale: python -m bench schemas"


def _validator(name: str):
    return jsonschema.Draft202012Validator(json.loads((SCHEMA_DIR / name).read_text()))


def _record_schema(path: Path) -> str:
    """The schema file of a record's version: today's, or an older version's as it was exported."""
    return OLDER_RECORDS.get(json.loads(path.read_text())["schema"], "record.schema.json")


DATA = [
    *((p, _record_schema(p)) for p in sorted((ROOT / "results/records").glob("*.json"))),
    *((p, "platform.schema.json") for p in sorted(PLATFORMS_DIR.glob("*.toml"))),
    *((p, "accelerator.schema.json") for p in sorted(PLATFORMS_DIR.glob("accelerators/*.toml"))),
    (PINS_FILE, "pins.schema.json"),
]


@pytest.mark.parametrize("path,schema", DATA, ids=lambda v: getattr(v, "stem", None) or "")
def test_kit_data_validates_against_its_json_schema(path: Path, schema: str) -> None:
    data = json.loads(path.read_text()) if path.suffix == ".json" else tomllib.loads(path.read_text())
    _validator(schema).validate(data)


def _today(path: Path) -> dict:
    """A kept record as the kit reads it and would write it today (``bench.record/3``)."""
    return json.loads(load_record(path).to_json())


def test_every_kept_record_as_read_today_validates_against_today_s_schema() -> None:
    validator = _validator("record.schema.json")
    for path in sorted((ROOT / "results/records").glob("*.json")):
        record = _today(path)
        assert record["schema"] == SCHEMA and validator.is_valid(record), path.name
        written = json.loads(path.read_text())
        if written["schema"] in OLDER_RECORDS:  # an older version validates against its own schema
            assert not validator.is_valid(written), path.name


def test_json_schema_refuses_what_the_kit_refuses() -> None:
    record = _today(next((ROOT / "results/records").glob("*.json")))
    validator = _validator("record.schema.json")
    for bad in ({**record, "gpus": True}, {**record, "extra": 1}, {**record, "status": "exploded"},
                {**record, "layout": {**record["layout"], "tp": 0}}):
        assert not validator.is_valid(bad)


def test_json_schema_takes_gpu_uuids_as_a_list_of_names_or_null() -> None:
    record = _today(next((ROOT / "results/records").glob("*.json")))
    validator = _validator("record.schema.json")
    uuid = "GPU-8442300b-9bec-9809-174b-7bcb20b53a7f"
    for good in ([uuid], None):
        assert validator.is_valid({**record, "provenance": {**record["provenance"], "gpu_uuids": good}})
    for bad in (uuid, [""], [1]):
        assert not validator.is_valid({**record, "provenance": {**record["provenance"], "gpu_uuids": bad}})
