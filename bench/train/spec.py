"""Which transformer layer spec and core attention the training entry builds, and what it refuses.

Vocabulary: the *attention choice* is one of

- ``te``: Megatron's Transformer Engine layer spec unchanged (``TEDotProductAttention``; fp8 possible);
- ``sdpa``: Megatron's layer spec for ``--transformer-impl`` with its core attention replaced by
  :class:`bench.train.attention.SDPACoreAttention` (torch fused attention);
- ``local``: Megatron's local layer spec unchanged (unfused ``DotProductAttention``, s×s scores).

``--kit-attention auto`` (the default) picks ``te`` under ``--transformer-impl transformer_engine`` and
``sdpa`` under ``--transformer-impl local``. The entry never rewrites Megatron's own flags: what the
planner emitted is what ran, so a missing flag is an error that names it.

``--kit-msamp-modules`` chooses the modules around MS-AMP's FP8 linears (``--kit-msamp``), which
need megatron-core's local layer spec: ``torch`` (the default) keeps that spec's layer norm (apex's
FusedLayerNorm where apex imports, else torch's LayerNorm) and the ``sdpa`` attention; ``te`` puts
Transformer Engine's ``TENorm`` into both norm slots and ``TEDotProductAttention`` in as core
attention (attention choice ``te``), the modules the TE fp8 mode runs (there fused into its
``TELayerNormColumnParallelLinear``), in bf16: MS-AMP's linears are the run's FP8.
"""

from __future__ import annotations

from argparse import Namespace

from bench.config.capabilities import Capabilities

ATTENTION_CHOICES = ("auto", "sdpa", "local", "te")
MSAMP_MODULES_CHOICES = ("torch", "te")


def resolve_attention(requested: str, transformer_impl: str, msamp_modules: str = "torch") -> str:
    """Turn ``--kit-attention`` into ``te``, ``sdpa`` or ``local`` for a ``--transformer-impl`` and
    ``--kit-msamp-modules`` (``te`` brings Transformer Engine's attention into the local layers)."""
    if requested not in ATTENTION_CHOICES:
        raise ValueError(f"--kit-attention {requested!r}: choose one of {', '.join(ATTENTION_CHOICES)}.")
    if transformer_impl not in ("local", "transformer_engine"):
        raise ValueError(
            f"--transformer-impl {transformer_impl!r} is not for training; use local or transformer_engine."
        )
    if msamp_modules == "te":
        if requested not in ("auto", "te"):
            raise ValueError(f"--kit-attention {requested} with --kit-msamp-modules te: the latter "
                             "brings Transformer Engine's attention; drop --kit-attention.")
        return "te"
    if requested == "auto":
        return "te" if transformer_impl == "transformer_engine" else "sdpa"
    if requested == "te" and transformer_impl != "transformer_engine":
        raise ValueError("--kit-attention te needs --transformer-impl transformer_engine.")
    if requested == "local" and transformer_impl != "local":
        raise ValueError("--kit-attention local needs --transformer-impl local.")
    return requested


def check_args(args: Namespace, attention: str, caps: Capabilities) -> list[str]:
    """Every problem with Megatron's parsed ``args`` for this environment, each naming its fix.

    An empty list means the entry can build and train the model. Checked before any process group
    or file exists, so a bad plan costs seconds, not a GPU allocation.
    """
    return [
        *_kernel_problems(args, attention, caps),
        *_precision_aware_problems(args, caps),
        *_paper_adam_problems(args),
        *_msamp_modules_problems(args, caps),
        *_entry_flag_problems(args, attention),
    ]


def _kernel_problems(args: Namespace, attention: str, caps: Capabilities) -> list[str]:
    """Fused kernels the arguments ask for that this environment lacks."""
    problems: list[str] = []
    if args.transformer_impl == "transformer_engine" and not caps.transformer_engine:
        problems.append(
            "Transformer Engine is not importable here: pass --transformer-impl local "
            "(the kit then uses SDPA attention)."
        )
    if args.gradient_accumulation_fusion and not caps.fused_wgrad:
        problems.append(
            "gradient accumulation fusion needs apex or Transformer Engine's fused_weight_gradient_mlp_cuda, "
            "which is missing: pass --no-gradient-accumulation-fusion."
        )
    if args.transformer_impl == "local" and not caps.apex_layer_norm:
        if not args.no_persist_layer_norm:
            problems.append(
                "without apex the local spec uses torch LayerNorm, which has no persistent kernel: "
                "pass --no-persist-layer-norm."
            )
        if args.sequence_parallel:
            problems.append(
                "--sequence-parallel needs Transformer Engine or apex layer norm; torch LayerNorm "
                "does not support it: drop --sequence-parallel or use an image with Transformer Engine."
            )
    if attention == "local" and args.masked_softmax_fusion and not caps.fused_softmax:
        problems.append(
            "the local attention's fused softmax kernel (scaled_upper_triang_masked_softmax_cuda) is "
            "missing: pass --no-masked-softmax-fusion."
        )
    if (
        args.position_embedding_type == "rope"
        and args.apply_rope_fusion
        and not caps.transformer_engine
    ):
        problems.append("RoPE fusion needs Transformer Engine: pass --no-rope-fusion.")
    return problems


