"""Platforms (machines and clusters) as validated TOML data in ``platforms/``.

A platform file holds every site fact the kit needs: scheduler, launcher, container runtime, GPUs per
node, the accelerator (whose peak TFLOP/s and its source live in ``platforms/accelerators/``),
default engine and precision, environment, module loads, image, bind mounts, library folders, CPU
binding, shared storage and job defaults (overridden by command-line options, which default to
``$BENCH_ACCOUNT`` etc.). A user adds a cluster by copying a file into a folder of their own named
by ``BENCH_PLATFORMS_DIR``: its platforms and ``accelerators/`` add to the kit's, and a file of the
same name replaces the kit's. The models are the files' schema (``results/schema/``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, Field, create_model, field_validator, model_validator

from bench.config.capabilities import Capabilities
from bench.config.environment import env_value
from bench.config.network import Network
from bench.config.paths import PLATFORMS_DIR, platforms_dirs
from bench.config.precisions import PeakFormat, Precision, PrecisionName
from bench.config.schema import NonNegative, Positive, Strict, hinted, load_toml
from bench.config.tomlfile import DataError

# An engine's name; the engines themselves are objects (bench.planning.engines' ENGINES).
EngineName = Literal["megatron", "megatron-deepspeed"]
ENGINE_NAMES: tuple[str, ...] = get_args(EngineName)
# The [capabilities] table of a platform file: Capabilities' fields, each true or false.
CapabilitiesTable = create_model("CapabilitiesTable", __base__=Strict,
                                 **{f.name: (bool, False) for f in fields(Capabilities)})
_WALLTIME = re.compile(r"^(?:(?P<days>\d+)-)?(?P<h>\d{1,3}):(?P<m>\d{2}):(?P<s>\d{2})$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a platform is named, never given as a path
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A library folder: absolute, or under a variable a module load sets (``${EBROOTAWSMINOFIMINRCCL}/lib``);
# a ``*`` is matched when the job runs (``/opt/cray/libfabric/*/lib64``: the newest version found).
LIBRARY_DIR = re.compile(r"^(?:\$\{(?P<var>[A-Za-z_][A-Za-z0-9_]*)\})?(?P<rest>/[A-Za-z0-9._+@%/*-]*)$")
LibraryDir = Annotated[str, hinted(LIBRARY_DIR.pattern,
                                   "must be an absolute folder, or one under a variable: ${EBROOTX}/lib")]
# Slurm's --cpu-bind: a keyword, or map_cpu/mask_cpu with a comma-separated list.
CpuBind = Annotated[str, hinted(r"^(?:(?:v,)?(?:none|cores|threads|sockets|ldoms|rank|(?:map_cpu|mask_cpu)[:=]"
                                r"[0-9a-fA-Fx,]+))?$", "must be a Slurm --cpu-bind value such as 'cores' or "
                                "'mask_cpu:0xfe,0xfe00'")]
AbsolutePath = Annotated[str, hinted(r"^(/.*)?$", "must be an absolute path as the job sees it")]  # "" for none


def check_walltime(value: str) -> str:
    """A duration as Slurm and PBS read it; a ValueError says what is wrong with it."""
    match = _WALLTIME.match(value)
    if not match:
        raise ValueError(f"walltime '{value}' must look like HH:MM:SS or D-HH:MM:SS")
    days, hours, minutes, seconds = (int(match[k] or 0) for k in ("days", "h", "m", "s"))
    if minutes > 59 or seconds > 59 or (match["days"] is not None and hours > 23):
        raise ValueError(f"walltime '{value}' is not a duration: minutes and seconds run to 59, "
                         "and hours to 23 after a day count (e.g. 01:30:00 or 2-12:00:00)")
    if not (days or hours or minutes or seconds):
        raise ValueError(f"walltime '{value}' is zero; give the job some time")
    return value


class Link(Strict):
    """The GPU-to-GPU link inside a node: ``gbps`` is its nominal bandwidth per GPU in one
    direction, GB/s (the figure NCCL's all-reduce bus bandwidth is compared with), with its source."""

    name: Annotated[str, Field(pattern=r"\S")]
    gbps: Positive
    source: Annotated[str, Field(pattern=r"\S")]


class AcceleratorFile(Strict):
    """One GPU (or GCD) model and its dense peak TFLOP/s per precision, with the source; ``link``,
    where known, the link between the GPUs of a node (none by default)."""

    model: str
    # Substrings of the device name a driver reports (e.g. "H200"); the longest that occurs decides
    # between files, so a blank one, which occurs in every name, is refused.
    match: tuple[Annotated[str, hinted(r"\S", "must name part of a device name, e.g. 'H100'")], ...] = ()
    memory_gb: Positive
    peak_tflops: dict[PeakFormat, Positive]
    peak_source: Annotated[str, Field(pattern=r"\S")]  # where the peak figures come from
    link: Link | None = None


class Accelerator(AcceleratorFile):
    """An accelerator file as loaded; ``name`` is its file name without ``.toml``."""

    name: str

    def peak(self, precision: Precision) -> float:
        """Dense peak for a precision's number format (fp8-*, msamp-* and fp4 runs: fp8's)."""
        fmt = precision.peak
        if fmt not in self.peak_tflops:
            raise ValueError(f"{precision.name} cannot run on {self.model}: its data file "
                             f"(platforms/accelerators/{self.name}.toml) has no dense {fmt} peak, "
                             f"only {', '.join(self.peak_tflops)}; use --precision bf16")
        return self.peak_tflops[fmt]


def walltime_seconds(value: str) -> int:
    """A checked walltime (``HH:MM:SS`` or ``D-HH:MM:SS``) in seconds."""
    match = _WALLTIME.match(check_walltime(value))
    assert match  # check_walltime refused anything else
    days, hours, minutes, seconds = (int(match[k] or 0) for k in ("days", "h", "m", "s"))
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


class Queue(Strict):
    """A PBS queue, the node counts it takes and its longest walltime ("": no limit known)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    min_nodes: Annotated[int, Field(ge=1)] = 1
    max_nodes: Annotated[int, Field(ge=1)]
    max_walltime: Annotated[str, AfterValidator(lambda value: value and check_walltime(value))] = ""

    def takes(self, nodes: int, walltime: str) -> bool:
        """Whether a job of ``nodes`` nodes and ``walltime`` fits this queue's limits."""
        long_ok = not self.max_walltime or walltime_seconds(walltime) <= walltime_seconds(self.max_walltime)
        return self.min_nodes <= nodes <= self.max_nodes and long_ok

    def limits(self) -> str:
        """``debug (1-2 nodes, up to 01:00:00)``."""
        most = f", up to {self.max_walltime}" if self.max_walltime else ""
        return f"{self.name} ({self.min_nodes}-{self.max_nodes} nodes{most})"

    @model_validator(mode="after")
    def _range(self) -> Queue:
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"queue '{self.name}': min_nodes {self.min_nodes} is above max_nodes "
                             f"{self.max_nodes}")
        return self


