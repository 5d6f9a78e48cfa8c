"""BuildKit builds through the Engine API (``POST /build?version=2``), with their progress.

dockerd (18.09 and later) builds with BuildKit when asked for builder version 2; the build context
goes up as the request body, as for the classic builder, so no BuildKit session is needed. Its
progress comes back as ``moby.buildkit.trace`` messages: base64 protobuf ``StatusResponse``s of
BuildKit's control API (vertexes = build steps, their logs). The few fields shown are decoded here
with a minimal protobuf reader, so the kit needs no BuildKit client. podman's compatible API has no
BuildKit; there the classic builder stays.
"""

from __future__ import annotations

import base64
import io
import json
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Field numbers in BuildKit's api/services/control/control.proto.
_VERTEXES, _LOGS = 1, 3
_V_DIGEST, _V_NAME, _V_CACHED, _V_STARTED, _V_COMPLETED, _V_ERROR = 1, 3, 4, 5, 6, 7
_L_VERTEX, _L_MSG = 1, 4
TRACE_ID = "moby.buildkit.trace"


def supports_buildkit(runtime) -> bool:
    """Whether the runtime builds with BuildKit: dockerd with API 1.39 or later; not podman."""
    version = runtime.version()
    names = " ".join(c.get("Name", "") for c in version.get("Components") or [])
    api = tuple(int(part) for part in str(version.get("ApiVersion", "0.0")).split("."))
    return "podman" not in names.lower() and api >= (1, 39)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as int, the rest as bytes."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = data[pos : pos + size], pos + size
        else:
            raise ValueError(f"protobuf wire type {wire} is not used by BuildKit's status")
        yield number, value


@dataclass
class Trace:
    """What the build has shown so far: started and finished steps, and the log lines."""

    show: Callable[[str], None]
    started: set[bytes] = field(default_factory=set)
    finished: set[bytes] = field(default_factory=set)
    tail: list[str] = field(default_factory=list)
    error: str | None = None

    def _line(self, text: str) -> None:
        self.tail.append(text)
        self.show(text)

    def feed(self, message: bytes) -> None:
        for number, value in fields(message):
            if number == _VERTEXES and isinstance(value, bytes):
                self._vertex(dict(fields(value)))
            elif number == _LOGS and isinstance(value, bytes):
                log = dict(fields(value))
                text = bytes(log.get(_L_MSG, b"")).decode(errors="replace")
                for line in text.splitlines():
                    if line.strip():
                        self._line(f"    {line}")

    def _vertex(self, vertex: dict) -> None:
        digest = bytes(vertex.get(_V_DIGEST, b""))
        name = bytes(vertex.get(_V_NAME, b"")).decode(errors="replace")
        if _V_ERROR in vertex:
            self.error = f"{name}: {bytes(vertex[_V_ERROR]).decode(errors='replace')}"
        if vertex.get(_V_CACHED) and digest not in self.finished:
            self.finished.add(digest)
            self._line(f"CACHED {name}")
        elif _V_STARTED in vertex and digest not in self.started:
            self.started.add(digest)
            self._line(name)
        if _V_COMPLETED in vertex:
            self.finished.add(digest)


def follow(chunks: Iterable[dict], show: Callable[[str], None]) -> tuple[list[str], str | None]:
    """Show a BuildKit build's steps and logs; return (the lines shown, the error if it failed)."""
    trace = Trace(show)
    for chunk in chunks:
        if chunk.get("id") == TRACE_ID and isinstance(chunk.get("aux"), str):
            trace.feed(base64.b64decode(chunk["aux"]))
        elif "error" in chunk:
            trace.error = chunk["error"].strip()
        elif chunk.get("stream", "").strip():
            trace._line(chunk["stream"].strip())
    return trace.tail, trace.error


def context_tar(path: str) -> bytes:
    """The build context as an uncompressed GNU tar, in path order.

    Not the docker SDK's tar: its PAX headers (for fractional mtimes) come first in the archive,
    and dockerd's BuildKit then takes the body for a bare Dockerfile instead of a context.
    """
    buffer = io.BytesIO()
    root = Path(path)
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for item in sorted(root.rglob("*")):
            archive.add(item, arcname=item.relative_to(root).as_posix(), recursive=False)
    return buffer.getvalue()


def build(runtime, path: str, tag: str, buildargs: dict[str, str], labels: dict[str, str],
          network_mode: str | None) -> Iterator[dict]:
    """POST the context at ``path`` to ``/build`` with builder version 2; yield decoded chunks."""
    params = {"t": tag, "version": "2", "rm": "1", "forcerm": "1",
              "buildargs": json.dumps(buildargs), "labels": json.dumps(labels)}
    if network_mode:
        params["networkmode"] = network_mode
    api = runtime.api
    response = api._post(api._url("/build"), params=params, data=context_tar(path), stream=True,
                         headers={"Content-Type": "application/x-tar"}, timeout=None)
    api._raise_for_status(response)
    return api._stream_helper(response, decode=True)
