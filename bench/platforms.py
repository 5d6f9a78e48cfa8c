"""Platforms (machines and clusters) as validated TOML data in ``platforms/``.

A platform file holds every site fact the kit needs: scheduler, launcher, container runtime, GPUs per
node, the accelerator (whose peak TFLOP/s and its source live in ``platforms/accelerators/``),
default engine and precision, environment, module loads, image, bind mounts, library folders (a
NCCL/RCCL network plugin), CPU binding, shared storage and job defaults. A user adds a cluster by
copying a file into a folder of their own named by ``BENCH_PLATFORMS_DIR``: its platforms and
``accelerators/`` add to the kit's, and a file of the same name replaces the kit's. Job
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
# msamp-o1 / msamp-o2 / fp4: MS-AMP on top of Transformer Engine fp8 (the MS-AMP seed's "msamp" mode
# is O2; "fp4" is O2 plus MS-AMP's FP4 simulation of weights and activations).
PRECISIONS = ("bf16", "fp16", "fp8-delayed", "fp8-current", "msamp-o1", "msamp-o2", "fp4")
PRECISION_SHORTHANDS = {"fp8": "fp8-delayed"}
MSAMP_PRECISIONS = ("msamp-o1", "msamp-o2", "fp4")
# Number formats an accelerator file gives dense peaks for; a precision is measured against its own.
PEAK_FORMATS = ("bf16", "fp16", "fp8")
# The format each precision's GEMMs run in. FP4 is simulated (values rounded to FP4, GEMMs in fp8).
_PEAK_FORMAT = {"bf16": "bf16", "fp16": "fp16", "fp8-delayed": "fp8", "fp8-current": "fp8",
                "msamp-o1": "fp8", "msamp-o2": "fp8", "fp4": "fp8"}
_WALLTIME = re.compile(r"^(?:(?P<days>\d+)-)?(?P<h>\d{1,3}):(?P<m>\d{2}):(?P<s>\d{2})$")
# A platform or accelerator is named, never given as a path: the name picks a file in the folder.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A library folder: absolute, or under a variable a module load sets (``${EBROOTAWSMINOFIMINRCCL}/lib``).
LIBRARY_DIR = re.compile(r"^(?:\$\{(?P<var>[A-Za-z_][A-Za-z0-9_]*)\})?(?P<rest>/[A-Za-z0-9._+@%/-]*)$")
# Slurm's --cpu-bind: a keyword, or map_cpu/mask_cpu with a comma-separated list.
_CPU_BIND = re.compile(r"^(?:v,)?(?:none|cores|threads|sockets|ldoms|rank|"
                       r"(?:map_cpu|mask_cpu)[:=][0-9a-fA-Fx,]+)$")


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
        """Dense peak for a precision's number format (fp8-*, msamp-* and fp4 runs: fp8's)."""
        fmt = peak_format(precision)
        if fmt not in self.peak_tflops:
            raise ValueError(f"{precision} cannot run on {self.model}: its data file "
                             f"(platforms/accelerators/{self.name}.toml) has no dense {fmt} peak, "
                             f"only {', '.join(self.peak_tflops)}; use --precision bf16")
        return self.peak_tflops[fmt]


def peak_format(precision: str) -> str:
    """The number format whose dense peak a precision is measured against: fp8-delayed -> fp8.

    Records written with a precision the kit no longer offers keep their prefix (``fp8``)."""
    return _PEAK_FORMAT.get(precision, precision.split("-", 1)[0])


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
    """Default training data for both engines (Megatron-DeepSpeed has no mock data; Megatron uses
    mock data when none is set); paths as the job sees them, relative ones to the submit folder."""

    path: str = ""
    vocab_file: str = ""
    merge_file: str = ""


@dataclass(frozen=True)
class Storage:
    """The cluster's shared parallel filesystem, where data, checkpoints and images live.

    ``stage``: the folder on it that holds the kit's data, checkpoints (``--save`` without a folder
    writes to ``<stage>/checkpoints/<run id>``) and images, as the job sees it. ``filesystem``: what
    it is, for people. ``squashed_image``: an image already squashed onto that filesystem (pyxis
    starts from the file instead of pulling ``image``). ``save_interval``: iterations between
    checkpoints when ``--save`` is given without ``--save-interval``.
    """

    filesystem: str = ""
    stage: str = ""
    squashed_image: str = ""
    save_interval: int = 0  # 0: save once, at the end of the run


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
    # The image or venv has flash-attention 2 (Megatron-DeepSpeed's --use-flash-attn-v2).
    flash_attention: bool = False
    module_paths: tuple[str, ...] = ()  # `module use` folders, before `module load`
    # Folders put first on the library path the training processes see: LD_LIBRARY_PATH, or
    # SINGULARITYENV_LD_LIBRARY_PATH inside Singularity (e.g. a NCCL/RCCL network plugin).
    library_path: tuple[str, ...] = ()
    cpu_bind: str = ""  # Slurm --cpu-bind for per-GPU srun tasks, e.g. LUMI's mask per GCD
    storage: Storage = Storage()
    source: str = ""  # the file it came from


def platforms_dirs() -> list[Path]:
    """The kit's platforms folder, then the user's ``BENCH_PLATFORMS_DIR`` (later ones win)."""
    user = os.environ.get("BENCH_PLATFORMS_DIR")
    if not user:
        return [REPO_PLATFORMS_DIR]
    if not Path(user).is_dir():
        raise DataError(f"BENCH_PLATFORMS_DIR={user} is not a folder; point it at the folder that "
                        "holds your platform files (<name>.toml, accelerators/<name>.toml)")
    return [REPO_PLATFORMS_DIR] + ([Path(user)] if Path(user).resolve() != REPO_PLATFORMS_DIR else [])


def _data_files(subfolder: str) -> dict[str, Path]:
    """name -> file over the platforms folders; a user's file of the same name wins."""
    found: dict[str, Path] = {}
    for folder in platforms_dirs():
        found.update((path.stem, path) for path in (folder / subfolder).glob("*.toml"))
    return dict(sorted(found.items()))


