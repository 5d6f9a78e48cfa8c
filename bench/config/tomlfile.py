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
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, not a TOML file") from None
    except OSError as exc:  # no permission, a device that fails: the file named, no traceback
        raise DataError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise DataError(f"{path}: nested too deeply to read; a data file is a few levels "
                        "deep") from None
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8; tomllib does not say which file it read
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); TOML "
                        "files must be UTF-8") from None
