"""The image digest of a container job on the real test Slurm, from the job's output to its record.

The job is the kit's Slurm script for a Singularity platform: sbatch runs it, it hashes the image
file on the node, srun starts the ranks, and ``collect`` records the digest it printed. Singularity
is not installable here (no Debian package), so a stand-in on PATH runs the command it is given
in the folder given by ``--pwd``; the image file is a few random bytes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.options import Options
from bench.planning.plan import plan
from bench.records.store import load_records
from bench.running.jobs.follow import follow
from bench.running.jobs.scheduler import SLURM
from bench.running.jobs.submit import submit_plan

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
SINGULARITY_STANDIN = """#!/bin/sh
# Stands in for `singularity exec --bind DIRS --pwd DIR IMAGE CMD...`: runs CMD in DIR.
[ "$1" = exec ] || exit 64
shift
dir=.
while [ $# -gt 0 ]; do
  case "$1" in
    --bind) shift 2 ;;
    --pwd) dir=$2; shift 2 ;;
    *) break ;;
  esac
done
[ -f "$1" ] || { echo "singularity stand-in: no image file $1" >&2; exit 66; }
shift
cd "$dir" && exec "$@"
"""
PRINTS_ONE_LINE = ("-c", "print('exits 0 without a single iteration')")


@pytest.fixture()
def sif_platform(slurm_cluster, tmp_path: Path):
    """ci-slurm as a Singularity platform (image: a .sif in the submit folder), the stand-in on
    PATH for the job (sbatch passes the environment on)."""
    platforms = tmp_path / "platforms"
    platforms.mkdir()
    text = (HERE / "platforms" / "ci-slurm.toml").read_text()
    text = text.replace('container_runtime = "none"',
                        'container_runtime = "singularity"\nimage = "standin.sif"')
    (platforms / "ci-slurm-sif.toml").write_text(text)
    shutil.copytree(REPO / "platforms" / "accelerators", platforms / "accelerators")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "singularity").write_text(SINGULARITY_STANDIN)
    (bin_dir / "singularity").chmod(0o755)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BENCH_PLATFORMS_DIR", str(platforms))
        patch.setenv("PYTHONPATH", str(REPO))
        patch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        yield load_platform("ci-slurm-sif")


def test_collect_records_the_digest_of_the_image_file_the_job_started(sif_platform,
                                                                      tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    image = root / "standin.sif"
    image.write_bytes(os.urandom(100_000))
    launch = plan(get_preset("125m"), "tp1pp1", sif_platform,
                  Options(now=datetime.now(UTC), gpus=1))
    run = submit_plan(replace(launch, entry=PRINTS_ONE_LINE, train_args=()), root)
    outcome = follow(run, SLURM, poll_s=0.5, max_wait_s=120, echo=lambda _: None)
    output = run.read_output() or ""
    assert "exits 0 without a single iteration" in output, output  # it ran through the stand-in
    assert outcome.status == "incomplete", outcome.reason

    done = subprocess.run([sys.executable, "-m", "bench", "collect"], cwd=root, text=True,
                          capture_output=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    (record,), problems = load_records(root / "results" / "records")
    assert problems == []
    assert record.provenance.image == "standin.sif"
    assert record.provenance.image_digest == "sha256:" + hashlib.sha256(
        image.read_bytes()).hexdigest()
    assert record.provenance.image_digest_kind == "file-sha256"
