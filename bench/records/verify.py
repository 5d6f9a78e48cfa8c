"""``python -m bench verify``: every record's numbers computed again from its own evidence.

A record's *evidence* is its ``series`` (every logged iteration) and its kept train log (named by
``log``, or found by run id for a record written before records named it:
:func:`bench.records.evidence.log_path`). For each record in the records folder, verify checks

- the kept log: its sha256 and size are the record's (``log.sha256``, ``log.bytes``), and the
  series and the loss curve (``lm_losses``) parsed from it are the record's;
- the metrics: computed again from the series (from the log where the record has none) with the
  kit's protocol and FLOPs function (:mod:`bench.records.recompute`), each within
  :data:`bench.records.recompute.RTOL` of the record's;
- the argv: it runs the layout, model and precision the record claims (:mod:`bench.records.claims`).

Each disagreement is one line naming the run id, the field, the record's value and the evidence's;
nothing is written, records and logs are only read.
"""

from __future__ import annotations

import argparse
import itertools
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from bench.config.text import visible
from bench.measure.logparse import ParseResult, parse_log
from bench.records import claims, recompute
from bench.records.evidence import LOG_DIR, SeriesPoint, read_log, series_of, text_sha256
from bench.records.record import Record
from bench.records.store import Problem, add_records_option, load_records, records_dir

MAX_SHOWN_CHARS = 200  # a value shown in a mismatch line: a number, a flag, a file name
SERIES_FIELDS = tuple(SeriesPoint.model_fields)
DESCRIPTION = ("Recompute every record's metrics (step time median and spread, samples/s, tokens/s/GPU, "
               "TFLOP/s, MFU) from its series and kept train log with the kit's protocol, check the "
               "log's sha256 and the argv against the configuration the record claims. One line per "
               "mismatch (run id, field, the record's value, the evidence's), then the counts; exit "
               "status 1 on any mismatch. Nothing is written.")


@dataclass(frozen=True)
class Mismatch:
    """A record's ``field`` holds ``recorded`` where ``source`` (the log, the series, an argv
    flag) says ``found``."""

    run_id: str
    field: str
    recorded: object
    source: str
    found: object

    def __str__(self) -> str:
        return (f"{_shown(self.run_id)}: {_shown(self.field)}: record {_shown(self.recorded)}, "
                f"{_shown(self.source)} {_shown(self.found)}")


@dataclass(frozen=True)
class Verdict:
    """One record's outcome: whether it has evidence (a series or a kept log) and what disagrees."""

    run_id: str
    evidence: bool
    mismatches: tuple[Mismatch, ...]


def _shown(value: object) -> str:
    """A value on one line: floats in full (repr), control characters escaped, length bounded."""
    text = visible(repr(value) if isinstance(value, float) else str(value))
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + "..."


def _kept_log(record: Record, folder: Path) -> tuple[str | None, list[Mismatch]]:
    """The text of the record's kept log (None without one) and what is wrong with the file."""
    name = record.log.file if record.log else None
    if name is not None and (PurePosixPath(name).parts[:1] != (LOG_DIR,) or ".." in PurePosixPath(name).parts):
        # A record names a file of its own folder's logs only: nothing else is read on its word.
        return None, [Mismatch(record.run_id, "log.file", name, "expected", f"a file under {LOG_DIR}/")]
    try:
        text = read_log(folder, record.run_id, name)
    except (OSError, EOFError, zlib.error) as error:
        return None, [Mismatch(record.run_id, "log.file", name or "(by run id)", "which is",
                               f"unreadable ({getattr(error, 'strerror', None) or error})")]
    if record.log is None:
        return text, []
    if text is None:
        return None, [Mismatch(record.run_id, "log.file", name, "which is", "missing")]
    found = []
    if text_sha256(text) != record.log.sha256:
        found.append(Mismatch(record.run_id, "log.sha256", record.log.sha256, "log", text_sha256(text)))
    if len(text.encode("utf-8", errors="replace")) != record.log.bytes:
        found.append(Mismatch(record.run_id, "log.bytes", record.log.bytes, "log",
                              len(text.encode("utf-8", errors="replace"))))
    return text, found


def _cut(record: Record) -> bool:
    """Whether the kept log is cut to its head, iteration lines and tail (past its budget): the
    memory reports between were left out, so memory is not checked against it."""
    return record.log is not None and record.log.truncated


