"""Fitting the model's factors on measured steps, and the stored fit (``fit.json``).

One non-negative factor per term minimises the Huber loss of the *relative* error of the step,
``r = (overlapped(gpu, host) + after - measured) / measured``
(:func:`bench.planning.predict.model.overlapped`): ``r^2`` within :data:`HUBER_DELTA`, growing
linearly beyond it, so that a step far off every configuration's terms pulls the factors no
harder than one at the edge. Such steps are real: the same host-bound 125m step ran 1.45x apart on
two machines of one kind (docs/reports/2026-11-29-h200-graphs-host-pair.md), which no term of a
configuration can follow. The step is homogeneous of degree one in the factors, each term weighted
by its side's ``d step / d side`` at the factors themselves, so the fit alternates (Gauss-Newton
with iteratively reweighted least squares): weigh each record's terms at the current factors and
each record by the Huber weight of its error there, solve the non-negative least squares (Lawson
and Hanson) those weights make linear, halving the move where it does not lower the loss; it
starts from the GPU's and host's terms added (both weights 1). Refit with
``python -m bench predict --refit``.
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from bench.config.paths import FIT_FILE
from bench.config.schema import Count, Strict, validate
from bench.config.tomlfile import DataError
from bench.planning.predict.model import overlapped
from bench.planning.predict.terms import AFTER_TERMS, GPU_TERMS, HOST_TERMS, TERMS

FIT_SCHEMA = "bench.predict-fit/1"
REFIT_COMMAND = "python -m bench predict --refit"
MAX_ROUNDS = 40  # the loss settles to 1e-9 in 5-15 rounds on the kit's records
SETTLED = 1e-9  # a round lowering the loss by less (relative) ends the fit
# Where the loss turns from squared to linear, as a relative error of the step. Chosen among 0.05,
# 0.10, 0.15, 0.20 and 0.30 by the validation's figures on the 342 records of 2026-11-29 (so
# those figures flatter it a little): at 0.20 fewer GPUs predict four within 9.9 % (10.7 % with
# squares alone), the group-held-out median and p90 stay (5.9 %, 20.2 % against 20.3 %), the
# published rows' median 20.4 % and p90 54.0 % (20.5 %, 53.3 %); smaller values trade the p90s
# for the medians (docs/running.md).
HUBER_DELTA = 0.20
K = len(TERMS)
_GPU = [TERMS.index(n) for n in GPU_TERMS]
_HOST = [TERMS.index(n) for n in HOST_TERMS]
_AFTER = [TERMS.index(n) for n in AFTER_TERMS]
_SIDE = [0 if n in GPU_TERMS else 1 if n in HOST_TERMS else 2 for n in TERMS]  # weights' index


@dataclass(frozen=True)
class Sample:
    """One measured step: its run id, its unfitted terms (in TERMS order) and the step (s)."""

    run_id: str
    terms: tuple[float, ...]
    step_s: float


def _solve(gram: list[float], rhs: list[float], cols: list[int]) -> list[float]:
    """Gaussian elimination on the passive columns, partial pivoting, a tiny ridge."""
    n = len(cols)
    a = [[gram[i * K + j] + (1e-12 * gram[i * K + i] if i == j else 0.0) for j in cols]
         + [rhs[i]] for i in cols]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(a[r][c]))
        a[c], a[p] = a[p], a[c]
        if a[c][c] == 0.0:
            a[c][c] = 1e-300
        for r in range(c + 1, n):
            f = a[r][c] / a[c][c]
            if f:
                a[r] = [x - f * y for x, y in zip(a[r], a[c], strict=True)]
    z = [0.0] * n
    for r in range(n - 1, -1, -1):
        z[r] = (a[r][n] - sum(a[r][j] * z[j] for j in range(r + 1, n))) / a[r][r]
    return z


def nnls(gram: list[float], rhs: list[float], passive: Sequence[int] = ()) -> list[float]:
    """min |Ax - b|^2 with x >= 0 from the normal equations ``gram`` (K x K, flat) and ``rhs``;
    ``passive``: the columns of a nearby solution, tried first (a warm start)."""
    x, cols = [0.0] * K, sorted(passive)
    if cols:
        z = _solve(gram, rhs, cols)
        x, cols = (([0.0] * K, []) if min(z) <= 0
                   else ([dict(zip(cols, z, strict=True)).get(i, 0.0) for i in range(K)], cols))
    scale = max((abs(v) for v in rhs), default=1.0) or 1.0
    for _ in range(3 * K):
        w = [rhs[i] - sum(gram[i * K + j] * x[j] for j in cols) for i in range(K)]
        free = [i for i in range(K) if i not in cols and w[i] > 1e-10 * scale]
        if not free:
            break
        cols = sorted([*cols, max(free, key=lambda i: w[i])])
        while True:
            z = dict(zip(cols, _solve(gram, rhs, cols), strict=True))
            if all(v > 0 for v in z.values()):
                x = [z.get(i, 0.0) for i in range(K)]
                break
            alpha = min(x[i] / (x[i] - z[i]) for i in cols if z[i] <= 0)
            x = [x[i] + alpha * (z.get(i, 0.0) - x[i]) for i in range(K)]
            cols = [i for i in cols if x[i] > 1e-15]
    return x


class Fitter:
    """The samples' terms relative to their measured steps, a column per term, kept so that each
    fit (all samples, or all but a few) builds its normal equations from them with sums over
    columns; ``full``: the factors fitted on every sample."""

    def __init__(self, samples: Sequence[Sample]):
        self.samples = tuple(samples)
        self._columns = [[s.terms[j] / s.step_s for s in self.samples] for j in range(K)]
        self.full = dict(zip(TERMS, self._settle((), [1.0] * K, both_added=True), strict=True))

    def _weights(self, x: list[float], left_out: frozenset[int]) -> list[list[float]]:
        """Per side (GPU, host, after) each sample's weight at factors ``x``; 0 where left out."""
        sides: list[list[float]] = [[], [], []]
        for i, s in enumerate(self.samples):
            both = overlapped(sum(s.terms[j] * x[j] for j in _GPU), sum(s.terms[j] * x[j] for j in _HOST))
            member = 0.0 if i in left_out else huber_weight(fitted_step(s.terms, x) / s.step_s - 1) ** 0.5
            for side, w in zip(sides, (both.gpu, both.host, 1.0), strict=True):
                side.append(member * w)
        return sides

    def _step(self, weights: list[list[float]], x: list[float]) -> list[float]:
        """The non-negative least squares with each sample's terms at ``weights``."""
        rows = [list(map(operator.mul, self._columns[j], weights[_SIDE[j]])) for j in range(K)]
        gram = [0.0] * (K * K)
        for a in range(K):
            for b in range(a, K):
                gram[a * K + b] = gram[b * K + a] = sum(map(operator.mul, rows[a], rows[b]))
        rhs = [sum(map(operator.mul, rows[j], weights[2])) for j in range(K)]
        return nnls(gram, rhs, [j for j in range(K) if x[j] > 0])

    def _settle(self, left_out: Sequence[int], x: list[float], both_added: bool = False) -> list[float]:
        """From factors ``x`` (or from both sides added): weigh, solve, until the loss settles."""
        out = frozenset(left_out)
        weights = ([[0.0 if i in out else 1.0 for i in range(len(self.samples))]] * 3 if both_added
                   else self._weights(x, out))
        x = self._step(weights, x) if both_added else x
        loss = self.loss(left_out, x)
        for _ in range(MAX_ROUNDS):
            new = self._step(self._weights(x, out), x)
            new_loss = self.loss(left_out, new)
            while new_loss > loss and max(abs(a - b) for a, b in zip(new, x, strict=True)) > 1e-12:
                new = [(a + b) / 2 for a, b in zip(new, x, strict=True)]
                new_loss = self.loss(left_out, new)
            if new_loss > loss * (1 - SETTLED):
                return new if new_loss < loss else x
            x, loss = new, new_loss
        return x

    def loss(self, left_out: Sequence[int], x: list[float]) -> float:
        """The fit's objective: the Huber loss of the relative errors of the samples not left out."""
        out = set(left_out)
        return sum(huber(fitted_step(s.terms, x) / s.step_s - 1)
                   for i, s in enumerate(self.samples) if i not in out)

    def fit(self, left_out: Sequence[int]) -> dict[str, float]:
        """Factors fitted on every sample but those at ``left_out`` (indices), starting from the
        full fit's (a warm start)."""
        return dict(zip(TERMS, self._settle(left_out, [self.full[n] for n in TERMS]), strict=True))


