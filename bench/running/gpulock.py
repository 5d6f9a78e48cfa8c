"""One lock file per GPU, so that two runs on one machine never share a GPU unknowingly: a second
run stops with an error naming the run that holds it, or waits for it (``BENCH_GPU_LOCK=wait``), or
takes it anyway (``BENCH_GPU_LOCK=off``).

The locks are ``flock`` locks on files in one folder of the machine, ``/tmp/megatron-bench-gpus``
(``$BENCH_GPU_LOCK_DIR`` where set), one per GPU UUID: every user of the machine sees them, and the
kernel releases a lock when its process ends, however it ends, so a killed run leaves nothing to
clean up. The folder is not ``$TMPDIR``'s: a scheduler gives each job a temporary folder of its own,
and two runs that look in two folders would share a GPU, both ``ok``.

The folder is writable by every user, so what is in it is not trusted: it and each lock file are
opened without following a symbolic link, and a lock file is used only when it is a regular file
with no other name (a planted link would make a run truncate and open up the file it points to).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bench.config.environment import env_value
from bench.config.text import visible
from bench.running.gpus import LocalGPUs

ENV = "BENCH_GPU_LOCK"  # its modes: bench.config.environment.GPU_LOCK_MODES
FOLDER_ENV = "BENCH_GPU_LOCK_DIR"
FOLDER = Path("/tmp") / "megatron-bench-gpus"
"""The lock folder of every run of the machine, whatever its ``$TMPDIR``."""
HOLDER_CHARS = 200  # what a lock file says of its holder, shown at most
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
_NO_LINK = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO planted there cannot block


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
    """The folder of the lock files: ``$BENCH_GPU_LOCK_DIR``, the default :data:`FOLDER`."""
    return Path(env_value(FOLDER_ENV) or FOLDER).expanduser()


def _open_folder(folder: Path) -> int:
    """The lock folder, opened (made by the first run, writable by every user and sticky, like
    /tmp); a ``ValueError`` where it is a link or not a folder."""
    try:
        folder.mkdir()
        with contextlib.suppress(OSError):
            folder.chmod(0o1777)
    except FileExistsError:
        pass
    except OSError as error:
        raise ValueError(f"the GPU lock folder {folder} cannot be made ({error.strerror}): set "
                         f"{FOLDER_ENV} to a folder every user of the machine can write") from None
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _NO_LINK)
    except OSError as error:
        raise ValueError(f"the GPU lock folder {folder} is not a folder but a link or a file "
                         f"({error.strerror}): remove it, and the next run makes the folder") from None
    mode = os.fstat(fd).st_mode
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        os.close(fd)
        raise ValueError(f"the GPU lock folder {folder} is writable by every user but not sticky, "
                         f"so any user may replace a run's lock: chmod 1777 {folder}")
    return fd


def _open(folder: int, path: Path) -> int:
    """The lock file, opened for writing where this user may (to name the holder), else for reading
    (``flock`` works on either); a ``ValueError`` where it is not a regular file of one name."""
    try:
        try:
            fd = os.open(path.name, os.O_RDWR | os.O_CREAT | _NO_LINK, 0o666, dir_fd=folder)
        except PermissionError:
            fd = os.open(path.name, os.O_RDONLY | _NO_LINK, dir_fd=folder)
    except OSError as error:
        what = ("a symbolic link" if error.errno == errno.ELOOP else
                "a folder" if error.errno == errno.EISDIR else f"unreadable ({error.strerror})")
        raise _not_a_lock(path, what) from None
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
        os.close(fd)
        raise _not_a_lock(path, "not a regular file" if not stat.S_ISREG(found.st_mode)
                          else f"a file with {found.st_nlink} names (a hard link)")
    if found.st_uid == os.geteuid():
        with contextlib.suppress(OSError):  # so that a run of another user can name itself
            os.fchmod(fd, 0o666)
    return fd


def _not_a_lock(path: Path, what: str) -> ValueError:
    return ValueError(f"the GPU lock file {path} is {what}, which no run makes, so nothing was "
                      "run: remove it (whoever put it there may have meant a run to write through "
                      "it), and the next run makes its lock file anew")


def holder(path: Path) -> str:
    """What the holder of a lock file wrote (its run and process; control characters escaped, at
    most :data:`HOLDER_CHARS` characters), or a plain phrase."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | _NO_LINK)
        with open(fd, "rb") as handle:
            text = handle.read(4 * HOLDER_CHARS).decode(errors="replace").strip()
        if text:
            return visible(text[:HOLDER_CHARS])
    return "another process"


def _mark(fd: int, who: str) -> None:
    with contextlib.suppress(OSError):  # a file of another user's: held, but not named
        os.ftruncate(fd, 0)
        os.pwrite(fd, who.encode(), 0)


@contextlib.contextmanager
def gpus_locked(keys: list[str], who: str, mode: str | None = None) -> Iterator[None]:
    """Hold every GPU of ``keys`` for the block. ``who`` names this run in the lock files (another
    run's error shows it). Raises ``ValueError`` (mode ``fail``) when another process holds one,
    and where the lock folder or a lock file is not what a run makes."""
    mode = mode or lock_mode()
    if mode == "off":
        yield
        return
    folder = lock_folder()
    fds: list[int] = []
    folder_fd = _open_folder(folder)
    try:
        for key in keys:
            path = folder / f"{_SAFE.sub('_', key)}.lock"
            fd = _open(folder_fd, path)
            fds.append(fd)
            _take(fd, path, key, mode)
            _mark(fd, f"{who} (pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')})")
        yield
    finally:
        for fd in [folder_fd, *fds]:  # closing releases the lock
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
