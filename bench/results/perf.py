"""Time ``python -m bench results`` on synthetic records: ``python -m bench.results.perf [N]``.

Writes N (default 10,000) valid records for 4 models x 3 platforms x 5 GPU counts x 2 layouts
into a temporary directory (not timed), then times in this process, in seconds: a first full
regeneration into an empty output directory (load + validate, aggregate, markdown, drawing every
plot including matplotlib's import, write), the phases of it separately (a regeneration runs the
import beside the loading, see ``bench.results.drawing``), and a second
regeneration into the same directory (plots whose inputs did not change are reused, as after
adding a record that changes no plot). Prints the load average, since other work on the machine
slows every phase. The target is 1 s for 10,000 records on a 2-core machine. Synthetic
records never go near results/.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from bench.config.extras import require
from bench.records.record import build_record
from bench.records.store import load_records, write_record
from bench.results import markdown, plots
from bench.results.aggregate import build_report
from bench.results.data import load_published, load_ranges
from bench.results.drawing import Drawer
from bench.results.generate import PUBLISHED_FILE, RANGES_FILE, generate, write_outputs

# name: (layers, hidden, heads, causal TFLOP per sample at s 2048, V 51200)
MODELS = {"1.3b": (24, 2048, 16, 17.4), "2.7b": (32, 2560, 32, 34.6),
          "6.7b": (32, 4096, 32, 85.0), "13b": (40, 5120, 40, 163.0)}
PLATFORMS = ("h200", "h100", "lumi")
GPU_COUNTS = (1, 2, 4, 8, 16)


def synthetic_records(directory: Path, count: int) -> None:
    """Write ``count`` valid ok records with varied configurations and throughputs."""
    for i in range(count):
        model = list(MODELS)[i % 4]
        layers, hidden, heads, per_sample = MODELS[model]
        platform = PLATFORMS[(i // 4) % 3]
        gpus = GPU_COUNTS[(i // 12) % 5]
        tp = 2 if (i // 60) % 2 and gpus > 1 else 1
        dp = gpus // tp
        samples = (0.5 + (i % 97) / 97) * 400 / per_sample * gpus
        tflops = per_sample * samples / gpus
        build = build_record(
            run_id=f"{model}_tp{tp}dp{dp}_{platform}_{i:06d}", status="ok", reason=None,
            started_at="2026-11-21T20:00:00Z", finished_at="2026-11-21T20:10:00Z",
            engine="megatron", precision="bf16",
            preset={"name": model, "layers": layers, "hidden": hidden, "heads": heads,
                    "seq_length": 2048, "vocab_size": 51200},
            layout={"name": f"tp{tp}dp{dp}", "tp": tp, "pp": 1, "dp": dp, "vp": None, "cp": 1,
                    "sp": False, "zero": None, "micro_batch": 1, "global_batch": 64 * dp},
            platform={"name": platform, "accelerator": "synthetic", "peak_tflops": 989.0,
                      "peak_source": "synthetic"},
            nodes=1 + (gpus - 1) // 8, gpus=gpus, argv=["python", "-m", "bench.train.pretrain_gpt"],
            env={"NCCL_DEBUG": "WARN"}, provenance={},
            metrics={"warmup_iters": 10, "window_iters": 20, "step_time_s_median": 1.0,
                     "step_time_s_p10": 0.9, "step_time_s_p90": 1.1, "samples_per_s": samples,
                     "tokens_per_s_per_gpu": samples * 2048 / gpus, "tflops_per_gpu": tflops,
                     "mfu": tflops / 989.0, "flops_convention": "megatron-causal",
                     "tflops_per_gpu_noncausal": None, "mfu_noncausal": None,
                     "peak_mem_gb": 40.0},
            labels={"sweep": f"s{i % 7}"}, data={"kind": "mock", "name": None, "path_sha256": None},
        )
        write_record(directory, build)


def _regenerate(records_dir: Path, out_dir: Path) -> float:
    start = time.perf_counter()
    write_outputs(out_dir, generate(records_dir, out_dir, PUBLISHED_FILE, RANGES_FILE).files)
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    """Time it, or one ``error:`` line (matplotlib missing, a data file not found from here)."""
    try:
        require("matplotlib", "results", "timing the results page")
        return _time(int(argv[0]) if argv else 10_000)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _time(count: int) -> int:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as temp:
        records_dir, out_dir = Path(temp) / "records", Path(temp) / "out"
        synthetic_records(records_dir, count)
        first = _regenerate(records_dir, out_dir)
        again = _regenerate(records_dir, out_dir)
        # Phases, timed again separately and one after the other (a regeneration overlaps the
        # matplotlib import with the loading); files are now in the page cache for both runs.
        t0 = time.perf_counter()
        runs, problems = load_records(records_dir)
        t1 = time.perf_counter()
        report = build_report(runs, problems, load_published(PUBLISHED_FILE),
                              load_ranges(RANGES_FILE))
        specs = plots.plan_plots(report)
        markdown.render(markdown.Page(report, "records", plots=tuple(specs)))
        t2 = time.perf_counter()
        with Drawer() as drawer:
            drawer.reuse_or_render(specs, {})
        t3 = time.perf_counter()
    print(f"{count} records -> {len(report.measured_rows)} measured rows, {len(specs)} plots")
    print(f"first regeneration, empty output (incl. matplotlib import): {first:.2f} s")
    print(f"  alone: load + validate {t1 - t0:.2f} s, aggregate + markdown {t2 - t1:.2f} s, "
          f"import matplotlib + draw plots {t3 - t2:.2f} s")
    print(f"second regeneration, plots unchanged: {again:.2f} s")
    print("load average before / after: " + " / ".join(
        ", ".join(f"{v:.2f}" for v in load) for load in (load_before, os.getloadavg())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
