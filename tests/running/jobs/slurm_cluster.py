"""A real one-node Slurm cluster on loopback, for the job lifecycle tests.

The session fixture starts its own munged (private key and socket), slurmctld and slurmd on free
ports with a private slurm.conf (proctrack/linuxproc, task/none, no GRES; see shared SLURM.md), so it
never touches a system Slurm or munge. It stops the daemons by PID and removes its directory.
In CI (CI=true) missing Slurm/munge binaries fail the tests; locally they skip with the apt command.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import require

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo", "scancel")
START_TIMEOUT_S = 60
# Virtual CPUs the node offers (SlurmdParameters=config_overrides lets it exceed the real count),
# so a system check with several ranks and the failure jobs run side by side.
NODE_CPUS = 8
# Seconds between SIGTERM and SIGKILL when a job hits its time limit (Slurm's default is 30).
KILL_WAIT_S = 2


def _missing(reason: str) -> None:
    require(False, f"{reason}; install: apt-get update && apt-get install -y "
            "--no-install-recommends slurmctld slurmd slurm-client munge (.ci/apt-packages.txt)")


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _slurm_conf(work: Path, host: str, ctld_port: int, slurmd_port: int) -> str:
    return f"""\
ClusterName=kit-test
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={work}/munge-run/munge.sock
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
ReturnToService=2
MinJobAge=4
KillWait={KILL_WAIT_S}
StateSaveLocation={work}/state
SlurmdSpoolDir={work}/spool/slurmd.%n
SlurmctldPidFile={work}/slurmctld.pid
SlurmdPidFile={work}/slurmd.pid
SlurmctldLogFile={work}/log/slurmctld.log
SlurmdLogFile={work}/log/slurmd.log
NodeName={host} CPUs={NODE_CPUS} RealMemory=4000 State=UNKNOWN
PartitionName=debug Default=YES Nodes=ALL MaxTime=INFINITE State=UP
"""


@dataclass(frozen=True)
class SlurmCluster:
    """A running test cluster; ``env`` points Slurm's clients at it (``SLURM_CONF``)."""

    work: Path
    conf: Path
    host: str

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted((self.work / "log").glob("*")) if p.is_file())


def _sbin(name: str) -> str:
    """Daemons live in /usr/sbin, which a non-login PATH may lack."""
    return shutil.which(name, path=os.environ["PATH"] + ":/usr/sbin:/sbin") or name


def _log_file(logs: ExitStack, path: Path) -> IO[str]:
    """A daemon's output file, closed with ``logs`` when the cluster stops."""
    return logs.enter_context(path.open("w"))


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def running_cluster() -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and slurmd; yield the cluster; stop them by PID and clean up."""
    missing = [b for b in BINARIES if shutil.which(b, path=os.environ.get("PATH", "") +
                                                   ":/usr/sbin:/sbin") is None]
    if missing:
        _missing(f"Slurm/munge binaries not found: {', '.join(missing)}")
    if os.geteuid() != 0:
        _missing("slurmd must run as root for the test cluster")
    try:
        munge_user = pwd.getpwnam("munge")
    except KeyError:
        _missing("no 'munge' user (the munge package creates it)")

    # Under /tmp itself: munged runs as its own user and must reach its socket, and the test run's
    # own temporary folder (tests/conftest.py) lies inside pytest's, which only root may enter.
    work = Path(tempfile.mkdtemp(prefix="bench-slurm-", dir="/tmp"))
    work.chmod(0o755)
    host = socket.gethostname().split(".")[0]
    processes: list[subprocess.Popen] = []
    logs = ExitStack()
    try:
        # munged insists: key dir private to munge, socket dir world-executable.
        key_dir, run_dir = work / "munge-key", work / "munge-run"
        for directory, mode in ((key_dir, 0o700), (run_dir, 0o755)):
            directory.mkdir()
            os.chown(directory, munge_user.pw_uid, munge_user.pw_gid)
            directory.chmod(mode)
        key = key_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chown(key, munge_user.pw_uid, munge_user.pw_gid)
        key.chmod(0o400)
        for sub in ("state", "log", f"spool/slurmd.{host}"):
            (work / sub).mkdir(parents=True)
        processes.append(subprocess.Popen(
            [_sbin("munged"), "--foreground", f"--socket={run_dir}/munge.sock",
             f"--key-file={key}", f"--pid-file={run_dir}/munged.pid",
             f"--seed-file={key_dir}/munged.seed", f"--log-file={work}/log/munged.log"],
            user=munge_user.pw_uid, group=munge_user.pw_gid, extra_groups=[],
            stdout=subprocess.DEVNULL, stderr=_log_file(logs, work / "log" / "munged.out")))
        for _ in range(100):
            if (run_dir / "munge.sock").exists():
                break
            time.sleep(0.05)

        conf = work / "slurm.conf"
        conf.write_text(_slurm_conf(work, host, *_free_ports(2)))
        cluster = SlurmCluster(work, conf, host)
        for daemon in ("slurmctld", "slurmd"):
            processes.append(subprocess.Popen(
                [_sbin(daemon), "-D", "-f", str(conf)], env=cluster.env,
                stdout=_log_file(logs, work / "log" / f"{daemon}.out"),
                stderr=subprocess.STDOUT))
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=cluster.env,
                                   check=False, capture_output=True, text=True).stdout.strip()
            if state == "idle":
                break
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                pytest.fail(f"test Slurm did not become idle (sinfo: {state!r})\n{cluster.logs()}")
            time.sleep(0.2)

        yield cluster
        # Cancel what tests left running so no job step outlives the daemons.
        subprocess.run(["scancel", "--full", "--user=root"], env=cluster.env, check=False, capture_output=True)
        for _ in range(50):
            if not subprocess.run(["squeue", "-h"], env=cluster.env, check=False, capture_output=True,
                                  text=True).stdout.strip():
                break
            time.sleep(0.2)
    finally:
        for process in reversed(processes):
            _stop(process)
        logs.close()
        shutil.rmtree(work, ignore_errors=True)
