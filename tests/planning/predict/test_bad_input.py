"""Bad input to the step-time model: stored fits and measured ceilings refused in one line naming
the file and the field, no term below zero, a refit that writes whole and only where told, and a
results page that never refits however many records it shows."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bench.cli import main
from bench.config.platforms import load_accelerator, load_platform
from bench.config.presets import get_preset
from bench.config.tomlfile import DataError
from bench.planning.plan import plan
from bench.planning.predict import facts, fit, holdout, validate
from bench.planning.predict.expect import load_step_model
from bench.planning.predict.facts import AllReduce
from bench.planning.predict.terms import step_terms
from bench.records.store import load_records
from bench.results import predicted
from tests.conftest import options

RECORDS = Path(__file__).resolve().parents[3] / "results" / "records"
PAGE_RECORDS = 20_000


def _stored() -> dict:
    return json.loads(fit.FIT_FILE.read_text())


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d["factors"].update(gemm=-1.0), "factors.gemm"),
    (lambda d: d["validation"].pop("p90"), "validation.p90"),
    (lambda d: d["factors"].pop("tp_comm"), "missing: tp_comm"),
    (lambda d: d.update(schema="bench.predict-fit/0"), "schema"),
])
def test_a_bad_fit_is_one_line_naming_the_file_and_field(tmp_path: Path, change, field: str) -> None:
    data = _stored()
    change(data)
    bad = tmp_path / "fit.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(DataError) as caught:
        fit.load_stored(bad)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(bad)) and field in message
    assert message.endswith("refit with python -m bench predict --refit")


def test_a_performance_file_with_repeated_sizes_is_refused(tmp_path: Path) -> None:
    text = (Path(facts.PERFORMANCE_DIR) / "h100-sxm.toml").read_text()
    (tmp_path / "h100-sxm.toml").write_text(text.replace("mib = [64.0, 256.0, 1024.0]", "mib = [64.0, 64.0, 1024.0]"))
    with pytest.raises(DataError) as caught:
        facts.load_performance("h100-sxm", tmp_path)
    message = str(caught.value)
    assert "\n" not in message and "h100-sxm.toml" in message and "mib" in message and "rise" in message


def test_rising_bus_bandwidth_gives_no_negative_latency_or_rate() -> None:
    steep = AllReduce(gpus=2, source="t", mib=(1.0, 16.0, 1024.0), busbw_gbps=(1.0, 100.0, 400.0))
    latency, rate = steep.seconds(0)
    assert latency >= 0 and rate > 0


def test_a_count_measured_at_one_size_keeps_a_positive_rate() -> None:
    perf = facts.load_performance("h100-sxm").model_copy(update={"allreduce": (
        AllReduce(gpus=2, source="t", mib=(1.0, 1024.0), busbw_gbps=(0.5, 300.0)),
        AllReduce(gpus=4, source="t", mib=(1.0,), busbw_gbps=(300.0,)))})
    latency, rate = perf.link(4)
    assert latency >= 0 and rate > 0


def test_no_term_of_a_record_is_negative() -> None:
    records, _ = load_records(RECORDS)
    for run in validate.observed(records, facts.load_all()):
        assert min(run.sample.terms) >= 0, run.sample.run_id


def test_refit_writes_only_where_told_and_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = fit.FIT_FILE.read_bytes()
    assert main(["predict", "--refit", "--fit", str(tmp_path / "nowhere" / "fit.json"),
                 "--records", str(RECORDS)]) == 2
    assert "no such folder" in capsys.readouterr().err and not (tmp_path / "nowhere").exists()
    target = tmp_path / "fit.json"
    target.write_text("old")
    small = tmp_path / "records"
    small.mkdir()
    for name in sorted(p.name for p in RECORDS.glob("2.7b_tp1pp1dp*_local_2026112[56]*.json"))[:12]:
        shutil.copy(RECORDS / name, small / name)
    assert main(["predict", "--refit", "--fit", str(target), "--records", str(small)]) == 0
    assert fit.load_stored(target)[0] and sorted(p.name for p in tmp_path.iterdir()) == ["fit.json", "records"]
    assert fit.FIT_FILE.read_bytes() == before


def test_held_out_groups_fit_once_each() -> None:
    assert holdout.groups(["a", "b", "a", "c"], [1, 2, 3, 2]) == [0, 1, 0, 1]


def test_the_page_never_refits_and_twenty_thousand_records_are_one_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records, _ = load_records(RECORDS)
    modelled = {run.sample.run_id for run in validate.observed(records, facts.load_all())}
    sources = sorted(modelled, key=lambda run_id: (RECORDS / f"{run_id}.json").stat().st_size)[:40]
    texts = [(run_id, (RECORDS / f"{run_id}.json").read_text()) for run_id in sources]
    for n in range(PAGE_RECORDS):
        run_id, text = texts[n % len(texts)]
        new = f"{run_id}-copy{n}"
        (tmp_path / f"{new}.json").write_text(text.replace(f'"{run_id}"', f'"{new}"', 1))
    copies, problems = load_records(tmp_path)
    assert len(copies) == PAGE_RECORDS and not problems

    def no_fit(*args, **kwargs):
        raise AssertionError("the results page fitted the model")

    terms_done = []

    def counted(case, perf):
        terms_done.append(1)
        return step_terms(case, perf)

    monkeypatch.setattr(fit.Fitter, "__init__", no_fit)
    monkeypatch.setattr(fit, "nnls", no_fit)
    monkeypatch.setattr(validate, "step_terms", counted)
    started = time.process_time()
    found = predicted.checked(copies)
    spent = time.process_time() - started
    assert found is not None and found.count == PAGE_RECORDS and len(terms_done) == PAGE_RECORDS
    assert spent < 10  # about 3 s of CPU here; a fit per record took 90 s at 1,000


def test_an_expectation_whose_terms_outrun_the_card_is_held_at_its_peak() -> None:
    # Factors a thousand times too small make 13b on four H200s step far faster than the card
    # can compute: the expectation stays at the accelerator file's dense bf16 peak and says so.
    model = load_step_model()
    tiny = replace(model, factors={name: f * 1e-3 for name, f in model.factors.items()})
    launch = plan(get_preset("13b"), "tp2pp2", load_platform("azure-h200"), options(gpus=4, step_model=tiny))
    exp = launch.expected
    peak = load_accelerator("h200-sxm").peak_tflops["bf16"]
    assert exp is not None and exp.tflops_per_gpu == pytest.approx(peak)
    assert any("held at the peak" in why for why in exp.beyond)
    plain = plan(get_preset("13b"), "tp2pp2", load_platform("azure-h200"), options(gpus=4)).expected
    assert plain is not None and plain.tflops_per_gpu < peak and plain.beyond == ()
