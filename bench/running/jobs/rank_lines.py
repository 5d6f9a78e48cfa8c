"""The lines each rank of a system check prints (``bench-sysinfo {json}``, ``bench-allreduce
{json}``: :mod:`bench.train.sysinfo`), read from a job's output that no rank controls alone: ranks
write into one stream, so a line can be cut, or hold another rank's text after its own or inside
it. Each prefix on a line is read (two ranks' lines run into one give two objects); one not
followed by a JSON object is counted, not parsed; text after the object is left out; a value of a
known key that has not its kind (a rank that is no integer, a GPU list that is no list) is dropped,
so that the report reads every line it can and flags the rest.
"""

from __future__ import annotations

import json

# The kind of each key the report reads; a value of another kind is dropped from its line.
KINDS: dict[str, type] = {
    "rank": int, "local_rank": int, "world_size": int, "host": str, "gpus": list, "devices": dict,
    "container": dict, "versions": dict, "communication": dict, "env": dict, "ok": bool,
    "error": str, "backend": str}
_DECODER = json.JSONDecoder()


def _kept(key: str, value: object) -> bool:
    kind = KINDS.get(key)
    if kind is None:
        return True
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def rank_lines(output: str, prefix: str) -> tuple[list[dict], int]:
    """The JSON object after each ``prefix`` in ``output``, each value of a key of :data:`KINDS` of
    its kind, and how many of the prefixes had no object after them."""
    found: list[dict] = []
    unreadable = 0
    for line in output.splitlines():
        for part in line.split(prefix)[1:]:  # two ranks' lines run into one are read both
            try:
                value, _ = _DECODER.raw_decode(part.lstrip())
            except ValueError:  # cut, or another rank's text inside it
                value = None
            if isinstance(value, dict):
                found.append({key: item for key, item in value.items() if _kept(key, item)})
            else:
                unreadable += 1
    return found, unreadable


def unreadable_flag(kind: str, count: int) -> list[str]:
    """The report's flag of ``count`` lines of ``kind`` that held no JSON object (none where 0)."""
    if not count:
        return []
    return [f"{count} {kind} line{'s' * (count > 1)} could not be read (cut, or interleaved with "
            "another rank's output): their ranks count as not reported"]
