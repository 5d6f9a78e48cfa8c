"""One image reference per target, from what build, pull and push make to what a job script uses.

A cluster's job script names its image in the runtime's own form: pyxis (``srun
--container-image``) takes ``registry#path:tag`` and pulls it at job start, or a squashfs file
made by ``enroot import``; Singularity takes a ``.sif`` file. The platform files' defaults are the
release images' names in those forms (``ghcr.io#megatron-bench-kit/cuda:latest``,
``megatron-bench-rocm.sif`` in the directory jobs run from), so ``pull`` and ``build`` write exactly
those, and every command prints the ``--image`` that runs what it made.
"""

from __future__ import annotations

from pathlib import Path

from bench.images.pins import Target

RELEASE_TAG = "latest"
_SUFFIX = {"enroot": ".sqsh", "singularity": ".sif", "apptainer": ".sif"}


def registry_reference(target: Target, registry: str | None = None, tag: str = RELEASE_TAG) -> str:
    """``registry/owner/name:tag`` of the target's image (default registry: the target's); a
    ``sha256:...`` digest in place of the tag gives ``registry/owner/name@sha256:...``."""
    separator = "@" if tag.startswith("sha256:") else ":"
    return f"{(registry or target.registry).rstrip('/')}/{target.image}{separator}{tag}"


def pyxis_reference(reference: str) -> str:
    """pyxis/enroot write the registry apart from the path with '#': ``ghcr.io#owner/name:tag``."""
    registry, _, path = reference.partition("/")
    return f"{registry}#{path}"


def image_file(target: Target, runtime: str, tag: str = RELEASE_TAG) -> str:
    """The file ``pull --runtime enroot|singularity`` (and an Apptainer build) write, e.g.
    ``megatron-bench-rocm.sif``; a tag other than the release one is part of the name."""
    stem = f"megatron-bench-{target.name}" + ("" if tag == RELEASE_TAG else f"_{tag.replace(':', '-')}")
    return stem + _SUFFIX[runtime]


def platforms_using(image: str) -> list[str]:
    """Names of the platforms whose default image is ``image``."""
    from bench.config.platforms import load_platform_file, platform_files

    return [path.stem for path in platform_files() if load_platform_file(path).image == image]


def for_jobs(image: str, where: Path | None = None) -> str:
    """The line telling which ``--image`` runs ``image``; ``where``: the folder of an image file,
    which is where jobs must be submitted from for a relative platform default to find it."""
    users = platforms_using(image)
    if users:
        submitted = f", for jobs submitted from {where}" if where else ""
        return f"job scripts: the default image of {', '.join(users)}{submitted} (no --image needed)"
    return f"job scripts: --image {where / image if where else image}"
