"""What the results page shows is a field of the record, written when the run is made: what built
the layers, the data, the patch series. Records written before these fields get them on load,
read back from their argv and engine notes; the files are not rewritten."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bench.config.capabilities import Capabilities, layers_of
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.plan import plan
from bench.records.build import PlanSummary, build_run_record, plan_summary
from bench.records.record import PatchSeries, data_info
from bench.records.store import load_records
from bench.results.words import LAYERS
from tests.conftest import options
from tests.test_import_graph import graph

REPO = Path(__file__).resolve().parents[2]
LAYERS_INV = {shown: impl for impl, shown in LAYERS.items()}
NGC = Capabilities(transformer_engine=True, apex_layer_norm=True, fused_wgrad=True, fused_softmax=True)


def test_kept_records_load_with_the_facts_their_argv_and_notes_held() -> None:
    before = {p: p.read_bytes() for p in (REPO / "results" / "records").glob("*.json")}
    records, problems = load_records(REPO / "results" / "records")
    assert records and not problems
    for record in records:
        written = json.loads((REPO / "results" / "records" / f"{record.run_id}.json").read_text())
        # Read back from the argv only where the record does not say it: the kit at fa1e3a2 ran
        # Transformer Engine without apex with gradient accumulation fusion in TE's layers, an argv
        # that reads as TE+apex.
        if "implementation" not in written:
            assert LAYERS[record.implementation] == layers_of(record.argv), record.run_id
        assert (record.data.kind == "real") == ("--data-path" in record.argv), record.run_id
        if "patches" in written:  # written at run time, with no engine note to read them from
            assert [s.model_dump() for s in record.patches] == written["patches"], record.run_id
            continue
        series = record.engine_notes.get("patch_series")
        assert [f"sha256:{s.sha256}" for s in record.patches] == ([series.split()[0]] if series else [])
    assert any(r.patches and not r.patches[0].applied for r in records)  # the "NOT applied" kind
    assert before == {p: p.read_bytes() for p in before}  # migrated on read, never rewritten


@pytest.mark.parametrize("caps,precision,expect", [
    (NGC, "bf16", "te+apex"), (Capabilities(transformer_engine=True), "bf16", "te"),
    (Capabilities(), "bf16", "local"),
    (Capabilities(transformer_engine=True, msamp=True), "msamp-o2", "local"),  # MS-AMP's linears
])
def test_a_new_record_carries_what_built_its_layers_and_its_data(caps, precision, expect) -> None:
    launch = plan(get_preset("345m"), "tp1pp1", load_platform("local"), options(
        gpus_present=1, gpu_name="NVIDIA H200", capabilities=caps, precision=precision,
        data_path="/data/corpus_text_document"))
    summary = plan_summary(launch)
    assert summary.implementation == expect == LAYERS_INV[layers_of(launch.train_argv)]
    record = build_run_record(summary, "failed", "stopped", "2026-11-21T20:31:40Z", None, None,
                              "", {}, {}, patches=[PatchSeries(upstream="megatron-deepspeed",
                                                               sha256="0" * 16, applied=True)])
    assert record.implementation == expect and record.patches[0].applied
    assert record.data == data_info("/data/corpus_text_document")
    assert (record.data.kind, record.data.name, record.data.path_sha256) == (
        "real", "corpus_text_document",
        hashlib.sha256(b"/data/corpus_text_document").hexdigest()[:16])


def test_a_plan_json_written_before_the_fields_still_makes_a_full_record() -> None:
    launch = plan(get_preset("345m"), "tp1pp1", load_platform("local"),
                  options(gpus_present=1, gpu_name="NVIDIA H200", capabilities=NGC))
    old = plan_summary(launch).model_dump(mode="json")
    del old["implementation"], old["data"]
    record = build_run_record(PlanSummary.model_validate_json(json.dumps(old)), "failed", "stopped",
                              "2026-11-21T20:31:40Z", None, None, "", {}, {})
    assert (record.implementation, record.data.kind) == ("te+apex", "mock")


def test_records_do_not_import_the_images_package() -> None:
    imports = {target for module, targets in graph().items() if module.startswith("bench.records")
               for target in targets}
    assert not {t for t in imports if t.startswith("bench.images")}


