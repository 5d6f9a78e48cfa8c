"""Before a run is launched: would its record hold what it ran? The record keeps the command of
each rank and the environment the kit set (:class:`bench.records.record.Record`, ``argv`` and
``env``, and the shell's run-changing variables as ``env:NAME`` in its variant), each value within
the record's limits. A value over them (a 20,000-character ``--data-path``, a variable of the shell
holding a whole file) would train to the end and then lose the record, so the run is refused first.
So is a run whose option would replace the shell's own value of a variable it sets
(``--allocator`` and the shell's ``PYTORCH_CUDA_ALLOC_CONF``): the user asked for both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from bench.config.text import visible
from bench.planning.engines.common import ALLOC_CONF_ENV
from bench.planning.plan import LaunchPlan
from bench.records.record import MAX_NAME_CHARS, MAX_TEXT_CHARS
from bench.running.local import shell_variables

SHOWN_CHARS = 60  # of a value over the limits, the error shows its start


def _shown(value: str) -> str:
    return visible(value[:SHOWN_CHARS]) + ("..." if len(value) > SHOWN_CHARS else "")


def _over(what: str, value: str, limit: int) -> str | None:
    if len(value) <= limit:
        return None
    return (f"{what} ({_shown(value)}) is {len(value):,} characters, more than a run's record keeps "
            f"({limit:,}), so the run would lose its record: shorten it or leave it out; nothing "
            "was run")


def _mapping_problem(what: str, values: Mapping[str, object]) -> str | None:
    for name, value in values.items():
        problem = _over(f"the name of {what} {_shown(name)}", name, MAX_NAME_CHARS)
        if problem is None and isinstance(value, str):
            problem = _over(f"the value of {what} {_shown(name)}", value, MAX_TEXT_CHARS)
        if problem:
            return problem
    return None


def _argv_problem(argv: Sequence[str]) -> str | None:
    for index, word in enumerate(argv):
        flag = argv[index - 1] if index and argv[index - 1].startswith("--") else None
        what = f"the training command's {flag} value" if flag else f"word {index} of the training command"
        if problem := _over(what, word, MAX_TEXT_CHARS):
            return problem
    return None


def record_limit_problem(launch: LaunchPlan) -> str | None:
    """Why the record of a run of ``launch`` would be refused by its limits, or None; for a run
    here, with this shell's run-changing variables (:func:`bench.running.local.shell_variables`)."""
    found = shell_variables(launch) if launch.platform.scheduler == "none" else {}
    return (_argv_problem(launch.train_argv)
            or _mapping_problem("the environment variable", {**dict(launch.env), **found})
            or _mapping_problem("the variant", {**dict(launch.variant),
                                                **{f"env:{name}": v for name, v in found.items()}})
            or _mapping_problem("the label", dict(launch.labels)))


def replaced_shell_problem(launch: LaunchPlan, environ: Mapping[str, str] = os.environ) -> str | None:
    """Why a run here of ``launch`` would replace this shell's own ``PYTORCH_CUDA_ALLOC_CONF``
    with the one ``--allocator`` sets (shell_variables leaves a variable the plan sets out, so the
    shell's value would be dropped without a word), or None; a run in an image or on a cluster gets
    the plan's environment alone."""
    if launch.in_docker or launch.platform.scheduler != "none":
        return None
    planned, mine = dict(launch.env).get(ALLOC_CONF_ENV), environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if planned is None or mine is None or mine == planned:
        return None
    return (f"--allocator sets {ALLOC_CONF_ENV}={visible(planned)}, but this shell has "
            f"{ALLOC_CONF_ENV}={_shown(mine)}: unset it to run with --allocator, or leave --allocator "
            "out to run with the shell's value (recorded as the run's environment); nothing was run")


def check_recordable(launches: Sequence[LaunchPlan]) -> None:
    """A ``ValueError`` naming the first value over the record's limits of any of ``launches``,
    or a shell value an option would replace, before any is launched or its plan summary made."""
    for launch in launches:
        if problem := record_limit_problem(launch) or replaced_shell_problem(launch):
            raise ValueError(problem)
