"""The options of ``python -m bench run``, declared once.

Each :class:`RunOption` names its flag, value type, default, choices, help, environment variable
and campaign key, where its value goes in the planner's ``Options``, the engine it applies to and
the variant key a non-default value is recorded under. ``bench.running.arguments`` builds the
command line from :data:`RUN_OPTIONS`, ``bench.config.campaign`` the ``[[run]]`` table of a campaign
file, and ``options_from`` the planner's ``Options``; ``Tuning`` and ``ZeroSettings`` take their
defaults, choice checks and variants from it (:func:`field_default`, :func:`check_choices`,
:func:`variant_of`), and the planner refuses a setting under an engine it does not apply to
(:func:`misplaced`). Tests tie every field of ``Options``, ``Tuning`` and ``ZeroSettings`` to its
entry, defaults and choices included. An A/B setting is one entry here plus its effect in its
engine. The preset and layout are the command's positional arguments (``model`` and ``layout`` in
a campaign); the options without a campaign key are about the command, not a configuration.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.config.environment import env_value
from bench.config.platforms import ENGINE_NAMES
from bench.config.precisions import PRECISION_SHORTHANDS, PRECISIONS

RECOMPUTE = ("full", "selective")  # activation recompute (bench.measure.flops counts it)
OFFLOADS = ("none", "cpu")  # where DeepSpeed keeps the optimizer state and step
# How gradients are kept and reduced; the fp8 ones are the entry's --kit-grad-reduce choices.
FP8_GRAD_REDUCE = ("fp8-allgather", "fp8-shared-scale")
GRAD_REDUCE = ("bf16", "fp32", *FP8_GRAD_REDUCE)
# Where Adam's state lives: megatron-core's own (fp32 master weights and moments), or the FP8-LM
# paper's layout in megatron-core's precision-aware optimizer (bench.planning.engines.megatron.
# PAPER_STATE_FLAGS), stepped by Transformer Engine's FusedAdam (paper) or by the kit's PaperAdamW
# (paper-kit: bench.train.paper_adam), an A/B of the two kernels on the same states.
OPTIMIZER_STATES = ("default", "paper", "paper-kit")
PAPER_OPTIMIZER_STATES = ("paper", "paper-kit")
# How MS-AMP's FP8 linear scales its input and output-gradient casts (MSAMP_FP8_SCALING, read by
# patches/ms-amp/0008 at import): from an amax window of earlier casts, or each tensor's own amax.
# In time by default: with Transformer Engine's casts (patch 0009) it is the faster FP8 linear, and
# repeated 345m loss runs do not tell the two apart (docs/reports/2026-11-26-h200x2-msamp-te-cast.md).
MSAMP_SCALINGS = ("delayed", "in-time")
DEFAULT_MSAMP_SCALING = "in-time"
# The modules around MS-AMP's FP8 linears: megatron-core's local layer norm (apex's or torch's) and
# torch's SDPA attention, or Transformer Engine's layer norm and attention (bench.train.spec); torch
# until the A/B says otherwise.
MSAMP_MODULES = ("torch", "te")
DEFAULT_MSAMP_MODULES = "torch"
# CUDA graphs: none, or Transformer Engine's (megatron-core's --cuda-graph-impl transformer_engine),
# which capture each layer's forward and backward; they need Transformer Engine's layers.
CUDA_GRAPHS = ("none", "te")
# What builds a Megatron-engine run's layers: auto (what the training environment has: Transformer
# Engine's where it imports), te (Transformer Engine's, refused where it is missing) or local
# (megatron-core's local layers and torch's SDPA attention, even where Transformer Engine imports).
# No variant key: the record's implementation and argv (--transformer-impl) say what built them.
LAYERS = ("auto", "te", "local")
DEFAULT_LAYERS = "auto"
# Attention and hidden dropout: Megatron's and Megatron-DeepSpeed's default, a probability.
DEFAULT_DROPOUT = 0.1
# torch's caching allocator: its default segments, or expandable ones that grow in place, which
# leave less memory reserved but unallocated (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True).
ALLOCATORS = ("default", "expandable")
DEFAULT_ITERS = 30
TIMEOUT_S = 3600.0  # wall-clock limit of a run here, seconds
HANG_TIMEOUT_S = 600.0  # a run here that prints nothing this long is stopped, seconds
POLL_S = 5.0  # seconds between scheduler queries while following a job

# Argument groups of ``run --help``, by the ``group`` of an option: (title, description).
GROUPS = {
    "deepspeed": ("DeepSpeed ZeRO settings", "Megatron-DeepSpeed engine; the stage is part of the "
                  "layout (e.g. tp4pp1zero3)"),
    "tuning": ("A/B settings", "change a kit default; the run is recorded as a variant of its "
               "configuration. More Megatron flags go after '--' (e.g. -- --manual-gc)"),
    "local": ("runs on this machine (--platform local)", None),
}


def elements(text: str) -> int:
    """A count of elements written as 200000000 or 2e8."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of elements (e.g. 2e8)") from None
    # inf (1e400) and nan have no int(): refused here, not by a traceback
    if not math.isfinite(value) or value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"'{text}' must be a whole number of elements, at least 1")
    return int(value)