class Job(Strict):
    """Scheduler defaults a user overrides by option (empty = not set). ``queues``: the site's
    queues with their node limits, in order of preference; without ``queue``, a PBS job goes to the
    first that takes its node count."""

    account: str = ""
    partition: str = ""
    queue: str = ""
    walltime: Annotated[str, hinted(_WALLTIME.pattern, "must be a walltime like HH:MM:SS or D-HH:MM:SS"),
                        AfterValidator(check_walltime)] = "00:30:00"
    qos: str = ""
    filesystems: str = ""  # PBS -l filesystems=... (ALCF)
    extra_directives: tuple[str, ...] = ()  # more scheduler options, e.g. "--exclusive"
    account_required: bool = False  # the site refuses jobs without an account (LUMI, ALCF)
    node_resources: str = ""  # PBS: appended to "select=<nodes>:", e.g. "system=polaris"
    queues: tuple[Queue, ...] = ()


class Data(Strict):
    """Default training data for both engines (Megatron-DeepSpeed has no mock data; Megatron uses
    mock data when none is set); paths as the job sees them, relative ones to the submit folder."""

    path: str = ""
    vocab_file: str = ""
    merge_file: str = ""


class Storage(Strict):
    """The cluster's shared parallel filesystem, where data, checkpoints and images live.

    ``stage``: the folder on it that holds the kit's data, checkpoints (``--save`` without a folder
    writes to ``<stage>/checkpoints/<run id>``) and images, as the job sees it. ``filesystem``: what
    it is, for people. ``squashed_image``: an image already squashed onto that filesystem (pyxis
    starts from the file instead of pulling ``image``). ``save_interval``: iterations between
    checkpoints when ``--save`` is given without ``--save-interval``, where it times two saves in
    the run's iterations (else, and for 0, the plan saves every ``iters // 2``: bench.planning.saves).
    """

    filesystem: str = ""
    stage: AbsolutePath = ""
    squashed_image: AbsolutePath = ""
    save_interval: NonNegative = 0


