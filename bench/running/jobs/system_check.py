"""The system check: gather every rank's ``sysinfo`` line into one table and flag disagreements.

Like the two-node validation run in the Azure seed, but without training: it proves that the
scheduler starts the expected ranks on the expected nodes, that every rank sees its devices, runs in
the same container or environment with the same kit/Megatron/torch versions, and got the
communication variables (NCCL/RCCL/libfabric ...) that the platform file sets. Every rank then
takes part in one small all-reduce with NCCL (RCCL on ROCm) under ``NCCL_DEBUG=INFO``, and the
report keeps NCCL's lines that say which network it used and whether its network plugin loaded.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from bench.config.platforms import Platform
from bench.config.presets import load_presets
from bench.config.text import visible
from bench.planning.checks import MIN_ITERS
from bench.planning.options import Options
from bench.planning.plan import LaunchPlan, plan
from bench.running.jobs.rank_lines import rank_lines, unreadable_flag
from bench.train.sysinfo import ALLREDUCE_PREFIX, LINE_PREFIX

CHECK_WALLTIME = "00:10:00"
"""Time limit of a system check job. The default is ten minutes; it takes seconds once started."""

# NCCL's own log of its network set-up, for the all-reduce (INIT and NET keep the log short); it
# replaces a platform's NCCL_DEBUG for the check only.
CHECK_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
# The NCCL INFO lines that name the network or its plugin: "NET/Plugin: ...", "NET/OFI Selected
# Provider is cxi", "Using network AWS Libfabric" (RCCL prints the same words).
NCCL_NETWORK_LINE = re.compile(r"NCCL INFO (?P<message>(?:NET/\S.*|Using network .*|"
                               r"Using non-device net plugin.*))$")
USING_NETWORK = re.compile(r"^Using network (?P<name>.+)$")
MAX_NETWORK_LINES = 12  # distinct messages kept in the report

# Facts every rank must share, as (label, path into the sysinfo JSON).
SHARED_FACTS = (
    ("container", ("container", "runtime")),
    ("image", ("container", "image")),
    ("python", ("container", "python")),
    ("venv", ("container", "venv")),
    ("kit", ("versions", "kit")),
    ("megatron_core", ("versions", "megatron_core")),
    ("torch", ("versions", "torch")),
    ("world_size", ("world_size",)),
)


@dataclass(frozen=True)
class CheckReport:
    """Gathered rank reports and what disagrees. ``ok`` means nothing was flagged."""

    ranks: tuple[dict, ...]
    flags: tuple[str, ...]
    network: tuple[str, ...] = ()  # NCCL's network lines, each message once (NCCL_NETWORK_LINE)
    all_reduce: str = ""  # one line on the all-reduce (empty: none was looked for)

    @property
    def ok(self) -> bool:
        return not self.flags


def check_plan(platform: Platform, nodes: int, now: datetime, nonce: str = "",
               **job: str | None) -> LaunchPlan:
    """A plan whose ranks run ``bench.train.sysinfo`` instead of training.

    It is the plan of the smallest preset, pure data parallel over ``nodes`` whole nodes, so the
    check goes through exactly the benchmark's launch path (directives, modules, environment,
    container, launcher), in the environment of the platform's default engine's jobs; only the
    command each rank runs differs, and it reads no data. Its run id is
    ``check_{platform}_{nodes}n_{UTC timestamp}[-{nonce}]``. ``job`` overrides the platform's account,
    partition or queue (``None``: the platform's; the command line defaults them to ``$BENCH_<KEY>``).
    """
    if platform.scheduler == "none":  # no job to submit, and no whole nodes to size it by
        raise ValueError(f"the system check is a job on a cluster, and platform {platform.name} "
                         "has no scheduler: check this machine's GPUs with `nox -s smoke`")
    smallest = min(load_presets().values(), key=lambda p: p.layers * p.hidden ** 2)
    gpus = nodes * platform.gpus_per_node
    launch = plan(smallest, "tp1pp1", platform,
                  Options(now=now, nodes=nodes, mbs=1, gbs=gpus, iters=MIN_ITERS, engine="megatron",
                          walltime=CHECK_WALLTIME, **job))
    # The environment of the platform's default engine's jobs (its [unset_env] and
    # unset_library_path), the jobs the check is the first step of.
    engine = platform.default_engine
    env = {**{name: value for name, value in launch.env if name not in platform.unset_for(engine)},
           **CHECK_ENV}
    report_env = tuple(arg for name in env for arg in ("--env", name))
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    suffix = f"-{nonce}" if nonce else ""
    # It reads no data: no data guard may stop it where the training data is not made yet.
    return replace(launch, run_id=f"check_{platform.name}_{nodes}n_{stamp}{suffix}",
                   entry=("-m", "bench.train.sysinfo"), train_args=(*report_env, "--all-reduce"),
                   env=tuple(env.items()), ds_config=None, engine=engine, data_path="")


def gather(output: str) -> list[dict]:
    """The sysinfo reports in a job's output, sorted by rank (unranked ones last); a line that
    holds none is left out (:func:`bench.running.jobs.rank_lines.rank_lines`)."""
    reports, _ = rank_lines(output, LINE_PREFIX)
    return sorted(reports, key=lambda r: (r.get("rank") is None, r.get("rank") or 0))


def network_lines(output: str) -> tuple[str, ...]:
    """NCCL's INFO messages naming the network or its plugin, each once, in order of appearance
    (the ``host:pid:tid [device]`` prefix of every rank's copy dropped)."""
    found: dict[str, None] = {}
    for line in output.splitlines():
        match = NCCL_NETWORK_LINE.search(line.rstrip())
        if match and len(found) < MAX_NETWORK_LINES:
            found.setdefault(match["message"].strip(), None)
    return tuple(found)


def check_output(output: str, expected_ranks: int, platform_env: dict[str, str]) -> CheckReport:
    """The report of a check job's output: :func:`compare` of the ranks' facts, then the
    all-reduce results and NCCL's network lines, flagging a rank that did not sum right or did not
    report, no NCCL line naming the network, or a network other than the ``NCCL_NET`` set."""
    report = compare(gather(output), expected_ranks, platform_env)
    results, unreadable = rank_lines(output, ALLREDUCE_PREFIX)
    flags = [*report.flags, *unreadable_flag("sysinfo", rank_lines(output, LINE_PREFIX)[1]),
             *unreadable_flag("all-reduce", unreadable)]
    good = sorted(r["rank"] for r in results if r.get("ok") and "rank" in r)
    failed = {r.get("rank"): r.get("error", "wrong sum") for r in results if not r.get("ok")}
    silent = sorted(set(range(expected_ranks)) - set(good) - set(failed))
    flags += [f"all-reduce failed on rank {rank}: {error}" for rank, error in sorted(
        failed.items(), key=lambda item: (item[0] is None, item[0] or 0))]
    if silent:
        flags.append(f"all-reduce: no result from ranks {silent} (hung, or the job ended first)")
    network = network_lines(output)
    used = sorted({m["name"] for m in map(USING_NETWORK.match, network) if m})
    backends = sorted({str(r["backend"]) for r in results if r.get("backend")})
    if "nccl" in backends and not used:  # gloo (no GPU) prints no NCCL lines
        flags.append("no NCCL 'Using network' line in the output (NCCL_DEBUG=INFO): which network "
                     "the all-reduce used is unknown")
    wanted = platform_env.get("NCCL_NET")
    if wanted and used and used != [wanted]:
        flags.append(f"NCCL used network {', '.join(used)}, the platform sets NCCL_NET={wanted!r}")
    summary = (f"all-reduce ({', '.join(backends) or '-'}): {len(good)} of {expected_ranks} ranks "
               "summed right")
    return replace(report, flags=tuple(flags), network=network, all_reduce=summary)


def _get(report: dict, path: tuple[str, ...]) -> object:
    value: object = report
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _disagreement(label: str, values: dict[int, object]) -> str | None:
    """A flag naming the ranks that differ from the most common value, if any differ."""
    counts = Counter(json.dumps(v, sort_keys=True) for v in values.values())
    if len(counts) <= 1:
        return None
    majority = counts.most_common(1)[0][0]
    odd = {rank: v for rank, v in values.items() if json.dumps(v, sort_keys=True) != majority}
    return (f"{label}: ranks {sorted(odd)} have {sorted({json.dumps(v) for v in odd.values()})}, "
            f"the others {majority}")


def compare(reports: list[dict], expected_ranks: int, platform_env: dict[str, str]) -> CheckReport:
    """Flag missing or duplicate ranks and facts on which ranks disagree.

    ``expected_ranks`` is the number of tasks the job asked for. ``platform_env`` is the
    environment the platform file sets; every rank must see exactly those values.
    """
    flags: list[str] = []
    ranks = [r.get("rank") for r in reports]
    if None in ranks:
        flags.append("some ranks could not tell their rank (no RANK/SLURM_PROCID/PMI_RANK ...)")
    seen = Counter(r for r in ranks if r is not None)
    missing = sorted(set(range(expected_ranks)) - set(seen))
    if missing:
        flags.append(f"missing ranks {missing}: expected {expected_ranks}, got {len(reports)}")
    duplicates = sorted(r for r, n in seen.items() if n > 1)
    if duplicates:
        flags.append(f"ranks reported more than once: {duplicates}")
    slots = Counter((r.get("host"), r.get("local_rank")) for r in reports)
    clashing = sorted(f"{host}/{local}" for (host, local), n in slots.items() if n > 1)
    if clashing:
        flags.append(f"several ranks share host/local rank {clashing}")

    by_rank = {i if r.get("rank") is None else r["rank"]: r for i, r in enumerate(reports)}
    for label, path in SHARED_FACTS:
        flag = _disagreement(label, {rank: _get(r, path) for rank, r in by_rank.items()})
        if flag:
            flags.append(flag)
    flag = _disagreement("visible GPUs (nvidia-smi -L count)",
                         {rank: len(r["gpus"]) if r.get("gpus") is not None else None
                          for rank, r in by_rank.items()})
    if flag:
        flags.append(flag)
    names = sorted({n for r in reports for n in r.get("communication", {})})
    for name in names:
        flag = _disagreement(name, {rank: r.get("communication", {}).get(name)
                                    for rank, r in by_rank.items()})
        if flag:
            flags.append(flag)
    for name, wanted in sorted(platform_env.items()):
        wrong = sorted(rank for rank, r in by_rank.items()
                       if {**r.get("communication", {}), **r.get("env", {})}.get(name) != wanted)
        if wrong:
            flags.append(f"{name}: the platform sets {wanted!r}, ranks {wrong} see otherwise")
    return CheckReport(tuple(reports), tuple(flags))


def _devices(report: dict) -> str:
    devices = {k: v for k, v in (report.get("devices") or {}).items() if v is not None}
    shown = ",".join(f"{k.split('_')[0]}={v}" for k, v in devices.items()) or "-"
    if report.get("gpus") is not None:
        shown += f" ({len(report['gpus'])} GPUs)"
    return shown


def format_report(report: CheckReport) -> str:
    """A fixed-width table of ranks, then the flags (or a line saying all ranks agree)."""
    header = ("rank", "host", "local", "devices", "container", "megatron", "torch", "comm vars")
    # What the ranks printed, shown with its control characters escaped: never sent raw.
    rows = [header] + [tuple(visible(cell) for cell in (
        str(r.get("rank")), str(r.get("host")), str(r.get("local_rank")), _devices(r),
        str(_get(r, ("container", "runtime"))), str(_get(r, ("versions", "megatron_core"))),
        str(_get(r, ("versions", "torch"))), str(len(r.get("communication", {})))))
        for r in report.ranks
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)).rstrip() for row in rows]
    if report.all_reduce:
        lines.append(report.all_reduce)
    if report.network:
        lines += ["NCCL network (NCCL_DEBUG=INFO):", *(f"  {visible(line)}" for line in report.network)]
    if report.ok:
        lines.append(f"all {len(report.ranks)} ranks agree")
    else:
        lines += [f"FLAG {visible(flag)}" for flag in report.flags]
    return "\n".join(lines)
