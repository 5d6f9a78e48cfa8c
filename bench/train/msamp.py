"""MS-AMP behind ``--kit-msamp {O1,O2}`` (the msamp-o1 / msamp-o2 / fp4 precisions).

The MS-AMP seed trains with a 2023 Megatron-LM patched where MS-AMP hooks in: the model's linear
layers become MS-AMP's fp8 modules (``msamp.te.TeReplacer`` under Transformer Engine), data
parallelism and the distributed optimizer become ``msamp.megatron``'s FP8 ones, and Adam becomes
``msamp.optim.LBAdamW`` (O1: fp32 moments; O2: fp8 first and fp16 second moment). The fp4 precision
is O2 with MS-AMP's FP4 simulation switched on by environment (``FP4_SIMULATION_ENV``).

This module checks, before anything is built, that this Python can do that with megatron-core 0.19:
MS-AMP must import (else the install hint), its Megatron integration must import, and the FP4
switches must agree with the level. The integration of MS-AMP 9746ea8 targets 2023 Megatron-LM
(``msamp/megatron/distributed.py`` imports ``megatron.model.distributed``,
``msamp/megatron/optimizer/distrib_optimizer.py`` imports ``megatron.optimizer``), which
megatron-core 0.19 does not have; the port of those two hooks is not built, so a run that passes the
import checks is still refused, naming what is missing, rather than training without MS-AMP.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from bench.config.precisions import FP4_SIMULATION_ENV

MSAMP_CHOICES = ("off", "O1", "O2")
INSTALL_HINT = ("build the image with `python -m bench images build cuda --option msamp=1` (MS-AMP "
                "9746ea8 with patches/ms-amp), or use --precision fp8")
# What the seed's patch takes from MS-AMP and a megatron-core port would use too: the TE module
# replacer and the low-bit Adam (msamp.megatron, the third, cannot import with megatron-core 0.19).
MEGATRON_HOOKS = ("msamp.te", "msamp.optim")
NOT_PORTED = ("MS-AMP's FP8 data-parallel and distributed-optimizer hooks are not ported to "
              "megatron-core 0.19's DistributedDataParallel / DistributedOptimizer (msamp.megatron "
              "targets Megatron-LM 2023); train with --precision fp8 until they are")


def fp4_switches(env: Mapping[str, str]) -> list[str]:
    """The FP4 simulation variables set to 1 in ``env``."""
    return [name for name, _ in FP4_SIMULATION_ENV if env.get(name, "0") == "1"]


def msamp_problem(level: str, env: Mapping[str, str]) -> str | None:
    """What stops ``--kit-msamp level`` in this Python and environment, in one line.

    None only with MS-AMP off and no FP4 switch set: until the port exists, every level is refused.
    """
    switches = fp4_switches(env)
    if level == "off":
        if switches:
            return (f"{', '.join(switches)} set, but MS-AMP is off: the FP4 simulation needs "
                    "--kit-msamp O2 (--precision fp4), or unset them")
        return None
    try:
        importlib.import_module("msamp")
    except ImportError as error:
        return (f"--kit-msamp {level} needs MS-AMP, which this Python cannot import ({error}): "
                f"{INSTALL_HINT}")
    if switches and level != "O2":
        return (f"the FP4 simulation ({', '.join(switches)}) runs with --kit-msamp O2 (--precision "
                f"fp4), not {level}")
    for module in MEGATRON_HOOKS:
        try:
            importlib.import_module(module)
        except ImportError as error:
            return (f"--kit-msamp {level}: {module} does not import with this torch/Transformer "
                    f"Engine ({error}); patches/ms-amp covers what is known")
    return f"--kit-msamp {level}: {NOT_PORTED}"
