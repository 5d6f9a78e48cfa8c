"""The parts of a run record that describe what ran: text bounds, the model's shape, the layout,
the platform and its peak, the data, the kit's patch series and the bytes held per part.

Units as in :mod:`bench.records.record`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from bench.config.schema import Count, NonNegative, Positive, Strict, hinted
from bench.records.migrate import data_fields


def _real_time(value: str) -> str:
    try:
        datetime.fromisoformat(value)
    except ValueError as error:  # the right shape, but no such day or time (month 13)
        raise ValueError(f"{value!r} is not a date and time ({error})") from None
    return value


def _fraction(value: float) -> float:
    if value > 1:
        raise ValueError(f"{value} is a fraction of peak and must be in (0, 1]; a value above 1 "
                         "means the wrong peak or FLOPs formula")
    return value


Fraction = Annotated[Positive, AfterValidator(_fraction)]
Timestamp = Annotated[str, hinted(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$",
                                  "must be UTC like 2026-11-21T20:15:00Z"), AfterValidator(_real_time)]
MAX_TEXT_CHARS = 10_000
"""The longest text a record holds (a log line, a reason, an argument). The default is 10,000, the
log parser's line length (``bench.measure.logparse.MAX_LINE_CHARS``): a longer one is not the
kit's, and a 100,000-character one took the results page 22 s and 1 GB."""
MAX_NAME_CHARS = 200
"""The longest name a record holds (a preset, layout, platform, accelerator, key): 200 by default."""
Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
Line = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
Key = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
JsonScalar = Line | int | Annotated[float, Field(allow_inf_nan=False)] | bool | None
class PresetInfo(Strict):
    """Model shape of the run; ``vocab_size`` is the padded vocabulary."""

    name: Name
    layers: Count
    hidden: Count
    heads: Count
    seq_length: Count
    vocab_size: Count


class LayoutInfo(Strict):
    """Parallel layout: degrees, virtual pipeline ``vp`` and ZeRO stage ``zero`` (null: off)."""

    name: Name
    tp: Count
    pp: Count
    dp: Count
    vp: Count | None
    cp: Count
    sp: bool
    zero: Annotated[int, Field(ge=0, le=3)] | None
    micro_batch: Count
    global_batch: Count


class PlatformInfo(Strict):
    """Platform as used: ``peak_tflops`` is the dense peak per GPU for the run's precision."""

    name: Name
    accelerator: Name
    peak_tflops: Positive
    peak_source: Text

Implementation = Literal["te", "te+apex", "local"]
Digest16 = Annotated[str, hinted(r"^[0-9a-f]{16}$", "must be 16 lower-case hex digits")]


class DataInfo(Strict):
    """What a run trained on: ``mock`` (the engine's generated data) or ``real`` (a tokenized
    corpus: ``name`` is the last part of its ``--data-path`` prefix, ``path_sha256`` the first 16
    hex digits of the sha256 of that prefix as given, so runs on different corpora of one name
    stay apart)."""

    kind: Literal["mock", "real"]
    name: Text | None = None
    path_sha256: Digest16 | None = None


def data_info(path: str) -> DataInfo:
    """The :class:`DataInfo` of a run given ``path`` as its data prefix ("" or None: mock data)."""
    return DataInfo(**data_fields(path or ""))


class PatchSeries(Strict):
    """A patch series of the kit (``patches/<upstream>/``) as found in the tree a run trained
    with: ``sha256`` the first 16 hex digits of the series' digest, ``applied`` whether that tree
    had all of it, and if not, ``why``."""

    upstream: Text
    sha256: Digest16
    applied: bool
    why: Text | None = None

class MemoryParts(Strict):
    """Bytes rank 0 held per part after its first optimizer step (:mod:`bench.train.memory_parts`):
    ``weights`` the model's parameters, ``gradients`` the gradient buffers, ``master`` the
    optimizer's master copies, ``moments`` its other state (Adam's moments and their scales);
    ``parameters`` the parameters on that rank. Sharded parts (the distributed optimizer's) are
    that rank's shard."""

    parameters: Count
    weights: NonNegative
    gradients: NonNegative
    master: NonNegative
    moments: NonNegative

    def per_parameter(self, part: str) -> float:
        """Bytes a parameter in ``part`` (one of weights, gradients, master, moments)."""
        return getattr(self, part) / self.parameters
