"""--kit-msamp-modules te on megatron-core 0.19.2 itself, on CPU, with the patched MS-AMP snapshot on
the path: the layer spec and the built GPT have Transformer Engine's TENorm in both norm slots,
TEDotProductAttention as core attention and MS-AMP's FP8 linears in the four linear slots, and a few
CPU steps train through them (megatron_checks.py's ``model_msamp_te_modules``).

Transformer Engine is not on this machine: stand-ins with the real classes' constructor arguments
take TE's place in megatron-core's extension module, so these check the wiring only; TE's kernels
(and how fast they are) are what a GPU run shows. The entry's refusals run for real in test_entry.py.
"""

from __future__ import annotations

import os
import shutil

from bench.images.pins import REPO_ROOT
from bench.images.series import run_series
from tests.snapshots import snapshot_tree
from tests.train.test_megatron_checks import CHECKS_SCRIPT


def test_te_modules_wrap_msamp_linears_in_the_built_gpt(run_megatron, tmp_path) -> None:
    tree = tmp_path / "ms-amp"
    shutil.copytree(snapshot_tree("ms-amp"), tree)
    run_series(REPO_ROOT / "patches/ms-amp/series", tree, "apply")
    # The planner's default scaling (bench.config.run_options.DEFAULT_MSAMP_SCALING).
    env = {"PYTHONPATH": os.pathsep.join((str(REPO_ROOT), str(tree))), "MSAMP_FP8_SCALING": "in-time"}
    result = run_megatron([str(CHECKS_SCRIPT), "model_msamp_te_modules"], env=env, timeout_s=600)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    assert result.stdout.strip().endswith("ok model_msamp_te_modules")
