"""What a user asks of a run, and what the caller observed of the world (time, GPUs present):
the planner's one input beside the preset, layout and platform."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bench.config.capabilities import Capabilities
from bench.config.run_options import DEFAULT_ITERS
from bench.planning.engines.deepspeed import DEFAULT_ZERO_SETTINGS, ZeroSettings
from bench.planning.predict.expect import StepModel
from bench.planning.tuning import DEFAULT_TUNING, Tuning


@dataclass(frozen=True)
class Options:
    """Everything a user can set on the command line, plus facts the caller observed.

    ``gpus``/``nodes``: run size; by default the GPUs present (local) or the fewest whole nodes
    that hold tp x pp x cp (clusters). ``iters``: training iterations (default 30).
    ``now``: the UTC time used in the run id. ``gpus_present``/``gpu_name``: what the local machine
    has (0/"" when unknown). ``tuning``: performance settings away from the kit's defaults
    (``bench.planning.tuning``), for A/B runs. ``seq_length``: the preset's sequence length replaced (the
    Polaris seed trains at 4096). ``save``: write checkpoints there ("": the platform's
    ``<storage stage>/checkpoints/<run id>``; None: no checkpoints), every ``save_interval``
    iterations (default: the platform's ``save_interval`` where it times two saves, else
    ``iters // 2``: bench.planning.saves). ``zero``:
    DeepSpeed ZeRO settings beyond the stage (Megatron-DeepSpeed engine).
    """

    now: datetime
    # A short random part of the run id ("" for none): two checkouts planning the same run in the
    # same second must not get one id.
    nonce: str = ""
    gpus: int | None = None
    nodes: int | None = None
    mbs: int | None = None
    gbs: int | None = None
    iters: int = DEFAULT_ITERS
    engine: str | None = None
    precision: str | None = None
    image: str | None = None
    data_path: str | None = None
    vocab_file: str | None = None
    merge_file: str | None = None
    account: str | None = None
    partition: str | None = None
    queue: str | None = None
    walltime: str | None = None
    tuning: Tuning = DEFAULT_TUNING
    seq_length: int | None = None
    save: str | None = None
    save_interval: int | None = None
    zero: ZeroSettings = DEFAULT_ZERO_SETTINGS
    recompute: str | None = None  # activation recompute: None, "full" or "selective"
    gpus_present: int = 0
    gpu_name: str = ""
    gpu_memory_gb: float = 0.0  # the local GPU's memory as the driver reports it (0: unknown)
    # The CPU cores a run here may use (os.sched_getaffinity; 0: unknown, or the shell sets
    # OMP_NUM_THREADS itself): a ZeRO-Offload run's CPU Adam threads are shared out of them.
    cpus_present: int = 0
    # The n-th of N measurements of one configuration (``--repeat N``): the run id gets ``-r<n>``
    # and the run's notes name the group (``repeat_group``, the run id without the suffix).
    repeat: int | None = None
    # Bookkeeping notes for the record (``sweep``, ``campaign``); they never split configurations.
    labels: tuple[tuple[str, str], ...] = ()
    # Appended to the run id as ``-<tag>``: keeps the runs of one command apart when they share
    # preset, layout and second (a campaign's runs are tagged ``c<n>``, n their place in the file).
    tag: str | None = None
    # What the training Python has, detected where the run trains (bench.running.trainenv.facts); None: not
    # probed, or it cannot import megatron-core. Used where the platform says capabilities = "auto".
    capabilities: Capabilities | None = None
    # The --image was built with --option msamp=1 (--image-option msamp=1): it adds MS-AMP to what
    # the platform declares for its own image.
    image_msamp: bool = False
    force: bool = False  # plan even when the memory estimate says it cannot fit
    # Capture bench.measure.profile.PROFILE_STEPS steps after the measured ones with the torch
    # profiler; the record gets where their time went (megatron engine).
    profile: bool = False
    # The step-time model, loaded before planning (bench.planning.predict.expect.load_step_model);
    # None: the plan has no expectation.
    step_model: StepModel | None = None

    @property
    def local_gpus(self) -> int:
        """GPUs of a run on this machine: ``--gpus``, else those present (0: none known)."""
        return self.gpus or self.gpus_present
