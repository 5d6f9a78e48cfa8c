"""Run argv lists through Megatron-DeepSpeed's own argument parser and validator.

Run with Python 3.12 + torch, DeepSpeed 0.18.2 importable and the working directory at a patched
Megatron-DeepSpeed tree. Reads a JSON list of cases ``{"argv": [...], "world_size": N}`` on stdin
and prints one JSON result per case: ``{"ok": bool, "error": str, ...parsed values}``. Nothing is
stood in for: the parser, DeepSpeed's added arguments and ``validate_args`` are the real code.
"""

import contextlib
import io
import json
import os
import sys

sys.path.insert(0, os.getcwd())
from megatron.arguments import parse_args, validate_args  # noqa: E402

FIELDS = ("data_parallel_size", "recompute_granularity", "checkpoint_activations", "zero_stage",
          "deepspeed", "fp16", "bf16", "gradient_accumulation_fusion", "micro_batch_size",
          "global_batch_size", "seq_length", "sequence_parallel", "cpu_optimizer",
          "deepspeed_activation_checkpointing", "recompute_method")


def check(case: dict) -> dict:
    saved_env = dict(os.environ)
    os.environ.update({"WORLD_SIZE": str(case["world_size"]), "RANK": "0", "LOCAL_RANK": "0"})
    sys.argv = ["pretrain_gpt.py", *case["argv"]]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            args = validate_args(parse_args())
        return {"ok": True, "error": "", **{k: getattr(args, k, None) for k in FIELDS}}
    except SystemExit:
        return {"ok": False, "error": (err.getvalue().strip().splitlines() or ["exit"])[-1]}
    except Exception as exc:  # the validator reports with assert and ValueError alike
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        os.environ.clear()
        os.environ.update(saved_env)


if __name__ == "__main__":
    print(json.dumps([check(case) for case in json.loads(sys.stdin.read())]))
