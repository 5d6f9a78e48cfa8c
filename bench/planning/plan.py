"""The one launch planner: (preset, layout, platform, options) -> a frozen LaunchPlan.

``plan`` is pure: it reads no clock, environment, hardware or file. Whatever it needs from the world (the
time for the run id, the GPUs present on the local machine) comes in through ``Options``. Renderers
in ``bench.render`` turn a plan into a Slurm script, a PBS script or a torchrun command line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from bench.config.capabilities import Capabilities, for_layers
from bench.config.platforms import Accelerator, Data, Platform, with_job_overrides
from bench.config.precisions import Precision, resolve_precision
from bench.config.presets import Preset
from bench.config.run_options import variant_key
from bench.measure.profile import PROFILE_STEPS
from bench.planning.checks import (
    account_note,
    check_options,
    check_resolved,
    pbs_queue,
)
from bench.planning.defaults import defaults_for
from bench.planning.engines.base import Engine, Resolved
from bench.planning.engines.common import allocator_env
from bench.planning.engines.deepspeed import core_priced
from bench.planning.engines.registry import ENGINES
from bench.planning.layout import Layout, LayoutSpec, build_layout, parse_layout_name
from bench.planning.memory import uncounted_note
from bench.planning.options import Options
from bench.planning.predict.expect import Asked, Expectation, expectation, rate
from bench.planning.question import MemoryQuestion, device_for
from bench.planning.saves import save_interval
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
    precision: Precision
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
    # What the results page shows of the run, kept as facts for its record: what builds the
    # layers (te, te+apex, local; None where the engine has no choice), the data prefix ("":
    # mock data) and the (upstream, tree) pairs whose kit patch series the run needs.
    implementation: str | None = None
    data_path: str = ""
    patched_trees: tuple[tuple[str, str], ...] = ()
    profile_steps: int = 0  # steps trained and profiled after the ``iters`` measured ones
    # What the step-time model expects of the run (bench.planning.predict.expect), or why it
    # expects nothing ("" as well where no model was loaded).
    expected: Expectation | None = None
    expected_none_why: str = ""

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
        if self.accelerator is None or self.precision.peak == "bf16":
            return None
        return self.accelerator.peak_tflops.get("bf16")


def run_id(preset: str, layout: str, platform: str, now: datetime, nonce: str = "") -> str:
    """``{preset}_{layout}_{platform}_{UTC timestamp}[-{nonce}]``, e.g.
    ``13b_tp2pp8dp1_lumi_20261121T201500Z-3f9a1c`` (records made before the nonce have none)."""
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{preset}_{layout}_{platform}_{stamp}" + (f"-{nonce}" if nonce else "")


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


def layers_take_sp(platform: Platform, options: Options) -> bool:
    """Whether the layers the run builds in its training environment (``--layers``) can run
    sequence parallelism."""
    return for_layers(_capabilities(platform, options), options.tuning.layers).sequence_parallel


def _capabilities(platform: Platform, options: Options) -> Capabilities:
    """What the training environment has: the platform's declaration (with MS-AMP for an image
    declared so), else what was detected, else nothing."""
    if options.image_msamp and platform.capabilities is not None:  # checked: with an --image
        return replace(platform.capabilities, msamp=True)
    if platform.capabilities is not None:
        return platform.capabilities
    return options.capabilities or Capabilities()


def _resolve(preset: Preset, platform: Platform, options: Options
             ) -> tuple[Preset, Platform, Precision, tuple[tuple[str, str], ...]]:
    """(preset, platform, precision, variant beyond the A/B tuning) as the checked options ask:
    the sequence length, the job settings and the platform's default precision applied."""
    variant = options.zero.variant()  # ZeRO settings, sequence length, recompute
    if options.recompute:
        variant += ((variant_key("recompute"), options.recompute),)
    if options.seq_length is not None and options.seq_length != preset.seq_length:
        preset = replace(preset, seq_length=options.seq_length)
        variant += ((variant_key("seq_length"), str(options.seq_length)),)
    platform = with_job_overrides(platform, account=options.account, partition=options.partition,
                                  queue=options.queue, walltime=options.walltime)
    return (preset, platform, resolve_precision(options.precision or platform.default_precision),
            variant)


def _run_id(preset: Preset, layout: Layout, platform: Platform, options: Options
            ) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(the run id, the labels): the tag and the repeat's number appended to the id."""
    rid = run_id(preset.name, layout.name, platform.name, options.now, options.nonce)
    if options.tag:
        rid = f"{rid}-{options.tag}"
    if options.repeat is None:
        return rid, options.labels
    return f"{rid}-r{options.repeat}", (*options.labels, ("repeat_group", rid))


