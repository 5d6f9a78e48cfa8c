"""Checks of a run's options that need no GPU: the planner runs them before anything is launched.

Each refusal is one sentence naming the option, the value and the fix. What they guard against is a
run that would start and then waste its GPU time (too few iterations to measure), or a value the
kit would silently replace or drop (``--gbs 0`` meaning "the default", ``--queue`` on Slurm), or a
value that would change meaning on the way to the launcher (``--data-path=--load`` becoming a
Megatron flag of its own).
"""

from __future__ import annotations

from bench.config.capabilities import Capabilities
from bench.config.platforms import Platform
from bench.config.precisions import MSAMP_PRECISIONS, Precision
from bench.config.run_options import (
    DEFAULT_MSAMP_MODULES,
    DEFAULT_MSAMP_SCALING,
    FP8_GRAD_REDUCE,
    RECOMPUTE,
    misplaced,
)
from bench.measure.protocol import MIN_WINDOW_ITERS, WARMUP_ITERS
from bench.planning.engines.base import capabilities_source
from bench.planning.layout import Layout
from bench.planning.options import Options
from bench.planning.tuning import Tuning, flag_names

MIN_ITERS = WARMUP_ITERS + MIN_WINDOW_ITERS
"""The fewest training iterations a run can be measured with: the warm-up plus the window."""

# Options holding a count; None means "the default", so 0 is refused rather than read as unset.
_COUNTS = (("gpus", "--gpus"), ("nodes", "--nodes"), ("mbs", "--mbs"), ("gbs", "--gbs"))

# Upper bounds, far above any benchmark (GPT-3 trained with a batch of 1536 sequences; a run
# measures tens to thousands of iterations): a typo of 10**30 is refused, not planned.
MAX_BATCH = 1 << 20
MAX_ITERS = 10_000_000
_BOUNDED = (("mbs", "--mbs", MAX_BATCH), ("gbs", "--gbs", MAX_BATCH),
            ("iters", "--iters", MAX_ITERS))

# Options whose value becomes an argument of its own for Megatron, the container runtime or the
# scheduler (PBS directives take "-A value"): a value starting with '-' would be read as a flag.
_FREE_TEXT = (("data_path", "--data-path"), ("vocab_file", "--vocab-file"),
              ("merge_file", "--merge-file"), ("image", "--image"), ("account", "--account"),
              ("partition", "--partition"), ("queue", "--queue"), ("walltime", "--walltime"))

# Job options by scheduler: Slurm has partitions and no queues, PBS queues and no partitions.
JOB_OPTIONS = {
    "slurm": ("account", "partition", "walltime"),
    "pbs": ("account", "queue", "walltime"),
    "none": (),
}
_WHY_NOT = {
    ("slurm", "queue"): "Slurm has partitions, not queues: use --partition",
    ("pbs", "partition"): "PBS has queues, not partitions: use --queue",
}


def check_options(options: Options, platform: Platform, engine: str) -> None:
    """Refuse what cannot run as asked; raises ValueError naming the option and the fix."""
    if options.recompute not in (None, *RECOMPUTE):
        raise ValueError(f"--recompute {options.recompute}: use one of {', '.join(RECOMPUTE)}")
    if options.seq_length is not None and options.seq_length < 1:
        raise ValueError(f"--seq-length must be at least 1, got {options.seq_length}")
    if options.save_interval is not None and (options.save is None or options.save_interval < 1):
        raise ValueError("--save-interval needs --save, and at least 1 iteration")
    if options.repeat is not None and options.repeat < 1:
        raise ValueError(f"a repeat is numbered from 1, got {options.repeat}")
    for key, flag in _COUNTS:
        value = getattr(options, key)
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value} (leave it out for the "
                             "default)")
    for key, flag, most in _BOUNDED:
        value = getattr(options, key)
        if value is not None and value > most:
            raise ValueError(f"{flag} must be at most {most:,}, got {str(value)[:40]}")
    if options.iters < MIN_ITERS:
        raise ValueError(f"--iters {options.iters} is too few to measure: the protocol needs at "
                         f"least {MIN_ITERS} ({WARMUP_ITERS} warm-up iterations, then a window of "
                         f"{MIN_WINDOW_ITERS}; see bench/measure/protocol.py)")
    for key, flag in _FREE_TEXT:
        value = getattr(options, key)
        if value is not None and not value.strip():
            # An empty value (a shell variable that was never set) would read as "not given":
            # for --data-path that is mock data, which the user did not ask for.
            raise ValueError(f"{flag} is empty: give a value, or leave {flag} out")
        if value is not None and value.startswith("-"):
            raise ValueError(f"{flag} '{value}' looks like a flag, and would be read as one "
                             f"where it is passed on; give a value that does not start with "
                             f"'-' (a file so named: ./{value})")
    _check_applies(options, platform, engine)


