"""Run argv lists through Megatron's own argument parser and validator (Python 3.12 + megatron-core).

Reads a JSON list of cases ``{"argv": [...], "env": {...}, "world_size": N}`` on stdin and prints
one JSON result per case: ``{"ok": bool, "error": str}``. A case with ``"capabilities"`` (the
environment the plan assumed) is also put through the training entry's own checks for that
environment (``bench.train.spec.check_args``), so planner and entry are held to agree. A case with
``"config": true`` also builds the TransformerConfig, whose checks (CUDA graphs against dropout,
say) otherwise fail only when training starts.
Megatron's validator asks the GPU for its architecture; on this GPU-less machine that one hardware
query answers "Hopper (9.0)", everything else is Megatron's real code.
"""

import contextlib
import io
import json
import os
import sys

import megatron.training.arguments as megatron_args
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.config.capabilities import Capabilities  # noqa: E402
from bench.train.grad_reduce import grad_reduce_problems  # noqa: E402
from bench.train.pretrain_gpt import add_kit_args  # noqa: E402
from bench.train.spec import check_args, resolve_attention  # noqa: E402

megatron_args.get_device_arch_version = lambda: 9
torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
# What megatron-core's OptimizerConfig is built from, as validated (its dtypes as torch names).
OPTIMIZER_KEYS = ("optimizer", "use_distributed_optimizer", "use_precision_aware_optimizer",
                  "accumulate_allreduce_grads_in_fp32", "main_grads_dtype", "main_params_dtype",
                  "exp_avg_dtype", "exp_avg_sq_dtype")


def check(case: dict) -> dict:
    saved_env = dict(os.environ)
    os.environ.update(case["env"])
    os.environ.update({"WORLD_SIZE": str(case["world_size"]), "RANK": "0"})
    sys.argv = ["pretrain_gpt.py", *case["argv"]]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            args = megatron_args.parse_args(extra_args_provider=add_kit_args)  # as the entry parses
            megatron_args.validate_args(args)
            if case.get("config"):  # the model's TransformerConfig and its own checks, as training builds it
                megatron_args.core_transformer_config_from_args(args)
        if "capabilities" in case:
            attention = resolve_attention("auto", args.transformer_impl, args.kit_msamp_modules)
            problems = check_args(args, attention, Capabilities(**case["capabilities"]))
            problems += grad_reduce_problems(args)
            if problems:
                return {"ok": False, "error": "entry refuses: " + " ".join(problems)}
        return {"ok": True, "error": "", "dp": args.data_parallel_size,
                "recompute": [args.recompute_granularity, args.recompute_method,
                              args.recompute_num_layers],
                "optimizer": {key: str(getattr(args, key)) for key in OPTIMIZER_KEYS}}
    except SystemExit:
        return {"ok": False, "error": err.getvalue().strip().splitlines()[-1]}
    except Exception as exc:  # the validator reports with assert and ValueError alike
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        os.environ.clear()
        os.environ.update(saved_env)


print(json.dumps([check(case) for case in json.load(sys.stdin)]))
