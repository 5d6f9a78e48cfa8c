"""Print one JSON line about this rank: ``python -m bench.train.sysinfo``.

Run by every task of a system check job (under srun, mpiexec or torchrun). The line starts with
:data:`LINE_PREFIX` so the kit can pick it out of a job's mixed output. It needs no GPU and imports
neither torch nor Megatron (versions come from package metadata), so it starts in well under a
second even on a slow shared file system. With ``--all-reduce`` it then sums a small tensor over
every rank with torch.distributed (NCCL or RCCL on GPUs, gloo without) and prints a second line,
starting :data:`ALLREDUCE_PREFIX`, so a hung collective still leaves the facts line behind.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import timedelta

import bench

LINE_PREFIX = "bench-sysinfo "

# (rank, local rank, world size) as each launcher names them, most specific first: under
# srun + torchrun, torchrun's RANK is the training rank and SLURM_PROCID the node's task.
RANK_VARIABLES = (
    ("RANK", "LOCAL_RANK", "WORLD_SIZE"),                                        # torchrun
    ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),                           # srun
    ("PALS_RANKID", "PALS_LOCAL_RANKID", "PALS_SIZE"),                           # Cray PALS mpiexec
    ("PMI_RANK", "PMI_LOCAL_RANK", "PMI_SIZE"),                                  # MPICH/Hydra
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI
)
DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                    "GPU_DEVICE_ORDINAL")
# Communication and launcher settings a platform file may set; all of them are reported.
COMMUNICATION_PREFIXES = ("NCCL_", "TORCH_NCCL_", "RCCL_", "FI_", "CXI_", "UCX_", "MPICH_",
                          "NVSHMEM_", "OMPI_MCA_", "HSA_", "MIOPEN_")
COMMUNICATION_NAMES = ("CUDA_DEVICE_MAX_CONNECTIONS", "MASTER_ADDR", "MASTER_PORT",
                       "OMP_NUM_THREADS", "LD_PRELOAD")
SMI_TIMEOUT_S = 20
ALLREDUCE_PREFIX = "bench-allreduce "
ALLREDUCE_ELEMENTS = 1 << 20  # fp32, 4 MiB: enough that NCCL sets up its network transport
ALLREDUCE_TIMEOUT_S = 300  # a rank that never joins fails the check rather than hang the job


def _rank() -> tuple[int | None, int | None, int | None, str | None]:
    for rank, local, size in RANK_VARIABLES:
        if rank in os.environ:
            def as_int(name: str) -> int | None:
                value = os.environ.get(name, "")
                return int(value) if value.isdigit() else None
            return as_int(rank), as_int(local), as_int(size), rank
    return None, None, None, None


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpu_list() -> list[str] | None:
    """``nvidia-smi -L`` lines (GPUs this process can see), or ``None`` without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(["nvidia-smi", "-L"], check=False, capture_output=True, text=True,
                              timeout=SMI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return ["nvidia-smi -L timed out"]
    return done.stdout.splitlines() if done.returncode == 0 else [done.stderr.strip()]


def _container() -> dict[str, str | None]:
    """Which container or Python environment this process runs in."""
    env = os.environ
    if env.get("APPTAINER_CONTAINER") or env.get("SINGULARITY_CONTAINER"):
        runtime, image = "singularity", env.get("APPTAINER_CONTAINER") or env.get(
            "SINGULARITY_CONTAINER")
    elif env.get("container"):  # podman, enroot and systemd-nspawn set it
        runtime, image = env["container"], None
    elif os.path.exists("/.dockerenv"):
        runtime, image = "docker", None
    elif os.path.exists("/run/.containerenv"):
        runtime, image = "podman", None
    else:
        runtime, image = "none", None
    in_venv = sys.prefix != sys.base_prefix
    return {
        "runtime": runtime,
        "image": image,
        "python": sys.executable,
        "venv": sys.prefix if in_venv else None,
        "conda": env.get("CONDA_PREFIX"),
        "nvidia_pytorch_version": env.get("NVIDIA_PYTORCH_VERSION"),
    }


def collect(extra_env: tuple[str, ...] = ()) -> dict:
    """This rank's facts as JSON-ready data; ``extra_env`` names more variables to report."""
    rank, local_rank, world_size, rank_source = _rank()
    return {
        "host": socket.gethostname(),
        "rank": rank,
        "local_rank": local_rank,
        "world_size": world_size,
        "rank_source": rank_source,
        "job_id": os.environ.get("SLURM_JOB_ID") or os.environ.get("PBS_JOBID"),
        "devices": {name: os.environ.get(name) for name in DEVICE_VARIABLES},
        "gpus": _gpu_list(),
        "container": _container(),
        "versions": {
            "kit": bench.__version__,
            "python": sys.version.split()[0],
            "megatron_core": _version("megatron-core"),
            # Transformer Engine sets its __version__ from this metadata: none, and it does not import
            "transformer_engine": _version("transformer_engine"),
            "torch": _version("torch"),
            "deepspeed": _version("deepspeed"),
        },
        "communication": {
            name: value for name, value in sorted(os.environ.items())
            if name.startswith(COMMUNICATION_PREFIXES) or name in COMMUNICATION_NAMES
        },
        "env": {name: os.environ.get(name) for name in extra_env},
    }


def all_reduce() -> dict:
    """Sum ``rank + 1`` over every rank (the launcher's rank variables, ``MASTER_ADDR`` and
    ``MASTER_PORT`` from the job); every element must come back as n(n+1)/2. On GPUs the backend
    is NCCL (RCCL on ROCm), whose ``NCCL_DEBUG=INFO`` lines say which network it used; without a
    GPU it is gloo. A failure is reported in the result, never raised."""
    rank, local_rank, world_size, _ = _rank()
    result: dict = {"rank": rank, "ok": False}
    if rank is None or world_size is None:
        return {**result, "error": "no launcher rank variables (RANK, SLURM_PROCID, PMI_RANK ...)"}
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        return {**result, "error": f"torch is not importable: {exc}"}
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    start = time.monotonic()
    try:
        if backend == "nccl":
            torch.cuda.set_device(local_rank or 0)
        dist.init_process_group(backend, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=ALLREDUCE_TIMEOUT_S))
        device = "cuda" if backend == "nccl" else "cpu"
        tensor = torch.full((ALLREDUCE_ELEMENTS,), float(rank + 1), device=device)
        dist.all_reduce(tensor)
        expected = world_size * (world_size + 1) / 2
        wrong = int((tensor != expected).sum().item())
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - any failure is the check's finding, reported
        return {**result, "backend": backend, "error": f"{type(exc).__name__}: {exc}"[:500]}
    return {**result, "backend": backend, "ok": wrong == 0, "wrong_elements": wrong,
            "elements": ALLREDUCE_ELEMENTS, "seconds": round(time.monotonic() - start, 3)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.train.sysinfo", description=__doc__)
    parser.add_argument("--env", action="append", default=[], metavar="NAME",
                        help="also report this environment variable (repeatable), e.g. the ones "
                             "the platform file sets")
    parser.add_argument("--all-reduce", action="store_true",
                        help="then sum a small tensor over every rank (torch.distributed) and "
                             f"print the result on a line starting {ALLREDUCE_PREFIX.strip()!r}")
    args = parser.parse_args(argv)
    print(LINE_PREFIX + json.dumps(collect(tuple(args.env)), sort_keys=True), flush=True)
    if args.all_reduce:
        print(ALLREDUCE_PREFIX + json.dumps(all_reduce(), sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
