"""Platform values with spaces, quotes and ``$(...)`` reach the launcher literally and run nothing.

The rendered script is executed by bash for real; ``srun``, ``scontrol`` and ``module`` are small
programs on PATH that record the arguments they receive (the cluster tools themselves are not what
is tested here, the script's quoting is).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.config.paths import PLATFORMS_DIR
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.plan import plan
from bench.render import slurm
from bench.render.shell import directive_value
from tests.conftest import options

RECORDER = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["RECORD_TO"], "a") as fh:
    fh.write(json.dumps({"tool": os.path.basename(sys.argv[0]), "argv": sys.argv[1:],
                         "env": {k: v for k, v in os.environ.items() if k.startswith("EVIL")}}) + "\\n")
if os.path.basename(sys.argv[0]) == "scontrol":
    print("node001")
"""


@pytest.fixture()
def evil_platform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    pwned = tmp_path / "pwned"
    payload = f'a b "c" \'d\' $(touch {pwned}) `touch {pwned}` ; touch {pwned}'
    shutil.copytree(PLATFORMS_DIR, tmp_path / "platforms")
    text = (PLATFORMS_DIR / "azure-h100.toml").read_text()
    text = text.replace('NCCL_DEBUG = "WARN"', f"NCCL_DEBUG = \"WARN\"\nEVIL = {json.dumps(payload)}")
    text = text.replace('image = "ghcr.io#megatron-bench-kit/cuda:latest"',
                        f"image = {json.dumps('img' + payload)}")
    squashed = "/data/megatron-bench/striped_directory/megatron-bench-cuda.sqsh"
    # The job checks that the image file exists before srun: make it, under its hostile name.
    image = Path(f"{tmp_path}/img{payload}")
    image.parent.mkdir(parents=True, exist_ok=True)
    image.write_bytes(b"squashfs stand-in")
    text = text.replace(f'squashed_image = "{squashed}"', f"squashed_image = {json.dumps(str(image))}")
    text = text.replace(
        'binds = ["/shared:/shared", "/opt/microsoft:/opt/microsoft", "/data:/data", "/var/tmp:/var/tmp"]',
        f"binds = [\"/data:/data\", {json.dumps('/x:' + payload)}]")
    text = text.replace('partition = "gpu"', 'partition = "gpu #1"')
    # The job checks that the data files exist before srun: make them, under a hostile name too.
    data = f"data/d{payload}_text_document"
    text = text.replace('path = "/data/megatron-bench/slimpajama/preprocessed/my-gpt3_00_text_document"',
                        f"path = {json.dumps(data)}")
    for suffix in (".bin", ".idx"):
        (tmp_path / f"{data}{suffix}").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{data}{suffix}").write_bytes(b"")
    (tmp_path / "platforms/evil.toml").write_text(text)
    monkeypatch.setenv("BENCH_PLATFORMS_DIR", str(tmp_path / "platforms"))
    return payload, pwned


def test_values_are_inert(tmp_path: Path, evil_platform: tuple[str, Path]) -> None:
    payload, pwned = evil_platform
    launch = plan(get_preset("125m"), "tp1pp1", load_platform("evil"),
                  options(nodes=1, account="acct $(touch " + str(pwned) + ")",
                          save=f"/data/ck{payload}"))
    script = slurm.render(launch)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("srun", "scontrol"):
        (bin_dir / tool).write_text(RECORDER)
        (bin_dir / tool).chmod(0o755)
    record = tmp_path / "calls.jsonl"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORD_TO": str(record),
           "SLURM_JOB_NODELIST": "node001", "SLURM_SUBMIT_DIR": str(tmp_path)}
    result = subprocess.run(["bash", "-c", script], env=env, cwd=tmp_path, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert not pwned.exists(), "a platform value was executed by the shell"
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    srun = next(c for c in calls if c["tool"] == "srun")
    assert srun["env"]["EVIL"] == payload
    assert f"--container-image={tmp_path}/img{payload}" in srun["argv"]
    assert f"--container-mounts=/data:/data,/x:{payload},{tmp_path}:{tmp_path}" in srun["argv"]
    assert f"/data/ck{payload}" in srun["argv"]
    assert "BENCH_END status=0" in result.stdout
    # Directive values with '#' or spaces are quoted, so sbatch does not cut them at the '#'.
    assert '#SBATCH --partition="gpu #1"' in script
    assert f'#SBATCH --account="acct $(touch {pwned})"' in script


def test_directive_refuses_what_it_cannot_quote() -> None:
    with pytest.raises(ValueError, match="double quote"):
        directive_value('a"b')
    assert directive_value("nvcr.io#nvidia/pytorch:25.03-py3") == '"nvcr.io#nvidia/pytorch:25.03-py3"'
