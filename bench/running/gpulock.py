"""One lock file per GPU, so that two runs on one machine never share a GPU unknowingly: a second
run stops with an error naming the run that holds it, or waits for it (``BENCH_GPU_LOCK=wait``), or
takes it anyway (``BENCH_GPU_LOCK=off``).

The locks are ``flock`` locks on files in the system's temporary folder (``$TMPDIR``, else
``/tmp``), one per GPU UUID: every user of the machine sees them, and the kernel releases a lock
when its process ends, however it ends, so a killed run leaves nothing to clean up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.config.environment import env_value
from bench.running.gpus import LocalGPUs

ENV = "BENCH_GPU_LOCK"  # its modes: bench.config.environment.GPU_LOCK_MODES
FOLDER_NAME = "megatron-bench-gpus"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def lock_mode() -> str:
    """``$BENCH_GPU_LOCK``, ``fail`` when unset (a bad value is refused by :func:`env_value`)."""
    return env_value(ENV) or "fail"


def gpu_keys(gpus: LocalGPUs, used: int, visible: str | None) -> list[str]:
    """One name for each of the first ``used`` visible GPUs (a run's ranks take them in order): its
    UUID; where the driver gave none, its entry of ``CUDA_VISIBLE_DEVICES`` (else its index)."""
    if gpus.uuids:
        return list(gpus.uuids[:used])
    entries = [e.strip() for e in (visible or "").split(",") if e.strip()]
    return [f"gpu-{e}" for e in (entries or [str(i) for i in range(gpus.count)])][:used]


def lock_folder() -> Path:
    """The machine-wide folder of the lock files, made writable by every user (like /tmp)."""
    folder = Path(tempfile.gettempdir()) / FOLDER_NAME
    if not folder.is_dir():
        folder.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):  # another user's folder: its mode is theirs
            folder.chmod(0o1777)
    return folder


def _open(path: Path) -> int:
    """The lock file, opened for writing where this user may (to name the holder), else for reading:
    ``flock`` works on either."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)
    return fd


def holder(path: Path) -> str:
    """What the holder of a lock file wrote: its run and process, or a plain phrase."""
    with contextlib.suppress(OSError):
        text = path.read_text(errors="replace").strip()[:200]
        if text:
            return text
    return "another process"


def _mark(fd: int, who: str) -> None:
    with contextlib.suppress(OSError):  # a file of another user's: held, but not named
        os.ftruncate(fd, 0)
        os.pwrite(fd, who.encode(), 0)


@contextlib.contextmanager
def gpus_locked(keys: list[str], who: str, mode: str | None = None) -> Iterator[None]:
    """Hold every GPU of ``keys`` for the block. ``who`` names this run in the lock files (another
    run's error shows it). Raises ``ValueError`` (mode ``fail``) when another process holds one."""
    mode = mode or lock_mode()
    if mode == "off":
        yield
        return
    folder = lock_folder()
    fds: list[int] = []
    try:
        for key in keys:
            path = folder / f"{_SAFE.sub('_', key)}.lock"
            fd = _open(path)
            fds.append(fd)
            _take(fd, path, key, mode)
            _mark(fd, f"{who} (pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')})")
        yield
    finally:
        for fd in fds:  # closing releases the lock
            os.close(fd)


def _take(fd: int, path: Path, key: str, mode: str) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    if mode == "fail":
        raise ValueError(f"GPU {key} is in use by {holder(path)}, so nothing was run: wait for "
                         f"it to end, or set {ENV}=wait to wait for it, or {ENV}=off to share the "
                         "GPU (the two runs then slow each other down)")
    print(f"waiting for GPU {key}, in use by {holder(path)} ({ENV}=wait)", file=sys.stderr)
    fcntl.flock(fd, fcntl.LOCK_EX)
