"""Does a record's argv run the configuration the record claims? Read back from the argv alone.

A record states its layout (tp, pp, vp, cp, micro and global batch, sequence parallelism), its
model (layers, hidden, heads, sequence length) and its precision; its ``argv`` is the command each
rank ran. Each claim is compared with the flag that carries it, as Megatron reads it (the last
occurrence wins, ``--flag value`` and ``--flag=value`` alike, an absent flag its default), for
both engines: Megatron-DeepSpeed's ``--no-pipeline-parallel`` means one stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.config.precisions import FP4_SIMULATION_ENV, PRECISIONS
from bench.records.record import Record

ABSENT = "absent"
"""What a claim reads when its flag is not in the argv and has no default."""
FP4_SWITCH = FP4_SIMULATION_ENV[0][0]  # the FP4 simulation's first switch, set in its environment


@dataclass(frozen=True)
class Disagreement:
    """A claim the argv does not carry: the record's ``field`` and value, what ``flag`` says."""

    field: str
    recorded: object
    flag: str
    found: str


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` as argparse reads it (the last one given), or None when absent."""
    found = None
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif word.startswith(flag + "="):
            found = word.split("=", 1)[1]
    return found


def _integer(argv: Sequence[str], flag: str, default: int | None) -> str:
    value = flag_value(argv, flag)
    return value if value is not None else (str(default) if default is not None else ABSENT)


def _virtual_stages(record: Record) -> str:
    """vp from ``--num-layers-per-virtual-pipeline-stage`` (layers per pp stage over it), 1 without."""
    per_stage = flag_value(record.argv, "--num-layers-per-virtual-pipeline-stage")
    if per_stage is None:
        return "1"
    if not per_stage.isdigit() or int(per_stage) == 0:
        return per_stage
    layers = record.preset.layers // record.layout.pp
    return str(layers // int(per_stage)) if layers % int(per_stage) == 0 else f"{layers}/{per_stage}"


def _shape(record: Record) -> list[tuple[str, object, str, str]]:
    """(field, recorded, flag, found) of every numeric claim."""
    argv, lay, preset = record.argv, record.layout, record.preset
    stages = "1" if "--no-pipeline-parallel" in argv else _integer(argv, "--pipeline-model-parallel-size", 1)
    return [
        ("layout.tp", lay.tp, "--tensor-model-parallel-size", _integer(argv, "--tensor-model-parallel-size", 1)),
        ("layout.pp", lay.pp, "--pipeline-model-parallel-size", stages),
        ("layout.vp", lay.vp, "--num-layers-per-virtual-pipeline-stage", _virtual_stages(record)),
        ("layout.cp", lay.cp, "--context-parallel-size", _integer(argv, "--context-parallel-size", 1)),
        ("layout.micro_batch", lay.micro_batch, "--micro-batch-size", _integer(argv, "--micro-batch-size", None)),
        ("layout.global_batch", lay.global_batch, "--global-batch-size",
         _integer(argv, "--global-batch-size", None)),
        ("preset.seq_length", preset.seq_length, "--seq-length", _integer(argv, "--seq-length", None)),
        ("preset.layers", preset.layers, "--num-layers", _integer(argv, "--num-layers", None)),
        ("preset.hidden", preset.hidden, "--hidden-size", _integer(argv, "--hidden-size", None)),
        ("preset.heads", preset.heads, "--num-attention-heads", _integer(argv, "--num-attention-heads", None)),
    ]


def _precision(record: Record) -> list[Disagreement]:
    """The flags a precision is run with: --fp16 alone, else --bf16 with fp8's recipe or
    MS-AMP's level where the precision has one, and none where it has not (fp4: MS-AMP's O2 with
    the FP4 simulation switched on in the environment); a precision the kit does not offer is
    a disagreement of its own."""
    argv, name, found = record.argv, record.precision, []
    precision = PRECISIONS.get(name)
    if precision is None:
        return [Disagreement("precision", name, "the kit's precisions", ", ".join(PRECISIONS))]
    wanted = {"--fp16": precision.half == "fp16", "--bf16": precision.half == "bf16"}
    for flag, present in wanted.items():
        if (flag in argv) != present:
            found.append(Disagreement("precision", name, flag, "given" if flag in argv else ABSENT))
    expected = {"--fp8-recipe": precision.te_recipe, "--kit-msamp": precision.msamp_level}
    for flag, value in expected.items():
        given = flag_value(argv, flag)
        if given != value:
            found.append(Disagreement("precision", name, flag, given or ABSENT))
    if precision.fp4_simulation != (record.env.get(FP4_SWITCH) == "1"):
        found.append(Disagreement("precision", name, f"env {FP4_SWITCH}",
                                  record.env.get(FP4_SWITCH, ABSENT)))
    return found


def disagreements(record: Record) -> list[Disagreement]:
    """Every claim of ``record`` that its argv does not carry; empty when the argv runs it."""
    found = [Disagreement(field, recorded, flag, value) for field, recorded, flag, value in _shape(record)
             if str(recorded) != value]
    if ("--sequence-parallel" in record.argv) != record.layout.sp:
        found.append(Disagreement("layout.sp", record.layout.sp, "--sequence-parallel",
                                  "given" if "--sequence-parallel" in record.argv else ABSENT))
    return found + _precision(record)
