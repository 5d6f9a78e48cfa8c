"""Reading TOML data files with errors that name the file and the key (models: ``bench.config.schema``)."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from bench.config.text import control_character, visible

# The kit's largest data file (a campaign) is under 20 KB; a device (/dev/zero) or a file this
# large is no data file, and is refused before it is read into memory.
MAX_TOML_BYTES = 1 << 20


class DataError(ValueError):
    """A data file (platform, preset, pins, ...) is missing, malformed or has a bad value."""


def read_toml(path: Path) -> dict[str, Any]:
    """Parse ``path`` (a regular file of at most :data:`MAX_TOML_BYTES`); a syntax error, or a
    control character in a key or value, becomes a DataError naming the file."""
    try:
        data = tomllib.loads(_regular_file_bytes(path).decode("utf-8"))
        _check_text(data, path)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, not a TOML file") from None
    except NotADirectoryError:  # a path through a file: "a.toml/b.toml"
        raise DataError(f"{path}: file not found") from None
    except OSError as exc:  # no permission, a device that fails: the file named, no traceback
        raise DataError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively, as does the check
        raise DataError(f"{path}: nested too deeply to read; a data file is a few levels "
                        "deep") from None
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8; tomllib does not say which file it read
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); TOML "
                        "files must be UTF-8") from None
    return data


def _regular_file_bytes(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most MAX_TOML_BYTES; a FIFO is opened
    without waiting for a writer, and refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(info.st_mode):
            raise DataError(f"{path}: not a regular file (a device, FIFO or socket); a data file "
                            "is a plain TOML file")
        data = handle.read(MAX_TOML_BYTES + 1)
    if len(data) > MAX_TOML_BYTES:
        raise DataError(f"{path}: larger than {MAX_TOML_BYTES >> 20} MiB; a data file is a few KB "
                        "of TOML")
    return data


def _check_text(value: object, path: Path, key: str = "") -> None:
    """Refuse a control character in any string (a TOML escape such as \\u001b makes one): it
    would reach the terminal or a job script's lines raw. Multi-line strings keep their line
    breaks and tabs; keys are names, which each file's schema checks."""
    if isinstance(value, dict):
        for name, item in value.items():
            _check_text(item, path, f"{key}.{name}" if key else name)
    elif isinstance(value, list):
        for item in value:
            _check_text(item, path, key)
    elif isinstance(value, str):
        found = control_character(value.replace("\r\n", "").replace("\n", "").replace("\t", ""))
        if found:
            raise DataError(f"{path}: key {visible(key)!r} holds the control character {found}; "
                            "remove it (only tabs and line breaks may stand in a value)")