def huber(r: float) -> float:
    """The loss of a relative error ``r``: ``r^2`` within :data:`HUBER_DELTA`, linear beyond
    (continuous, with a continuous slope)."""
    return r * r if abs(r) <= HUBER_DELTA else HUBER_DELTA * (2 * abs(r) - HUBER_DELTA)


def huber_weight(r: float) -> float:
    """The weight that makes a squared error ``r^2`` weigh as :func:`huber` does at ``r``'s slope
    (iteratively reweighted least squares): 1 within :data:`HUBER_DELTA`, ``delta / |r|`` beyond."""
    return 1.0 if abs(r) <= HUBER_DELTA else HUBER_DELTA / abs(r)


def fitted_step(terms: Sequence[float], x: Sequence[float]) -> float:
    """The step (s) of unfitted ``terms`` with factors ``x``, both in TERMS order."""
    gpu = sum(terms[j] * x[j] for j in _GPU)
    host = sum(terms[j] * x[j] for j in _HOST)
    return overlapped(gpu, host).seconds + sum(terms[j] * x[j] for j in _AFTER)


def fit_factors(samples: Sequence[Sample]) -> dict[str, float]:
    """The factors fitted on every sample."""
    return Fitter(samples).full


Fraction = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Factor = Annotated[float, Field(ge=0, allow_inf_nan=False)]  # a term's seconds never go negative