# [job] keys a scheduler's renderer does not use: set, they would be silently dropped.
_JOB_KEYS_UNUSED = {
    "slurm": ("queue", "filesystems", "node_resources", "queues"),
    "pbs": ("partition", "qos"),
    "none": ("account", "partition", "queue", "qos", "filesystems", "extra_directives",
             "node_resources", "account_required", "queues"),
}


class PlatformFile(Strict):
    """A machine or cluster: the keys of ``platforms/<name>.toml``."""

    description: str
    scheduler: Literal["slurm", "pbs", "none"]
    launcher: Literal["srun", "torchrun", "mpiexec"]
    # docker (scheduler "none" only): `docker run --gpus all` of `image` or --image; with neither,
    # the run uses the Python the kit is started from (the local platform without --image).
    container_runtime: Literal["pyxis", "singularity", "docker", "venv", "none"]
    gpus_per_node: NonNegative  # 0 = count the GPUs present (the local platform)
    accelerator: str  # a name in platforms/accelerators/, or "auto" to detect
    default_engine: EngineName
    default_precision: PrecisionName
    image: str = ""
    # Exported before launch; numbers are written as strings. Site settings such as NCCL's live
    # here, never in the kit's code (the training entry sets no environment of its own).
    env: dict[str, str] = {}
    modules: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()  # shell lines run before launching (e.g. activating a venv)
    binds: tuple[str, ...] = ()
    job: Job = Job()
    data: Data = Data()
    cpus_per_task: NonNegative = 0  # 0 = leave to the scheduler
    # Where pretrain_gpt.py of Megatron-DeepSpeed is, as the job sees it (the kit's images use /opt).
    megatron_deepspeed_dir: str = "/opt/Megatron-DeepSpeed"
    # What the image or venv has (bench.config.capabilities); "auto": detected where the run trains.
    capabilities: Literal["auto"] | CapabilitiesTable = CapabilitiesTable()  # type: ignore[valid-type]
    flash_attention: bool = False  # flash-attention 2 (Megatron-DeepSpeed's --use-flash-attn-v2)
    module_paths: tuple[str, ...] = ()  # `module use` folders, before `module load`
    # Folders put first on the library path the training processes see: LD_LIBRARY_PATH, or
    # SINGULARITYENV_LD_LIBRARY_PATH inside Singularity (e.g. a NCCL/RCCL network plugin).
    library_path: tuple[LibraryDir, ...] = ()
    cpu_bind: CpuBind = ""  # for per-GPU srun tasks, e.g. LUMI's mask per GCD
    storage: Storage = Storage()
    # The links between nodes (none by default: a multi-node plan then prices them as NVLink).
    network: Network | None = None
    # Variables an engine's jobs leave unset, by engine name (none by default): not exported from
    # [env], and unset in the script, since a module load may set them too (ALCF Polaris: the NCCL
    # plugin's variables can hang Megatron-DeepSpeed).
    unset_env: dict[EngineName, tuple[Annotated[str, Field(pattern=_ENV_NAME.pattern)], ...]] = {}
    # Folders of library_path an engine's jobs leave off, by engine name (none by default): NCCL
    # loads a network plugin it finds on the library path whatever NCCL_NET says, so unsetting the
    # plugin's variables alone does not turn it off (ALCF Polaris, Megatron-DeepSpeed).
    unset_library_path: dict[EngineName, tuple[LibraryDir, ...]] = {}

    @field_validator("capabilities", mode="before")
    @classmethod
    def _capabilities(cls, value: object) -> object:
        if value != "auto" and not isinstance(value, dict):
            raise ValueError('must be "auto" (detect where the run trains) or a table of '
                             "true/false, e.g. [capabilities] transformer_engine = true")
        if isinstance(value, dict):
            try:
                Capabilities.from_dict(value, "capabilities")  # its words for a bad table
            except ValueError as exc:
                raise ValueError(str(exc).split(": ", 1)[1]) from None
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, env: object) -> object:
        for key, value in env.items() if isinstance(env, dict) else ():
            if not _ENV_NAME.match(key):
                raise ValueError(f"'{key}' is not a valid environment variable name")
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise ValueError(f"'{key}' must be a string or number")
        return {key: str(value) for key, value in env.items()} if isinstance(env, dict) else env

    @model_validator(mode="after")
    def _consistent(self) -> PlatformFile:
        if self.scheduler != "none" and self.gpus_per_node == 0:
            raise ValueError("a cluster platform must state gpus_per_node")
        if self.cpu_bind and (self.scheduler != "slurm" or self.launcher != "srun"):
            raise ValueError("cpu_bind binds srun's per-GPU tasks: it needs scheduler 'slurm' and "
                             "launcher 'srun'")
        if self.container_runtime in ("pyxis", "singularity") and not self.image:
            raise ValueError(f"container_runtime '{self.container_runtime}' needs 'image'")
        if self.container_runtime == "docker" and self.scheduler != "none":
            raise ValueError("container_runtime 'docker' runs an image on this machine (scheduler "
                             "'none'); job scripts start images with pyxis or Singularity")
        if self.unset_env and self.scheduler == "none":
            raise ValueError("unset_env applies to job scripts: it needs a scheduler")
        for engine, folders in self.unset_library_path.items():
            stray = [folder for folder in folders if folder not in self.library_path]
            if stray:
                raise ValueError(f"unset_library_path.{engine}: {stray} not in library_path; name "
                                 "folders of library_path only")
        for key in _JOB_KEYS_UNUSED[self.scheduler]:
            if getattr(self.job, key):
                raise ValueError(f"[job]: '{key}' does not apply to scheduler '{self.scheduler}', "
                                 "whose scripts would drop it; remove it")
        return self


