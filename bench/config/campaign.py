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
``iters``, ``precision``, ``data_path``, ``recompute``, ``seq_length``, ``save``,
``zero_offload``, ``no_overlap``, ``repeat``, ``timeout``, ...): every option of
:data:`bench.config.run_options.RUN_OPTIONS` but those about the command (``dry_run``, ``json``,
``campaign``, ``only``). Each run becomes the argv of one ``run`` command,
so it is checked by the same parser; options given on the command line beside ``--campaign`` apply
to every run and win over the file (e.g. ``--platform``, ``--records``, ``--dry-run``). Every
run's record names the campaign (``notes.campaign``, the file's stem), and its run id ends
``-c<n>``, n the run's place in the file, so runs of one preset and layout planned in the same
second stay apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import create_model, model_validator

from bench.config.run_options import RUN_OPTIONS, RunOption
from bench.config.schema import Strict, load_toml, validate


class _RunTableBase(Strict):
    """The keys of a ``[[run]]`` that are not options of ``run``."""

    name: str | None = None
    group: str | tuple[str, ...] = ()
    model: str
    layout: str | None = None
    megatron_args: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _one_layout(self) -> _RunTableBase:
        if (self.layout is None) == (not getattr(self, "sweep", False)):
            raise ValueError("give a layout or sweep = true (one of them)")
        return self


def _field(option: RunOption) -> tuple[Any, Any]:
    """A campaign key's type and default: a flag is false unless set; a value is left out."""
    return (bool, False) if option.kind is bool else (option.kind | None, None)


# One ``[[run]]`` with the ``[defaults]`` under it: the special keys, then every option of ``run``
# a campaign may set (bench.config.run_options), with its type; a boolean is a flag.
RunTable = create_model("RunTable", __base__=_RunTableBase,
                        **{o.name: _field(o) for o in RUN_OPTIONS if o.campaign})

# Keys of a run that are not plain ``--key value`` options.
_SPECIAL = tuple(_RunTableBase.model_fields)


class CampaignFile(Strict):
    """A campaign file: ``description``, ``[defaults]`` and ``[[run]]`` tables (each run is
    checked alone, with the defaults under it, as a :class:`RunTable`)."""

    description: str = ""
    defaults: dict[str, Any] = {}
    run: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class CampaignRun:
    """One ``[[run]]``: its number in the file (from 1; its runs' ids end ``-c<number>``), name,
    groups, its ``run`` options (without the command name) and the Megatron flags it passes."""

    number: int
    name: str
    groups: tuple[str, ...]
    options: tuple[str, ...]
    megatron_args: tuple[str, ...] = ()

    @property
    def argv(self) -> tuple[str, ...]:
        """The ``run`` argv the file gives: its options, then ``--`` and the Megatron flags."""
        return self.argv_with(())

    def argv_with(self, command_line: Sequence[str]) -> tuple[str, ...]:
        """The argv with the command line's own ``run`` options after the file's, so that they
        win (argparse keeps the last value), and the Megatron flags last."""
        megatron = ("--", *self.megatron_args) if self.megatron_args else ()
        return (*self.options, *command_line, *megatron)


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


def _options(entry: dict[str, Any]) -> tuple[str, ...]:
    """The ``run`` options of a checked run, in the order the file gives them."""
    argv = [entry["model"]]
    if "layout" in entry:
        argv.append(entry["layout"])
    for key, value in entry.items():
        if key in _SPECIAL:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                argv.append(flag)
        else:
            argv += [flag, str(value)]
    return tuple(argv)


def load_campaign(path: Path | str) -> Campaign:
    """Read and check a campaign file; a ValueError names the file, the run and the key."""
    path = Path(path)
    data = load_toml(path, CampaignFile)
    runs, names = [], set()
    for index, table in enumerate(data.run):
        where = f"{path}: [[run]] #{index + 1}"
        entry = {**data.defaults, **table}
        run = validate(entry, RunTable, where)
        name = run.name or f"run-{index + 1}"
        if name in names:
            raise ValueError(f"{where}: name {name!r} is used twice")
        names.add(name)
        groups = (run.group,) if isinstance(run.group, str) else run.group
        runs.append(CampaignRun(index + 1, name, groups, _options(entry), run.megatron_args))
    if not runs:
        raise ValueError(f"{path}: no [[run]] entries")
    clash = sorted({group for run in runs for group in run.groups} & names)
    if clash:  # --only NAME would select that run and the whole group
        raise ValueError(f"{path}: group {clash[0]!r} is also a run's name, so --only {clash[0]} "
                         "would select both: rename the group or the run")
    return Campaign(path.stem, data.description, tuple(runs))
