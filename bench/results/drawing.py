"""Draw plots beside the loading: a forked process imports matplotlib while records load.

matplotlib's import (about 0.5 s) and drawing (about 0.3 s a plot) are most of a first
regeneration, and neither needs the records. :class:`Drawer` forks a process before the records
are loaded; it imports matplotlib while the parent loads and aggregates. When the parent knows
which PNGs must be drawn, that process forks one child per PNG (after the import, so no child
imports again) and the bytes come back through a pipe. Each child draws with
:func:`bench.results.plots.render_pngs`, so the bytes are the ones drawing in-process gives.
Without ``fork`` (not Linux) everything happens in-process, as
:func:`bench.results.plots.reuse_or_render`.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from types import TracebackType

from bench.results import plots

_Job = tuple[plots.PlotSpec, str]  # spec and its inputs key


def _render_one(job: _Job) -> bytes:
    return plots.render_pngs([job])[0]


def _serve(conn: Connection) -> None:
    """The drawing process: import matplotlib, then draw one batch of jobs on request."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.backends.backend_agg
        import matplotlib.figure  # noqa: F401  (what render_pngs imports, before forking)

        jobs: list[_Job] | None = conn.recv()
        if not jobs:
            return
        if len(jobs) == 1:
            pngs = [_render_one(jobs[0])]
        else:
            # One child per PNG: the OS shares the cores between them, so the last one does not
            # wait for a free worker.
            with multiprocessing.get_context("fork").Pool(len(jobs)) as pool:
                pngs = pool.map(_render_one, jobs, chunksize=1)
        conn.send(("ok", pngs))
    except EOFError:
        return  # the parent went away or needed nothing
    except BaseException as error:  # noqa: BLE001 (reported to the parent, which raises)
        conn.send(("error", "".join(traceback.format_exception(error))))
    finally:
        conn.close()


class Drawer:
    """Start with ``with Drawer() as drawer:`` before loading; call :meth:`reuse_or_render` once."""

    def __init__(self) -> None:
        self._process: multiprocessing.process.BaseProcess | None = None
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
        self, specs: Sequence[plots.PlotSpec], existing: Mapping[str, bytes]
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
        if not jobs:
            return pngs  # type: ignore[return-value]  (no None left)
        self._conn.send(jobs)
        outcome, payload = self._conn.recv()
        self.close()
        if outcome != "ok":
            raise RuntimeError(f"drawing the plots failed in the drawing process:\n{payload}")
        drawn = iter(payload)
        return [png if png is not None else next(drawn) for png in pngs]
