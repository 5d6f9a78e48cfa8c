"""Draw plots beside the loading: a forked process imports matplotlib while records load.

matplotlib's import (about 0.45 s) and drawing (about 0.25 s a plot) are most of a first
regeneration, and neither needs the records. :class:`Drawer` forks a process before the records
are loaded; it imports matplotlib while the parent loads and aggregates. When the parent knows
which PNGs must be drawn, it draws one and forks a child for each other one (after the import,
so no child imports again); the bytes come back through pipes. Each child draws with
:func:`bench.results.plots.render_pngs`, so the bytes are the ones drawing in-process gives.
Without ``fork`` (not Linux) everything happens in-process, as
:func:`bench.results.plots.reuse_or_render`.
"""

from __future__ import annotations

import gc
import multiprocessing
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from types import TracebackType

from bench.results import plots

_Job = tuple[plots.Drawable, str]  # spec and its inputs key


def _render_one(job: _Job) -> bytes:
    return plots.render_pngs([job])[0]


def _reply(conn: Connection, work: Callable[[], object]) -> None:
    """Send ``("ok", work())``, or ``("error", traceback)`` when it raises."""
    try:
        message = ("ok", work())
    except Exception as error:  # noqa: BLE001 (the parent raises it, with this traceback)
        message = ("error", "".join(traceback.format_exception(error)))
    conn.send(message)


def _render_in_child(context: BaseContext, job: _Job) -> tuple[BaseProcess, Connection]:
    # If the drawing process dies, the child's send fails on the closed pipe and the child ends.
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_reply, args=(sender, lambda: _render_one(job)))
    child.start()
    sender.close()
    return child, receiver


def _render_all(jobs: Sequence[_Job]) -> list[bytes]:
    """This process draws the first PNG and one forked child each of the others.

    The OS shares the cores between them, so no PNG waits for a free worker.
    """
    context = multiprocessing.get_context("fork")
    children = [_render_in_child(context, job) for job in jobs[1:]]
    pngs = [_render_one(jobs[0])]
    for child, receiver in children:
        try:
            outcome, payload = receiver.recv()
        except EOFError:
            outcome, payload = "error", "a drawing process ended without an answer"
        child.join()
        if outcome != "ok":
            raise RuntimeError(payload)
        pngs.append(payload)
    return pngs


def _serve(conn: Connection) -> None:
    """The drawing process: import matplotlib, then draw one batch of jobs on request."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.backends.backend_agg
        import matplotlib.figure
        import matplotlib.style  # noqa: F401  (what render_pngs imports, before forking)
        from PIL import Image

        Image.preinit()  # the image formats savefig's first call would import, in every child
        # The cyclic collector would walk matplotlib's import-time objects again and again in
        # every drawing (measured: a fifth of a first plot); frozen, forked children share them.
        gc.freeze()
    except Exception as error:  # noqa: BLE001 (sent when drawing is asked for)
        failure: Exception | None = error
    else:
        failure = None
    try:
        jobs: list[_Job] = conn.recv()
    except EOFError:
        return  # the parent needed nothing drawn, or went away
    if failure is not None:
        conn.send(("error", "".join(traceback.format_exception(failure))))
    else:
        _reply(conn, lambda: _render_all(jobs))
    conn.close()


class Drawer:
    """Start with ``with Drawer() as drawer:`` before loading; call :meth:`reuse_or_render` once."""

    def __init__(self) -> None:
        self._process: BaseProcess | None = None
        if "fork" not in multiprocessing.get_all_start_methods():
            return
        context = multiprocessing.get_context("fork")
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(target=_serve, args=(child_conn,), name="bench-plots")
        self._process.start()
        child_conn.close()

    def __enter__(self) -> Drawer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the drawing process; one still importing matplotlib for nothing is killed."""
        if self._process is None:
            return
        self._conn.close()
        if self._process.is_alive():
            self._process.kill()
        self._process.join()
        self._process = None

    def reuse_or_render(
        self, specs: Sequence[plots.Drawable], existing: Mapping[str, bytes]
    ) -> list[bytes]:
        """PNG bytes per spec: ``existing[filename]`` when its inputs key matches, else drawn.

        Same result as :func:`bench.results.plots.reuse_or_render`.
        """
        if self._process is None:
            return plots.reuse_or_render(specs, existing)
        keys = [plots.inputs_key(spec) for spec in specs]
        pngs: list[bytes | None] = [
            existing[spec.filename]
            if plots.png_text(existing.get(spec.filename, b"")).get(plots.KEY_CHUNK) == key
            else None
            for spec, key in zip(specs, keys, strict=True)
        ]
        jobs = [(spec, key) for spec, key, png in zip(specs, keys, pngs, strict=True) if png is None]
        drawn = iter(self._render(jobs) if jobs else [])
        return [png if png is not None else next(drawn) for png in pngs]

    def _render(self, jobs: list[_Job]) -> list[bytes]:
        assert self._process is not None  # only called while the drawing process runs
        try:
            self._conn.send(jobs)
            outcome, payload = self._conn.recv()
        except (OSError, EOFError):  # it died (killed, out of memory) before answering
            outcome, payload = "error", f"it ended with exit code {self._process.exitcode}"
        self._process.join()  # it ends after answering
        self.close()
        if outcome != "ok":
            raise RuntimeError(f"drawing the plots failed in the drawing process:\n{payload}")
        return payload
