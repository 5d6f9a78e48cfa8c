"""bench.train.fp8_linear on CPU, in the Python with torch: its arguments, its refusal without a GPU,
and how the rows are set side by side. The timings themselves come from the GPU machine (docs/reports).
"""

from __future__ import annotations

CHECKS = r'''
import contextlib
import io
import pathlib
import sys
import tempfile

from bench.train import fp8_linear

# Each MS-AMP variant sets both of MS-AMP's switches and is set against a te.Linear recipe that runs.
for switches, counterpart in fp8_linear.MSAMP_VARIANTS.values():
    assert set(switches) == {"MSAMP_FP8_SCALING", "MSAMP_FP8_TE_CAST"} and counterpart in fp8_linear.TE_RECIPES

# In time against TE's current scaling, delayed against delayed; failed rows are left out.
rows = [
    {"variant": "bf16 nn.Linear", "tflops": 500.0},
    {"variant": "te.Linear fp8 delayed", "te_recipe": "delayed", "tflops": 1000.0},
    {"variant": "te.Linear fp8 current", "te_recipe": "current", "tflops": 800.0},
    {"variant": "msamp in time, TE cast, weight cast reused", "msamp_variant": "in time, TE cast",
     "te_counterpart": "current", "tflops": 760.0},
    {"variant": "msamp delayed, TE cast, weight cast reused", "msamp_variant": "delayed, TE cast",
     "te_counterpart": "delayed", "tflops": 900.0},
    {"variant": "msamp in time, torch cast", "failed": "exit status 1"},
]
assert fp8_linear.ratios(rows) == {
    "msamp in time, TE cast, weight cast reused": {"bf16": 1.52, "te.Linear fp8 current": 0.95},
    "msamp delayed, TE cast, weight cast reused": {"bf16": 1.8, "te.Linear fp8 delayed": 0.9},
}


def refused(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            fp8_linear.parse_args(argv)
        except SystemExit:
            return err.getvalue()
    raise AssertionError(f"{argv} was taken")


assert "three positive integers" in refused(["8192", "4096"])
assert "three positive integers" in refused(["8192", "0", "16"])
with tempfile.TemporaryDirectory() as tmp:
    earlier = pathlib.Path(tmp, "fp8_linear.json")
    earlier.write_text("{}")
    assert "exists" in refused(["--out", str(earlier)]) and earlier.read_text() == "{}"
    out = pathlib.Path(tmp, "new.json")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert fp8_linear.main(["--out", str(out)]) == 2
    assert "no CUDA device" in err.getvalue() and not out.exists()
print("ok")
'''


def test_arguments_refusals_and_side_by_side_ratios(run_megatron) -> None:
    done = run_megatron(["-c", CHECKS])
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