@dataclass(frozen=True)
class RunOption:
    """One option of ``run``.

    ``name`` is its Python name: ``--name`` with ``-`` for ``_`` on the command line, the key in a
    campaign's ``[[run]]`` (unless ``campaign`` is False) and the argparse destination. ``kind``
    is the value's type as a campaign file writes it (``bool``: a flag); ``parse`` reads the
    command line's text (default: ``kind``). ``env``: an environment variable that replaces the
    default. ``field``: where the value goes in ``bench.planning.options.Options`` (dotted for
    ``tuning.*`` and ``zero.*``), after ``to_field``; None: the command uses it itself.
    """

    name: str
    kind: type
    help: str
    default: Any = None
    env: str | None = None
    campaign: bool = True
    field: str | None = None
    to_field: Callable[[Any], Any] | None = None
    choices: tuple[str, ...] | None = None
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    group: str | None = None
    # argparse details of the few options that need them (``--save`` alone, ``--only`` repeated).
    extra: tuple[tuple[str, Any], ...] = ()
    aliases: tuple[str, ...] = ()  # hidden old names, for scripts
    # The engine the setting applies to (None: both) and the sentence that refuses it under the
    # other one, where it would be silently ignored.
    engine: str | None = None
    refusal: str = ""
    # The note key a value of ``field`` away from its default is recorded under (the run is then a
    # variant of its configuration), and how that value is written there.
    variant: str | None = None
    variant_text: Callable[[Any], str] = str
    doc: str | None = None  # the section of docs/running.md that says more, by its anchor

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def field_default(self) -> Any:
        """The default of its ``Options`` field: the option's default (a flag's: off), through
        ``to_field``; the environment variable is the command line's, not the planner's."""
        value = False if self.kind is bool else self.default
        return self.to_field(value) if self.to_field is not None else value

    @property
    def full_help(self) -> str:
        """The help with its pointer to the documentation, where it has one."""
        return f"{self.help} (docs/running.md#{self.doc})" if self.doc else self.help

    def resolved_default(self) -> Any:
        """The default with its environment variable applied (read when the parser is built)."""
        return (env_value(self.env) or self.default) if self.env else self.default

    def add_to(self, parser: argparse.ArgumentParser | argparse._ArgumentGroup,
               **help_values: object) -> None:
        """Add this option to an argparse parser or group; ``help_values`` fill the help's
        ``{names}`` (facts of later stages, such as a sweep's iterations)."""
        if self.kind is bool:
            kwargs: dict[str, Any] = {"action": "store_true"}
        else:
            kwargs = {"type": self.parse or self.kind, "default": self.resolved_default()}
            if self.choices:
                kwargs["choices"] = self.choices
            if self.metavar:
                kwargs["metavar"] = self.metavar
        kwargs.update(self.extra)
        parser.add_argument(self.flag, dest=self.name, help=self.full_help.format_map(help_values),
                            **kwargs)
        for alias in self.aliases:
            parser.add_argument(alias, dest=self.name, type=kwargs.get("type"),
                                help=argparse.SUPPRESS)


def _job(key: str) -> RunOption:
    return RunOption(key, str, f"scheduler {key} (default: $BENCH_{key.upper()}, else the platform "
                     "file)", env=f"BENCH_{key.upper()}", field=key)


