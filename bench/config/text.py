"""Names and values shown on a terminal or written into a job script: a control character (an
escape sequence that redraws the screen, a newline that starts another ``#SBATCH`` line) is shown
as its escape, never sent raw, and an error line has a bounded length."""

from __future__ import annotations

import re

MAX_ERROR_LINE_CHARS = 2000  # an error names files and values: a few hundred characters at most
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab and newline, DEL, C1
_ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with every control character, tab and newline included, as its escape."""
    return _ANY_CONTROL.sub(lambda found: repr(found[0])[1:-1], text)


def control_character(text: str) -> str | None:
    """The first control character of ``text`` (tab and newline included) as its escape, or None."""
    found = _ANY_CONTROL.search(text)
    return repr(found[0])[1:-1] if found else None


def error_text(message: object) -> str:
    """A message for ``error: ...``: control characters escaped (a message's own line breaks
    kept), each line cut to :data:`MAX_ERROR_LINE_CHARS` with the number of characters left out."""
    lines = []
    for line in _CONTROL.sub(lambda found: repr(found[0])[1:-1], str(message)).split("\n"):
        if len(line) > MAX_ERROR_LINE_CHARS:
            cut = len(line) - MAX_ERROR_LINE_CHARS
            line = f"{line[:MAX_ERROR_LINE_CHARS]} ... ({cut:,} more characters)"
        lines.append(line.replace("\t", " "))
    return "\n".join(lines)
