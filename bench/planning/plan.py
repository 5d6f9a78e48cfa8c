"""The one launch planner: (preset, layout, platform, options) -> a frozen LaunchPlan.

``plan`` is pure: it reads no clock, environment or hardware. Whatever it needs from the world (the
time for the run id, the GPUs present on the local machine) comes in through ``Options``. Renderers
in ``bench.render`` turn a plan into a Slurm script, a PBS script or a torchrun command line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from bench.config.capabilities import Capabilities
from bench.config.platforms import Accelerator, Platform, load_accelerator, match_accelerator, with_job_overrides
from bench.config.precisions import MSAMP_PRECISIONS, peak_format, resolve_precision
from bench.config.presets import Preset
from bench.measure.flops import RECOMPUTE
from bench.planning.checks import check_options
from bench.planning.engines.common import checkpoint_flags, precision_env
from bench.planning.engines.deepspeed import (
    DEFAULT_ZERO_SETTINGS,
    DS_CONFIG_NAME,
    deepspeed_args,
    ds_config_json,
    zero_problems,
    zero_stage,
)
from bench.planning.engines.megatron import ENTRY, megatron_args
from bench.planning.layout import Layout, LayoutSpec, build_layout, parse_layout_name
from bench.planning.memory import GB, check_fits, estimate_bytes, grad_bytes
from bench.planning.options import Options
from bench.planning.tuning import Tuning, check_extra_args

MASTER_PORT = 29500
RUNS_DIR = "runs"


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to launch one run; renderers only format it."""

    run_id: str
    preset: Preset
    layout: Layout
    platform: Platform
    accelerator: Accelerator | None  # None: not known (no GPU detected on an "auto" platform)
    engine: str
    precision: str
    nodes: int
    gpus_per_node: int
    iters: int
    image: str
    entry: tuple[str, ...]  # what python runs: ("-m", "bench.train.pretrain_gpt") or a script
    train_args: tuple[str, ...]  # engine flags after the entry
    env: tuple[tuple[str, str], ...]  # exported before launch, in this order
    ds_config: str | None = None  # DeepSpeed JSON text, written beside the job script
    # What the plan assumed the training environment has (platform data, or detected locally).
    capabilities: Capabilities = Capabilities()
    notes: tuple[str, ...] = field(default=())  # what the user should know (e.g. missing GPUs)
    # Settings away from the kit's defaults (bench.planning.tuning, ZeRO settings, sequence length),
    # recorded in the run's notes.
    variant: tuple[tuple[str, str], ...] = field(default=())
    # How the run was made (sweep, repeat group, campaign), recorded in the run's notes too.
    labels: tuple[tuple[str, str], ...] = field(default=())
    memory_gb: float = 0.0  # estimated peak per GPU (bench.planning.memory)
    recompute: str | None = None  # activation recompute (bench.measure.flops counts it as hardware FLOPs)

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def in_docker(self) -> bool:
        """A run on this machine inside ``image``, started by ``docker run`` (bench.render.docker)."""
        return self.platform.container_runtime == "docker" and bool(self.image)

    @property
    def run_dir(self) -> str:
        return f"{RUNS_DIR}/{self.run_id}"

    @property
    def train_argv(self) -> tuple[str, ...]:
        """The per-rank command: ``python <entry> <flags>``."""
        return ("python", *self.entry, *self.train_args)

    @property
    def peak_tflops(self) -> float | None:
        return self.accelerator.peak(self.precision) if self.accelerator else None

    @property
    def bf16_peak_tflops(self) -> float | None:
        """The bf16 dense peak, for precisions measured against another one (fp8); else None."""
        if self.accelerator is None or peak_format(self.precision) == "bf16":
            return None
        return self.accelerator.peak_tflops.get("bf16")


def run_id(preset: str, layout: str, platform: str, now: datetime) -> str:
    """``{preset}_{layout}_{platform}_{UTC timestamp}``, e.g. ``13b_tp2pp8dp1_lumi_20261121T201500Z``."""
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{preset}_{layout}_{platform}_{stamp}"


