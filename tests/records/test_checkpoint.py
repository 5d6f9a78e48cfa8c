"""Checkpoint saves: read from the real log of a 1.3b dp4 run on four H200s that saved twice
(kept beside its record in results/records/logs/; docs/reports/2026-11-27-h200x4-13b.md), kept in
the record as ``checkpoint``, with the estimate of one checkpoint's bytes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bench.config.platforms import load_platform
from bench.config.precisions import PRECISIONS
from bench.config.presets import get_preset
from bench.measure.logparse import CheckpointSave, checkpoint_saves, log_lines, parse_log
from bench.planning.memory import model_parameters
from bench.planning.plan import plan
from bench.records.build import build_run_record, plan_summary
from bench.records.checkpoint import Checkpoint, Save, checkpoint_of, estimated_bytes
from bench.records.record import RecordError, record_from_dict, record_from_json
from tests.conftest import options
from tests.record_factory import make_record

REPO = Path(__file__).parents[2]
RUN_ID = "1.3b_tp1pp1dp4_local_20261127T094915Z-727ec9-c26"
BF16 = PRECISIONS["bf16"]
SAVED_LOG = REPO / "results" / "records" / "logs" / f"{RUN_ID}.log.gz"
SAVED_RECORD = REPO / "results" / "records" / f"{RUN_ID}.json"
LOGS = REPO / "tests" / "fixtures" / "logs"


def _saved_log() -> str:
    with gzip.open(SAVED_LOG, "rt") as log:
        return log.read()


def test_both_saves_of_the_real_log_are_read_with_megatrons_timer() -> None:
    parsed = parse_log(_saved_log())
    assert parsed.checkpoint_saves == (
        CheckpointSave(iteration=5, directory="checkpoints/x4", format="torch_dist",
                       ms_max=31261.89, ms_min=31219.82),
        CheckpointSave(iteration=10, directory="checkpoints/x4", format="torch_dist",
                       ms_max=15470.14, ms_min=15449.65),
    )
    assert parsed.status.value == "ok" and len(parsed.iterations) == 10


@pytest.mark.parametrize("name", sorted(path.name for path in LOGS.glob("*.log")))
def test_a_log_without_saves_has_none(name: str) -> None:
    """Every kept log of a run that did not save, both engines' (none of Megatron-DeepSpeed's saved)."""
    assert parse_log((LOGS / name).read_text()).checkpoint_saves == ()


def test_megatron_deepspeeds_line_has_no_format_and_a_max_alone_timer_has_no_min() -> None:
    """Megatron-DeepSpeed's save line, as its checkpointing.py formats it ('saving checkpoint at
    iteration {:7d} to {}'), and Megatron's timer under --timing-log-option max; the real log's
    lines around them. A save whose timer never came (the run died saving) is left out."""
    lines = log_lines(_saved_log())
    start = next(i for i, line in enumerate(lines) if "saving checkpoint at iteration" in line)
    timer = next(i for i, line in enumerate(lines) if "save-checkpoint ...." in line)
    deepspeed = ["saving checkpoint at iteration {:7d} to {}".format(5, "/scratch/ck run"),
                 *lines[start + 1:timer], "    save-checkpoint ................................: 31261.89"]
    assert checkpoint_saves(deepspeed) == (
        CheckpointSave(iteration=5, directory="/scratch/ck run", format=None, ms_max=31261.89, ms_min=None),)
    died = lines[:timer] + lines[timer + 1:]  # the first save's timer gone: the next iteration comes first
    assert [save.iteration for save in checkpoint_saves(died)] == [10]


def test_the_record_keeps_the_saves_and_estimates_the_bytes() -> None:
    """The run planned again as it was (1.3b dp4, --save checkpoints/x4 --save-interval 5) and its
    real log: the record has the saves in seconds, their sum, and 14 B a parameter; its metrics are
    the kept record's."""
    launch = plan(get_preset("1.3b"), "tp1pp1dp4", load_platform("local"),
                  options(gpus_present=4, gpus=4, gpu_name="NVIDIA H200", mbs=4, gbs=64, iters=10,
                          save="checkpoints/x4", save_interval=5))
    text = _saved_log()
    parsed = parse_log(text)
    record = build_run_record(plan_summary(launch), parsed.status, parsed.reason, "2026-11-27T09:49:15Z",
                              "2026-11-27T09:51:02Z", parsed, text, {"kit_commit": "2d2c4e6"}, {})
    kept = record_from_json(SAVED_RECORD.read_text())
    assert record.metrics == kept.metrics and kept.checkpoint is None  # written before the field
    ckpt = record.checkpoint
    assert ckpt is not None and (ckpt.format, ckpt.directory) == ("torch_dist", "checkpoints/x4")
    assert [(s.iteration, s.seconds_max, s.seconds_min) for s in ckpt.saves] == [
        (5, 31.26189, 31.21982), (10, 15.47014, 15.44965)]
    assert ckpt.seconds_total == pytest.approx(46.73203)
    # Megatron-Core counted 1,317,654,528 parameters on the single model-parallel rank.
    assert model_parameters(get_preset("1.3b")) == kept.memory_parts.parameters == 1_317_654_528
    assert ckpt.estimated_bytes == 1_317_654_528 * 14
    assert [round(ckpt.gb_per_s(s), 2) for s in ckpt.saves] == [0.59, 1.19]
    assert record_from_json(record.to_json()) == record


def test_the_field_round_trips_and_an_old_record_reads_as_none(tmp_path: Path) -> None:
    ckpt = checkpoint_of(parse_log(_saved_log()).checkpoint_saves, get_preset("1.3b"), BF16, "default")
    record = make_record(checkpoint=ckpt.model_dump())
    assert record_from_dict(json.loads(record.to_json())) == record
    assert record_from_dict(json.loads(record.to_json())).checkpoint == ckpt
    assert make_record().checkpoint is None


@pytest.mark.parametrize(("change", "problem"), [
    ({"seconds_total": 40.0}, "seconds_total 40.0 is not the saves' seconds_max summed"),
    ({"saves": [{"iteration": 5, "seconds_max": 1.0, "seconds_min": 2.0}], "seconds_total": 1.0},
     "seconds_min 2.0 is above seconds_max 1.0"),
    ({"saves": []}, "saves"),
    ({"format": "torch dist"}, "format"),
])
def test_an_inconsistent_checkpoint_is_refused(change: dict[str, object], problem: str) -> None:
    ckpt = checkpoint_of(parse_log(_saved_log()).checkpoint_saves, get_preset("1.3b"), BF16, "default")
    with pytest.raises(RecordError, match=problem):
        make_record(checkpoint={**ckpt.model_dump(), **change})


def test_the_estimate_is_left_out_where_the_optimizer_keeps_other_state() -> None:
    preset = get_preset("175b")
    assert estimated_bytes(preset, BF16, "default") / 2**40 == pytest.approx(2.22, abs=0.01)  # seed 001: ~2.3 TiB
    assert estimated_bytes(preset, PRECISIONS["fp8-delayed"], "default") == estimated_bytes(preset, BF16, "default")
    assert estimated_bytes(preset, PRECISIONS["msamp-o2"], "default") is None
    assert estimated_bytes(preset, BF16, "paper") is None
    assert estimated_bytes(preset, None, "default") is None  # a precision the kit does not offer
    ckpt = Checkpoint(format=None, directory="/ck", saves=(Save(iteration=1, seconds_max=0.0),),
                      seconds_total=0.0)
    assert ckpt.gb_per_s(ckpt.saves[0]) is None
