"""What this machine has, asked once per command: its GPUs and what each training Python has.

A campaign plans many runs in one command; each would otherwise start the training Python again
(seconds: it imports torch and megatron-core) and ask the driver again. One :class:`Machine` is
made per command and passed along; it is never shared between commands.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.config.platforms import Platform
from bench.running import docker
from bench.running import gpus as hardware
from bench.running.trainenv import Facts, facts


@dataclass
class Machine:
    """The answers of this machine for one command, each asked the first time it is needed."""

    _gpus: hardware.LocalGPUs | None = None
    _facts: dict[tuple[str, str], Facts | None] = field(default_factory=dict)

    def gpus(self) -> hardware.LocalGPUs:
        if self._gpus is None:
            self._gpus = hardware.detect_gpus()
        return self._gpus

    def training_facts(self, image: str | None, platform: Platform, dry_run: bool) -> Facts | None:
        """What the Python that will train has: it gives the plan its capabilities and is the
        preflight of a run. With ``image`` on a docker platform that Python is the image's, asked
        in a container; a machine where docker cannot start the image is refused here, before
        anything is written (a dry run says so in a note and plans without the image's
        capabilities)."""
        in_image = bool(image) and platform.container_runtime == "docker"
        key = (image if in_image else "", platform.megatron_deepspeed_dir)
        if key not in self._facts:
            self._facts[key] = (_image_facts(image, platform, dry_run) if in_image else
                                facts(megatron_deepspeed_dir=platform.megatron_deepspeed_dir))
        return self._facts[key]


def _image_facts(image: str, platform: Platform, dry_run: bool) -> Facts | None:
    try:
        docker.check_runtime(image)
        return docker.probe(image, str(Path.cwd()), platform.binds, platform.megatron_deepspeed_dir)
    except ValueError as exc:
        if not dry_run:
            raise
        print(f"note: the image's Python was not probed: {exc}", file=sys.stderr)
        return None
