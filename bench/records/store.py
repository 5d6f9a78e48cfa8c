"""The records folder: one JSON file per run, written atomically and once, loaded tolerantly.

``<records>/<run_id>.json`` is never overwritten (records are append-only); :func:`load_records`
skips a file that does not load as a :class:`Problem` naming it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.config.run_options import BY_NAME
from bench.records.record import Record, RecordError, record_from_json

RECORDS_DIR = Path("results") / "records"
"""Where records go by default, under the command's root (``--root``, else the current folder)."""

_TEMP_SUFFIX = ".tmp"
RECORD_MODE = 0o644
"""A record file's permissions: its owner writes it, everyone reads it."""
MAX_RECORD_BYTES = 32 * 2**20
"""The largest record file read, in bytes (32 MiB): a run's record is tens of kB, and under two MB
with every log line at its bound; a larger file is refused, not read into memory."""


class RecordExistsError(FileExistsError):
    """A record with this run id is already on disk; records are never overwritten."""


@dataclass(frozen=True)
class Problem:
    """A file in the records directory that was skipped, and why."""

    file: str
    message: str

    def __str__(self) -> str:
        # A file name may hold a newline or escape codes: shown quoted, it cannot fake a line.
        return f"{self.file if self.file.isprintable() else ascii(self.file)}: {self.message}"


def add_records_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--records DIR``, the one records-folder option of every command that reads or writes
    records; ``--records-dir``, the old name of ``run``'s, stays as a hidden alias for scripts."""
    BY_NAME["records"].add_to(parser)


def records_dir(args: argparse.Namespace) -> Path:
    """The records folder a command was given (:func:`add_records_option`), defaults filled in."""
    if args.records is not None:
        return args.records
    return getattr(args, "root", Path()) / RECORDS_DIR


def record_path(records_dir: Path | str, run_id: str) -> Path:
    """Where the record of ``run_id`` lives: ``<records_dir>/<run_id>.json``."""
    return Path(records_dir) / f"{run_id}.json"


def check_records_dir(records_dir: Path | str) -> None:
    """Before a run, a ValueError naming ``records_dir`` if it cannot hold records (a file in the
    way, no permission, a read-only file system): the GPUs are not used for a record that is lost."""
    directory = Path(records_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()  # unnamed where it can be: nothing left behind
    except OSError as error:
        raise ValueError(f"records directory {directory} cannot hold records "
                         f"({error.strerror or error}); give a writable directory with "
                         "--records") from None


def write_record(records_dir: Path | str, record: Record) -> Path:
    """Write ``record`` to ``<records_dir>/<run_id>.json`` atomically and return the path.

    A fsynced temporary file is hard-linked to the final name: ``os.link`` fails rather than replace
    a file (:class:`RecordExistsError`), and no reader sees half a record. The temporary file is
    removed on every path, KeyboardInterrupt included.
    """
    if not isinstance(record, Record):
        raise TypeError(f"write_record takes a Record (see build_record), got {type(record).__name__}")
    final = record_path(records_dir, record.run_id)
    exists = RecordExistsError(f"{final} already exists; records are append-only, so a run id is "
                               "written once (plan a new run for a new run id)")
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        raise exists
    fd, temp = tempfile.mkstemp(dir=final.parent, prefix=f".{record.run_id}.", suffix=_TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), RECORD_MODE)  # mkstemp made it 0600: records are shared
            handle.write(record.to_json().encode())
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temp, final)
        except FileExistsError:
            raise exists from None
    finally:
        os.unlink(temp)
    with contextlib.suppress(OSError):  # the new directory entry made durable, where possible
        dir_fd = os.open(final.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return final


def load_record(path: Path | str) -> Record:
    """Read and validate one record file; whatever it holds (not JSON or UTF-8, 4300-digit numbers,
    deep nesting, a FIFO that would block the read, more than :data:`MAX_RECORD_BYTES`, no
    ``schema`` key), a :class:`RecordError`, else ``OSError``."""
    path = os.fspath(path)  # plain strings: pathlib's parsing costs more than the read
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RecordError(["not a regular file"])
    with open(fd, "rb") as handle:
        text = handle.read(MAX_RECORD_BYTES + 1)  # bounded, should the file grow as it is read
        if len(text) > MAX_RECORD_BYTES:
            raise RecordError([f"over {MAX_RECORD_BYTES // 2**20} MiB ({os.fstat(fd).st_size:,} "
                               "bytes), far more than a run's record: not one the kit wrote; move "
                               "it out of the records folder"])
        record = record_from_json(text)
    if "schema_" not in record.model_fields_set:  # read as the current version, it could be another
        raise RecordError(['no "schema" key, so the version it was written in is unknown: add the '
                           'one its kit wrote ("bench.record/1" before the record held its data '
                           'and implementation, "bench.record/2" before its variant named the '
                           'older code it ran, else "bench.record/3")'])
    name = os.path.basename(path)
    if record.run_id != name.removesuffix(".json"):
        raise RecordError([f"run_id {record.run_id!r} does not match the file name {name!r}"])
    return record


def load_records(records_dir: Path | str) -> tuple[list[Record], list[Problem]]:
    """Every valid record in ``records_dir`` (by file name), and as problems the ``*.json`` files
    that do not load and leftovers of interrupted writes; other files are ignored."""
    directory = os.fspath(records_dir)
    records: list[Record] = []
    skipped: list[Problem] = []
    # Records hold no reference cycles: the cyclic collector would only walk the growing list of
    # them again and again (measured: 15 % of loading 10,000 records), and all of them once more
    # when enabled (0.04 s) unless they go straight into its oldest generation (freeze, unfreeze).
    collecting = gc.isenabled()
    gc.disable()
    try:
        for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
            if name.startswith(".") and name.endswith(_TEMP_SUFFIX):
                skipped.append(Problem(name, "leftover temporary file of an interrupted write; delete it"))
            elif name.endswith(".json") and not name.startswith("."):
                try:
                    records.append(load_record(os.path.join(directory, name)))
                except RecordError as error:
                    skipped.append(Problem(name, "; ".join(error.problems)))
                except OSError as error:
                    skipped.append(Problem(name, f"cannot read ({error.strerror or error})"))
    finally:
        if collecting:
            gc.freeze()
            gc.unfreeze()
            gc.enable()
    return records, skipped
