"""Optional dependencies: the kit needs only pydantic; each command needing more says which extra.

``pyproject.toml`` names the extras: ``results`` (matplotlib), ``images`` (docker, spython),
``train`` (torch, megatron-core), ``test`` (pytest).
"""

from __future__ import annotations

import importlib.util

# The kit's one dependency beyond the standard library, said where it is missing.
NO_PYDANTIC = ("the kit needs pydantic >= 2.11, which this Python lacks: pip install "
               "'pydantic>=2.11' (or pip install . in the kit's checkout)")


class MissingExtra(ValueError):
    """An optional dependency is not installed; the message names the extra that brings it."""


def require(module: str, extra: str, purpose: str) -> None:
    """Raise :class:`MissingExtra` naming ``extra`` when ``module`` cannot be imported."""
    if importlib.util.find_spec(module) is None:
        raise MissingExtra(f"{purpose} needs {module}, which is not installed: "
                           f"pip install 'megatron-bench-kit[{extra}]' (or pip install {module})")
