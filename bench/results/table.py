"""Markdown of the results page: record text made literal, number cells, links and tables.

Every number column is right-aligned with a fixed number of decimals (samples/s 2, tokens/s 0,
TFLOP/s 1, % 1, GB 1, loss 4, loss difference in % 2); units are in the headers; a dash means
"not used" for measured rows and "not published" for published ones.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bench.config.text import visible
from bench.records.record import Record

DASH = "–"
Columns = Sequence[tuple[str, bool]]  # (header, right-aligned) in table order

# What lets record text (variant keys and values, labels, reasons, names) make HTML, a link, code,
# emphasis or a new table cell. An underscore inside a word emphasises nothing (13b_sweep_lumi),
# and brackets make a link only as "](" (the page defines no reference links): both stay as they
# are, as in "[rank0]: ...".
_MARKUP = re.compile(r"[\\`*<>|~&]|\](?=\()|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_LABEL_MARKUP = re.compile(_MARKUP.pattern + r"|[\[\]]")
_CODE_SPAN = re.compile(r"(`[^`]*`)")


def number(value: float | None, decimals: int) -> str:
    return DASH if value is None else f"{value:.{decimals}f}"


def integer(value: int | None) -> str:
    return DASH if value is None else str(value)


def one_line(text: str) -> str:
    """``text`` on one line: its runs of white space one space, every other control character (an
    escape sequence from a shell variable or a training log) as its escape, never sent raw."""
    return visible(" ".join(text.split()))


def escape(text: str) -> str:
    """Record text as literal Markdown on one line."""
    return _escape_markup(one_line(text))


def _escape_markup(text: str) -> str:
    return _MARKUP.sub(lambda m: "\\" + m[0], text)


def text(value: str | None) -> str:
    """Record text as literal Markdown, a dash where there is none."""
    return escape(value) if value else DASH


def with_code(text: str) -> str:
    """Text with the kit's code spans (`` `name` ``) kept and everything between escaped: what is
    inside a code span is shown literally, HTML included."""
    return "".join(part if i % 2 else _escape_markup(part)
                   for i, part in enumerate(_CODE_SPAN.split(one_line(text))))


def code(text: str) -> str:
    """``text`` (a file name, which may hold anything) as an inline code span showing it
    literally: control characters as escapes (a newline as ``\\n``), the fence longer than any
    run of backticks inside."""
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    fence = "`" * (max(map(len, re.findall("`+", shown)), default=0) + 1)
    pad = " " if shown[:1] in ("`", " ") or shown[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def cell_code(text: str) -> str:
    """:func:`code` for a table cell: a ``|`` in it escaped, as a table reads one even inside a
    code span as the end of the cell (the page shows it plain)."""
    return code(text).replace("|", "\\|")


def plain(text: str) -> str:
    """Untrusted text (a skipped file's problem, quoting its contents) as literal Markdown:
    one line, with every character that could start a link, emphasis, code or HTML escaped."""
    return re.sub(r"([\\`*_\[\]<>|~&])", r"\\\1", one_line(text)) or DASH


def link(text: str, target: str | None) -> str:
    # A link's text ends at its first "]": every bracket in it is escaped.
    label = _LABEL_MARKUP.sub(lambda m: "\\" + m[0], one_line(text)) or DASH
    return label if target is None else f"[{label}]({target.replace(' ', '%20')})"


def record_link(run: Record, records_link: str) -> str:
    """The run id linked to its record file."""
    return link(run.run_id, f"{records_link}/{run.run_id}.json")


def table(header: Columns, rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(name for name, _ in header) + " |"]
    lines.append("| " + " | ".join("---:" if right else "---" for _, right in header) + " |")
    lines.extend("| " + " | ".join(cells) + " |" for cells in rows)
    return lines


def heading(title: str) -> list[str]:
    """A group's heading inside a section: its title as record text."""
    return [f"### {text(title)}", ""]