def _run_size(spec: LayoutSpec, platform: Platform, options: Options) -> tuple[int, int, int]:
    """(gpus, nodes, gpus_per_node) for the run, checked against the platform."""
    if platform.scheduler == "none":
        if options.nodes not in (None, 1):
            raise ValueError(f"platform {platform.name} is one machine: --nodes must be 1")
        gpus = options.local_gpus or spec.model_parallel_gpus
        if options.gpus_present and gpus > options.gpus_present:
            raise ValueError(f"--gpus {gpus} but this machine has {options.gpus_present} GPUs")
        return gpus, 1, gpus
    per_node = platform.gpus_per_node
    if options.gpus and options.nodes and options.gpus != options.nodes * per_node:
        raise ValueError(f"--gpus {options.gpus} and --nodes {options.nodes} disagree: "
                         f"{platform.name} has {per_node} GPUs per node")
    if options.nodes:
        return options.nodes * per_node, options.nodes, per_node
    gpus = options.gpus or spec.model_parallel_gpus
    if gpus <= per_node:
        return gpus, 1, gpus
    if gpus % per_node:
        raise ValueError(f"{gpus} GPUs do not fill whole nodes of {per_node} on {platform.name}; "
                         f"use a multiple of {per_node} (e.g. --gpus "
                         f"{math.ceil(gpus / per_node) * per_node})")
    return gpus, gpus // per_node, per_node


def _accelerator(platform: Platform, options: Options) -> Accelerator | None:
    if platform.accelerator != "auto":
        return load_accelerator(platform.accelerator)
    return match_accelerator(options.gpu_name) if options.gpu_name else None


def _memory(preset: Preset, layout: Layout, engine: str, precision: str,
            accelerator: Accelerator | None, per_node: int, tuning: Tuning,
            force: bool, node_gpus: int | None = None) -> tuple[float, str]:
    """(estimated GB per GPU, a note saying it); a ValueError when it cannot fit, unless forced."""
    grad = grad_bytes(engine, precision, tuning.grad_reduce_bf16)
    zero_stage = layout.zero or 1  # DeepSpeed's default stage 1 shards like the distributed optimizer
    need = estimate_bytes(preset, layout, grad, zero_stage) / GB
    if accelerator is None:
        return need, f"memory estimate: ~{need:.1f} GB per GPU (device memory unknown: not checked)"
    if not force:
        check_fits(preset, layout, accelerator.memory_gb, accelerator.model, per_node, grad,
                   zero_stage, node_gpus=node_gpus)
    return need, (f"memory estimate: ~{need:.1f} GB per GPU of {accelerator.memory_gb:g} GB"
                  + (" (--force)" if force else ""))


def _bound(path: str, binds: tuple[str, ...]) -> bool:
    """Whether a path the job uses is inside its container: relative paths live in the bound
    submit folder; absolute ones must lie under a bind's container side (``src[:dst[:opts]]``)."""
    if not path.startswith("/"):
        return True
    inside = [(bind.split(":")[1] if ":" in bind else bind).rstrip("/") for bind in binds]
    return any(path == d or path.startswith(d + "/") for d in inside)


def _check_binds(platform: Platform, image: str, paths: dict[str, str]) -> None:
    """Refuse data or checkpoint folders a container would not see (before anything is written)."""
    if platform.container_runtime not in ("pyxis", "singularity", "docker") or not image:
        return
    for flag, path in paths.items():
        if path and not _bound(path, platform.binds):
            raise ValueError(f"{flag} {path} is outside every folder bound into the container on "
                             f"{platform.name} ({', '.join(platform.binds) or 'none'}): use a "
                             "folder under one of them or relative to the submit (working) "
                             f"folder, or add its folder to binds in "
                             f"{platform.source or platform.name}")


def _save_dir(platform: Platform, options: Options, rid: str) -> str:
    if options.save is None or options.save:
        return options.save or ""
    if not platform.storage.stage:
        raise ValueError(f"--save without a folder writes to the platform's storage stage, but "
                         f"{platform.name} has no [storage] stage: give --save DIR")
    return f"{platform.storage.stage}/checkpoints/{rid}"