def _no_gpu(platform: Platform, options: Options, gpus: int) -> list[str]:
    """The note for a run here on a machine where no GPU was found."""
    if platform.scheduler != "none" or options.gpus_present:
        return []
    return [f"no GPU found on this machine: the plan assumes {gpus} GPU(s); it needs NVIDIA GPUs "
            "with a working driver to run"]


def _unknown_gpu(platform: Platform, options: Options, accelerator: Accelerator | None) -> list[str]:
    """The note for a GPU found here that has no accelerator file."""
    if platform.accelerator != "auto" or not options.gpu_name or accelerator is not None:
        return []
    return [f"GPU '{options.gpu_name}' has no file in platforms/accelerators/: MFU will not be "
            "computed; add one with its dense peak and source"]


def _question(preset: Preset, layout: Layout, engine: Engine, precision: Precision, options: Options,
              accelerator: Accelerator | None) -> MemoryQuestion:
    """The memory question of the run as the user asked it, on its GPU or under --gpu-memory-cap."""
    return MemoryQuestion.ask(preset, layout, engine, precision, options.tuning, options.recompute,
                              device_for(accelerator, options.tuning.gpu_memory_cap))


def _fits_memory(preset: Preset, platform: Platform, options: Options, engine: Engine,
                 precision: Precision) -> Callable[[Layout], bool] | None:
    """Whether a layout fits the run's GPU by the memory estimate, as the run's own refusal counts
    it (True where its memory is unknown), so a refused layout suggests only such layouts; None
    with --force. Asked only of a refused layout's candidates."""
    if options.force:
        return None

    def fit(layout: Layout) -> bool:
        accelerator = platform.accelerator_for(options.gpu_name, options.gpu_memory_gb)
        return _question(preset, layout, engine, precision, options, accelerator).within_refusal()
    return fit


def _lay_out(preset: Preset, spec: LayoutSpec, platform: Platform, options: Options, engine: Engine,
             precision: Precision) -> tuple[Layout, Platform, int, int]:
    """(the layout on the run's GPUs, the platform with the queue for its nodes, nodes, GPUs per
    node); a refusal suggests only layouts that fit the memory (:func:`_fits_memory`)."""
    gpus, nodes, per_node = _run_size(spec, platform, options)
    platform = with_job_overrides(platform, queue=pbs_queue(platform, nodes))
    # Tensor parallelism must stay inside a node; on the local machine the node is what we have.
    sized_by_layout = not (options.gpus or options.nodes
                           or (platform.scheduler == "none" and options.gpus_present))
    layout = build_layout(spec, preset, gpus, per_node, options.mbs, options.gbs,
                          sized_by_layout=sized_by_layout,
                          fits=_fits_memory(preset, platform, options, engine, precision))
    return layout, platform, nodes, per_node


def _where(platform: Platform, options: Options, rid: str) -> tuple[Data, str, str]:
    """(the data, the checkpoint folder or "", the image) of the run, checked to be inside its
    container."""
    data = platform.data.model_copy(update={k: v for k, v in (
        ("path", options.data_path), ("vocab_file", options.vocab_file),
        ("merge_file", options.merge_file)) if v})
    save = _save_dir(platform, options, rid)
    image = options.image or platform.storage.squashed_image or platform.image
    _check_binds(platform, image, {"--data-path": data.path, "--vocab-file": data.vocab_file,
                                   "--merge-file": data.merge_file, "--save": save})
    return data, save, image


def _env(platform: Platform, engine: Engine, precision: Precision, tuning: Tuning,
         nodes: int) -> dict[str, str]:
    """What the job exports: the platform's [env] for the engine, the precision's and the
    allocator's, and the rendezvous port across nodes or a scheduler."""
    env = {**platform.env_for(engine.name), **precision.environment(tuning.msamp_scaling),
           **allocator_env(tuning.allocator, platform.env)}
    if nodes > 1 or platform.scheduler != "none":
        env["MASTER_PORT"] = str(MASTER_PORT)
    return env


def _accelerator(platform: Platform, options: Options, precision: Precision) -> Accelerator | None:
    """The GPU, whose peak for the precision must be known (the record's MFU divides by it)."""
    accelerator = platform.accelerator_for(options.gpu_name, options.gpu_memory_gb)
    if accelerator is not None:
        accelerator.peak(precision)
    return accelerator


def _train_args(engine: Engine, args: tuple[str, ...], save: str, platform: Platform,
                options: Options, tuning: Tuning) -> tuple[tuple[str, ...], list[str]]:
    """The run's flags after the entry: the engine's, its checkpoint flags where the run saves,
    then the user's extra flags, refused where they repeat one of these; and the notes on its save
    interval (bench.planning.saves)."""
    notes: list[str] = []
    if save:
        interval, notes = save_interval(options.iters, options.save_interval,
                                        platform.storage.save_interval)
        args += tuple(engine.checkpoint_flags(save, interval))
    check_extra_args(tuning.extra_args, args)
    return (*args, *tuning.extra_args), notes


