"""The line the training entry prints of its host probe (:mod:`bench.train.host_probe`), written and
read here so that the two cannot drift apart.

E.g. ``host probe: 4.12 us to issue a torch op on cuda (2000 ops, median of 5)``: the host time rank
0 took to issue one small torch op on its device (``cuda`` or ``cpu``), in microseconds, the median
of 5 timings of 2000 ops each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEVICES = ("cuda", "cpu")
HOST_PROBE = re.compile(
    rf"host probe: (?P<op_us>\d+(?:\.\d+)?) us to issue a torch op on (?P<device>{'|'.join(DEVICES)}) "
    r"\((?P<ops>\d+) ops, median of (?P<repeats>\d+)\)")


@dataclass(frozen=True)
class ProbeLine:
    """What the line says: microseconds an op, the device the ops ran on, how many ops were timed
    together and how many such timings the median was taken of."""

    op_us: float
    device: str
    ops: int
    repeats: int


def probe_line(op_us: float, device: str, ops: int, repeats: int) -> str:
    """The line for ``op_us`` microseconds an op on ``device`` (one of :data:`DEVICES`), the median
    of ``repeats`` timings of ``ops`` ops."""
    if device not in DEVICES:
        raise ValueError(f"host probe on {device!r}: the line names one of {', '.join(DEVICES)}")
    return f"host probe: {op_us:.2f} us to issue a torch op on {device} ({ops} ops, median of {repeats})"


def read_probe_line(log_text: str) -> ProbeLine | None:
    """The first such line of a run's log (rank 0 prints it once), or None."""
    found = HOST_PROBE.search(log_text)
    if found is None:
        return None
    return ProbeLine(float(found["op_us"]), found["device"], int(found["ops"]), int(found["repeats"]))