def _not(value: bool) -> bool:
    return not value


def _on_off(value: bool) -> str:
    return "on" if value else "off"


_ZERO: dict[str, Any] = dict(
    group="deepspeed", engine="megatron-deepspeed",
    refusal="--zero-offload, --overlap-comm, --contiguous-gradients and the bucket sizes are "
            "DeepSpeed settings: use --engine megatron-deepspeed")
_MEGATRON_DEFAULTS: dict[str, Any] = dict(
    group="tuning", engine="megatron",
    refusal="--no-overlap and --no-fused-loss are Megatron-engine settings; Megatron-DeepSpeed's "
            "come from its own flags and DeepSpeed config (extra flags go after '--')")


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("platform", str, "platform file name in platforms/ (default: local, or "
              "$BENCH_PLATFORM)", default="local", env="BENCH_PLATFORM"),
    RunOption("gpus", int, "total GPUs (default: GPUs present locally, or the fewest whole nodes "
              "holding tp x pp x cp on a cluster)", field="gpus"),
    RunOption("nodes", int, "nodes (cluster platforms)", field="nodes"),
    RunOption("mbs", int, "micro batch, sequences (default: the preset's; fp8-delayed and "
              "fp8-current: the largest of it, 2x and 4x that divides the batch per data-parallel "
              "rank and fits the memory estimate)", field="mbs"),
    RunOption("gbs", int, "global batch, sequences (default: the preset's)", field="gbs"),
    # The default depends on --sweep: bench.running.arguments fills it in.
    RunOption("iters", int, f"training iterations (default {DEFAULT_ITERS}; a sweep: "
              "{sweep_iters} per layout)", field="iters"),
    RunOption("engine", str, "default: the platform's", choices=ENGINE_NAMES, field="engine"),
    RunOption("precision", str, "default: the platform's. The MS-AMP seed's modes: bf16; te = "
              "fp8-delayed / fp8-current (Transformer Engine; fp8 = fp8-delayed); msamp = msamp-o2 "
              "(MS-AMP; msamp-o1 keeps fp32 Adam states); fp4 = msamp-o2 with FP4 simulation",
              doc="precisions---precision",
              choices=(*PRECISIONS, *PRECISION_SHORTHANDS), field="precision"),
    RunOption("image", str, "container image or venv (default: the platform's)", field="image"),
    RunOption("image_option", str, "the --image was built with this option (`images build cuda "
              "--option msamp=1`): it has MS-AMP, which the platform's image lacks",
              choices=("msamp=1",), field="image_msamp", to_field=lambda v: v == "msamp=1"),
    RunOption("data_path", str, "Megatron data prefix (.bin/.idx); default mock data",
              field="data_path"),
    *(RunOption(key, str, f"GPT-2 {file} (Megatron-DeepSpeed)", field=key,
                engine="megatron-deepspeed", refusal=f"--{key.replace('_', '-')} does not apply to "
                "the megatron engine, which trains on mock data or --data-path's tokenized data "
                "with a null tokenizer; it is for --engine megatron-deepspeed")
      for key, file in (("vocab_file", "vocab.json"), ("merge_file", "merges.txt"))),
    RunOption("recompute", str, "activation recompute: full (every layer) or selective (core "
              "attention); TFLOP/s stay model FLOPs, the record adds the hardware FLOPs figure",
              choices=RECOMPUTE, field="recompute", variant="recompute"),
    RunOption("force", bool, "plan it even when the memory estimate says it does not fit the GPU",
              field="force"),
    # A variant only away from the preset's own (bench.planning.plan._resolve).
    RunOption("seq_length", int, "sequence length (default: the preset's)", field="seq_length",
              variant="seq_length"),
    RunOption("profile", bool, "after the measured iterations, profile 2 more with the torch "
              "profiler (rank 0); the record says where their time went", field="profile",
              doc="where-the-time-goes---profile", engine="megatron",
              refusal="--profile captures steps through megatron-core's training loop; the "
              "megatron-deepspeed engine has no such hook: use --engine megatron, or drop --profile"),
    RunOption("save", str, "save checkpoints to DIR (alone: the platform's storage stage "
              "checkpoints/<run id>); default: no checkpoints", metavar="DIR", field="save",
              extra=(("nargs", "?"), ("const", ""))),
    RunOption("save_interval", int, "iterations between checkpoints (default: the platform's "
              "where it times two saves in --iters, else --iters // 2)", field="save_interval"),
    *(_job(key) for key in ("account", "partition", "queue", "walltime")),
    RunOption("zero_offload", str, "where the optimizer state and step live (cpu: ZeRO-Offload)",
              default="none", choices=OFFLOADS, field="zero.offload", variant="zero_offload",
              **_ZERO),
    RunOption("overlap_comm", bool, "overlap gradient reduction with the backward pass",
              field="zero.overlap_comm", variant="overlap_comm", variant_text=_on_off, **_ZERO),
    RunOption("contiguous_gradients", bool, "copy gradients into one contiguous buffer as they "
              "are produced", field="zero.contiguous_gradients", variant="contiguous_gradients",
              variant_text=_on_off, **_ZERO),
    # A campaign writes 2e8 as a float; the command line reads "2e8" or "200000000".
    RunOption("reduce_bucket", float, "reduce bucket size in elements, e.g. 2e8", parse=elements,
              metavar="N", field="zero.reduce_bucket_size", variant="reduce_bucket_size", **_ZERO),
    RunOption("allgather_bucket", float, "allgather bucket size in elements, e.g. 2e8",
              parse=elements, metavar="N", field="zero.allgather_bucket_size",
              variant="allgather_bucket_size", **_ZERO),
    # The A/B settings, in the order of a run's variant.
    RunOption("no_overlap", bool, "do not overlap the data-parallel gradient reduce and parameter "
              "gather with compute", field="tuning.overlap", to_field=_not, variant="overlap",
              variant_text=_on_off, **_MEGATRON_DEFAULTS),
    RunOption("grad_reduce", str, "gradient accumulation and reduction type under bf16; "
              "fp8-allgather / fp8-shared-scale reduce in FP8 with the kit's collectives "
              "(megatron engine, dp > 1)", default="bf16", choices=GRAD_REDUCE, group="tuning",
              field="tuning.grad_reduce", variant="grad_reduce", doc="gradient-reduction---grad-reduce",
              engine="megatron", refusal="--grad-reduce {value} changes how megatron-core's "
              "DistributedDataParallel keeps and reduces gradients (fp8-*: the kit's collectives in "
              "its place, bench.train.grad_reduce); Megatron-DeepSpeed reduces through DeepSpeed: "
              "use --engine megatron"),
    RunOption("optimizer_states", str, "Adam's state: megatron-core's fp32 master weights and "
              "moments; paper: the FP8-LM paper's layout stepped by Transformer Engine's FusedAdam; "
              "paper-kit: the same states stepped by the kit's PaperAdamW (megatron engine)",
              default="default", choices=OPTIMIZER_STATES, group="tuning",
              field="tuning.optimizer_states", variant="optimizer_states",
              doc="optimizer-states---optimizer-states", engine="megatron", refusal="--optimizer-states is "
              "megatron-core's precision-aware optimizer (Transformer Engine's FusedAdam); "
              "Megatron-DeepSpeed's optimizer state is DeepSpeed's: use --engine megatron"),
    RunOption("msamp_scaling", str, "how MS-AMP's FP8 linear scales its input and output-gradient "
              "casts: in-time (each tensor by its own amax) or delayed (from earlier casts' "
              "amaxes); sets MSAMP_FP8_SCALING (msamp-o1/msamp-o2/fp4 only)",
              default=DEFAULT_MSAMP_SCALING, choices=MSAMP_SCALINGS, group="tuning",
              field="tuning.msamp_scaling", variant="msamp_scaling", doc="ms-amps-scaling---msamp-scaling"),
    RunOption("msamp_modules", str, "the layer norm and core attention around MS-AMP's FP8 "
              "linears: torch (megatron-core's local ones) or te (Transformer Engine's); "
              "msamp-o1/msamp-o2/fp4, megatron engine",
              default=DEFAULT_MSAMP_MODULES, choices=MSAMP_MODULES, group="tuning",
              field="tuning.msamp_modules", variant="msamp_modules", doc="ms-amps-modules---msamp-modules",
              engine="megatron", refusal="--msamp-modules te builds Transformer Engine's layer norm "
              "and attention around MS-AMP's linears in the kit's megatron-core layer spec; "
              "Megatron-DeepSpeed's layers are its own: use --engine megatron, or drop "
              "--msamp-modules"),
    RunOption("no_fused_loss", bool, "Megatron's unfused cross-entropy loss instead of its fused "
              "one", field="tuning.fused_loss", to_field=_not, variant="fused_loss",
              variant_text=_on_off, **_MEGATRON_DEFAULTS),
    RunOption("no_fused_attention", bool, "Megatron-DeepSpeed's unfused core attention (it stores "
              "the s x s scores) instead of flash-attn or torch's SDPA", group="tuning",
              field="tuning.fused_attention", to_field=_not, variant="core_attention",
              variant_text=lambda fused: "fused" if fused else "unfused",
              engine="megatron-deepspeed", refusal="--no-fused-attention is a Megatron-DeepSpeed "
              "setting: the megatron engine's attention is torch's SDPA or Transformer Engine's"),
    RunOption("cuda_graphs", str, "CUDA graphs: none, or te (Transformer Engine's, capturing each "
              "layer's forward and backward; Transformer Engine layers, megatron engine; with "
              "--recompute selective they need --dropout 0)", default="none", choices=CUDA_GRAPHS,
              group="tuning", field="tuning.cuda_graphs", variant="cuda_graphs",
              engine="megatron",
              refusal="--cuda-graphs {value} captures megatron-core's layers with Transformer "
              "Engine's graphs; Megatron-DeepSpeed has no such hook: use --engine megatron"),
    RunOption("layers", str, "what builds the layers: auto (what the environment has), te "
              "(Transformer Engine's) or local (megatron-core's local layers with SDPA attention, "
              "even where Transformer Engine is present); megatron engine",
              default=DEFAULT_LAYERS, choices=LAYERS, group="tuning", field="tuning.layers",
              doc="layers---layers", engine="megatron",
              refusal="--layers {value} chooses megatron-core's layer implementation; "
              "Megatron-DeepSpeed builds its own layers: use --engine megatron, or drop --layers"),
    # A recipe away from the default: dropout 0 changes the training math (the results page names
    # such a run a recipe, never the plain precision's row).
    RunOption("dropout", float, f"attention and hidden dropout probability (default "
              f"{DEFAULT_DROPOUT:g}, Megatron's); 0 trains without dropout, a recipe of its own",
              default=DEFAULT_DROPOUT, metavar="P", group="tuning", field="tuning.dropout",
              variant="dropout", variant_text=lambda p: f"{p:g}"),
    RunOption("gpu_memory_cap", float, "plan and train as if each GPU had GB of memory (80 for an "
              "H100 80GB)", metavar="GB", group="tuning",
              field="tuning.gpu_memory_cap", variant="gpu_memory_cap_gb",
              variant_text=lambda gb: f"{gb:g}", doc="what-fits-a-smaller-gpu---gpu-memory-cap"),
    RunOption("allocator", str, "torch's caching allocator in the training processes: its own "
              "segments, or expandable ones that grow in place (PYTORCH_CUDA_ALLOC_CONF)",
              default="default", choices=ALLOCATORS, group="tuning", field="tuning.allocator",
              variant="allocator", doc="torchs-allocator---allocator"),
    RunOption("dry_run", bool, "print the job script or command and exit; writes nothing",
              campaign=False),
    RunOption("sweep", bool, "every valid layout that fits the GPUs (local: those present, report "
              "the best; a cluster: --gpus or --nodes, one job per layout)"),
    RunOption("repeat", int, "measure each configuration N times (run ids end -r1..-rN; the "
              "records share notes.repeat_group, for python -m bench compare)", default=1,
              metavar="N"),
    RunOption("campaign", str, "a campaign TOML file listing configurations "
              "(results/campaigns/*.toml); options given here apply to every run", campaign=False),
    RunOption("only", str, "with --campaign: only the runs of this name or group (repeatable)",
              campaign=False, metavar="NAME", extra=(("action", "append"),)),
    RunOption("json", bool, "print the plans (and records or job ids) as JSON on stdout; "
              "progress and messages go to stderr", campaign=False),
    RunOption("records", str, "run records folder (default: results/records in the current "
              "folder, or under --root where the command has one)", parse=Path, metavar="DIR",
              group="local", aliases=("--records-dir",)),
    RunOption("timeout", float, f"wall-clock limit per run, seconds (default {TIMEOUT_S:.0f})",
              group="local"),
    RunOption("hang_timeout", float, "stop a run that prints nothing for this long, seconds "
              f"(default {HANG_TIMEOUT_S:.0f})", group="local"),
    RunOption("verbose", bool, "stream the training log", group="local"),
    RunOption("wait", bool, "after submitting, follow the job: queue state, then training "
              "progress from its output, until it ends"),
    RunOption("poll", float, f"seconds between scheduler queries while waiting (default {POLL_S})",
              default=POLL_S),
)
BY_NAME = {option.name: option for option in RUN_OPTIONS}
CAMPAIGN_KEYS = tuple(option.name for option in RUN_OPTIONS if option.campaign)