def _capabilities(platform: Platform, options: Options) -> Capabilities:
    if options.image_msamp:
        if platform.capabilities is None:
            raise ValueError(f"--image-option msamp=1 declares an image, but {platform.name} detects "
                             "what its Python has (MS-AMP included): drop --image-option")
        if not options.image:
            raise ValueError("--image-option msamp=1 says what an --image was built with, and the "
                             f"platform's image ({platform.image}) has no MS-AMP: give --image too")
        return replace(platform.capabilities, msamp=True)
    if platform.capabilities is not None:
        return platform.capabilities
    return options.capabilities or Capabilities()


def _check_capabilities(caps: Capabilities, precision: str, layout: Layout,
                        platform: Platform) -> None:
    """What the Megatron engine cannot do without an extension, refused before anything runs."""
    where = ("detected in this Python" if platform.capabilities is None
             else f"declared by {platform.source or platform.name}")
    if peak_format(precision) == "fp8" and precision not in MSAMP_PRECISIONS and not caps.transformer_engine:
        raise ValueError(f"{precision} needs Transformer Engine, which this environment lacks "
                         f"({where}): use --precision bf16, or an image with Transformer Engine")
    if precision in MSAMP_PRECISIONS and not caps.msamp:
        raise ValueError(f"{precision} needs MS-AMP, which this environment lacks ({where}): build "
                         "the image with `python -m bench images build cuda --option msamp=1` and "
                         "pass it as --image with --image-option msamp=1, or use --precision fp8")
    if layout.sp and not (caps.transformer_engine or caps.apex_layer_norm):
        raise ValueError(f"layout {layout.name}: sequence parallelism needs Transformer Engine or "
                         f"apex layer norm, which this environment lacks ({where}); drop 'sp'")


