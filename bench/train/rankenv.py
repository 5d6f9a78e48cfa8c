"""Start a command with torch.distributed's rank variables taken from the launcher.

``srun`` and ``mpiexec`` start one process per GPU but name ranks their own way; Megatron reads
RANK, LOCAL_RANK and WORLD_SIZE. Usage: ``python -m bench.train.rankenv <command> [args...]``.
"""

from __future__ import annotations

import os
import sys

# (rank, local rank, world size) variables, in the order launchers are recognised.
_LAUNCHERS = (
    ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),  # srun
    ("PMI_RANK", "PALS_LOCAL_RANKID", "PMI_SIZE"),  # Cray PALS mpiexec (ALCF Polaris)
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI
    ("PMIX_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),
)


def rank_env(environ: dict[str, str]) -> dict[str, str]:
    """RANK/LOCAL_RANK/WORLD_SIZE from the first launcher whose variables are all set."""
    if all(k in environ for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")):
        return {}
    for rank, local, size in _LAUNCHERS:
        if rank in environ and local in environ and size in environ:
            return {"RANK": environ[rank], "LOCAL_RANK": environ[local],
                    "WORLD_SIZE": environ[size]}
    raise RuntimeError("bench.train.rankenv: no launcher rank variables found (expected SLURM_PROCID, "
                       "PMI_RANK or OMPI_COMM_WORLD_RANK); start it under srun or mpiexec")


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m bench.train.rankenv <command> [args...]")
    os.environ.update(rank_env(dict(os.environ)))
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