class Platform(PlatformFile):
    """A platform file as loaded: ``name`` is its file name without ``.toml``, ``source`` its path;
    ``capabilities`` is None where they are detected ("auto"). ``accelerators``: its accelerator's
    file as loaded, or for ``accelerator = "auto"`` every known one (matched to the GPU found
    when a run is planned), so that planning reads no files."""

    name: str
    source: str = ""
    capabilities: Capabilities | None = Capabilities()  # type: ignore[assignment]
    accelerators: tuple[Accelerator, ...] = ()

    def unset_for(self, engine: str) -> tuple[str, ...]:
        """The variables ``unset_env`` names for ``engine``'s jobs (none by default)."""
        return next((names for name, names in self.unset_env.items() if name == engine), ())

    def library_path_for(self, engine: str) -> tuple[str, ...]:
        """The library_path an ``engine``'s jobs put first: all of it but what
        ``unset_library_path`` names for it."""
        dropped = next((dirs for name, dirs in self.unset_library_path.items() if name == engine), ())
        return tuple(folder for folder in self.library_path if folder not in dropped)

    def env_for(self, engine: str) -> dict[str, str]:
        """The [env] an ``engine``'s jobs export: all of it but what ``unset_env`` names for it."""
        dropped = self.unset_for(engine)
        return {name: value for name, value in self.env.items() if name not in dropped}

    def accelerator_for(self, gpu_name: str, memory_gb: float = 0.0) -> Accelerator | None:
        """The run's accelerator: the platform's own, or ("auto") the file that most specifically
        matches the device name (and memory, in GB, where known) the driver reported; None when
        there is none."""
        if self.accelerator != "auto":
            return self.accelerators[0]
        return _matching(self.accelerators, gpu_name, memory_gb) if gpu_name else None


def _named(path: Path) -> bool:
    """Whether a data file's name is a platform's or accelerator's name (``--platform`` takes)."""
    return bool(_NAME.match(path.stem)) and not path.stem.endswith(".toml")


def _data_files(subfolder: str) -> dict[str, Path]:
    """name -> file over the platforms folders; a user's file of the same name wins. A file whose
    name no ``--platform`` could give (``my site.toml``) is not one: :func:`misnamed_files`."""
    found = {path.stem: path for folder in platforms_dirs()
             for path in (folder / subfolder).glob("*.toml") if _named(path)}
    return dict(sorted(found.items()))