def _check_applies(options: Options, platform: Platform, engine: str) -> None:
    """Refuse options that the platform or engine would otherwise silently ignore."""
    for key in ("account", "partition", "queue", "walltime"):
        if getattr(options, key) is None or key in JOB_OPTIONS[platform.scheduler]:
            continue
        why = _WHY_NOT.get((platform.scheduler, key))
        if why is None:  # no scheduler: a run on this machine
            why = (f"platform {platform.name} runs on this machine, with no scheduler"
                   + (" (limit a run with --timeout)" if key == "walltime" else ""))
        raise ValueError(f"--{key} does not apply on platform {platform.name}: {why}")
    if options.image_msamp and platform.capabilities is None:
        raise ValueError(f"--image-option msamp=1 declares an image, but {platform.name} detects "
                         "what its Python has (MS-AMP included): drop --image-option")
    if options.image_msamp and not options.image:
        raise ValueError("--image-option msamp=1 says what an --image was built with, and the "
                         f"platform's image ({platform.image}) has no MS-AMP: give --image too")
    if options.image is not None and platform.container_runtime == "none":
        raise ValueError(f"--image does not apply on platform {platform.name}: it runs in the "
                         "Python environment the kit is started from (container_runtime none)")
    refusal = misplaced(options, engine)  # a setting the engine would ignore
    if refusal is not None:
        raise ValueError(refusal)


def pbs_queue(platform: Platform, nodes: int) -> str | None:
    """The queue a job of ``nodes`` nodes goes to: the one asked for (``--queue`` or the platform's
    ``queue``), checked against the platform's queue limits, else the first of its ``queues`` that
    takes the job; None where the platform lists no queues. A ValueError names the right queue."""
    queues = platform.job.queues
    if not queues:
        return None
    where = f"{platform.source or platform.name} [job] queues"
    fitting = [q for q in queues if q.takes(nodes, platform.job.walltime)]
    asked = next((q for q in queues if q.name == platform.job.queue), None)
    if asked is not None and asked not in fitting:
        fix = f"use --queue {fitting[0].name}" if fitting else "use fewer nodes or a shorter --walltime"
        raise ValueError(f"queue {asked.limits()} cannot take {nodes} node(s) for "
                         f"{platform.job.walltime} ({where}): {fix}, or leave --queue out to have "
                         "the queue chosen from the node count")
    if platform.job.queue:  # a queue the data does not list: the site's own choice
        return platform.job.queue
    if not fitting:
        raise ValueError(f"no queue of {platform.name} takes {nodes} node(s) for "
                         f"{platform.job.walltime}: {', '.join(q.limits() for q in queues)} "
                         f"({where}); change --nodes or --walltime, or name another queue of the site with "
                         "--queue")
    return fitting[0].name


def check_resolved(precision: Precision, layout: Layout, tuning: Tuning, caps: Capabilities,
                   platform: Platform) -> None:
    """The refusals that need the resolved plan: its precision, its layout on the run's GPUs and
    the capabilities of its training environment, with the A/B settings the user asked for."""
    check_msamp_scaling(tuning.msamp_scaling, precision)
    check_msamp_layout(precision, layout)
    check_grad_reduce_layout(tuning.grad_reduce, layout)
    check_optimizer_states(tuning.optimizer_states, precision, tuning.grad_reduce, caps, platform)
    check_msamp_modules(tuning.msamp_modules, precision, caps, platform)
    check_deferred_embedding_wgrad(tuning.extra_args, layout, caps)
    check_layers(tuning, precision, layout, caps, platform)


