"""Platforms (machines and clusters) as validated TOML data in ``platforms/``.

A platform file holds every site fact the kit needs: scheduler, launcher, container runtime, GPUs per
node, the accelerator (whose peak TFLOP/s and its source live in ``platforms/accelerators/``),
default engine and precision, environment, module loads, image, bind mounts and job defaults. A user
adds a cluster by copying a file; ``BENCH_PLATFORMS_DIR`` points the kit at another folder. Job
defaults (account, partition, queue, walltime) are overridden by command-line options, which default
to ``$BENCH_ACCOUNT`` etc. The models are the files' schema (``results/schema/platform.schema.json``,
``accelerator.schema.json``): strict types, unknown keys refused, errors naming file and key.
"""

from __future__ import annotations

import os
import re
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import Field, create_model, field_validator, model_validator

from bench.capabilities import Capabilities
from bench.schema import PATTERN_HINTS, Strict, load_toml
from bench.tomlfile import DataError

REPO_PLATFORMS_DIR = Path(__file__).resolve().parent.parent / "platforms"

# fp8-delayed / fp8-current: Transformer Engine's delayed-scaling and current (per-tensor) scaling
# recipes (bench.engines.common.precision_flags). "fp8" on the command line means fp8-delayed.
Precision = Literal["bf16", "fp16", "fp8-delayed", "fp8-current"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
PRECISION_SHORTHANDS = {"fp8": "fp8-delayed"}
# Number formats an accelerator file gives dense peaks for; a precision is measured against its own.
PeakFormat = Literal["bf16", "fp16", "fp8"]
PEAK_FORMATS: tuple[str, ...] = get_args(PeakFormat)
Engine = Literal["megatron", "megatron-deepspeed"]
ENGINES: tuple[str, ...] = get_args(Engine)
# The [capabilities] table of a platform file: Capabilities' fields, each true or false.
CapabilitiesTable = create_model("CapabilitiesTable", __base__=Strict,
                                 **{f.name: (bool, False) for f in fields(Capabilities)})
_WALLTIME = re.compile(r"^(\d+-)?\d{1,3}:\d{2}:\d{2}$")
PATTERN_HINTS[_WALLTIME.pattern] = "a walltime like HH:MM:SS or D-HH:MM:SS"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class AcceleratorFile(Strict):
    """One GPU (or GCD) model and its dense peak TFLOP/s per precision, with the source."""

    model: str
    # Substrings of the device name a driver reports (e.g. "H200").
    match: tuple[str, ...] = ()
    memory_gb: Annotated[float, Field(gt=0)]
    peak_tflops: dict[PeakFormat, Annotated[float, Field(gt=0)]]
    peak_source: Annotated[str, Field(pattern=r"\S")]  # where the peak figures come from


class Accelerator(AcceleratorFile):
    """An accelerator file as loaded; ``name`` is its file name without ``.toml``."""

    name: str

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


class Job(Strict):
    """Scheduler defaults a user overrides by option (empty = not set)."""

    account: str = ""
    partition: str = ""
    queue: str = ""
    walltime: Annotated[str, Field(pattern=_WALLTIME.pattern)] = "00:30:00"
    qos: str = ""
    filesystems: str = ""  # PBS -l filesystems=... (ALCF)
    extra_directives: tuple[str, ...] = ()  # more scheduler options, e.g. "--exclusive"
    account_required: bool = False  # the site refuses jobs without an account (LUMI, ALCF)
    node_resources: str = ""  # PBS: appended to "select=<nodes>:", e.g. "system=polaris"


class Data(Strict):
    """Training data for engines without mock data (Megatron-DeepSpeed); paths as the job sees them."""

    path: str = ""
    vocab_file: str = ""
    merge_file: str = ""


class PlatformFile(Strict):
    """A machine or cluster: the keys of ``platforms/<name>.toml``."""

    description: str
    scheduler: Literal["slurm", "pbs", "none"]
    launcher: Literal["srun", "torchrun", "mpiexec"]
    container_runtime: Literal["pyxis", "singularity", "docker", "venv", "none"]
    gpus_per_node: Annotated[int, Field(ge=0)]  # 0 = count the GPUs present (the local platform)
    accelerator: str  # a name in platforms/accelerators/, or "auto" to detect
    default_engine: Engine
    default_precision: Precision
    image: str = ""
    # Exported before launch; numbers are written as strings. Site settings such as NCCL's live
    # here, never in the kit's code (the training entry sets no environment of its own).
    env: dict[str, str] = {}
    modules: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()  # shell lines run before launching (e.g. activating a venv)
    binds: tuple[str, ...] = ()
    job: Job = Job()
    data: Data = Data()
    cpus_per_task: Annotated[int, Field(ge=0)] = 0  # 0 = leave to the scheduler
    # Where pretrain_gpt.py of Megatron-DeepSpeed is, as the job sees it (the kit's images use /opt).
    megatron_deepspeed_dir: str = "/opt/Megatron-DeepSpeed"
    # What the image or venv has (bench.capabilities); "auto": detected where the run trains.
    capabilities: Literal["auto"] | CapabilitiesTable = CapabilitiesTable()  # type: ignore[valid-type]

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
        if not isinstance(env, dict):
            return env
        for key, value in env.items():
            if not _ENV_NAME.match(key):
                raise ValueError(f"'{key}' is not a valid environment variable name")
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise ValueError(f"'{key}' must be a string or number")
        return {key: str(value) for key, value in env.items()}

    @model_validator(mode="after")
    def _consistent(self) -> PlatformFile:
        if self.scheduler != "none" and self.gpus_per_node == 0:
            raise ValueError("a cluster platform must state gpus_per_node")
        if self.container_runtime in ("pyxis", "singularity", "docker") and not self.image:
            raise ValueError(f"container_runtime '{self.container_runtime}' needs 'image'")
        return self


class Platform(PlatformFile):
    """A platform file as loaded: ``name`` is its file name without ``.toml``, ``source`` its path;
    ``capabilities`` is None where they are detected ("auto")."""

    name: str
    source: str = ""
    capabilities: Capabilities | None = Capabilities()  # type: ignore[assignment]


def platforms_dir() -> Path:
    return Path(os.environ.get("BENCH_PLATFORMS_DIR") or REPO_PLATFORMS_DIR)


def load_platform_file(path: Path) -> Platform:
    """Load and validate one platform file; errors name the file and the key."""
    data = load_toml(path, PlatformFile)
    if data.accelerator != "auto":
        try:
            load_accelerator(data.accelerator)
        except DataError as exc:
            raise DataError(f"{path}: key 'accelerator': {exc}") from None
    caps = None if data.capabilities == "auto" else Capabilities(**dict(data.capabilities))
    return Platform.model_construct(**{**dict(data), "capabilities": caps}, name=path.stem,
                                    source=str(path))


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


def job_option_default(key: str) -> str | None:
    """The default of the ``--<key>`` option: ``$BENCH_<KEY>`` (read by the command line only)."""
    return os.environ.get(f"BENCH_{key.upper()}") or None


def with_job_overrides(platform: Platform, **overrides: str | None) -> Platform:
    """The platform with the job settings given (None or empty: the platform file's)."""
    changes = {key: value for key, value in overrides.items() if value}
    if not _WALLTIME.match(changes.get("walltime", "0:00:00")):
        raise DataError(f"--walltime: walltime '{changes['walltime']}' must look like HH:MM:SS or "
                        "D-HH:MM:SS")
    if not changes:
        return platform
    return platform.model_copy(update={"job": platform.job.model_copy(update=changes)})


# --- accelerators -------------------------------------------------------------------------------

def accelerators_dir() -> Path:
    return platforms_dir() / "accelerators"


def accelerator_files() -> list[Path]:
    return sorted(accelerators_dir().glob("*.toml"))


def load_accelerator_file(path: Path) -> Accelerator:
    return Accelerator.model_construct(**dict(load_toml(path, AcceleratorFile)), name=path.stem)


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
