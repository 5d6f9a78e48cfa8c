"""Real runtimes for the image tests: dockerd on a private socket, a stand-in base, a local registry.

In CI (CI=true) a missing tool fails the test; elsewhere it skips with the reason. Everything a
fixture starts it stops by PID, and it removes what the daemon left behind (data dirs, mounts, a
docker0 bridge, iptables rules) by comparing with what was there before it started.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import require

# What the stand-in must hold so every step the kit adds really runs (pip installs with and without
# build isolation, patch, CA update): what NGC/ROCm bases have except torch and numpy, whose wheels
# are large and which no kit step needs (the pinned packages install with --no-deps). Like those
# bases, the distribution's Python carries pip-installed pip and setuptools (in /usr/local), not
# Debian-packaged Python libraries that pip cannot upgrade. Trixie's Python 3.13 satisfies
# megatron-core's >= 3.12.
STANDIN_SUITE = "trixie"
STANDIN_PACKAGES = (
    "python3", "python3-pip-whl", "python3-setuptools-whl", "ca-certificates", "patch", "git",
    "make", "g++", "python3-dev",  # the real bases build Megatron-DeepSpeed's dataset helpers
)
# Install pip and setuptools from Debian's own wheels, offline, into /usr/local.
STANDIN_PIP = (
    "set -e; cd /usr/share/python-wheels; "
    "python3 $(ls pip-*.whl)/pip install --no-index --find-links . --break-system-packages pip setuptools"
)
STANDIN_TAG = "megatron-bench-standin:trixie"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "megatron-bench"


def need(tool: str) -> str:
    """The path of ``tool``; fails in CI and skips elsewhere when it is missing."""
    path = shutil.which(tool) or next(
        (p for p in (f"/usr/sbin/{tool}", f"/usr/bin/{tool}") if os.access(p, os.X_OK)), None)
    if path is None:
        require(False, f"{tool} is not installed (apt-get install it; see .ci/apt-packages.txt)")
    return path


def _iptables_rules() -> str:
    iptables = shutil.which("iptables-save") or "/usr/sbin/iptables-save"
    done = subprocess.run([iptables], capture_output=True, text=True)
    # Drop counters and comments so only rules are compared.
    return "\n".join(line for line in done.stdout.splitlines() if not line.startswith(("#", ":")))


def _links() -> set[str]:
    return set(os.listdir("/sys/class/net"))


def _unmount_under(directory: Path) -> None:
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(str(directory))), reverse=True):
        subprocess.run(["umount", "-l", mount], check=False)


def _wait_for(predicate, seconds: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    tail = log.read_text()[-3000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} did not come up within {seconds} s\n{tail}")


@pytest.fixture(scope="session")
def runtime():
    """dockerd on a private socket (no bridge, no iptables: builds use the host network)."""
    dockerd = need("dockerd")
    import docker

    work = Path(tempfile.mkdtemp(prefix="bench-dockerd-"))
    links_before, rules_before = _links(), _iptables_rules()
    sock = work / "docker.sock"
    log = work / "dockerd.log"
    process = subprocess.Popen(
        [dockerd, "--data-root", str(work / "data"), "--exec-root", str(work / "exec"),
         "--pidfile", str(work / "dockerd.pid"), "-H", f"unix://{sock}",
         "--storage-driver", "overlay2", "--bridge", "none", "--iptables=false",
         "--ip-masq=false"],
        stdout=log.open("w"), stderr=subprocess.STDOUT,
    )
    try:
        _wait_for(sock.exists, 30, "dockerd", log)
        client = docker.DockerClient(base_url=f"unix://{sock}", timeout=600)
        _wait_for(lambda: client.ping(), 30, "dockerd API", log)
        client.docker_host = f"unix://{sock}"  # for tests that go through the command line
        yield client
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        _unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)
        for link in _links() - links_before:  # e.g. docker0, should a daemon make one anyway
            subprocess.run(["ip", "link", "delete", link], check=False)
        if _iptables_rules() != rules_before:
            pytest.fail("dockerd left iptables rules behind")


def _debian_mirror() -> str:
    """The Debian mirror apt already uses (deb822 or one-line sources)."""
    for path in [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"),
                 *Path("/etc/apt/sources.list.d").glob("*")]:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            parts = line.split()
            if line.startswith("URIs:") and "security" not in line:
                return parts[1]
            if line.startswith("deb ") and "security" not in line:
                return next(p for p in parts[1:] if p.startswith("http"))
    return "http://deb.debian.org/debian"


@pytest.fixture(scope="session")
def standin_base(runtime) -> str:
    """A Debian trixie rootfs imported as an image; the tarball is cached across sessions."""
    need("debootstrap")
    key = hashlib.sha256(" ".join((STANDIN_SUITE, *STANDIN_PACKAGES)).encode()).hexdigest()[:12]
    tarball = CACHE / f"standin-{STANDIN_SUITE}-{key}.tar"
    if not tarball.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="bench-rootfs-") as scratch:
            rootfs = Path(scratch) / "rootfs"
            start = time.monotonic()
            subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={','.join(STANDIN_PACKAGES)}",
                 STANDIN_SUITE, str(rootfs), _debian_mirror()],
                check=True, stdout=subprocess.DEVNULL,
            )
            subprocess.run(["chroot", str(rootfs), "sh", "-c", STANDIN_PIP], check=True)
            # Like the real bases: apt lists and caches are not part of the image.
            shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
            partial = tarball.with_suffix(".partial")
            subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True)
            partial.rename(tarball)
            print(f"stand-in rootfs made in {time.monotonic() - start:.0f} s")
    with tarball.open("rb") as data:
        repository, tag = STANDIN_TAG.split(":")
        runtime.api.import_image_from_data(data.read(), repository=repository, tag=tag)
    return STANDIN_TAG


@pytest.fixture(scope="session")
def registry() -> str:
    """Debian's docker-registry (the reference distribution registry) on a loopback port."""
    binary = need("docker-registry")
    work = Path(tempfile.mkdtemp(prefix="bench-registry-"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = work / "config.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage:\n  filesystem:\n    rootdirectory: {work / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
        "log:\n  level: warn\n"
    )
    log = work / "registry.log"
    process = subprocess.Popen([binary, "serve", str(config)], stdout=log.open("w"),
                               stderr=subprocess.STDOUT)

    def answers() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        _wait_for(answers, 20, "docker-registry", log)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=20)
        shutil.rmtree(work, ignore_errors=True)