def check_layers(tuning: Tuning, precision: Precision, layout: Layout, caps: Capabilities,
                 platform: Platform) -> None:
    """``--layers te`` needs Transformer Engine where the run trains, and a precision whose layers
    it builds; ``--layers local`` builds megatron-core's local layers, so what needs Transformer
    Engine's (its fp8, its CUDA graphs) is refused with it, and sequence parallelism needs apex's
    layer norm there. (The engine it applies to is checked with the other settings': ``misplaced``.)"""
    layers, where = tuning.layers, capabilities_source(platform)
    if layers == "te" and not caps.transformer_engine:
        raise ValueError("--layers te builds Transformer Engine's layers, and this environment has "
                         f"no Transformer Engine ({where}): use an image with it, or --layers auto")
    if layers == "te" and precision.msamp:
        raise ValueError(f"--layers te with --precision {precision.name}: MS-AMP's FP8 linears go "
                         "into megatron-core's local layers (--msamp-modules te puts Transformer "
                         "Engine's layer norm and attention around them): drop --layers te")
    if layers != "local":
        return
    if precision.fp8_linears == "Transformer Engine":
        raise ValueError(f"--layers local with --precision {precision.name}: its fp8 runs in "
                         "Transformer Engine's layers: use --layers auto or te, or --precision bf16")
    if tuning.graphs:
        raise ValueError(f"--layers local with --cuda-graphs {tuning.cuda_graphs}: Transformer "
                         "Engine's graphs capture Transformer Engine's layers: drop --cuda-graphs, "
                         "or use --layers auto or te")
    if layout.sp and not caps.apex_layer_norm:
        raise ValueError(f"--layers local with layout {layout.name}: megatron-core's local layers "
                         "run sequence parallelism only with apex's layer norm, which this "
                         f"environment lacks ({where}): drop 'sp', or use --layers auto or te")


DEFER_EMBEDDING_WGRAD = "--defer-embedding-wgrad-compute"


def check_deferred_embedding_wgrad(extra: tuple[str, ...], layout: Layout, caps: Capabilities) -> None:
    """Megatron defers the output layer's weight gradient to the pipeline's flush, inside the fused
    weight-gradient accumulation: it refuses the flag at start-up without a pipeline or that kernel."""
    if DEFER_EMBEDDING_WGRAD not in flag_names(extra):
        return
    if layout.pp == 1:
        raise ValueError(f"{DEFER_EMBEDDING_WGRAD} overlaps the output layer's weight gradient with "
                         f"the pipeline's flush, and {layout.name} has no pipeline (pp 1): drop it, "
                         "or use a layout with pp > 1")
    if not caps.fused_wgrad:
        raise ValueError(f"{DEFER_EMBEDDING_WGRAD} needs the fused weight-gradient accumulation "
                         "(apex's fused_weight_gradient_mlp_cuda), which this training environment "
                         "lacks: build apex (python -m bench.running.provision setup --builds "
                         "te,apex) or drop the flag")


def check_grad_reduce_layout(grad_reduce: str, layout: Layout) -> None:
    """The FP8 gradient reduction needs data-parallel ranks to reduce over."""
    if grad_reduce in FP8_GRAD_REDUCE and layout.dp == 1:
        raise ValueError(f"--grad-reduce {grad_reduce} reduces gradients over data-parallel ranks, and "
                         f"{layout.name} on {layout.gpus} GPU(s) has dp 1: give more GPUs than "
                         f"tp x pp x cp ({layout.tp * layout.pp * layout.cp}), or drop --grad-reduce")


def check_optimizer_states(states: str, precision: Precision, grad_reduce: str, caps: Capabilities,
                           platform: Platform) -> None:
    """``--optimizer-states paper`` steps with Transformer Engine's FusedAdam from bf16 main
    gradients, in place of megatron-core's Adam, ``paper-kit`` with the kit's PaperAdamW on the
    same states: refuse what would not run so. Both need Transformer Engine: megatron-core's
    ``OptimizerConfig`` refuses its precision-aware optimizer when TE's FusedAdam cannot be
    imported (megatron/core/optimizer/optimizer_config.py, 0.19.2 line 450), whichever Adam steps."""
    if states == "default":
        return
    if precision.msamp_level == "O2":
        raise ValueError(f"--optimizer-states {states} with --precision {precision.name}: its Adam is "
                         "MS-AMP's LBAdamW, which keeps its own fp8/fp16 moments; use --precision "
                         "msamp-o1 for MS-AMP's FP8 linears with the paper's optimizer states, or "
                         "drop --optimizer-states")
    if precision.half == "fp16":
        # An fp16 master copy of fp16 weights would add memory and no precision.
        raise ValueError(f"--optimizer-states {states} is a bf16 recipe (bf16 weights and main "
                         "gradients, an fp16 master copy); under --precision fp16 the weights are "
                         "fp16 themselves: use --precision bf16, fp8-delayed, fp8-current or "
                         "msamp-o1")
    if grad_reduce == "fp32":
        # Megatron would not refuse: bf16 main gradients turn its fp32 accumulation off unasked.
        raise ValueError(f"--optimizer-states {states} reads bf16 main gradients, and --grad-reduce "
                         "fp32 asks for fp32 ones, which Megatron would silently drop: drop "
                         "--grad-reduce fp32")
    if not caps.transformer_engine:
        steps = ("which steps with Transformer Engine's FusedAdam" if states == "paper" else
                 "whose configuration megatron-core refuses unless Transformer Engine's FusedAdam "
                 "can be imported, though the kit's PaperAdamW steps")
        raise ValueError(f"--optimizer-states {states} is megatron-core's precision-aware "
                         f"optimizer, {steps}, and this environment has no Transformer Engine "
                         f"({capabilities_source(platform)}): use an image with it, "
                         "or drop --optimizer-states")


