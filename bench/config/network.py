"""The links between the nodes of a cluster, as platform data: the ``[network]`` table of a
platform file (``platforms/<name>.toml``), read with the rest of it (:mod:`bench.config.platforms`).

Each figure says first what it is and then where it comes from (``datasheet: <document>``,
``published: <where>``, ``measured: <how>``), so that what prices a run over nodes can be traced.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from bench.config.schema import Positive, Strict, hinted

# Where a figure comes from, said first: a vendor's datasheet, a published measurement or the
# kit's own measurement, then the document or the run (``datasheet: LUMI documentation, ...``).
FIGURE_SOURCE = r"^(?:datasheet|published|measured): \S"
FigureSource = Annotated[str, hinted(FIGURE_SOURCE, "must say what the figure is and where it comes from: "
                                     "'datasheet: <document>', 'published: <where>' or 'measured: <how>'")]


class Network(Strict):
    """The links between nodes (the ``[network]`` table of a platform file): ``nics`` network
    interfaces per node, ``gbits`` the bandwidth of each in Gb/s, one direction, and
    ``latency_us`` the time a step of a ring between nodes takes, in microseconds; each with its
    source.
    The step-time model prices the collectives whose ranks span nodes over them
    (bench.planning.predict.terms)."""

    name: Annotated[str, Field(pattern=r"\S")]
    nics: Annotated[int, Field(ge=1)]
    gbits: Positive
    source: FigureSource
    latency_us: Positive
    latency_source: FigureSource

    def gpu_bytes_per_s(self, gpus_per_node: int) -> float:
        """Bytes per second one GPU of a node gets when all ``gpus_per_node`` send at once: the
        node's NICs shared evenly."""
        return self.nics * self.gbits * 1e9 / 8 / gpus_per_node
