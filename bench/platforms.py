"""Platforms (machines and clusters) as validated TOML data in ``platforms/``.

A platform file holds every site fact the kit needs: scheduler, launcher, container runtime, GPUs per
node, the accelerator (whose peak TFLOP/s and its source live in ``platforms/accelerators/``),
default engine and precision, environment, module loads, image, bind mounts and job defaults. A user
adds a cluster by copying a file; ``BENCH_PLATFORMS_DIR`` points the kit at another folder. Job
defaults (account, partition, queue, walltime) are overridden by options or by the environment
variables ``BENCH_ACCOUNT``, ``BENCH_PARTITION``, ``BENCH_QUEUE``, ``BENCH_WALLTIME``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.capabilities import Capabilities
from bench.tomlfile import DataError, no_leftovers, read_toml, take

REPO_PLATFORMS_DIR = Path(__file__).resolve().parent.parent / "platforms"

SCHEDULERS = ("slurm", "pbs", "none")
LAUNCHERS = ("srun", "torchrun", "mpiexec")
RUNTIMES = ("pyxis", "singularity", "docker", "venv", "none")
ENGINES = ("megatron", "megatron-deepspeed")
# fp8-delayed / fp8-current: Transformer Engine's delayed-scaling and current (per-tensor) scaling
# recipes (bench.engines.common.precision_flags). "fp8" on the command line means fp8-delayed.
PRECISIONS = ("bf16", "fp16", "fp8-delayed", "fp8-current")
PRECISION_SHORTHANDS = {"fp8": "fp8-delayed"}
# Number formats an accelerator file gives dense peaks for; a precision is measured against its own.
PEAK_FORMATS = ("bf16", "fp16", "fp8")
_WALLTIME = re.compile(r"^(\d+-)?\d{1,3}:\d{2}:\d{2}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Accelerator:
    """One GPU (or GCD) model and its dense peak TFLOP/s per precision, with the source."""

    name: str
    model: str
    match: tuple[str, ...]  # substrings of the device name a driver reports (e.g. "H200")
    memory_gb: float
    peak_tflops: dict[str, float]
    peak_source: str

    def peak(self, precision: str) -> float:
        """Dense peak for a precision's number format (fp8-* runs are measured against fp8)."""
        fmt = peak_format(precision)
        if fmt not in self.peak_tflops:
            raise ValueError(f"{precision} cannot run on {self.model}: its data file "
                             f"(platforms/accelerators/{self.name}.toml) has no dense {fmt} peak, "
                             f"only {', '.join(self.peak_tflops)}; use --precision bf16")
        return self.peak_tflops[fmt]


def peak_format(precision: str) -> str:
    """The number format whose dense peak a precision is measured against: fp8-delayed -> fp8."""
    return precision.split("-", 1)[0]


def resolve_precision(name: str) -> str:
    """A precision name or shorthand to the kit's name; unknown names raise with the choices."""
    name = PRECISION_SHORTHANDS.get(name, name)
    if name not in PRECISIONS:
        raise ValueError(f"precision '{name}' is not one of {', '.join(PRECISIONS)} "
                         f"(fp8 = fp8-delayed)")
    return name


@dataclass(frozen=True)
class Job:
    """Scheduler defaults a user overrides by option or environment (empty = not set)."""

    account: str = ""
    partition: str = ""
    queue: str = ""
    walltime: str = "00:30:00"
    qos: str = ""
    filesystems: str = ""  # PBS -l filesystems=... (ALCF)
    extra_directives: tuple[str, ...] = ()  # more scheduler options, e.g. "--exclusive"
    account_required: bool = False  # the site refuses jobs without an account (LUMI, ALCF)
    node_resources: str = ""  # PBS: appended to "select=<nodes>:", e.g. "system=polaris"


@dataclass(frozen=True)
class Data:
    """Training data for engines without mock data (Megatron-DeepSpeed); paths as the job sees them."""

    path: str = ""
    vocab_file: str = ""
    merge_file: str = ""