def check_msamp_scaling(scaling: str, precision: Precision) -> None:
    """``--msamp-scaling`` sets how MS-AMP's FP8 linear scales; under another precision no MS-AMP
    linear runs, and the run would be recorded as a variant of a setting that did nothing."""
    if scaling != DEFAULT_MSAMP_SCALING and not precision.msamp:
        raise ValueError(f"--msamp-scaling {scaling} with --precision {precision.name}: it is how "
                         f"MS-AMP's FP8 linear scales, and {precision.name} runs no MS-AMP; use --precision "
                         f"{', '.join(MSAMP_PRECISIONS)}, or drop --msamp-scaling")


def check_msamp_modules(modules: str, precision: Precision, caps: Capabilities,
                        platform: Platform) -> None:
    """``--msamp-modules te`` puts Transformer Engine's layer norm and attention around MS-AMP's
    FP8 linears: it needs MS-AMP's linears to be there, and Transformer Engine to build them."""
    if modules == DEFAULT_MSAMP_MODULES:
        return
    if not precision.msamp:
        raise ValueError(f"--msamp-modules {modules} with --precision {precision.name}: it chooses "
                         f"the modules around MS-AMP's FP8 linears, and {precision.name} runs no MS-AMP "
                         "(fp8-delayed and fp8-current are Transformer Engine's modules throughout); "
                         f"use --precision {', '.join(MSAMP_PRECISIONS)}, or drop --msamp-modules")
    if not caps.transformer_engine:
        raise ValueError(f"--msamp-modules {modules} builds Transformer Engine's layer norm and "
                         "attention, and this environment has no Transformer Engine "
                         f"({capabilities_source(platform)}): use an image with it, or drop "
                         "--msamp-modules")


def check_msamp_layout(precision: Precision, layout: Layout) -> None:
    """MS-AMP's FP8 linear on megatron-core (bench.train.msamp) is wired for one tensor-parallel
    rank without sequence parallelism; anything else would stop at the first forward."""
    if not precision.msamp or layout.tp == 1:  # sp needs tp > 1
        return
    why = "sequence parallelism ('sp')" if layout.sp else f"tensor parallelism (tp{layout.tp})"
    raise ValueError(f"--precision {precision.name} with layout {layout.name}: MS-AMP's FP8 linear on "
                     f"megatron-core does not do {why}; use tp1 without 'sp' (split the model "
                     "with pp, and dp for the rest), or --precision fp8 (Transformer Engine)")


ACCOUNT_PLACEHOLDER = "<PROJECT>"
"""What a dry run's script shows where a site needs an account and none was given."""


def missing_account(platform: Platform, shown: str = "") -> str | None:
    """What to do when the site refuses jobs without an account and none was given, else None:
    a submit refuses with it (:func:`bench.running.jobs.submit.check_submittable`)."""
    if not (platform.job.account_required and not platform.job.account):
        return None
    return (f"{platform.name} needs an account for its jobs{shown}: pass --account PROJECT or set "
            "BENCH_ACCOUNT")


def account_note(platform: Platform) -> list[str]:
    """A dry run's note where the account is missing: its script shows the placeholder."""
    missing = missing_account(platform, f", shown as {ACCOUNT_PLACEHOLDER} in this script")
    return [f"{missing} to submit it"] if missing else []