def misnamed_files() -> list[Path]:
    """The ``*.toml`` files of the platforms folders whose names are no platform's or
    accelerator's, so that ``bench platforms`` can say why they are not listed."""
    return sorted(path for folder in platforms_dirs() for sub in ("", "accelerators")
                  for path in (folder / sub).glob("*.toml") if not _named(path))


def origin(path: Path) -> str:
    """Where a data file came from: ``kit``, or ``user`` (``BENCH_PLATFORMS_DIR``, which may name a
    site folder the kit ships, such as ``platforms/sites/shared-gpu-hosts``)."""
    return "kit" if path.resolve().parent in (PLATFORMS_DIR, PLATFORMS_DIR / "accelerators") else "user"


def platform_files() -> list[Path]:
    return list(_data_files("").values())


def load_platform_file(path: Path) -> Platform:
    """Load and validate one platform file; errors name the file and the key."""
    data = load_toml(path, PlatformFile)
    if data.accelerator == "auto":
        accelerators = tuple(map(load_accelerator_file, accelerator_files()))
    else:
        try:
            accelerators = (load_accelerator(data.accelerator),)
        except DataError as exc:
            raise DataError(f"{path}: key 'accelerator': {exc}") from None
    caps = None if data.capabilities == "auto" else Capabilities(**dict(data.capabilities))
    return Platform.model_construct(**{**dict(data), "capabilities": caps}, name=path.stem,
                                    source=str(path), accelerators=accelerators)


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
                         f"a file of {PLATFORMS_DIR} into a folder named by BENCH_PLATFORMS_DIR)")
    return load_platform_file(files[name])


def job_option_default(key: str) -> str | None:
    """The default of the ``--<key>`` option: ``$BENCH_<KEY>`` (read by the command line only)."""
    return env_value(f"BENCH_{key.upper()}")


def with_job_overrides(platform: Platform, **overrides: str | None) -> Platform:
    """The platform with the job settings given (None or empty: the platform file's)."""
    changes = {key: value for key, value in overrides.items() if value}
    if "walltime" in changes:
        try:
            check_walltime(changes["walltime"])
        except ValueError as error:
            raise DataError(f"--walltime: {error}") from None
    return platform.model_copy(update={"job": platform.job.model_copy(update=changes)}) if changes else platform


def accelerator_files() -> list[Path]:
    return list(_data_files("accelerators").values())


def load_accelerator_file(path: Path) -> Accelerator:
    return Accelerator.model_construct(**dict(load_toml(path, AcceleratorFile)), name=path.stem)


def load_accelerator(name: str) -> Accelerator:
    files = _data_files("accelerators")
    if not _NAME.match(name) or name not in files:
        raise DataError(f"unknown accelerator '{name}'; known: {', '.join(files)}")
    return load_accelerator_file(files[name])


# A driver reports memory in MiB of the whole device (an 80 GB A100: 81920 MiB, 85.9 GB), a data
# file the marketed size: within this fraction they are the same card.
_MEMORY_TOLERANCE = 0.15


def match_accelerator(device_name: str, memory_gb: float = 0.0) -> Accelerator | None:
    """The accelerator file that most specifically matches a driver-reported device name
    (:func:`_matching`)."""
    return _matching(map(load_accelerator_file, accelerator_files()), device_name, memory_gb)


def _matching(accelerators: Iterable[Accelerator], device_name: str,
              memory_gb: float = 0.0) -> Accelerator | None:
    """The longest of the files' ``match`` strings that occurs in the name wins, and where the
    device's memory is known (``memory_gb`` > 0, in GB) only files of that size count. None when no
    file matches; a DataError when two files match equally, naming both."""
    name = device_name.lower()
    found: list[tuple[int, Accelerator]] = []
    for accelerator in accelerators:
        lengths = [len(m) for m in accelerator.match if m.lower() in name]
        size_ok = not memory_gb or abs(memory_gb / accelerator.memory_gb - 1) <= _MEMORY_TOLERANCE
        if lengths and size_ok:
            found.append((max(lengths), accelerator))
    if not found:
        return None
    best = max(length for length, _ in found)
    winners = [a for length, a in found if length == best]
    if len(winners) > 1:
        files = " and ".join(f"accelerators/{a.name}.toml" for a in winners)
        raise DataError(f"GPU '{device_name}' matches {files} equally: make one file's match "
                        "more specific (e.g. 'A100-SXM4-80GB') or remove one of them")
    return winners[0]
