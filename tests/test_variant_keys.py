"""Variant keys are read through the run-option table (``bench.config.run_options.variant_key``):
no module of ``bench/`` types a key where it reads a record's variant, and every key a module names
for reading one is declared there. Renaming a key in the table then renames it everywhere."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.config.run_options import VARIANT_KEYS

BENCH = Path(__file__).resolve().parent.parent / "bench"
# Upgrades name keys as the records of their day wrote them: those are history, not the table's.
HISTORY = {"records/migrate.py"}
KEY_NAME = re.compile(r"^[A-Z][A-Z_]*_(KEY|KEYS|VARIANT)$")
# Module constants with such names that hold no variant key.
NOT_VARIANT_KEYS = {"CAMPAIGN_KEYS", "SELECTOR_KEYS", "BATCH_KEYS", "TUNING_NOTE_KEYS", "VARIANT_KEYS",
                    "EXTRA_ARGS_KEY"}


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(BENCH.rglob("*.py")):
        name = path.relative_to(BENCH).as_posix()
        if name not in HISTORY:
            yield name, ast.parse(path.read_text(), filename=str(path))


def _is_variant(node: ast.AST) -> bool:
    """``<anything>.variant`` or a name ``variant``."""
    return (isinstance(node, ast.Attribute) and node.attr == "variant") or (
        isinstance(node, ast.Name) and node.id == "variant")


def _typed_reads(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Each ``x.variant.get("key", ...)`` and ``x.variant["key"]`` with the key typed."""
    for node in ast.walk(tree):
        key = None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get" and _is_variant(node.func.value) and node.args):
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and _is_variant(node.value):
            key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            yield node.lineno, key.value


def test_no_module_types_a_key_where_it_reads_a_variant() -> None:
    typed = [f"bench/{name}:{line} {key!r}" for name, tree in _sources() for line, key in _typed_reads(tree)]
    assert typed == [], "read these through variant_key(): " + ", ".join(typed)


def _key_constants() -> Iterator[tuple[str, str]]:
    """(module, constant) for each module-level ``*_KEY``/``*_KEYS``/``*_VARIANT`` name."""
    for name, tree in _sources():
        module = "bench." + name.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                for named in names:
                    if isinstance(named, ast.Name) and KEY_NAME.match(named.id) \
                            and named.id not in NOT_VARIANT_KEYS:
                        yield module, named.id


KEY_CONSTANTS = sorted(set(_key_constants()))


def test_the_key_constants_are_found() -> None:
    found = {constant for _, constant in KEY_CONSTANTS}
    assert {"CAP_KEY", "STATES_KEY", "DROPOUT_KEY", "GRAPHS_KEY", "RECIPE_KEYS"} <= found


@pytest.mark.parametrize(("module", "constant"), KEY_CONSTANTS, ids=lambda v: v)
def test_every_key_read_from_a_variant_is_a_declared_one(module: str, constant: str) -> None:
    value = getattr(importlib.import_module(module), constant)
    keys = (value,) if isinstance(value, str) else tuple(value)
    assert set(keys) <= set(VARIANT_KEYS), f"{module}.{constant} = {value!r}: not a run option's variant key"