def options_of(part: str) -> tuple[RunOption, ...]:
    """The options whose field is in ``part`` of ``Options`` ("tuning", "zero"; "" for its own)."""
    return tuple(o for o in RUN_OPTIONS if o.field is not None
                 and o.field.rpartition(".")[0] == part)


def field_default(field: str) -> Any:
    """The default of the ``Options`` field ``field`` (dotted: ``tuning.overlap``), from its entry."""
    (option,) = (o for o in RUN_OPTIONS if o.field == field)
    return option.field_default


def _value(options: Any, field: str) -> Any:
    for name in field.split("."):
        options = getattr(options, name)
    return options


def unknown_choices(part: str, settings: Any) -> list[tuple[RunOption, Any]]:
    """The (option, value) pairs of ``settings`` (a ``Tuning``, ``ZeroSettings``...) outside their
    entry's choices."""
    return [(o, value) for o in options_of(part) if o.choices
            and (value := getattr(settings, o.field.rpartition(".")[2])) not in o.choices]


def variant_of(part: str, settings: Any) -> tuple[tuple[str, str], ...]:
    """The settings of ``part`` away from their defaults, as (note key, text), in table order."""
    pairs = []
    for option in options_of(part):
        value = getattr(settings, option.field.rpartition(".")[2])
        if option.variant is not None and value != option.field_default:
            pairs.append((option.variant, option.variant_text(value)))
    return tuple(pairs)


