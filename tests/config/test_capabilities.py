"""Capabilities -> Megatron flags, platform declarations, and what the planner refuses without them."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from bench.config.capabilities import Capabilities, layers_of, megatron_flags
from bench.config.platforms import DataError, load_platform, load_platform_file
from bench.config.presets import get_preset
from bench.images.pins import REPO_ROOT as REPO
from bench.planning.plan import plan
from bench.running.trainenv import facts
from tests.conftest import megatron_python, options
from tests.inprocess import run_cli

NGC = Capabilities(transformer_engine=True, apex_layer_norm=True, fused_wgrad=True, fused_softmax=True)
TE_ONLY = Capabilities(transformer_engine=True)
ALL = [Capabilities(*bits) for bits in itertools.product((False, True), repeat=4)]


def test_flags_for_the_three_environments_users_have() -> None:
    assert megatron_flags(NGC) == ["--transformer-impl", "transformer_engine"]
    # TE without apex: Megatron's output layer still wants apex's fused wgrad kernel.
    assert megatron_flags(TE_ONLY) == ["--transformer-impl", "transformer_engine",
                                       "--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion"]
    assert megatron_flags(Capabilities()) == [
        "--transformer-impl", "local", "--no-rope-fusion", "--no-gradient-accumulation-fusion",
        "--no-persist-layer-norm", "--no-masked-softmax-fusion"]


@pytest.mark.parametrize("caps", ALL, ids=lambda c: c.describe())
def test_every_missing_extension_turns_its_fusion_off(caps: Capabilities) -> None:
    flags = megatron_flags(caps)
    assert flags[:2] == ["--transformer-impl", "transformer_engine" if caps.transformer_engine else "local"]
    assert ("--no-gradient-accumulation-fusion" in flags) == (not caps.fused_wgrad)
    assert ("--no-masked-softmax-fusion" in flags) == (not caps.fused_softmax)
    assert ("--no-persist-layer-norm" in flags) == (not caps.transformer_engine and not caps.apex_layer_norm)


def test_cluster_platforms_declare_what_their_image_has() -> None:
    assert load_platform("azure-h100").capabilities == NGC
    assert load_platform("azure-h200").capabilities == NGC
    assert load_platform("local").capabilities is None  # detected where the run trains


def test_a_plan_takes_the_platforms_capabilities_or_the_detected_ones() -> None:
    preset = get_preset("1.3b")
    azure = plan(preset, "tp1pp1", load_platform("azure-h100"), options(gpus=8))
    assert azure.capabilities == NGC and "--no-gradient-accumulation-fusion" not in azure.train_args
    local = plan(preset, "tp1pp1", load_platform("local"), options(gpus_present=1, capabilities=TE_ONLY))
    assert local.capabilities == TE_ONLY
    assert "--no-gradient-accumulation-fusion" in local.train_args
    undetected = plan(preset, "tp1pp1", load_platform("local"), options(gpus_present=1))
    assert undetected.capabilities == Capabilities()
    assert any("could not be detected" in note for note in undetected.notes)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('capabilities = "yes"', "must be \"auto\""),
        ("[capabilities]\ntransformer_engine = 1", "must be true or false"),
        ("[capabilities]\ntransformer_engines = true", "unknown capability transformer_engines"),
    ],
)
def test_bad_capability_data_names_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    base = Path("platforms/local.toml").read_text().replace('capabilities = "auto"\n', "")
    path = tmp_path / "mine.toml"
    # Top-level keys must come before the first table.
    head, _, tables = base.partition("\n[env]")
    path.write_text(f"{head}\n{text}\n\n[env]{tables}")
    with pytest.raises(DataError, match=message) as err:
        load_platform_file(path)
    assert str(path) in str(err.value)


def test_fp8_and_sequence_parallelism_need_what_they_need() -> None:
    preset = get_preset("6.7b")
    local = load_platform("local")
    with pytest.raises(ValueError, match="fp8-delayed needs Transformer Engine.*detected in this Python"):
        plan(preset, "tp1pp1", local, options(gpus_present=1, precision="fp8"))
    with pytest.raises(ValueError, match="sequence parallelism needs Transformer Engine or apex"):
        plan(preset, "tp2pp1sp", local, options(gpus_present=2, capabilities=Capabilities()))
    assert plan(preset, "tp2pp1sp", local, options(gpus_present=2, capabilities=TE_ONLY)).layout.sp
    # A100 (Polaris) has no fp8 peak in its data: refused with the reason, before anything runs.
    with pytest.raises(ValueError, match="fp8-current cannot run on NVIDIA A100"):
        plan(preset, "tp4pp1", load_platform("polaris"),
             options(engine="megatron", precision="fp8-current"))


@pytest.mark.parametrize(
    ("precision", "recipe_flags"),
    [
        ("fp8", ["--fp8-recipe", "delayed", "--fp8-amax-history-len", "1024"]),
        ("fp8-delayed", ["--fp8-recipe", "delayed"]),
        ("fp8-current", ["--fp8-recipe", "tensorwise"]),
    ],
)
def test_fp8_recipes_are_named_and_measured_against_both_peaks(precision: str, recipe_flags: list[str]) -> None:
    launch = plan(get_preset("6.7b"), "tp2pp1sp", load_platform("azure-h200"),
                  options(gpus=8, precision=precision))
    args = " ".join(launch.train_args)
    assert "--fp8-format hybrid" in args and " ".join(recipe_flags) in args
    assert launch.precision.name == ("fp8-delayed" if precision == "fp8" else precision)
    assert launch.peak_tflops == 1979.0 and launch.bf16_peak_tflops == 989.0
    assert plan(get_preset("6.7b"), "tp1pp1", load_platform("azure-h200"),
                options(gpus=8)).bf16_peak_tflops is None


def test_dry_run_says_which_capabilities_it_assumed() -> None:
    done = run_cli("run", "6.7b", "tp2pp1sp", "--precision", "fp8", "--platform", "azure-h100",
                   "--dry-run", cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "--fp8-recipe delayed" in done.stdout and "--sequence-parallel" in done.stdout
    assert "assumed (from azure-h100's platform file): Transformer Engine yes, apex layer norm yes" in done.stderr


@pytest.mark.needs_megatron
def test_probe_reads_megatrons_own_flags_in_the_python_that_trains(tmp_path: Path) -> None:
    """A Python without megatron-core gets None (nothing can train there), never a guess; the
    Megatron venv of the tests (CPU torch, no TE, no apex) reports exactly that. The preflight's
    one probe (bench.running.trainenv.facts) gives the plan its capabilities."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    assert facts(str(bare / "bin" / "python")).capabilities is None
    assert facts(megatron_python()).capabilities == Capabilities()


