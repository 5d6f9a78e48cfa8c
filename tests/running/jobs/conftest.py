"""Fixtures for the job lifecycle tests: a real one-node Slurm (see slurm_cluster.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.running.jobs.slurm_cluster import SlurmCluster, running_cluster


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The test cluster; Slurm's clients in this process (and the kit) talk to it."""
    with running_cluster() as cluster, pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", str(cluster.conf))
        yield cluster