def _precision_aware_problems(args: Namespace, caps: Capabilities) -> list[str]:
    """megatron-core's precision-aware optimizer needs Transformer Engine and megatron-core's Adam."""
    problems: list[str] = []
    if args.use_precision_aware_optimizer and not caps.transformer_engine:
        problems.append(
            "--use-precision-aware-optimizer steps with Transformer Engine's FusedAdam, which is not "
            "importable here (megatron-core's OptimizerConfig asks for it under --kit-paper-adam "
            "too): drop it and its --main-*-dtype/--exp-avg*-dtype flags, or use an image with "
            "Transformer Engine."
        )
    if args.use_precision_aware_optimizer and args.kit_msamp == "O2":
        problems.append(
            "--kit-msamp O2 replaces megatron-core's Adam with MS-AMP's LBAdamW, which has no "
            "precision-aware states: use --kit-msamp O1 with --use-precision-aware-optimizer, or drop it."
        )
    return problems


def _entry_flag_problems(args: Namespace, attention: str) -> list[str]:
    """Megatron flags that the kit's entry chooses itself, ignores or does not support."""
    problems: list[str] = []
    if args.spec is not None:
        problems.append("--spec is not used: the kit chooses the layer spec (see --kit-attention).")
    backend = getattr(args.attention_backend, "name", args.attention_backend)
    if attention != "te" and backend != "auto":
        problems.append(
            f"--attention-backend {backend} selects Transformer Engine backends; "
            "leave it at auto and choose with --kit-attention."
        )
    if args.kit_fp8_attention and (attention != "te" or not args.fp8):
        problems.append(
            "--kit-fp8-attention runs Transformer Engine's attention in FP8: it needs --fp8-format "
            "and --kit-attention te (Transformer Engine's layers); drop it otherwise."
        )
    if attention == "sdpa" and args.reset_attention_mask:
        problems.append(
            "--reset-attention-mask is ignored by causal SDPA attention: drop it or use --kit-attention local."
        )
    unsupported = {
        "sft": "--sft",
        "dataloader_inter_document_masking": "--dataloader-inter-document-masking",
        "hybrid_context_parallel": "--hybrid-context-parallel",
        "mtp_num_layers": "--mtp-num-layers",
        "sequence_packing_scheduler": "--sequence-packing-scheduler",
    }
    for name, flag in unsupported.items():
        if getattr(args, name, None):
            problems.append(f"{flag} is not supported by the kit's GPT pretraining entry: drop it.")
    return problems


def _paper_adam_problems(args: Namespace) -> list[str]:
    """``--kit-paper-adam`` steps the paper's states in megatron-core's precision-aware optimizer
    (bench.train.paper_adam): without that optimizer or with other dtypes it would not be built,
    or would refuse at the first step."""
    if not getattr(args, "kit_paper_adam", False):
        return []
    dtypes = tuple(str(getattr(args, name, None)).removeprefix("torch.")
                   for name in ("main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"))
    if args.use_precision_aware_optimizer and dtypes == ("float16", "uint8", "float16"):
        return []
    return ["--kit-paper-adam steps the FP8-LM paper's states in megatron-core's precision-aware "
            "optimizer: pass --use-precision-aware-optimizer --main-params-dtype fp16 "
            "--exp-avg-dtype fp8 --exp-avg-sq-dtype fp16 (--optimizer-states paper-kit renders "
            "them), or drop --kit-paper-adam."]