def test_layers_are_read_back_from_a_records_argv() -> None:
    assert layers_of(megatron_flags(NGC)) == "TE+apex"
    assert layers_of(megatron_flags(TE_ONLY)) == "TE"
    assert layers_of(megatron_flags(Capabilities())) == "no TE"
    assert layers_of(["--zero-stage", "1"]) == ""  # Megatron-DeepSpeed chooses no layer implementation


def test_results_page_keeps_environments_apart_and_names_both_peaks_for_fp8() -> None:
    """On the real H200 records: TE, TE+apex and no-TE runs of one configuration are separate rows,
    and an fp8 row is read against the fp8 peak with its share of the bf16 peak beside it."""
    from bench.records.store import load_records
    from bench.results.aggregate import build_report
    from bench.results.data import load_published, load_ranges

    runs, _ = load_records("results/records")
    report = build_report(runs, [], load_published("results/published.toml"),
                          load_ranges("results/reference_ranges.toml"))
    rows = [r for r in report.measured_rows
            if r.model == "2.7b" and r.micro_batch == 8 and r.global_batch == 64 and r.gpus == 1]
    by_engine = {(r.engine, r.precision, r.variant): r for r in rows}
    assert by_engine[("megatron (TE)", "bf16", "")].tflops_per_gpu == pytest.approx(487.7, abs=0.05)
    assert by_engine[("megatron (TE+apex)", "bf16", "")].tflops_per_gpu == pytest.approx(488.0, abs=0.05)
    fp8 = by_engine[("megatron (TE)", "fp8-delayed", "")]
    assert fp8.percent_of_peak == pytest.approx(652.1 / 1979 * 100, abs=0.05)
    assert fp8.percent_of_bf16_peak == pytest.approx(652.1 / 989 * 100, abs=0.05)
    assert fp8.verdict.value == "in range"  # judged by the fp8 range, never by a bf16 one
