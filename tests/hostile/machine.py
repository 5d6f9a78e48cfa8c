"""``python -m bench run`` in a child process, as on a machine with one H200: the real entry point,
command, runner and record store, with the driver's answers, the training Python's preflight and
torchrun stood in for (``tests/fixtures/launchers/fake_torchrun.py`` prints a captured log).

What is under test is everything the kit does around the launcher; a test names the fake GPU's UUID
(two children with one UUID share a GPU) and the fake torchrun's arguments.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.running.test_reliability import FAKE_TORCHRUN, OK_LOG, REPO

# The plan of OK_LOG's run; the child reads its GPU's UUID and torchrun's arguments from the
# environment, so the command line is exactly what a user types.
RUN_ARGS = ("run", "1.3b", "tp1pp1", "--mbs", "4", "--gbs", "32", "--iters", "15")
CHILD = f"""
import os, runpy, shlex, sys
from bench.config.capabilities import Capabilities
from bench.render import torchrun
from bench.running import command, gpus, run
from bench.running.trainenv import Facts

uuid = os.environ["TEST_GPU_UUID"]
gpus.detect_gpus = lambda: gpus.LocalGPUs(1, "NVIDIA H200", "570.00", 150.1, (uuid,))
facts = Facts(python=sys.executable, torch="2.7", torch_cuda="12.8", cuda_devices=1,
              megatron_core="0.12", torchrun="torchrun", capabilities=Capabilities())
command.Machine.training_facts = lambda self, image, platform, dry_run: facts
run.environment_ready = lambda launch, found: True
fake = shlex.split(os.environ["TEST_FAKE_ARGS"])
torchrun.command = lambda plan: [sys.executable, {str(FAKE_TORCHRUN)!r}, *fake]
sys.argv = ["python -m bench", *sys.argv[1:]]
runpy.run_module("bench", run_name="__main__")
"""


def bench_run(cwd: Path, *args: str, fake: str = str(OK_LOG), uuid: str = "GPU-test-0",
              env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m bench run ...`` started in ``cwd`` (``args``: the default is OK_LOG's plan)."""
    environ = {**os.environ, "PYTHONPATH": str(REPO), "TEST_GPU_UUID": uuid,
               "TEST_FAKE_ARGS": fake, **(env or {})}
    return subprocess.Popen([sys.executable, "-c", CHILD, *(args or RUN_ARGS)], cwd=cwd,
                            env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_terminal_sigint)


def _terminal_sigint() -> None:
    """The child takes Ctrl-C as a terminal's foreground process does, even where this test run
    was started with SIGINT ignored (a background job): Python keeps an ignored SIGINT ignored,
    and the tests that stop a run with SIGINT would wait on it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
