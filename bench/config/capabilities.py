"""What the training environment has, and the Megatron flags that follow from it.

*Capabilities* are the optional CUDA extensions Megatron-Core uses when they import: Transformer
Engine (its layer spec, fp8, sequence parallelism), apex's fused layer norm, the fused
weight-gradient accumulation kernel (apex's ``fused_weight_gradient_mlp_cuda``; Megatron's output
layer needs it even under Transformer Engine), the fused masked softmax of the local attention, and
MS-AMP (the msamp-o1/msamp-o2/fp4 precisions; the kit's CUDA image has it only when built with
``--option msamp=1``).

The planner and the training entry agree through this module: a local plan *detects* them in the
Python that will train (``bench.running.trainenv``'s probe calls :func:`detect` there), a cluster
platform *declares* them with its image (``[capabilities]`` in ``platforms/<name>.toml``), and
:func:`megatron_flags` turns them into the only environment flags a plan carries. No user adds a
flag for the environment.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, fields, replace

# A probe imports torch, megatron-core and Transformer Engine: seconds, not minutes.
PROBE_TIMEOUT_S = 120


@dataclass(frozen=True)
class Capabilities:
    """Optional CUDA extensions present where the run trains (all False: plain torch)."""

    transformer_engine: bool = False  # transformer_engine.pytorch imports
    apex_layer_norm: bool = False  # apex FusedLayerNorm (else torch LayerNorm: no sequence parallel)
    fused_wgrad: bool = False  # fused_weight_gradient_mlp_cuda: gradient accumulation fusion
    fused_softmax: bool = False  # scaled_upper_triang_masked_softmax_cuda: the local attention's fusion
    msamp: bool = False  # msamp imports (MS-AMP: the msamp-o1/msamp-o2/fp4 precisions)

    @property
    def sequence_parallel(self) -> bool:
        """Whether the layers can run sequence parallelism: Transformer Engine's, or the local
        ones with apex's layer norm."""
        return self.transformer_engine or self.apex_layer_norm

    def describe(self) -> str:
        """One line for a dry run, e.g. ``Transformer Engine yes, apex layer norm no, ...``."""
        words = {"transformer_engine": "Transformer Engine", "apex_layer_norm": "apex layer norm",
                 "fused_wgrad": "fused wgrad accumulation", "fused_softmax": "fused softmax",
                 "msamp": "MS-AMP"}
        return ", ".join(f"{words[f.name]} {'yes' if getattr(self, f.name) else 'no'}"
                         for f in fields(self))

    @classmethod
    def from_dict(cls, raw: dict[str, object], where: str) -> Capabilities:
        """From a TOML table or the probe's JSON; unknown keys and non-booleans are refused."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(raw) - set(names))
        if unknown:
            raise ValueError(f"{where}: unknown capability {', '.join(unknown)}; known: {', '.join(names)}")
        for key, value in raw.items():
            if not isinstance(value, bool):
                raise ValueError(f"{where}: capability '{key}' must be true or false")
        return cls(**raw)  # type: ignore[arg-type]


def for_layers(caps: Capabilities, layers: str) -> Capabilities:
    """The capabilities the layers are built with under ``--layers`` (bench.config.run_options
    ``LAYERS``): ``local`` builds megatron-core's local layers, so Transformer Engine goes unused
    even where it imports (``auto`` and ``te`` take what the environment has; the planner refuses
    ``te`` without it)."""
    return replace(caps, transformer_engine=False) if layers == "local" else caps


def megatron_flags(caps: Capabilities) -> list[str]:
    """The layer implementation, then one flag per Megatron default that wants a missing extension."""
    flags = ["--transformer-impl", "transformer_engine" if caps.transformer_engine else "local"]
    if not caps.transformer_engine:
        flags.append("--no-rope-fusion")  # TE's fused RoPE (read only with rope embeddings)
    if not caps.fused_wgrad:
        flags.append("--no-gradient-accumulation-fusion")
    if not caps.transformer_engine and not caps.apex_layer_norm:
        flags.append("--no-persist-layer-norm")  # torch LayerNorm has no persistent kernel
    if not caps.fused_softmax:
        flags.append("--no-masked-softmax-fusion")  # only the local attention reads it
    return flags


def implementation(caps: Capabilities) -> str:
    """What builds a Megatron-engine run's layers under :func:`megatron_flags` (a record's
    ``implementation``): ``te+apex`` (Transformer Engine with apex's fused weight-gradient
    accumulation), ``te`` or ``local`` (torch layers and SDPA attention)."""
    if not caps.transformer_engine:
        return "local"
    return "te+apex" if caps.fused_wgrad else "te"


def layers_of(argv: tuple[str, ...] | list[str]) -> str:
    """What built a Megatron-engine run's layers, read back from its argv: ``TE+apex``, ``TE`` or
    ``no TE`` (torch layers and SDPA attention); "" for argv that does not choose (other engines)."""
    if "--transformer-impl" not in argv:
        return ""
    impl = argv[list(argv).index("--transformer-impl") + 1]
    if impl != "transformer_engine":
        return "no TE"
    return "TE" if "--no-gradient-accumulation-fusion" in argv else "TE+apex"


def detect() -> Capabilities:
    """Read the availability flags megatron.core itself computes at import (needs megatron-core)."""
    import importlib.util

    from megatron.core.extensions.transformer_engine import HAVE_TE
    from megatron.core.models.gpt.gpt_layer_specs import HAVE_APEX
    from megatron.core.tensor_parallel.layers import _grad_accum_fusion_available

    return Capabilities(
        transformer_engine=bool(HAVE_TE),
        apex_layer_norm=bool(HAVE_APEX),
        fused_wgrad=bool(_grad_accum_fusion_available),
        fused_softmax=importlib.util.find_spec("scaled_upper_triang_masked_softmax_cuda") is not None,
        msamp=msamp_importable(),
    )


def msamp_importable() -> bool:
    """Whether ``import msamp`` works: present is not enough (an MS-AMP without patches/ms-amp fails
    at import on Transformer Engine 2.x).

    Tried in a child process: an MS-AMP that imports ``msamp.te`` overrides Transformer Engine
    functions for the whole process (msamp/te/extension.py), which a bf16 or fp8 run must not get.
    """
    import importlib.util

    if importlib.util.find_spec("msamp") is None:
        return False
    try:
        done = subprocess.run([sys.executable, "-c", "import msamp"], capture_output=True,
                              timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
