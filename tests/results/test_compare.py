"""``bench compare`` on the fixture records, whose step-time spread and repeats are known.

The three ok 13b dp4 fixture runs (``tests/fixtures/results/records``) have p10/p90 step times at
the median -1 %/+1 % over 20 window steps, so each run's standard error is
1.2533 x (0.02 / 2.5631) / sqrt(20) = 0.21868 % of its TFLOP/s/GPU; sweep s1 holds two of them
(489.0 and 480.85), sweep s2 one (493.075).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

from bench import cli
from bench.records.store import load_records, write_record
from bench.results.compare import Comparison, compare_in, format_text, select
from bench.running import gpus as hardware
from bench.running import local as runner
from bench.running import run as run_module
from bench.running.gpus import LocalGPUs
from tests.record_factory import make_record

TESTS = Path(__file__).parents[1]
RECORDS = TESTS / "fixtures" / "results" / "records"
LOG = TESTS / "fixtures" / "logs" / "megatron_ok_1.3b_tp1pp1_h200.log"
RUN_SE = 1.2533 * (0.02 / 2.5631) / math.sqrt(20)


def test_one_run_against_two_repeats_is_within_the_noise() -> None:
    c = compare_in(RECORDS, "model=13b layout=dp4 sweep=s1", "13b_dp4_h200_20261121T202500Z")
    assert [r.run_id for r in c.a.runs] == ["13b_dp4_h200_20261121T201500Z",
                                             "13b_dp4_h200_20261121T202000Z"]
    assert c.a.tflops == pytest.approx((489.0 + 480.85) / 2)
    assert c.a.within_se == pytest.approx(math.hypot(489.0, 480.85) * RUN_SE / 2, rel=1e-3)
    # Two runs 8.15 apart: standard deviation 8.15 / sqrt(2), over sqrt(2) runs = 4.075.
    assert c.a.between_se == pytest.approx(4.075)
    assert c.a.se == pytest.approx(4.075)
    assert c.b.se == pytest.approx(493.075 * RUN_SE, rel=1e-3)
    assert c.delta == pytest.approx(8.15)
    assert c.band == pytest.approx(2 * math.hypot(4.075, 493.075 * RUN_SE), rel=1e-3)  # 8.43
    assert not c.exceeds and not c.repeated
    assert "No difference beyond the noise: +1.68 % within ±1.74 %" in c.verdict
    assert "run-to-run noise unknown" in c.verdict
    assert c.memory == (0.0, 0.0)


def test_a_layout_change_exceeds_the_noise() -> None:
    c = compare_in(RECORDS, "model=13b layout=dp4", "model=13b layout=tp2pp2")
    assert len(c.a.runs) == 3 and len(c.b.runs) == 1
    assert c.b.tflops - c.a.tflops == pytest.approx(244.5 - (489.0 + 480.85 + 493.075) / 3)
    assert c.exceeds and c.verdict.startswith("B is slower by 49.86 %")
    assert c.memory is not None and c.memory[0] == pytest.approx(67.0 - 110.0)


@pytest.mark.parametrize("side,message", [
    ("model=13b", "matches 2 configurations; narrow it with one of layout=dp4|tp2pp2"),
    ("model=13b layout=dp8", "no ok record matches"),
    ("13b_dp4_h200_20261121T203500Z", "status is not ok"),
    ("no_such_run", "no record no_such_run"),
    ("model=13b layout=tq4", "layout:"),
    ("model=13b layout", "'layout' is not key=value"),
    ("model=13b model=1.3b", "model is given twice"),
])
def test_bad_sides_are_refused_with_the_fix(side: str, message: str) -> None:
    records, _ = load_records(RECORDS)
    with pytest.raises(ValueError) as error:
        select(records, side)
    assert message in str(error.value)


def test_a_selector_keeps_ab_variants_apart_from_the_defaults(tmp_path: Path) -> None:
    shutil.copytree(RECORDS, tmp_path / "records")
    variant = make_record(run_id="13b_dp4_h200_20261121T210000Z", started_at="2026-11-21T21:00:00Z",
                          finished_at="2026-11-21T21:10:00Z",
                          variant={"attention": "sdpa", "overlap": "off"})
    write_record(tmp_path / "records", variant)
    records, _ = load_records(tmp_path / "records")
    assert variant.run_id not in [r.run_id for r in select(records, "model=13b layout=dp4").runs]
    chosen = select(records, "model=13b layout=dp4 overlap=off").runs
    assert [r.run_id for r in chosen] == [variant.run_id]
    assert select(records, "model=13b notes='attention=sdpa, overlap=off'").runs == chosen


def test_cli_text_and_json(capsys) -> None:
    args = ["compare", "--records", str(RECORDS), "model=13b layout=dp4 sweep=s1",
            "13b_dp4_h200_20261121T202500Z"]
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    assert "TFLOP/s/GPU       484.9    493.1    +8.1 (+1.68 %)          ±8.4 (±1.74 %)" in text
    assert "13b_dp4_h200_20261121T202000Z   480.9 TFLOP/s/GPU (s.e. 1.1)" in text
    assert cli.main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exceeds_noise"] is False and data["a"]["tflops_se_between"] == pytest.approx(4.075)
    assert cli.main(["compare", "--records", str(RECORDS), "model=13b", "x"]) == 2
    assert "narrow it" in capsys.readouterr().err


def test_repeat_runs_a_configuration_n_times_into_one_group(monkeypatch, tmp_path: Path,
                                                            capsys) -> None:
    """``run --repeat 2 --json``: two records of one repeat group, which compare pools.

    The ranks are a replay of a real Megatron log (no GPU here); planning, the runner, the parser
    and the records are the kit's own.
    """
    monkeypatch.chdir(tmp_path)
    one_h200 = LocalGPUs(1, "NVIDIA H200", "570.00")
    monkeypatch.setattr(hardware, "detect_gpus", lambda: one_h200)
    replay = [sys.executable, "-c", f"print(open({str(LOG)!r}).read(), end='')"]
    monkeypatch.setattr(runner.torchrun, "command", lambda plan: replay)
    # The replay needs no training Python; the preflight of one is tests/running/test_trainenv.py's.
    monkeypatch.setattr(run_module, "environment_ready", lambda launch, found: True)
    code = cli.main(["run", "1.3b", "tp1pp1", "--mbs", "4", "--gbs", "32", "--iters", "15",
                     "--repeat", "2", "--json", "--records-dir", "records"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    ids = [entry["record"]["run_id"] for entry in out["runs"]]
    assert [i[-3:] for i in ids] == ["-r1", "-r2"]
    group = ids[0][:-3]
    # The group is the runs' only label; they ran the kit's defaults and were not jobs.
    assert all(entry["record"]["labels"] == {"repeat_group": group}
               and entry["record"]["variant"] == {} and entry["record"]["notes"] == {}
               for entry in out["runs"])
    records, problems = load_records(tmp_path / "records")
    assert sorted(r.run_id for r in records) == ids and not problems
    pooled = select(records, f"repeat_group={group}")
    assert len(pooled.runs) == 2 and pooled.between_se == 0.0  # the same log twice
    assert Comparison(pooled, select(records, ids[0])).delta == pytest.approx(0.0)


REAL = TESTS.parent / "results" / "records"
GBS32_TODAY = ("2.7b_tp1pp1dp1_local_20261129T181246Z-061704,2.7b_tp1pp1dp1_local_20261129T182309Z-2561ad,"
               "2.7b_tp1pp1dp1_local_20261129T182907Z-66b57c")


def test_a_comparison_says_whether_its_sides_shared_a_machine() -> None:
    """Global batch 128 against 32 ran alternating on one H200 (one GPU UUID on all six records);
    the same key of the morning ran on another; a record of 2026-11-21 names no GPU."""
    one = compare_in(REAL, GBS32_TODAY, "2.7b_tp1pp1dp1_local_20261129T181440Z-b2eda5,"
                     "2.7b_tp1pp1dp1_local_20261129T181901Z-d2b4e8,2.7b_tp1pp1dp1_local_20261129T182457Z-3eb2ea")
    assert one.machines == ["479a56ec"] and one.machine_words == "Both sides ran on one machine (GPUs 479a56ec)"
    two = compare_in(REAL, "2.7b_tp1pp1dp1_local_20261129T060521Z-1dcf15", GBS32_TODAY)
    assert two.machines == ["416fcfbe", "479a56ec"]
    assert two.machine_words.startswith("The runs ran on 2 machines (416fcfbe, 479a56ec): the difference also")
    old = compare_in(REAL, "2.7b_tp1pp1dp1_local_20261121T203332Z", GBS32_TODAY)
    assert None in old.machines and old.machine_words.startswith("1 run(s) name no GPUs")
    assert "GPUs 479a56ec" in format_text(one) and "GPUs ?" in format_text(old)
