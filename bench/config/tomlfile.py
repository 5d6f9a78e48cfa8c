"""Reading TOML data files with errors that name the file and the key (models: ``bench.config.schema``)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


class DataError(ValueError):
    """A data file (platform, preset, pins, ...) is missing, malformed or has a bad value."""


def read_toml(path: Path) -> dict[str, Any]:
    """Parse ``path``; a syntax error becomes a DataError naming the file."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8; tomllib does not say which file it read
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); TOML "
                        "files must be UTF-8") from None


def take(table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str,
         default: Any = ...) -> Any:
    """Pop ``key`` from ``table`` checking its type; ``where`` names the file and table for errors."""
    if key not in table:
        if default is ...:
            raise DataError(f"{where}: missing key '{key}'")
        return default
    value = table.pop(key)
    # bool is an int in Python; a TOML `true` must not pass for a number.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise DataError(f"{where}: key '{key}' must be {_kind_name(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise DataError(f"{where}: key '{key}' must be {_kind_name(kind)}, got {value!r}")
    return value


def no_leftovers(table: dict[str, Any], where: str, allowed: list[str]) -> None:
    """Refuse unknown keys: a typo in a data file must not be silently ignored."""
    if table:
        unknown = ", ".join(sorted(table))
        raise DataError(f"{where}: unknown key(s) {unknown}; allowed: {', '.join(allowed)}")


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({str: "a string", int: "an integer", float: "a number", bool: "true/false",
                        list: "a list", dict: "a table"}.get(k, k.__name__) for k in kinds)
