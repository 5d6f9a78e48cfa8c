"""The base of the kit's data models (records, platforms, presets, campaigns, pins, published
figures) and their errors: every TOML data file is read through one of them.

Every schema is a pydantic model derived from :class:`Strict`: strict types (``true`` is not a
count, ``"8"`` is not a number), unknown keys refused, immutable. :func:`problems` words a
validation error as one line per problem naming the key; :func:`load_toml` reads a TOML data file
(:func:`validate` one table of it) into a model and raises
:class:`~bench.config.tomlfile.DataError` naming the file. The JSON Schemas of these models are
exported by ``python -m bench schemas`` (:mod:`bench.results.schemas`).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.config.tomlfile import DataError, read_toml

M = TypeVar("M", bound=BaseModel)

_PHRASES = {
    "int_type": "must be an integer", "float_type": "must be a number",
    "string_type": "must be a string", "bool_type": "must be true or false",
    "list_type": "must be a list", "tuple_type": "must be a list", "dict_type": "must be a table",
    "model_type": "must be a table", "string_too_short": "must not be empty",
    "finite_number": "must be a finite number",
}  # fmt: skip
_KEYED = re.compile(r"^\w+: ")  # a validator's problem line that names its key
# What a pattern means, said in the error after the value (pydantic's message shows the regex).
PATTERN_HINTS: dict[str, str] = {}
# Value types the models share. JSON and TOML can both spell inf and nan: never a measurement.
Text = Annotated[str, Field(min_length=1)]
Count = Annotated[int, Field(ge=1)]
NonNegative = Annotated[int, Field(ge=0)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


def hinted(pattern: str, hint: str) -> Any:
    """``Field(pattern=pattern)`` whose error says ``'<value>' <hint>``."""
    PATTERN_HINTS[pattern] = hint
    return Field(pattern=pattern)


class Strict(BaseModel):
    """Base of every data model of the kit: strict types, unknown keys refused, immutable."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


def problems(error: ValidationError, model: type[BaseModel]) -> list[str]:
    """One line per problem, each naming the key (a dotted path) and what is wrong."""
    lines: list[str] = []
    unknown: dict[str, list[str]] = defaultdict(list)
    errors = error.errors(include_url=False)
    # A string too long for one branch of a union (text or number) is what is wrong: the other
    # branches' complaints would only quote it again.
    too_long = {e["loc"][:-1] for e in errors if e["type"] == "string_too_long"
                and e["loc"][-1:] == ("constrained-str",)}
    for e in errors:
        if e["loc"][:-1] in too_long and e["type"] != "string_too_long":
            continue
        where = ".".join(map(str, e["loc"])).removesuffix(".constrained-str")
        kind, message = e["type"], e["msg"]
        if kind == "extra_forbidden":
            parent, _, key = where.rpartition(".")
            unknown[parent].append(key)
        elif kind == "value_error":  # the models' own rules: one problem per line
            for line in message.removeprefix("Value error, ").splitlines():
                sep = "." if _KEYED.match(line) else ": "
                lines.append(f"{where}{sep}{line}" if where else line)
        elif kind == "missing":
            lines.append(f"missing key '{where}'")
        elif kind == "string_too_long":  # neither the key nor the value is quoted whole
            lines.append(f"key '{_shortened(where)}' is {len(e['input'])} characters long, "
                         f"more than the {e['ctx']['max_length']} allowed")
        elif kind == "string_pattern_mismatch" and e["ctx"]["pattern"] in PATTERN_HINTS:
            lines.append(f"{where}: {e['input']!r} {PATTERN_HINTS[e['ctx']['pattern']]}")
        elif kind in ("literal_error", "enum"):
            lines.append(f"key '{where}' is {e['input']!r}, expected {e['ctx']['expected']}")
        else:
            lines.append(f"key '{_shortened(where) or '(top)'}' {_PHRASES.get(kind, message)}, "
                         f"got {_shortened(repr(e['input']), 200)}")
    for parent, keys in unknown.items():
        table = f"[{parent}] " if parent else ""
        lines.append(f"{table}unknown key(s) {', '.join(keys)}; allowed: "
                     f"{', '.join(_fields_at(model, parent))}")
    return lines


def _shortened(text: str, keep: int = 60) -> str:
    """``text`` with its middle cut out when longer than ``keep`` characters."""
    return text if len(text) <= keep else f"{text[:keep // 2]}...{text[-keep // 2:]}"


def _fields_at(model: type[BaseModel] | None, path: str) -> list[str]:
    """The keys the model allows in the table at dotted ``path`` (tables of tables skipped)."""
    for part in filter(None, path.split(".")):
        if model is not None and part in model.model_fields:
            model = next((t for t in _types(model.model_fields[part].annotation)
                          if isinstance(t, type) and issubclass(t, BaseModel)), None)
    return [f.alias or name for name, f in model.model_fields.items()] if model else []


def _types(annotation: Any) -> list[Any]:
    return [annotation, *(t for arg in get_args(annotation) for t in _types(arg))]


def validate(data: Any, model: type[M], where: str) -> M:
    """``data`` (a TOML table) as ``model``, checked as the JSON it stands for (one parse path);
    a :class:`DataError` starts with ``where`` (the file, and the table in it)."""
    try:
        return model.model_validate_json(json.dumps(data, default=str))
    except RecursionError:  # dotted keys nest tables without nesting the parser (a.a.a...= 1)
        raise DataError(f"{where}: nested too deeply to read; a data file is a few levels "
                        "deep") from None
    except ValidationError as error:
        text = "; ".join(problems(error, model))
        raise DataError(f"{where}{' ' if text.startswith('[') else ': '}{text}") from None


def load_toml(path: Path, model: type[M]) -> M:
    """Read ``path`` into ``model``; errors name the file and the key."""
    return validate(read_toml(path), model, str(path))