def _estimate(question: MemoryQuestion, platform: Platform, per_node: int, options: Options,
              asked: Asked) -> tuple[float, list[str]]:
    """(estimated GB per GPU, its notes); refused when it cannot fit the GPU, unless --force. The
    refusal names larger runs by --nodes where jobs run over nodes, and orders the layouts that fit
    by the step-time model's rate."""
    return question.estimate(platform.gpus_per_node or per_node, options.force,
                             platform.gpus_per_node if platform.scheduler != "none" else None,
                             rate(options.step_model, asked))


def _later_notes(platform: Platform, options: Options, accelerator: Accelerator | None,
                 train_args: tuple[str, ...], tuning: Tuning) -> list[str]:
    """The notes after the estimate's: an unknown GPU, what the estimate leaves out, the account
    (a dry run shows the script; only a submit refuses)."""
    return [*_unknown_gpu(platform, options, accelerator),
            *uncounted_note(train_args, tuning.graphs), *account_note(platform)]


def plan(preset: Preset, layout: str | LayoutSpec, platform: Platform, options: Options) -> LaunchPlan:
    """Check everything and return the frozen plan; any impossibility raises ValueError.

    The stages: check the options, resolve what they ask, lay the run out on its GPUs, refuse what
    needs the resolved plan (``check_resolved``), ask the memory question once (the settled
    defaults, ``bench.planning.defaults``, and the estimate read it), let the engine render its
    flags (refusing what it cannot do), ask the step-time question beside it (the expectation, and
    the order of a refusal's layouts), then estimate the memory. Reads no files: the platform comes
    with its accelerators loaded, the options with the step-time model.
    """
    engine = ENGINES[options.engine or platform.default_engine]
    check_options(options, platform, engine.name)
    preset, platform, precision, other_variant = _resolve(preset, platform, options)
    # Lay out. A name is parsed once here; a sweep passes the spec of a layout it has built.
    spec = parse_layout_name(layout) if isinstance(layout, str) else layout
    layout, platform, nodes, per_node = _lay_out(preset, spec, platform, options, engine, precision)
    rid, labels = _run_id(preset, layout, platform, options)
    data, save, image = _where(platform, options, rid)
    accelerator = _accelerator(platform, options, precision)
    caps = _capabilities(platform, options)
    check_resolved(precision, layout, options.tuning, caps, platform)
    question = _question(preset, layout, engine, precision, options, accelerator)
    chosen = defaults_for(question, caps, options)
    layout, tuning = chosen.layout, chosen.tuning
    flags = engine.flags(Resolved(
        preset=preset, layout=layout, platform=platform, precision=precision, iters=options.iters,
        capabilities=caps, capabilities_known=(platform.capabilities is not None
                                               or options.capabilities is not None),
        data=data, tuning=tuning, zero=options.zero, recompute=chosen.recompute,
        run_dir=f"{RUNS_DIR}/{rid}", image=image, cpus=options.cpus_present if platform.scheduler == "none" else 0,
        profile_steps=PROFILE_STEPS if options.profile else 0))
    args, saving = _train_args(engine, flags.args + chosen.args, save, platform, options, tuning)
    # The step-time question, beside the memory one: the same plan at any layout.
    asked = Asked(accelerator.name if accelerator else None, engine.name, engine.step_model, preset,
                  precision, flags.implementation, args, tuning.optimizer_states, nodes, tuning.graphs,
                  platform.name, per_node, platform.network,
                  as_core=engine.priced_as_core and core_priced(layout, options.zero.offload))
    expected, expected_none_why = expectation(options.step_model, asked, layout)
    # Estimate: refused when it cannot fit the GPU, after what the engine refuses.
    memory_gb, memory_notes = _estimate(chosen.question, platform, per_node, options, asked)
    notes = [*flags.notes, *_no_gpu(platform, options, layout.gpus), *flags.assumed, *chosen.notes,
             *memory_notes, *saving, *_later_notes(platform, options, accelerator, args, tuning)]
    return LaunchPlan(
        run_id=rid, preset=preset, layout=layout, platform=platform, accelerator=accelerator,
        engine=engine.name, precision=precision, nodes=nodes, gpus_per_node=per_node,
        iters=options.iters, image=image, entry=flags.entry, train_args=args,
        env=tuple({**_env(platform, engine, precision, tuning, nodes), **dict(flags.env)}.items()),
        ds_config=flags.ds_config, capabilities=caps, notes=tuple(notes),
        variant=tuning.variant() + other_variant, labels=labels, memory_gb=memory_gb,
        recompute=chosen.recompute, implementation=flags.implementation, data_path=data.path,
        patched_trees=flags.patched_trees, profile_steps=PROFILE_STEPS if options.profile else 0,
        expected=expected, expected_none_why=expected_none_why)
