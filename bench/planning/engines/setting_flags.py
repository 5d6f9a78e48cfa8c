"""The Megatron flags of two typed settings, CUDA graphs and dropout, both ways.

The engines render the flags from the settings (``Tuning.cuda_graphs``, ``Tuning.dropout``);
:func:`lift` reads the settings back out of Megatron flags that were written by hand: the flags a
user types after ``--`` (``bench.running.arguments``), and the argv of records made before the two
were settings (``bench.records.identity.typed_settings``, which reads them, never rewrites them).
Megatron-LM and Megatron-DeepSpeed name dropout alike; only megatron-core has the graphs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

GRAPH_IMPL_FLAG = "--cuda-graph-impl"
# The kit's choice of --cuda-graphs -> megatron-core's --cuda-graph-impl value.
GRAPH_IMPLS = {"te": "transformer_engine"}
DROPOUT_FLAGS = ("--attention-dropout", "--hidden-dropout")


def graph_flags(cuda_graphs: str) -> list[str]:
    """megatron-core's flags for ``cuda_graphs`` (``none``: no flags)."""
    impl = GRAPH_IMPLS.get(cuda_graphs)
    return [GRAPH_IMPL_FLAG, impl] if impl else []


def dropout_flags(dropout: float, default: float) -> list[str]:
    """Attention and hidden dropout at ``dropout`` (a probability), no flags at the engines'
    ``default``; 0 is written ``0.0``, as the hand-written flags of the kit's records were."""
    if dropout == default:
        return []
    return [part for flag in DROPOUT_FLAGS for part in (flag, f"{float(dropout)!r}")]


@dataclass(frozen=True)
class Lifted:
    """What :func:`lift` found: ``cuda_graphs`` (None: no graph flag the kit names),
    ``dropout`` (None: not both dropout flags with one value) and the ``rest`` of the argv."""

    cuda_graphs: str | None
    dropout: float | None
    rest: tuple[str, ...]


def _value(argv: Sequence[str], flag: str) -> str | None:
    """The value after the last ``flag`` of ``argv`` (None: absent, or last with no value)."""
    values = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]
    return values[-1] if values else None


def _dropout(argv: Sequence[str]) -> float | None:
    values = {_value(argv, flag) for flag in DROPOUT_FLAGS}
    if len(values) != 1 or None in values:
        return None  # one of the two, or two values: not the kit's one setting
    try:
        return float(values.pop() or "")
    except ValueError:
        return None


def _without(argv: Sequence[str], flags: Sequence[str]) -> tuple[str, ...]:
    """``argv`` without each of ``flags`` and the value after it."""
    rest: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        else:
            rest.append(arg)
    return tuple(rest)


def hidden_dropout(argv: Sequence[str]) -> float | None:
    """The hidden dropout ``argv`` sets (Megatron reads the last ``--hidden-dropout``; None: none
    given, or no number, which Megatron's parser refuses)."""
    try:
        return float(_value(argv, DROPOUT_FLAGS[1]) or "")
    except ValueError:
        return None


def keeps_dropout_masks(dropout: float, user_flags: Sequence[str]) -> bool:
    """Whether training keeps hidden-dropout masks (hidden dropout above 0), the memory estimate's
    question: the ``--dropout`` setting, unless the user's own flags after '--' (``user_flags``,
    which Megatron reads after the kit's) set ``--hidden-dropout``."""
    written = hidden_dropout(user_flags)
    return (dropout if written is None else written) > 0


def lift(argv: Sequence[str]) -> Lifted:
    """The settings written as Megatron flags in ``argv``, and the argv without those flags: a
    graph implementation the kit names, and one dropout probability given to both flags."""
    impl = _value(argv, GRAPH_IMPL_FLAG)
    graphs = next((name for name, value in GRAPH_IMPLS.items() if value == impl), None)
    dropout = _dropout(argv)
    lifted = ((GRAPH_IMPL_FLAG,) if graphs else ()) + (DROPOUT_FLAGS if dropout is not None else ())
    return Lifted(graphs, dropout, _without(argv, lifted))
