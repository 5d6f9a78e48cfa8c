"""What a record's numbers were computed from: the per-iteration series and the kept train log.

Every run, whatever its status, keeps its whole train log gzip-compressed beside the records, as
``<records dir>/logs/<run_id>.log.gz`` (:data:`LOG_DIR`), and its record names that file with the
sha256 of the text it holds (:class:`LogFile`). The record also carries the series parsed from the
log (:class:`SeriesPoint`, one per logged iteration), so that ``python -m bench verify`` can
recompute the metrics from the record alone and check them against the log.

Records written before this have neither; their log, where one was kept, is found by run id alone
(:func:`log_path`), and records themselves are never edited.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import Field

from bench.config.schema import Count, NonNegative, Positive, Strict
from bench.measure.logparse import ITERATION, ParseResult, log_lines

LOG_DIR = "logs"
"""The folder of kept train logs inside a records folder: ``results/records/logs/``."""
LOG_SUFFIX = ".log.gz"
LOG_BUDGET_BYTES = 512 * 1024
"""The most a run's kept log may take compressed: 512 KiB by default. Megatron's log of a 30-step
run with its argument dump is 10-20 KiB compressed; a log past the budget (a warning printed on
every step for thousands of steps) is kept as its head, every iteration line and its tail, and the
record says it was cut (:attr:`LogFile.truncated`)."""
HEAD_LINES, TAIL_LINES = 2_000, 5_000  # what a log past the budget keeps around its iteration lines
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
FiniteOrNone = Annotated[float, Field(allow_inf_nan=False)] | None
Milliseconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class SeriesPoint(Strict):
    """One logged iteration as the log printed it: ``step_ms`` its elapsed time in milliseconds,
    ``tokens`` the global batch times the sequence length, ``mem_mb`` the largest ``max allocated``
    (MiB) of the ranks' memory reports after it (null where the log prints none), ``lm_loss`` and
    ``grad_norm`` null where not logged (a non-finite loss is kept as null: the status says nan)."""

    iteration: Count
    step_ms: Milliseconds
    tokens: Count | None
    lm_loss: FiniteOrNone
    grad_norm: FiniteOrNone
    mem_mb: Positive | None


class LogFile(Strict):
    """The kept train log: ``file`` relative to the records folder, ``sha256`` and ``bytes`` of the
    UTF-8 text it holds (uncompressed), ``truncated`` when the log was past :data:`LOG_BUDGET_BYTES`
    and only its head, iteration lines and tail were kept."""

    file: str
    sha256: Sha256
    bytes: NonNegative
    truncated: bool = False


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def series_of(parsed: ParseResult | None, global_batch: int, seq_length: int) -> tuple[SeriesPoint, ...]:
    """The record's ``series`` from a parsed log; ``global_batch`` where a line does not print it."""
    if parsed is None:
        return ()
    memory: Mapping[int, float] = parsed.memory_after or {}
    return tuple(SeriesPoint(
        iteration=it.index, step_ms=it.elapsed_ms, tokens=(it.global_batch or global_batch) * seq_length,
        lm_loss=_finite(it.lm_loss), grad_norm=_finite(it.grad_norm), mem_mb=memory.get(it.index) or None)
        for it in parsed.iterations if it.index > 0)


def log_path(records_dir: Path | str, run_id: str) -> Path:
    """Where the kept log of ``run_id`` lives (or would): ``<records_dir>/logs/<run_id>.log.gz``."""
    return Path(records_dir) / LOG_DIR / f"{run_id}{LOG_SUFFIX}"


def _compressed(text: str) -> bytes:
    # mtime 0: the same text gives the same bytes, so a kept log can be checked by its hash.
    return gzip.compress(text.encode("utf-8", errors="replace"), compresslevel=9, mtime=0)


def within_budget(text: str) -> tuple[str, bool]:
    """``text`` itself if it compresses within :data:`LOG_BUDGET_BYTES`, else its first
    :data:`HEAD_LINES` lines, every iteration line between, and its last :data:`TAIL_LINES`
    lines, with a line saying how many were left out; the flag says whether it was cut."""
    if len(_compressed(text)) <= LOG_BUDGET_BYTES:
        return text, False
    lines = log_lines(text)
    middle = lines[HEAD_LINES:-TAIL_LINES] if len(lines) > HEAD_LINES + TAIL_LINES else []
    kept = [line for line in middle if ITERATION.search(line)]
    gap = f"[bench: {len(middle) - len(kept)} lines that are not iteration lines were left out here " \
          f"to keep the log within {LOG_BUDGET_BYTES // 1024} KiB compressed]"
    cut = "\n".join([*lines[:HEAD_LINES], gap, *kept, *lines[len(lines) - TAIL_LINES:]]) + "\n"
    return cut, True


def write_log(records_dir: Path | str, run_id: str, text: str) -> LogFile:
    """Keep ``text`` as the log of ``run_id`` (append-only: an existing file is never replaced:
    FileExistsError) and return what its record says of it. Raises OSError when it cannot be
    written; the caller records the run without it."""
    kept, truncated = within_budget(text)
    data = kept.encode("utf-8", errors="replace")
    final = log_path(records_dir, run_id)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=final.parent, prefix=f".{run_id}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o644)
            handle.write(_compressed(kept))
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temp, final)  # fails rather than replace a kept log
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    return LogFile(file=f"{LOG_DIR}/{final.name}", sha256=hashlib.sha256(data).hexdigest(),
                   bytes=len(data), truncated=truncated)


def read_log(records_dir: Path | str, run_id: str, file: str | None = None) -> str | None:
    """The text of a kept log (``file`` as the record names it, else found by run id), or None
    when there is none. Raises OSError or EOFError/gzip.BadGzipFile for a file that cannot be read."""
    path = Path(records_dir) / file if file else log_path(records_dir, run_id)
    if not path.is_file():
        return None
    with gzip.open(path, "rb") as handle:
        return handle.read(64 * LOG_BUDGET_BYTES).decode("utf-8", errors="replace")


def text_sha256(text: str) -> str:
    """The hash a :class:`LogFile` gives of the text it holds."""
    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()


def keep_log(records_dir: Path | str, run_id: str, text: str) -> tuple[LogFile | None, str | None]:
    """:func:`write_log`, never raising: the kept log, or None and why (the record's note
    ``log``). A log already kept for this run id (a second ``collect``) is taken as it is where it
    holds the same text."""
    try:
        return write_log(records_dir, run_id, text), None
    except FileExistsError:
        kept, truncated = within_budget(text)
        try:
            found = read_log(records_dir, run_id)
        except (OSError, EOFError) as error:
            found, why = None, str(error)
        if found == kept:
            return LogFile(file=f"{LOG_DIR}/{log_path(records_dir, run_id).name}", sha256=text_sha256(kept),
                           bytes=len(kept.encode("utf-8", errors="replace")), truncated=truncated), None
        why = "it holds another text" if found is not None else why
        return None, f"the train log was not kept: {log_path(records_dir, run_id)} exists and {why}"
    except OSError as error:
        return None, f"the train log could not be kept ({error.strerror or error}); it is in the run folder"
