"""The results page's checkpoint writes and the run summary's line: the 1.3b dp4 record of four
H200s with the saves the kit reads from its real log (kept beside its record in
results/records/logs/; docs/reports/2026-11-27-h200x4-13b.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from bench.config.precisions import PRECISIONS
from bench.config.presets import get_preset
from bench.measure.logparse import parse_log
from bench.records.checkpoint import checkpoint_of
from bench.records.record import Record, record_from_dict
from bench.results.checkpoints import saving_runs, section
from bench.running.local import summary
from tests.record_factory import make_record

REPO = Path(__file__).parents[2]
RUN_ID = "1.3b_tp1pp1dp4_local_20261127T094915Z-727ec9-c26"
SAVED_LOG = REPO / "results" / "records" / "logs" / f"{RUN_ID}.log.gz"
SAVED_RECORD = REPO / "results" / "records" / f"{RUN_ID}.json"


def _saved_run(precision: str = "bf16") -> Record:
    """The kept record (written before ``checkpoint``) with the field its own log gives."""
    with gzip.open(SAVED_LOG, "rt") as log:
        saves = parse_log(log.read()).checkpoint_saves
    data = json.loads(SAVED_RECORD.read_text())
    ckpt = checkpoint_of(saves, get_preset("1.3b"), PRECISIONS[precision], "default")
    return record_from_dict({**data, "checkpoint": ckpt.model_dump(mode="json")})


def test_one_row_a_save_with_the_estimate_beside_the_wait() -> None:
    run = _saved_run()
    lines = section([make_record(), run], "records")
    assert lines[0] == "## Checkpoint writes"
    assert "not measured but estimated" in lines[2] and "14 B" in lines[2]
    assert lines[4:] == [
        "| run | GPUs | format | folder | iteration | wait s (max) | min s | estimated GB | estimated GB/s |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
        f"| [1.3B tp1pp1dp4](records/{RUN_ID}.json) | 4 × NVIDIA H200 SXM 141GB | `torch_dist` "
        "| `checkpoints/x4` | 5 | 31.3 | 31.2 | 18.4 | 0.59 |",
        f"| [1.3B tp1pp1dp4](records/{RUN_ID}.json) | 4 × NVIDIA H200 SXM 141GB | `torch_dist` "
        "| `checkpoints/x4` | 10 | 15.5 | 15.4 | 18.4 | 1.19 |",
        "",
    ]


def test_no_saving_run_no_section_and_no_estimate_a_dash() -> None:
    assert section([make_record()], "records") == [] and saving_runs([make_record()]) == []
    row = section([_saved_run("msamp-o2")], "records")[6]
    assert row.endswith("| 5 | 31.3 | 31.2 | – | – |")


def test_the_run_summary_says_what_the_saves_cost() -> None:
    rows = summary([_saved_run(), make_record()]).splitlines()
    assert len(rows) == 5 and "checkpoint" not in rows[3]
    assert rows[4] == ("1.3b tp1pp1dp4: 2 checkpoint saves into checkpoints/x4 (torch_dist), 46.7 s "
                       "waited: iteration 5 31.3 s, iteration 10 15.5 s; ~18.4 GB each (estimated, "
                       "14 B a parameter), ~0.59 GB/s at the slowest")


def test_a_run_of_many_saves_says_the_slowest_and_the_median() -> None:
    """Past four saves the line names the slowest and the median (the real two saves, thrice)."""
    with gzip.open(SAVED_LOG, "rt") as log:
        saves = parse_log(log.read()).checkpoint_saves
    line = checkpoint_of(saves * 3, get_preset("1.3b"), PRECISIONS["bf16"], "default").describe()
    assert line.startswith("6 checkpoint saves into checkpoints/x4 (torch_dist), 140.2 s waited: "
                           "slowest 31.3 s, median 23.4 s; ~18.4 GB each")