def plan(preset: Preset, layout: str | LayoutSpec, platform: Platform, options: Options) -> LaunchPlan:
    """Check everything and return the frozen plan; any impossibility raises ValueError."""
    if options.recompute not in (None, *RECOMPUTE):
        raise ValueError(f"--recompute {options.recompute}: use one of {', '.join(RECOMPUTE)}")
    # Settings away from the kit's defaults besides the A/B tuning: ZeRO settings, sequence length,
    # activation recompute.
    other_variant = options.zero.variant()
    if options.recompute:
        other_variant += (("recompute", options.recompute),)
    if options.seq_length is not None and options.seq_length != preset.seq_length:
        if options.seq_length < 1:
            raise ValueError(f"--seq-length must be at least 1, got {options.seq_length}")
        preset = replace(preset, seq_length=options.seq_length)
        other_variant += (("seq_length", str(options.seq_length)),)
    if options.save_interval is not None and (options.save is None or options.save_interval < 1):
        raise ValueError("--save-interval needs --save, and at least 1 iteration")
    engine = options.engine or platform.default_engine
    check_options(options, platform, engine)
    precision = resolve_precision(options.precision or platform.default_precision)
    platform = with_job_overrides(platform, account=options.account, partition=options.partition,
                                  queue=options.queue, walltime=options.walltime)
    # A name is parsed once here; a sweep passes the spec of a layout it has already built.
    spec = parse_layout_name(layout) if isinstance(layout, str) else layout
    gpus, nodes, per_node = _run_size(spec, platform, options)
    # Tensor parallelism must stay inside a node; on the local machine the node is what we have.
    sized_by_layout = not (options.gpus or options.nodes or (platform.scheduler == "none" and options.gpus_present))
    layout = build_layout(spec, preset, gpus, per_node, options.mbs, options.gbs, sized_by_layout=sized_by_layout)
    accelerator = _accelerator(platform, options)
    if accelerator is not None:
        accelerator.peak(precision)  # the platform must know the peak for the precision it runs
    rid = run_id(preset.name, layout.name, platform.name, options.now)
    if options.tag:
        rid = f"{rid}-{options.tag}"
    labels = options.labels
    if options.repeat is not None:
        if options.repeat < 1:
            raise ValueError(f"a repeat is numbered from 1, got {options.repeat}")
        labels = (*labels, ("repeat_group", rid))
        rid = f"{rid}-r{options.repeat}"
    tuning, tuning_notes = options.tuning.at_layout(layout.dp, precision)
    caps = _capabilities(platform, options)
    ds_config = None
    notes = []
    if engine == "megatron" and options.zero != DEFAULT_ZERO_SETTINGS:
        raise ValueError("--zero-offload, --overlap-comm, --contiguous-gradients and the bucket "
                         "sizes are DeepSpeed settings: use --engine megatron-deepspeed")
    data = platform.data.model_copy(update={k: v for k, v in (
        ("path", options.data_path), ("vocab_file", options.vocab_file),
        ("merge_file", options.merge_file)) if v})
    save = _save_dir(platform, options, rid)
    image = options.image or platform.storage.squashed_image or platform.image
    _check_binds(platform, image, {"--data-path": data.path, "--vocab-file": data.vocab_file,
                                   "--merge-file": data.merge_file, "--save": save})
    if engine == "megatron":
        if not tuning.fused_attention:
            raise ValueError("--no-fused-attention is a Megatron-DeepSpeed setting: the megatron "
                             "engine's attention is torch's SDPA or Transformer Engine's")
        entry = ENTRY
        _check_capabilities(caps, precision, layout, platform)
        args = megatron_args(preset, layout, precision, options.iters, caps, data.path, tuning,
                             options.recompute)
    else:
        if options.tuning.changes_megatron_defaults:  # asked for, even where a no-op
            raise ValueError("--no-overlap, --grad-reduce and --no-fused-loss are Megatron-engine "
                             "settings; Megatron-DeepSpeed's come from its own flags and DeepSpeed "
                             "config (extra flags go after '--')")
        problems, zero_notes = zero_problems(options.zero, zero_stage(layout))
        if problems:
            raise ValueError("DeepSpeed settings are not possible: " + "; ".join(problems))
        notes += zero_notes
        entry = (f"{platform.megatron_deepspeed_dir}/pretrain_gpt.py",)
        args = deepspeed_args(preset, layout, precision, options.iters, data,
                              f"{RUNS_DIR}/{rid}/{DS_CONFIG_NAME}", options.zero,
                              platform.flash_attention, options.recompute,
                              tuning.fused_attention)
        ds_config = ds_config_json(layout, precision, options.zero)
    if save:
        args += checkpoint_flags(save, options.save_interval or platform.storage.save_interval)
    check_extra_args(tuning.extra_args, args)
    memory_gb, memory_note = _memory(preset, layout, engine, precision, accelerator,
                                     platform.gpus_per_node or per_node, tuning, options.force,
                                     platform.gpus_per_node if platform.scheduler != "none" else None)
    env = {**platform.env, **precision_env(precision)}
    if nodes > 1 or platform.scheduler != "none":
        env["MASTER_PORT"] = str(MASTER_PORT)
    if platform.scheduler == "none" and not options.gpus_present:
        notes.append(f"no GPU found on this machine: the plan assumes {gpus} GPU(s); it needs "
                     "NVIDIA GPUs with a working driver to run")
    if engine == "megatron" and platform.capabilities is None and options.capabilities is None:
        where = (f"the image {image}" if platform.container_runtime == "docker" and image
                 else "this Python")
        notes.append(f"megatron-core did not import in {where}, so Transformer Engine and "
                     "apex could not be detected: the plan assumes neither")
    notes += [*tuning_notes, memory_note]
    if platform.accelerator == "auto" and options.gpu_name and accelerator is None:
        notes.append(f"GPU '{options.gpu_name}' has no file in platforms/accelerators/: MFU will "
                     "not be computed; add one with its dense peak and source")
    return LaunchPlan(
        run_id=rid, preset=preset, layout=layout, platform=platform, accelerator=accelerator,
        engine=engine, precision=precision, nodes=nodes, gpus_per_node=per_node,
        iters=options.iters,
        image=image, entry=entry,
        train_args=(*args, *tuning.extra_args), env=tuple(env.items()),
        ds_config=ds_config, capabilities=caps, notes=tuple(notes),
        variant=tuning.variant() + other_variant, labels=labels, memory_gb=memory_gb,
        recompute=options.recompute)