def origin(path: Path) -> str:
    """Where a data file came from: ``kit``, or ``BENCH_PLATFORMS_DIR`` (its folder)."""
    kit = path.resolve().is_relative_to(REPO_PLATFORMS_DIR)
    return "kit" if kit else f"BENCH_PLATFORMS_DIR ({path.parent})"


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
    """A duration as Slurm and PBS read it: minutes and seconds below 60, hours below 24 after a
    day count, more than zero."""
    match = _WALLTIME.match(value)
    if not match:
        raise DataError(f"{where}: walltime '{value}' must look like HH:MM:SS or D-HH:MM:SS")
    hours, minutes, seconds = (int(match[k]) for k in ("h", "m", "s"))
    if minutes > 59 or seconds > 59 or (match["days"] is not None and hours > 23):
        raise DataError(f"{where}: walltime '{value}' is not a duration: minutes and seconds run "
                        "to 59, and hours to 23 after a day count (e.g. 01:30:00 or 2-12:00:00)")
    if not (int(match["days"] or 0) or hours or minutes or seconds):
        raise DataError(f"{where}: walltime '{value}' is zero; give the job some time")


def _data(table: dict[str, Any], where: str) -> Data:
    raw = dict(take(table, "data", dict, where, {}))
    where = f"{where} [data]"
    data = Data(path=take(raw, "path", str, where, ""),
                vocab_file=take(raw, "vocab_file", str, where, ""),
                merge_file=take(raw, "merge_file", str, where, ""))
    no_leftovers(raw, where, ["path", "vocab_file", "merge_file"])
    return data


def _storage(table: dict[str, Any], where: str) -> Storage:
    raw = dict(take(table, "storage", dict, where, {}))
    where = f"{where} [storage]"
    storage = Storage(filesystem=take(raw, "filesystem", str, where, ""),
                      stage=take(raw, "stage", str, where, ""),
                      squashed_image=take(raw, "squashed_image", str, where, ""),
                      save_interval=take(raw, "save_interval", int, where, 0))
    no_leftovers(raw, where, ["filesystem", "stage", "squashed_image", "save_interval"])
    for key in ("stage", "squashed_image"):
        value = getattr(storage, key)
        if value and not value.startswith("/"):
            raise DataError(f"{where}: '{key}' must be an absolute path as the job sees it, "
                            f"got '{value}'")
    if storage.save_interval < 0:
        raise DataError(f"{where}: save_interval must be 0 (at the end) or more iterations")
    return storage