def _msamp_modules_problems(args: Namespace, caps: Capabilities) -> list[str]:
    """What stops ``--kit-msamp-modules te``: it surrounds MS-AMP's linears with TE's modules."""
    if args.kit_msamp_modules == "torch":
        return []
    problems = []
    if args.kit_msamp == "off":
        problems.append(
            f"--kit-msamp-modules {args.kit_msamp_modules} chooses the modules around MS-AMP's FP8 "
            "linears, and --kit-msamp is off: pass --kit-msamp O1 or O2, or drop --kit-msamp-modules."
        )
    if not caps.transformer_engine:
        problems.append(
            f"--kit-msamp-modules {args.kit_msamp_modules} builds Transformer Engine's TENorm and "
            "TEDotProductAttention, and Transformer Engine is not importable here: drop "
            "--kit-msamp-modules (torch's layer norm and SDPA attention) or use an image with it."
        )
    if args.fp8 is not None:
        # Under a TE fp8 recipe megatron-core would run the layers in TE's fp8 autocast, beside
        # MS-AMP's own FP8: the modules would no longer be the bf16 ones the A/B compares.
        problems.append(
            f"--fp8-format {args.fp8} turns on Transformer Engine's fp8 autocast around TE's modules, "
            "and MS-AMP's linears are this run's FP8: drop --fp8-format."
        )
    return problems


def layer_spec_provider(attention: str, fp8_linears: bool = False, te_modules: bool = False):
    """Return a ``transformer_layer_spec`` callable for ``GPTModelConfig`` (None keeps Megatron's).

    The callable builds Megatron's default spec for the config (TE or local, as
    ``--transformer-impl`` says), swaps in :class:`SDPACoreAttention` for ``sdpa``, with
    ``te_modules`` (``--kit-msamp-modules te``) Transformer Engine's norms and attention
    (:func:`with_te_modules`), and with ``fp8_linears`` (``--kit-msamp``) MS-AMP's FP8 linears
    (:func:`bench.train.msamp.with_fp8_linears`).
    """
    if attention in ("te", "local") and not (fp8_linears or te_modules):
        return None

    def kit_layer_spec(config, vp_stage=None):
        from megatron.training.models.gpt import default_layer_spec

        spec = default_layer_spec(config, vp_stage)
        if te_modules:
            spec = with_te_modules(spec)
        if attention == "sdpa":
            from bench.train.attention import SDPACoreAttention

            spec = with_core_attention(spec, SDPACoreAttention)
        if fp8_linears:
            from bench.train.msamp import with_fp8_linears

            spec = with_fp8_linears(spec)
        return spec

    return kit_layer_spec


def with_core_attention(spec, core_attention):
    """Set ``core_attention`` in a layer spec's self-attention (the spec objects are fresh per call)."""
    submodules = getattr(spec, "submodules", None)
    attention = getattr(submodules, "self_attention", None)
    if attention is None or not hasattr(getattr(attention, "submodules", None), "core_attention"):
        raise ValueError(
            f"layer spec {getattr(spec, 'module', spec)!r} has no self_attention.core_attention to replace; "
            "use --kit-attention te or local for this model."
        )
    attention.submodules.core_attention = core_attention
    return spec


def with_te_modules(spec):
    """Transformer Engine's ``TENorm`` in a local layer spec's two norm slots and
    ``TEDotProductAttention`` as its core attention (``--kit-msamp-modules te``).

    TE's own spec fuses each norm into the linear after it (``TELayerNormColumnParallelLinear`` as
    ``linear_qkv`` and ``linear_fc1``), which would replace MS-AMP's linears; the standalone
    ``TENorm`` runs TE's layer norm before them instead (what that cannot take over: under fp8 TE's
    fused module can write the norm's output in fp8 for its GEMM, where MS-AMP's linear casts the
    bf16 output itself). Bias + GeLU stays megatron-core's
    jit-fused ``bias_gelu`` in its MLP, the kernel the TE spec's MLP runs too (megatron-core's MLP
    around TE's linears); TE fuses it only inside its LayerNormMLP / op fuser, which would replace
    MS-AMP's fc1. TE's causal attention takes no mask tensor (the dataloader's is ignored, as under
    the TE spec), and with no ``--fp8-format`` the layers run outside TE's fp8 autocast, in bf16.
    """
    from megatron.core.extensions.transformer_engine import TEDotProductAttention, TENorm
    from megatron.core.transformer.identity_op import IdentityOp

    layer = spec.submodules
    for slot in ("input_layernorm", "pre_mlp_layernorm"):
        if getattr(layer, slot, IdentityOp) is IdentityOp:
            # TE's spec leaves the slots empty (its norms are fused into the linears): a norm here
            # would normalize twice.
            raise ValueError(f"layer spec {getattr(spec, 'module', spec)!r} has no {slot} to replace; "
                             "--kit-msamp-modules te needs --transformer-impl local.")
        setattr(layer, slot, TENorm)
    return with_core_attention(spec, TEDotProductAttention)
