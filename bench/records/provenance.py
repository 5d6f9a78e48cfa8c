"""Where a run's numbers came from: versions, the GPUs and host, the image (the record's
``provenance``), and the conditions the GPUs ran under (its ``conditions``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from bench.config.schema import Count, NonNegative, Strict, hinted
from bench.records.parts import Name, Text

Watts = Annotated[float, Field(gt=0, allow_inf_nan=False)]
MHz = Annotated[int, Field(ge=0)]
GiB = Annotated[float, Field(ge=0, allow_inf_nan=False)]
# A clock event (throttle) reason as nvidia-smi names its field, clocks_event_reasons.<name>
Reason = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=40)]
# A pair of GPUs by nvidia-smi index, "0-1", and how `nvidia-smi topo -m` says they are linked
Pair = Annotated[str, Field(pattern=r"^\d+-\d+$", max_length=20)]
Link = Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9#]*$", max_length=20)]


class Provenance(Strict):
    """Where the numbers came from; every key is present, null when it could not be determined.

    ``hostname`` is one host the run ran on, or null. A cluster run's record (``bench jobs
    collect``) knows ``kit_commit``, ``image`` and what the job printed of its image's digest; the
    scheduler's node list is in its notes (``nodelist``). Cluster records written before this held
    the node list in ``hostname``.

    ``image_digest`` is the identity of the image the run's container runtime started, read at run
    time, never from the plan; ``image_digest_kind`` says what it is: ``registry`` (a registry's
    manifest digest: the reference the runtime pulled was pinned ``@sha256:...``, or the engine's
    RepoDigests of the image it started), ``image-id`` (the engine's local image ID, the digest
    of the image's configuration: an image that never came from a registry) or ``file-sha256``
    (sha256 of the image file, ``.sqsh`` or ``.sif``, at job start). Both are null for a run
    without an image and where the runtime does not say (a tag pulled by pyxis); records written
    before the kind existed lack it.

    ``gpu_uuids`` are the UUIDs of the GPUs the run saw (nvidia-smi's ``uuid``, in
    ``CUDA_VISIBLE_DEVICES`` order): they name the physical machine, which ``hostname`` does not
    where every VM is called ``vm``. Null where unknown: records written before the field, cluster
    records (``bench jobs collect``), a driver that does not say.

    ``transformer_engine`` is the version of Transformer Engine on the training Python's path
    (its ``transformer_engine`` package metadata, from which TE sets its own ``__version__``):
    where it imports, megatron-core steps Adam with its FusedAdam whatever the layers, so it changes
    a run's speed even on the local layers. Null where TE is absent, in cluster records, and in
    records written before the field, which do not say whether TE was there.
    """

    kit_commit: Text | None
    megatron_core: Text | None
    torch: Text | None
    cuda: Text | None
    nccl: Text | None
    gpu_model: Text | None
    gpu_count: Count | None
    driver: Text | None
    image: Text | None
    image_digest: Annotated[str, hinted(r"^sha256:[0-9a-f]{64}$",
                                        "must be sha256:<64 lower-case hex digits>")] | None
    hostname: Text | None
    image_digest_kind: Literal["registry", "image-id", "file-sha256"] | None = None
    gpu_uuids: list[Name] | None = None
    transformer_engine: Text | None = None

    @model_validator(mode="after")
    def _digest_has_kind(self) -> Provenance:
        if (self.image_digest is None) != (self.image_digest_kind is None):
            raise ValueError("image_digest and image_digest_kind are set together or not at all")
        return self


class GpuConditions(Strict):
    """One GPU of the run (nvidia-smi's ``index``) as NVML or nvidia-smi read it; every key is
    present, null where the driver did not say.

    Read once when the run starts: ``power_limit_w``, the power ceiling the driver enforces (W);
    ``sm_clock_max_mhz`` and ``memory_clock_max_mhz``, the highest clocks the GPU may run (MHz);
    ``ecc``, the ECC mode. Sampled while the run goes: ``sm_clock_end_mhz`` and
    ``memory_clock_end_mhz``, the clocks at the last sample; ``temperature_max_c``, the highest GPU
    temperature seen (°C); ``memory_used_max_gib``, the most device memory in use seen (GiB, 2^30
    bytes: everything on the GPU, torch's allocator, the CUDA contexts and NCCL's buffers alike);
    ``reasons``, every clock event (throttle) reason active at some sample, sorted, by nvidia-smi's
    names (``sw_power_cap``, ``hw_thermal_slowdown``, ``gpu_idle`` while the run starts up)."""

    index: NonNegative
    power_limit_w: Watts | None
    sm_clock_max_mhz: MHz | None
    memory_clock_max_mhz: MHz | None
    ecc: Literal["enabled", "disabled"] | None
    sm_clock_end_mhz: MHz | None
    memory_clock_end_mhz: MHz | None
    temperature_max_c: int | None
    memory_used_max_gib: GiB | None
    reasons: list[Reason] | None


class Conditions(Strict):
    """What the machine was while the run went: the record's ``conditions``, null in records made
    before it and in cluster records; every key is present, null where it could not be read.

    ``source`` says what read the GPUs (``nvml``: nvidia-ml-py; ``nvidia-smi``: its CSV queries);
    ``gpus`` are the run's GPUs in the order of ``provenance.gpu_uuids``, sampled ``samples`` times,
    every ``sample_interval_s`` seconds. ``links``: how each pair of the run's GPUs is linked, by
    nvidia-smi index (``"0-1": "NV18"``, 18 bonded NVLinks; ``SYS``, ``NODE``, ``PHB``, ``PXB``,
    ``PIX``: PCIe paths), as ``nvidia-smi topo -m`` says; empty for one GPU. ``cpu_model`` and
    ``cpu_count`` (logical cores) are the host's, ``cpu_affinity`` the cores the run may use.

    ``memory_cap_gb`` is the run's ``--gpu-memory-cap`` (null without one); ``allocator_gib`` what
    it leaves torch's allocator on rank 0 and ``outside_allocator_gib`` what that rank held outside
    the allocator when the cap was set (the CUDA context), both as the training entry printed them
    (null where the log has no such line). NCCL's buffers are made later, outside the allocator and
    outside the cap; only training knows their size, so the record keeps beside the cap the GPUs'
    ``memory_used_max_gib``, which holds them.

    ``host_op_us`` is how fast the host issues work: the microseconds rank 0 of the training entry
    took to issue one small torch op (an in-place add on a one-element tensor) on
    ``host_op_device`` (``cuda``, or ``cpu`` where the entry saw no GPU), the median of a few
    timings of thousands of ops, as the entry printed it (``host probe: ...`` in the log,
    :mod:`bench.measure.host_probe_line`). It tells a slower host from a costlier configuration in
    host-bound steps, where the CPU's model name says no more than "Intel(R) Xeon(R) Processor".
    Both are null where the log has no such line (a probe that failed; Megatron-DeepSpeed's runs
    before its script ran through the kit's ``bench.train.script_entry``), and records written
    before the probe lack them.
    """

    source: Literal["nvml", "nvidia-smi"] | None
    gpus: list[GpuConditions]
    samples: NonNegative
    sample_interval_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None
    links: dict[Pair, Link] | None
    cpu_model: Text | None
    cpu_count: Count | None
    cpu_affinity: Count | None
    memory_cap_gb: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None
    allocator_gib: GiB | None
    outside_allocator_gib: GiB | None
    host_op_us: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    host_op_device: Literal["cuda", "cpu"] | None = None

    @model_validator(mode="after")
    def _probe_has_device(self) -> Conditions:
        if (self.host_op_us is None) != (self.host_op_device is None):
            raise ValueError("host_op_us and host_op_device are set together or not at all")
        return self

    def describe(self) -> str:
        """One line for a run's end summary: power, clocks, heat, what slowed the clocks, and the
        host's pace (a host-bound step's own speed)."""
        parts = []
        first = self.gpus[0] if self.gpus else None
        if first and first.power_limit_w is not None:
            parts.append(f"{first.power_limit_w:.0f} W")
        ends = [g.sm_clock_end_mhz for g in self.gpus if g.sm_clock_end_mhz is not None]
        if ends and first and first.sm_clock_max_mhz is not None:
            parts.append(f"SM clock {min(ends)}-{max(ends)} of {first.sm_clock_max_mhz} MHz at the end")
        hottest = [g.temperature_max_c for g in self.gpus if g.temperature_max_c is not None]
        if hottest:
            parts.append(f"{max(hottest)} °C at most")
        seen = sorted({r for g in self.gpus for r in g.reasons or ()})
        parts.append(f"clocks held back by {', '.join(seen)}" if seen else
                     "no clock event seen" if self.samples else "not sampled")
        if self.host_op_us is not None:
            parts.append(f"host {self.host_op_us:.2f} us a torch op on {self.host_op_device}")
        return "; ".join(parts)
