"""Model presets (GPT-3 shapes) loaded from TOML data.

The kit's presets live in ``bench/config/presets/*.toml``; a user adds presets without code by putting a
TOML file of the same form in a folder and pointing ``BENCH_PRESETS_DIR`` at it. A user preset with
the same name as a kit preset replaces it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.config.environment import env_value
from bench.config.schema import Strict, load_toml, validate
from bench.config.tomlfile import DataError

KIT_PRESETS_DIR = Path(__file__).parent / "presets"
# A preset's name becomes part of a run id, hence of a folder under runs/ and a record's file name:
# ASCII letters, digits, '.', '_' and '-', not starting with a dot ('../x', a newline, control or
# bidi characters would make paths outside runs/ or names that print as something else).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
NAME_MAX_CHARS = 64
"""The longest preset name. The default is 64: a run id must stay a valid file name."""


@dataclass(frozen=True)
class Preset:
    """A GPT model shape and its default batch sizes (in sequences)."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq_length: int
    vocab_size: int  # padded vocabulary, as the FLOPs count uses it
    micro_batch: int
    global_batch: int
    ffn_hidden: int  # default 4 * hidden

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "heads", "seq_length", "vocab_size", "micro_batch",
                      "global_batch", "ffn_hidden"):
            if getattr(self, field) <= 0:
                raise DataError(f"preset {self.name}: {field} must be positive")
        if self.hidden % self.heads:
            raise DataError(f"preset {self.name}: hidden {self.hidden} is not divisible by "
                            f"heads {self.heads}")
        if self.global_batch % self.micro_batch:
            raise DataError(f"preset {self.name}: global_batch {self.global_batch} is not a "
                            f"multiple of micro_batch {self.micro_batch}")


class PresetTable(Strict):
    """One ``[presets."<name>"]`` table; ``ffn_hidden`` defaults to 4 x ``hidden``."""

    layers: int
    hidden: int
    heads: int
    seq_length: int
    vocab_size: int
    micro_batch: int
    global_batch: int
    ffn_hidden: int | None = None


class PresetFile(Strict):
    """A preset file: ``[presets."<name>"]`` tables (each checked as a :class:`PresetTable`)."""

    presets: dict[str, dict[str, Any]]


def _presets_from(path: Path) -> dict[str, Preset]:
    out: dict[str, Preset] = {}
    for name, raw in load_toml(path, PresetFile).presets.items():
        if not _NAME.fullmatch(name) or len(name) > NAME_MAX_CHARS:
            raise DataError(f"{path}: preset name {name!r} is not a name: use up to "
                            f"{NAME_MAX_CHARS} ASCII letters, digits, '.', '_' or '-', starting "
                            "with a letter or digit (it becomes part of the run id)")
        where = f"{path} [presets.\"{name}\"]"
        table = validate(raw, PresetTable, where)
        try:
            out[name] = Preset(name=name, **table.model_dump(exclude={"ffn_hidden"}),
                               ffn_hidden=table.ffn_hidden or 4 * table.hidden)
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from None
    return out


def preset_files() -> list[Path]:
    """The kit's preset files, then the user's (``BENCH_PRESETS_DIR``), in load order."""
    files = sorted(KIT_PRESETS_DIR.glob("*.toml"))
    user_dir = env_value("BENCH_PRESETS_DIR")
    if user_dir:
        files += sorted(Path(user_dir).glob("*.toml"))
    return files


def load_presets() -> dict[str, Preset]:
    """All presets by name; later files override earlier ones."""
    presets: dict[str, Preset] = {}
    for path in preset_files():
        presets.update(_presets_from(path))
    return presets


def get_preset(name: str) -> Preset:
    """The preset called ``name`` (case-insensitive), or a ValueError listing the known ones."""
    presets = load_presets()
    key = name.lower()
    if key not in presets:
        raise ValueError(f"unknown preset '{name}'; known presets: {', '.join(presets)} "
                         "(add your own in a TOML file under BENCH_PRESETS_DIR)")
    return presets[key]