@dataclass(frozen=True)
class Platform:
    """A machine or cluster, loaded from ``platforms/<name>.toml``."""

    name: str
    description: str
    scheduler: str
    launcher: str
    container_runtime: str
    gpus_per_node: int  # 0 = count the GPUs present (the local platform)
    accelerator: str  # a name in platforms/accelerators/, or "auto" to detect
    default_engine: str
    default_precision: str
    image: str
    env: dict[str, str] = field(default_factory=dict)
    modules: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()  # shell lines run before launching (e.g. activating a venv)
    binds: tuple[str, ...] = ()
    job: Job = Job()
    data: Data = Data()
    cpus_per_task: int = 0  # 0 = leave to the scheduler
    # Where pretrain_gpt.py of Megatron-DeepSpeed is, as the job sees it (the kit's images use /opt).
    megatron_deepspeed_dir: str = "/opt/Megatron-DeepSpeed"
    # What the image or venv has (bench.capabilities); None: detected where the run trains.
    capabilities: Capabilities | None = Capabilities()
    source: str = ""  # the file it came from


def platforms_dir() -> Path:
    return Path(os.environ.get("BENCH_PLATFORMS_DIR") or REPO_PLATFORMS_DIR)


def _choice(table: dict[str, Any], key: str, choices: tuple[str, ...], where: str) -> str:
    value = take(table, key, str, where)
    if value not in choices:
        raise DataError(f"{where}: key '{key}' is '{value}', expected one of {', '.join(choices)}")
    return value