def misplaced(options: Any, engine: str) -> str | None:
    """The refusal of the first setting of ``options`` (the planner's ``Options``) given away from
    its default under an engine it does not apply to, else None: that engine would ignore it."""
    for option in RUN_OPTIONS:
        if option.engine in (None, engine) or option.field is None:
            continue
        value = _value(options, option.field)
        if value != option.field_default:
            return option.refusal.format(value=value)
    return None


EXTRA_ARGS_KEY = "megatron_args"  # the variant key of the Megatron flags given after '--'
# Variant keys no run option sets: the code an older kit ran for a setting, where it is not the
# code today's kit runs for it, written into older records' variants as they are read
# (bench.records.migrate.CODE_CHANGES). PAPER_ADAM_KEY: "chunked", PaperAdamW's chunked torch step
# before its Triton kernel (kit 74d8988), with optimizer_states paper-kit.
PAPER_ADAM_KEY = "paper_adam"
OLDER_CODE_KEYS = (PAPER_ADAM_KEY,)
# Every note key a variant may use: the table's, the Megatron flags given after '--', and the
# older code's.
VARIANT_KEYS = (*(o.variant for o in RUN_OPTIONS if o.variant), EXTRA_ARGS_KEY, *OLDER_CODE_KEYS)


def variant_key(name: str) -> str:
    """The variant key of the run option ``name`` (``gpu_memory_cap`` -> ``gpu_memory_cap_gb``):
    how a reader of a record's variant names a setting, so that renaming it here renames it
    everywhere. Raises KeyError for an option with no variant key."""
    key = BY_NAME[name].variant
    if key is None:
        raise KeyError(f"run option {name!r} has no variant key")
    return key