class Validation(Strict):
    """The validation's figures at the refit (``python -m bench predict --validate``): ``median``
    and ``p90`` of the group-held-out errors (fractions; the band an expectation quotes where
    ``bands`` has none of its kind),
    ``gpus`` the most GPUs of a record fitted on; the others as the command names them, the
    published rows' only where some were priced."""

    gpus: Count
    median: Fraction
    p90: Fraction
    spread_median: Fraction | None = None  # the records' own spread within groups (validate.within_group)
    spread_p90: Fraction | None = None
    # The group-held-out p90 of the records of a kind (GPU-bound, host-bound: as the fit prices
    # them), a precision, and a precision and kind with enough records (validate.bands): the
    # bands a plan's expectation quotes, the most particular first
    bands: dict[str, Fraction] = {}
    size_median: Fraction | None = None
    cross_median: Fraction | None = None
    ranking: Fraction | None = None
    published_rows: Fraction | None = None
    published_median: Fraction | None = None
    published_p90: Fraction | None = None
    published_top: Fraction | None = None  # of the priced rows, those whose layout the sweep ranks in its top three
    # Megatron-DeepSpeed's records priced as megatron-core's local layers, never fitted on: their
    # errors, the share that ran slower than priced, and how many (validate.priced_as_core)
    core_priced_median: Fraction | None = None
    core_priced_p90: Fraction | None = None
    core_priced_slower: Fraction | None = None
    core_priced_records: Fraction | None = None


class StoredFit(Strict):
    """``fit.json``: one factor per term of the model, the validation, and where they came from."""

    schema_: Literal["bench.predict-fit/1"] = Field(alias="schema")
    factors: dict[str, Factor]
    validation: Validation
    fitted_at: str
    kit_commit: str | None
    refit: str
    records: tuple[str, ...]

    @model_validator(mode="after")
    def _terms(self) -> StoredFit:
        missing, unknown = set(TERMS) - set(self.factors), set(self.factors) - set(TERMS)
        if missing or unknown:
            raise ValueError(f"factors: its terms are not the model's (missing: "
                             f"{', '.join(sorted(missing)) or 'none'}; "
                             f"unknown: {', '.join(sorted(unknown)) or 'none'})")
        return self


def fit_document(factors: dict[str, float], run_ids: Sequence[str], fitted_at: str,
                 kit_commit: str | None, validation: dict[str, float]) -> str:
    """The stored fit as JSON text: the factors, their provenance and the validation's figures on
    the same records (:class:`Validation`), which a plan's expectation quotes as its error band."""
    return json.dumps({"schema": FIT_SCHEMA, "factors": {n: round(factors[n], 6) for n in TERMS},
                       "validation": _nested(validation),
                       "fitted_at": fitted_at, "kit_commit": kit_commit, "refit": REFIT_COMMAND,
                       "records": sorted(run_ids)}, indent=2) + "\n"


BAND_PREFIX = "band:"  # a band among the validation's figures as they are handed around, flat
GPU_BOUND, HOST_BOUND = "GPU-bound", "host-bound"  # the kinds of step a band is of


def kind_of(host_bound: bool) -> str:
    """The kind of a step the fit prices host-bound (or not), as a band names it."""
    return HOST_BOUND if host_bound else GPU_BOUND


def _nested(figures: dict[str, float]) -> dict[str, object]:
    """The validation's flat figures as ``fit.json`` keeps them: the bands under ``bands``."""
    plain = {k: round(v, 4) for k, v in sorted(figures.items()) if not k.startswith(BAND_PREFIX)}
    bands = {k.removeprefix(BAND_PREFIX): round(v, 4) for k, v in sorted(figures.items()) if k.startswith(BAND_PREFIX)}
    return plain | ({"bands": bands} if bands else {})


def write_fit(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a hidden partial file beside it, renamed
    over it); the folder must exist: a refit writes only where it is told."""
    if not path.parent.is_dir():
        raise ValueError(f"{path.parent}: no such folder for the fit; give --fit a file in a folder "
                         "that exists")
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(text)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def load_run_ids(path: Path = FIT_FILE) -> tuple[str, ...]:
    """The run ids the stored fit was fitted on; a DataError as :func:`load_stored`'s."""
    return _stored(path).records


def load_fit(path: Path = FIT_FILE) -> dict[str, float]:
    """The stored factors; a DataError naming the file and the refit command."""
    return load_stored(path)[0]


def load_stored(path: Path = FIT_FILE) -> tuple[dict[str, float], dict[str, float]]:
    """(the stored factors, the validation's figures); a one-line DataError naming the file, the
    field and the refit command."""
    stored = _stored(path)
    figures = stored.validation.model_dump(exclude_none=True, exclude={"bands"})
    bands = {f"{BAND_PREFIX}{k}": float(v) for k, v in stored.validation.bands.items()}
    return ({name: stored.factors[name] for name in TERMS},
            {k: float(v) for k, v in figures.items()} | bands)


def _stored(path: Path) -> StoredFit:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: cannot be read ({error}); refit with {REFIT_COMMAND}") from None
    try:
        data = json.loads(text)
    except ValueError as error:
        raise DataError(f"{path}: not JSON ({error}); refit with {REFIT_COMMAND}") from None
    try:
        return validate(data, StoredFit, str(path))
    except DataError as error:
        raise DataError(f"{error}; not a fit of this model: refit with {REFIT_COMMAND}") from None
