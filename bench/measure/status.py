"""How a run ended: the status of a run record and of the log parser's verdict (stdlib only, so
the training environment can parse logs without the kit's schema library)."""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """How a run ended. Only ``ok`` carries metrics; every other status needs a reason."""

    OK = "ok"
    INCOMPLETE = "incomplete"
    OOM = "oom"
    NAN = "nan"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    FAILED = "failed"
