"""Campaign files: the configurations of a measuring campaign as data, run by ``run --campaign``.

A campaign is a TOML file::

    description = "A/B runs of the kit's defaults on one H200"
    [defaults]              # applied to every run; a run's own keys win
    iters = 11
    [[run]]
    name = "2.7b-gbs64-foreach"   # for --only and the logs; unique in the file
    group = "x1"                  # optional, or a list: --only x1 selects the whole group
    model = "2.7b"
    layout = "tp1pp1"             # or sweep = true
    mbs = 8
    gbs = 64
    megatron_args = ["--kit-torch-adam", "foreach"]

Every other key is an option of ``python -m bench run`` with ``_`` for ``-`` (``gpus``,
``nodes``, ``mbs``, ``gbs``, ``iters``, ``engine``, ``precision``, ``image``, ``data_path``,
``platform``, ``no_overlap``, ``grad_reduce``, ``no_fused_loss``, ``no_fused_attention``,
``repeat``, ``timeout``, ``hang_timeout``, ...). Each run becomes the argv of one ``run`` command,
so it is checked by the same parser; options given on the command line beside ``--campaign`` apply
to every run and win over the file (e.g. ``--platform``, ``--records-dir``, ``--dry-run``). Every
run's record names the campaign (``notes.campaign``, the file's stem), and its run id ends
``-c<n>``, n the run's place in the file, so runs of one preset and layout planned in the same
second stay apart.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Keys that are not plain ``--key value`` options.
_SPECIAL = {"name": str, "group": str | list, "model": str, "layout": str, "sweep": bool,
            "megatron_args": list}
# Options of ``run`` a campaign may set, with their TOML type; booleans are flags.
OPTION_TYPES: dict[str, type] = {
    "platform": str, "gpus": int, "nodes": int, "mbs": int, "gbs": int, "iters": int,
    "engine": str, "precision": str, "image": str, "data_path": str, "vocab_file": str,
    "merge_file": str, "account": str, "partition": str, "queue": str, "walltime": str,
    "no_overlap": bool, "grad_reduce": str, "no_fused_loss": bool,
    "no_fused_attention": bool, "repeat": int,
    "timeout": float, "hang_timeout": float, "verbose": bool,
}


@dataclass(frozen=True)
class CampaignRun:
    """One ``[[run]]``: its number in the file (from 1; its runs' ids end ``-c<number>``), name,
    groups and the ``run`` argv (without the command name)."""

    number: int
    name: str
    groups: tuple[str, ...]
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Campaign:
    name: str
    description: str
    runs: tuple[CampaignRun, ...]

    def selected(self, only: list[str] | None) -> list[CampaignRun]:
        """The runs named (by name or group) in ``only``, in file order; all without it."""
        if not only:
            return list(self.runs)
        known = {r.name for r in self.runs} | {g for r in self.runs for g in r.groups}
        unknown = [name for name in only if name not in known]
        if unknown:
            raise ValueError(f"campaign {self.name}: no run or group {', '.join(unknown)} "
                             f"(names and groups: {', '.join(sorted(known))})")
        return [r for r in self.runs if r.name in only or set(r.groups) & set(only)]


def _type_ok(value: Any, kind: Any) -> bool:
    if kind == str | list:
        return isinstance(value, str) or _type_ok(value, list)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is list:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return isinstance(value, kind)


def _argv(entry: dict[str, Any], where: str) -> tuple[str, ...]:
    if "model" not in entry:
        raise ValueError(f"{where}: missing key 'model' (a preset, e.g. 2.7b)")
    if ("layout" in entry) == bool(entry.get("sweep")):
        raise ValueError(f"{where}: give a layout or sweep = true (one of them)")
    argv = [entry["model"]]
    if "layout" in entry:
        argv.append(entry["layout"])
    if entry.get("sweep"):
        argv.append("--sweep")
    for key, value in entry.items():
        if key in _SPECIAL:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                argv.append(flag)
        else:
            argv += [flag, str(value)]
    if entry.get("megatron_args"):
        argv += ["--", *entry["megatron_args"]]
    return tuple(argv)


def load_campaign(path: Path | str) -> Campaign:
    """Read and check a campaign file; a ValueError names the file, the run and the key."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as error:
        raise ValueError(f"campaign {path}: cannot read it ({error.strerror or error})") from None
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"campaign {path}: not valid TOML ({error})") from None
    unknown = sorted(set(data) - {"description", "defaults", "run"})
    if unknown:
        raise ValueError(f"{path}: unknown top-level key(s) {', '.join(unknown)} "
                         "(description, [defaults], [[run]])")
    defaults = data.get("defaults", {})
    types = {**_SPECIAL, **OPTION_TYPES}
    runs, names = [], set()
    for index, table in enumerate(data.get("run", [])):
        where = f"{path}: [[run]] #{index + 1}"
        entry = {**defaults, **table}
        for key, value in entry.items():
            if key not in types:
                raise ValueError(f"{where}: unknown key {key!r}; known: {', '.join(types)}")
            if not _type_ok(value, types[key]):
                kind = "a string or a list of strings" if key == "group" else types[key].__name__
                raise ValueError(f"{where}: key {key!r} must be {kind}, got {value!r}")
        name = entry.get("name") or f"run-{index + 1}"
        if name in names:
            raise ValueError(f"{where}: name {name!r} is used twice")
        names.add(name)
        group = entry.get("group", [])
        groups = (group,) if isinstance(group, str) else tuple(group)
        runs.append(CampaignRun(index + 1, name, groups, _argv(entry, where)))
    if not runs:
        raise ValueError(f"{path}: no [[run]] entries")
    return Campaign(path.stem, str(data.get("description", "")), tuple(runs))