def _str_list(table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    values = take(table, key, list, where, [])
    if not all(isinstance(v, str) for v in values):
        raise DataError(f"{where}: key '{key}' must be a list of strings")
    return tuple(values)


def _env(table: dict[str, Any], where: str) -> dict[str, str]:
    env = take(table, "env", dict, where, {})
    out = {}
    for key, value in env.items():
        if not _ENV_NAME.match(key):
            raise DataError(f"{where} [env]: '{key}' is not a valid environment variable name")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise DataError(f"{where} [env]: '{key}' must be a string or number")
        out[key] = str(value)
    return out


def _job(table: dict[str, Any], where: str) -> Job:
    raw = dict(take(table, "job", dict, where, {}))
    where = f"{where} [job]"
    job = Job(
        account=take(raw, "account", str, where, ""),
        partition=take(raw, "partition", str, where, ""),
        queue=take(raw, "queue", str, where, ""),
        walltime=take(raw, "walltime", str, where, "00:30:00"),
        qos=take(raw, "qos", str, where, ""),
        filesystems=take(raw, "filesystems", str, where, ""),
        extra_directives=_str_list(raw, "extra_directives", where),
        account_required=take(raw, "account_required", bool, where, False),
        node_resources=take(raw, "node_resources", str, where, ""),
    )
    no_leftovers(raw, where, ["account", "partition", "queue", "walltime", "qos", "filesystems",
                              "extra_directives", "account_required", "node_resources"])
    check_walltime(job.walltime, where)
    return job


def check_walltime(value: str, where: str) -> None:
    if not _WALLTIME.match(value):
        raise DataError(f"{where}: walltime '{value}' must look like HH:MM:SS or D-HH:MM:SS")


def _data(table: dict[str, Any], where: str) -> Data:
    raw = dict(take(table, "data", dict, where, {}))
    where = f"{where} [data]"
    data = Data(path=take(raw, "path", str, where, ""),
                vocab_file=take(raw, "vocab_file", str, where, ""),
                merge_file=take(raw, "merge_file", str, where, ""))
    no_leftovers(raw, where, ["path", "vocab_file", "merge_file"])
    return data


def _capabilities(table: dict[str, Any], where: str) -> Capabilities | None:
    raw = table.pop("capabilities", {})
    if raw == "auto":
        return None
    if not isinstance(raw, dict):
        raise DataError(f"{where}: key 'capabilities' must be \"auto\" (detect where the run trains)"
                        " or a table of true/false, e.g. [capabilities] transformer_engine = true")
    try:
        return Capabilities.from_dict(raw, f"{where} [capabilities]")
    except ValueError as exc:
        raise DataError(str(exc)) from None


_PLATFORM_KEYS = ["description", "scheduler", "launcher", "container_runtime", "gpus_per_node",
                  "accelerator", "default_engine", "default_precision", "image", "env", "modules",
                  "setup", "binds", "job", "data", "cpus_per_task",
                  "megatron_deepspeed_dir", "capabilities"]


def load_platform_file(path: Path) -> Platform:
    """Load and validate one platform file; errors name the file and the key."""
    raw = read_toml(path)
    where = str(path)
    platform = Platform(
        name=path.stem,
        description=take(raw, "description", str, where),
        scheduler=_choice(raw, "scheduler", SCHEDULERS, where),
        launcher=_choice(raw, "launcher", LAUNCHERS, where),
        container_runtime=_choice(raw, "container_runtime", RUNTIMES, where),
        gpus_per_node=take(raw, "gpus_per_node", int, where),
        accelerator=take(raw, "accelerator", str, where),
        default_engine=_choice(raw, "default_engine", ENGINES, where),
        default_precision=_choice(raw, "default_precision", PRECISIONS, where),
        image=take(raw, "image", str, where, ""),
        env=_env(raw, where),
        modules=_str_list(raw, "modules", where),
        setup=_str_list(raw, "setup", where),
        binds=_str_list(raw, "binds", where),
        job=_job(raw, where),
        data=_data(raw, where),
        cpus_per_task=take(raw, "cpus_per_task", int, where, 0),
        megatron_deepspeed_dir=take(raw, "megatron_deepspeed_dir", str, where,
                                    "/opt/Megatron-DeepSpeed"),
        capabilities=_capabilities(raw, where),
        source=str(path),
    )
    no_leftovers(raw, where, _PLATFORM_KEYS)
    if platform.gpus_per_node < 0:
        raise DataError(f"{where}: gpus_per_node must be positive (0 = count the GPUs present)")
    if platform.scheduler != "none" and platform.gpus_per_node == 0:
        raise DataError(f"{where}: a cluster platform must state gpus_per_node")
    if platform.container_runtime in ("pyxis", "singularity", "docker") and not platform.image:
        raise DataError(f"{where}: container_runtime '{platform.container_runtime}' needs 'image'")
    if platform.accelerator != "auto":
        try:
            load_accelerator(platform.accelerator)
        except DataError as exc:
            raise DataError(f"{where}: key 'accelerator': {exc}") from None
    return platform


def platform_files() -> list[Path]:
    return sorted(platforms_dir().glob("*.toml"))


def load_platform(name: str) -> Platform:
    """The platform ``name`` from the platforms folder, or a ValueError listing the known ones."""
    path = platforms_dir() / f"{name}.toml"
    if not path.exists():
        known = ", ".join(p.stem for p in platform_files())
        raise ValueError(f"unknown platform '{name}'; known: {known} (add one by copying a file "
                         f"in {platforms_dir()})")
    return load_platform_file(path)


def with_job_overrides(platform: Platform, **overrides: str | None) -> Platform:
    """Apply job overrides: explicit options first, then ``BENCH_<KEY>`` environment variables."""
    changes = {}
    for key in ("account", "partition", "queue", "walltime", "qos"):
        value = overrides.get(key) or os.environ.get(f"BENCH_{key.upper()}")
        if value:
            changes[key] = value
    if "walltime" in changes:
        check_walltime(changes["walltime"], "--walltime")
    return replace(platform, job=replace(platform.job, **changes)) if changes else platform


# --- accelerators -------------------------------------------------------------------------------

def accelerators_dir() -> Path:
    return platforms_dir() / "accelerators"


def accelerator_files() -> list[Path]:
    return sorted(accelerators_dir().glob("*.toml"))


def load_accelerator_file(path: Path) -> Accelerator:
    raw = read_toml(path)
    where = str(path)
    peaks = take(raw, "peak_tflops", dict, where)
    for key, value in peaks.items():
        if key not in PEAK_FORMATS or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DataError(f"{where} [peak_tflops]: '{key}' must be one of {PEAK_FORMATS} with a "
                            "number of dense TFLOP/s")
    acc = Accelerator(
        name=path.stem,
        model=take(raw, "model", str, where),
        match=_str_list(raw, "match", where),
        memory_gb=float(take(raw, "memory_gb", (int, float), where)),
        peak_tflops={k: float(v) for k, v in peaks.items()},
        peak_source=take(raw, "peak_source", str, where),
    )
    no_leftovers(raw, where, ["model", "match", "memory_gb", "peak_tflops", "peak_source"])
    if not acc.peak_source.strip():
        raise DataError(f"{where}: peak_source must say where the peak figures come from")
    return acc


def load_accelerator(name: str) -> Accelerator:
    path = accelerators_dir() / f"{name}.toml"
    if not path.exists():
        known = ", ".join(p.stem for p in accelerator_files())
        raise DataError(f"unknown accelerator '{name}'; known: {known}")
    return load_accelerator_file(path)


def match_accelerator(device_name: str) -> Accelerator | None:
    """The accelerator whose ``match`` strings occur in a driver-reported device name."""
    for path in accelerator_files():
        acc = load_accelerator_file(path)
        if any(m.lower() in device_name.lower() for m in acc.match):
            return acc
    return None