def _series_mismatches(record: Record, parsed: ParseResult) -> list[Mismatch]:
    """The record's series against the one the kept log gives, point by point."""
    again = series_of(parsed, record.layout.global_batch, record.preset.seq_length)
    if len(again) != len(record.series):
        return [Mismatch(record.run_id, "series", f"{len(record.series)} points", "log",
                         f"{len(again)} points")]
    fields = [field for field in SERIES_FIELDS if not (_cut(record) and field == "mem_mb")]
    return [Mismatch(record.run_id, f"series[{i}].{field}", getattr(mine, field), "log", getattr(theirs, field))
            for i, (mine, theirs) in enumerate(zip(record.series, again, strict=True))
            for field in fields if getattr(mine, field) != getattr(theirs, field)]


def _loss_mismatches(record: Record, parsed: ParseResult) -> list[Mismatch]:
    """The record's ``lm_losses`` (the loss curve) against the log's, up to its first non-finite
    loss; a record written before records carried them, with none and no ``log``, is not checked."""
    again = tuple(itertools.takewhile(math.isfinite, parsed.losses))
    if record.lm_losses == again or (not record.lm_losses and record.log is None):
        return []
    if len(again) != len(record.lm_losses):
        return [Mismatch(record.run_id, "lm_losses", f"{len(record.lm_losses)} losses", "log",
                         f"{len(again)} losses")]
    return [Mismatch(record.run_id, f"lm_losses[{i}]", mine, "log", theirs)
            for i, (mine, theirs) in enumerate(zip(record.lm_losses, again, strict=True)) if mine != theirs]


def _metrics_mismatches(record: Record, parsed: ParseResult | None) -> list[Mismatch]:
    """The record's metrics against those computed again from its series, else from its log."""
    if record.metrics is None or not (record.series or parsed):
        return []
    source = "series" if record.series else "log"
    iterations = recompute.iterations_of(record.series) if record.series else parsed.iterations
    try:
        found = recompute.recomputed(record, iterations, parsed.peak_mem_gb if parsed else None)
    except ValueError as error:  # too short a window, zero step times, a model that is no model
        return [Mismatch(record.run_id, "metrics", "present", source, f"gives none ({error})")]
    fields = [*recompute.METRIC_FIELDS, *(["peak_mem_gb"] if parsed and not _cut(record) else []),
              *(["mfu_bf16_peak"] if None not in (record.metrics.mfu_bf16_peak, found["mfu_bf16_peak"]) else [])]
    return [Mismatch(record.run_id, field, mine, source, theirs)
            for field, mine, theirs in recompute.differences(record, found, fields)]


def verify_record(record: Record, folder: Path | str) -> Verdict:
    """Check one record of the records folder ``folder`` against its evidence and its argv."""
    found = [Mismatch(record.run_id, d.field, d.recorded, f"argv {d.flag}", d.found)
             for d in claims.disagreements(record)]
    text, log_problems = _kept_log(record, Path(folder))
    parsed = parse_log(text) if text is not None else None
    if parsed is not None:
        found += _series_mismatches(record, parsed) if record.series else []
        found += _loss_mismatches(record, parsed)
    found += log_problems + _metrics_mismatches(record, parsed)
    evidence = bool(record.series) or text is not None or record.log is not None
    return Verdict(record.run_id, evidence, tuple(found))


def verify_folder(folder: Path | str) -> tuple[list[Verdict], list[Problem]]:
    """Every record of ``folder`` verified, and the files in it that are no record. Raises
    ValueError when ``folder`` is not a folder."""
    if not Path(folder).is_dir():
        raise ValueError(f"{folder} is not a records folder; give one with --records DIR")
    records, problems = load_records(folder)
    return [verify_record(record, folder) for record in records], problems


def report(verdicts: Sequence[Verdict], problems: Sequence[Problem]) -> tuple[list[str], int]:
    """The lines verify prints, the summary last, and how many mismatches (files that are no
    record count as one each: they cannot be vouched for)."""
    lines = [str(m) for v in verdicts for m in v.mismatches]
    lines += [visible(f"{problem}: not a record, so not verified") for problem in problems]
    count = len(lines)
    with_evidence = sum(v.evidence for v in verdicts)
    lines.append(f"verified {with_evidence} with evidence, {len(verdicts) - with_evidence} without "
                 f"(no series, no log), {count} mismatches")
    return lines, count


def cmd_verify(args: argparse.Namespace) -> int:
    """``python -m bench verify [--records DIR]``: 1 on any mismatch, else 0."""
    lines, count = report(*verify_folder(records_dir(args)))
    print("\n".join(lines))
    return 1 if count else 0


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``verify`` on the kit's command line."""
    parser = sub.add_parser("verify", help="recompute every record's metrics from its series and "
                            "log, and check its argv; exit 1 on a mismatch", description=DESCRIPTION)
    add_records_option(parser)
    parser.set_defaults(func=cmd_verify)
