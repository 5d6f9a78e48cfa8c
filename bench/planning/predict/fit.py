"""Fitting the model's factors on measured steps, and the stored fit (``fit.json``).

One non-negative factor per term minimises the squared *relative* error of the step,
``sum(((max(gpu, host) + after) - measured) / measured)^2``: a record is either GPU-bound or
launch-bound (host), so the fit alternates between choosing each record's bound with the current
factors and solving the non-negative least squares (Lawson and Hanson) that bound makes linear,
starting from the fit with both added. Refit with ``python -m bench predict --refit``.
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
from bench.planning.predict.terms import AFTER_TERMS, GPU_TERMS, HOST_TERMS, TERMS

FIT_SCHEMA = "bench.predict-fit/1"
REFIT_COMMAND = "python -m bench predict --refit"
MAX_ROUNDS = 12  # bound choices settle in 2-4 rounds on the kit's records
K = len(TERMS)
_GPU = [TERMS.index(n) for n in GPU_TERMS]
_HOST = [TERMS.index(n) for n in HOST_TERMS]
_AFTER = [TERMS.index(n) for n in AFTER_TERMS]


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


def _outer(v: list[float]) -> list[float]:
    return [a * b for a in v for b in v]


def _add(total: list[float], part: list[float], sign: float = 1.0) -> list[float]:
    """``total`` plus (``sign`` 1) or minus (-1) ``part``, term by term."""
    # operator's add or sub mapped: twice a comprehension's speed (a leave-one-out calls this
    # tens of thousands of times), and the very sums, since a + -1.0 * b is a - b exactly
    if len(total) != len(part) or sign not in (1, -1):
        raise ValueError(f"cannot add {len(part)} terms times {sign} to {len(total)}")
    return list(map(operator.add if sign > 0 else operator.sub, total, part))


class Fitter:
    """The samples' weighted outer products per bound (``gpu``, ``host``, ``both`` added), kept so
    that a fit leaving a few records out, or changing a few bounds, updates sums instead of
    redoing them."""

    def __init__(self, samples: Sequence[Sample]):
        self.samples = tuple(samples)
        self._rows: list[dict[str, tuple[list[float], list[float]]]] = []
        for s in self.samples:
            t = [v / s.step_s for v in s.terms]
            gpu = [t[j] if j not in _HOST else 0.0 for j in range(K)]
            host = [t[j] if j not in _GPU else 0.0 for j in range(K)]
            self._rows.append({"both": (_outer(t), t), "gpu": (_outer(gpu), gpu),
                               "host": (_outer(host), host)})
        self._totals = {bound: self._sum(range(len(self.samples)), bound)
                        for bound in ("both", "gpu", "host")}
        self.full = self.fit(())

    def _sum(self, members: Sequence[int], bound: str) -> tuple[list[float], list[float]]:
        gram, rhs = [0.0] * (K * K), [0.0] * K
        for i in members:
            gram, rhs = _add(gram, self._rows[i][bound][0]), _add(rhs, self._rows[i][bound][1])
        return gram, rhs

    def _bounds(self, members: Sequence[int], x: list[float]) -> dict[int, str]:
        return {i: self._bound(i, x) for i in members}

    def _bound(self, i: int, x: list[float]) -> str:
        t = self.samples[i].terms
        return "host" if sum(t[j] * x[j] for j in _HOST) > sum(t[j] * x[j] for j in _GPU) else "gpu"

    def _system(self, left_out: Sequence[int], bound: dict[int, str]) -> tuple[list[float], list[float]]:
        """The normal equations of every sample but ``left_out``, each at its ``bound``: the
        all-GPU sums corrected where a bound is the host."""
        gram, rhs = self._totals["gpu"]
        for i in left_out:
            gram, rhs = _add(gram, self._rows[i]["gpu"][0], -1), _add(rhs, self._rows[i]["gpu"][1], -1)
        for i, b in bound.items():
            if b == "host":
                for part, sign in ((self._rows[i]["host"], 1), (self._rows[i]["gpu"], -1)):
                    gram, rhs = _add(gram, part[0], sign), _add(rhs, part[1], sign)
        return gram, rhs

    def _settle(self, left_out: Sequence[int], x: list[float]) -> list[float]:
        """From factors ``x``: choose each bound, refit, until the bounds stay."""
        members = [i for i in range(len(self.samples)) if i not in set(left_out)]
        bound: dict[int, str] = {}
        for _ in range(MAX_ROUNDS):
            chosen = self._bounds(members, x)
            if chosen == bound:
                break
            bound = chosen
            x = nnls(*self._system(left_out, bound), [j for j in range(K) if x[j] > 0])
        return x

    def loss(self, left_out: Sequence[int], x: list[float]) -> float:
        """The fit's objective: squared relative errors of the samples not left out."""
        out = set(left_out)
        return sum((fitted_step(s.terms, x) / s.step_s - 1) ** 2
                   for i, s in enumerate(self.samples) if i not in out)

    def fit(self, left_out: Sequence[int]) -> dict[str, float]:
        """Factors fitted on every sample but those at ``left_out`` (indices). The first fit
        starts from the one with the bounds added and from one that lets the host explain all;
        a fit leaving records out starts from the full fit (a warm start) and settles."""
        if hasattr(self, "full"):
            return dict(zip(TERMS, self._settle(left_out, [self.full[n] for n in TERMS]), strict=True))
        gram, rhs = self._totals["both"]
        starts = [nnls(gram, rhs), nnls(*self._totals["host"])]
        best = min((self._settle(left_out, x) for x in starts), key=lambda x: self.loss(left_out, x))
        return dict(zip(TERMS, best, strict=True))


def fitted_step(terms: Sequence[float], x: list[float]) -> float:
    """The step (s) of unfitted ``terms`` with factors ``x``, both in TERMS order."""
    gpu = sum(terms[j] * x[j] for j in _GPU)
    host = sum(terms[j] * x[j] for j in _HOST)
    return max(gpu, host) + sum(terms[j] * x[j] for j in _AFTER)


def fit_factors(samples: Sequence[Sample]) -> dict[str, float]:
    """The factors fitted on every sample."""
    return Fitter(samples).full


Fraction = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Factor = Annotated[float, Field(ge=0, allow_inf_nan=False)]  # a term's seconds never go negative


class Validation(Strict):
    """The validation's figures at the refit (``python -m bench predict --validate``): ``median``
    and ``p90`` of the group-held-out errors (fractions; the band an expectation quotes),
    ``gpus`` the most GPUs of a record fitted on; the others as the command names them, the
    published rows' only where some were priced."""

    gpus: Count
    median: Fraction
    p90: Fraction
    size_median: Fraction | None = None
    cross_median: Fraction | None = None
    ranking: Fraction | None = None
    published_rows: Fraction | None = None
    published_median: Fraction | None = None
    published_p90: Fraction | None = None
    published_top: Fraction | None = None  # of the priced rows, those whose layout the sweep ranks in its top three


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
                       "validation": {k: round(v, 4) for k, v in sorted(validation.items())},
                       "fitted_at": fitted_at, "kit_commit": kit_commit, "refit": REFIT_COMMAND,
                       "records": sorted(run_ids)}, indent=2) + "\n"


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
    figures = stored.validation.model_dump(exclude_none=True)
    return {name: stored.factors[name] for name in TERMS}, {k: float(v) for k, v in figures.items()}


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
