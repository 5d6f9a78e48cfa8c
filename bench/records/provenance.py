"""Where a run's numbers came from: versions, the GPUs and host, the image (the record's
``provenance``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import model_validator

from bench.config.schema import Count, Strict, hinted
from bench.records.parts import Name, Text


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

    @model_validator(mode="after")
    def _digest_has_kind(self) -> Provenance:
        if (self.image_digest is None) != (self.image_digest_kind is None):
            raise ValueError("image_digest and image_digest_kind are set together or not at all")
        return self
