"""A case: one run as the step-time model sees it, built from a plan's facts or a run record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.config.network import Network
from bench.config.precisions import PRECISIONS, Family, Precision
from bench.config.run_options import field_default, variant_key
from bench.planning.engines.setting_flags import lift

STATES_KEY = variant_key("optimizer_states")
GRAPHS_KEY = variant_key("cuda_graphs")
NO_GRAPHS = field_default("tuning.cuda_graphs")


@dataclass(frozen=True)
class Case:
    """The shape of one run. ``layers``, ``hidden``, ``heads``, ``seq``, ``vocab``: the preset;
    ``tp`` .. ``global_batch``: the layout; ``family``: ``bf16`` (also fp16), ``fp8`` (Transformer
    Engine's), ``msamp`` (MS-AMP O1/O2) or ``fp4`` (MS-AMP O2 with FP4 simulation);
    ``implementation``: ``te`` or ``local`` layers; ``recompute``: ``selective``, ``full`` or
    None; ``graphs``: CUDA graphs (the ``--cuda-graphs`` setting); ``overlap``: the data-parallel
    reduction overlapped with the backward pass; ``paper_states``: MS-AMP's paper optimizer states;
    ``node_gpus``: the GPUs of a node and ``network`` the links between nodes, where the run spans
    more than one (0 and None by default: every rank on one node, as every record so far)."""

    accelerator: str
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    tp: int
    pp: int
    dp: int
    vp: int
    cp: int
    sp: bool
    micro_batch: int
    global_batch: int
    family: Family
    implementation: str
    recompute: str | None = None
    graphs: bool = False
    overlap: bool = False
    paper_states: bool = False
    node_gpus: int = 0
    network: Network | None = None

    @property
    def nodes(self) -> int:
        """Nodes the run spans: 1 unless ``network`` and ``node_gpus`` say otherwise."""
        gpus = self.tp * self.pp * self.dp * self.cp
        return -(-gpus // self.node_gpus) if self.network is not None and self.node_gpus else 1

    @property
    def micro_batches(self) -> int:
        """Micro-batches each pipeline runs per step."""
        return self.global_batch // (self.micro_batch * self.dp)


def _flag_value(argv: tuple[str, ...], flag: str) -> str | None:
    if flag not in argv:
        return None
    i = argv.index(flag)
    return argv[i + 1] if i + 1 < len(argv) else ""


def case_of(accelerator: str, preset: Any, layout: Any, precision: Precision, implementation: str | None,
            argv: tuple[str, ...], optimizer_states: str, graphs: bool, node_gpus: int = 0,
            network: Network | None = None) -> Case:
    """The case of a run on ``accelerator`` from what a plan and a record both hold: the preset
    and layout (read by attribute), the layers' ``implementation`` (None: read from the argv), the
    rank's argv, the optimizer states setting and whether it runs CUDA graphs; a plan adds the
    GPUs of a node and the links between nodes (none by default: one node)."""
    implementation = implementation or (
        "te" if _flag_value(argv, "--transformer-impl") == "transformer_engine" else "local")
    return Case(
        accelerator=accelerator, layers=preset.layers, hidden=preset.hidden, heads=preset.heads,
        seq=preset.seq_length, vocab=preset.vocab_size, tp=layout.tp, pp=layout.pp, dp=layout.dp,
        vp=layout.vp or 1, cp=layout.cp, sp=layout.sp, micro_batch=layout.micro_batch,
        global_batch=layout.global_batch, family=precision.family,
        implementation="te" if implementation.startswith("te") else "local",
        # Megatron-DeepSpeed's full recompute is its --checkpoint-activations
        recompute=_flag_value(argv, "--recompute-granularity") or (
            "full" if "--checkpoint-activations" in argv else None),
        graphs=graphs, overlap="--overlap-grad-reduce" in argv,
        paper_states=optimizer_states.startswith("paper"), node_gpus=node_gpus, network=network)


def case_from_record(record: Any) -> Case:
    """The case of a run record (a ``bench.records.record.Record``; read by attribute, as the
    planning stage sits before the records'); its precision one the kit offers)."""
    return case_of(record.platform.accelerator, record.preset, record.layout, PRECISIONS[record.precision],
                   record.implementation, tuple(record.argv),
                   str(record.variant.get(STATES_KEY, "")), record_graphs(record))


def record_graphs(record: Any) -> bool:
    """Whether a record's run had CUDA graphs: its ``cuda_graphs`` variant, or, in a record made
    before graphs were a setting, the flag its argv ran with."""
    setting = record.variant.get(GRAPHS_KEY) or lift(tuple(record.argv)).cuda_graphs or NO_GRAPHS
    return setting != NO_GRAPHS