def _library_path(table: dict[str, Any], where: str) -> tuple[str, ...]:
    dirs = _str_list(table, "library_path", where)
    for entry in dirs:
        if not LIBRARY_DIR.match(entry):
            raise DataError(f"{where}: library_path entry '{entry}' must be an absolute folder, "
                            "or one under a variable written ${NAME}/..., e.g. ${EBROOTX}/lib")
    return dirs


def _cpu_bind(table: dict[str, Any], where: str) -> str:
    value = take(table, "cpu_bind", str, where, "")
    if value and not _CPU_BIND.match(value):
        raise DataError(f"{where}: cpu_bind '{value}' is not a Slurm --cpu-bind value such as "
                        "'cores' or 'mask_cpu:0xfe,0xfe00'")
    return value


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


# [job] keys a scheduler's renderer does not use: set, they would be silently dropped.
_JOB_KEYS_UNUSED = {
    "slurm": ("queue", "filesystems", "node_resources"),
    "pbs": ("partition", "qos"),
    "none": ("account", "partition", "queue", "qos", "filesystems", "extra_directives",
             "node_resources", "account_required"),
}

_PLATFORM_KEYS = ["description", "scheduler", "launcher", "container_runtime", "gpus_per_node",
                  "accelerator", "default_engine", "default_precision", "image", "env", "modules",
                  "setup", "binds", "job", "data", "cpus_per_task",
                  "megatron_deepspeed_dir", "capabilities", "flash_attention",
                  "module_paths", "library_path", "cpu_bind", "storage"]


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
        flash_attention=take(raw, "flash_attention", bool, where, False),
        module_paths=_str_list(raw, "module_paths", where),
        library_path=_library_path(raw, where),
        cpu_bind=_cpu_bind(raw, where),
        storage=_storage(raw, where),
        source=str(path),
    )
    no_leftovers(raw, where, _PLATFORM_KEYS)
    if platform.gpus_per_node < 0:
        raise DataError(f"{where}: gpus_per_node must be positive (0 = count the GPUs present)")
    if platform.scheduler != "none" and platform.gpus_per_node == 0:
        raise DataError(f"{where}: a cluster platform must state gpus_per_node")
    if platform.cpu_bind and (platform.scheduler != "slurm" or platform.launcher != "srun"):
        raise DataError(f"{where}: cpu_bind binds srun's per-GPU tasks: it needs scheduler "
                        "'slurm' and launcher 'srun'")
    if platform.container_runtime in ("pyxis", "singularity", "docker") and not platform.image:
        raise DataError(f"{where}: container_runtime '{platform.container_runtime}' needs 'image'")
    for key in _JOB_KEYS_UNUSED[platform.scheduler]:
        if getattr(platform.job, key):
            raise DataError(f"{where} [job]: '{key}' does not apply to scheduler "
                            f"'{platform.scheduler}', whose scripts would drop it; remove it")
    if platform.accelerator != "auto":
        try:
            load_accelerator(platform.accelerator)
        except DataError as exc:
            raise DataError(f"{where}: key 'accelerator': {exc}") from None
    return platform


def platform_files() -> list[Path]:
    return list(_data_files("").values())


def load_platform(name: str) -> Platform:
    """The platform ``name`` from the platforms folders, or a ValueError listing the known ones."""
    files = _data_files("")
    known = ", ".join(files)
    if not _NAME.match(name) or name.endswith(".toml"):
        raise ValueError(f"--platform '{name}' is not a platform name; known: {known} (a "
                         "platform is named, not given as a path: put its file in a folder named "
                         "by BENCH_PLATFORMS_DIR)")
    if name not in files:
        raise ValueError(f"unknown platform '{name}'; known: {known} (add one by copying "
                         f"a file of {REPO_PLATFORMS_DIR} into a folder named by BENCH_PLATFORMS_DIR)")
    return load_platform_file(files[name])


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

def accelerator_files() -> list[Path]:
    return list(_data_files("accelerators").values())


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
    files = _data_files("accelerators")
    if not _NAME.match(name) or name not in files:
        raise DataError(f"unknown accelerator '{name}'; known: {', '.join(files)}")
    return load_accelerator_file(files[name])


def match_accelerator(device_name: str) -> Accelerator | None:
    """The accelerator whose ``match`` strings occur in a driver-reported device name."""
    for path in accelerator_files():
        acc = load_accelerator_file(path)
        if any(m.lower() in device_name.lower() for m in acc.match):
            return acc
    return None
