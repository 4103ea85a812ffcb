"""One call of a property-suite example on a backend, read back as float64 NumPy.

Arrays of every dtype (bfloat16 built in the framework itself), outputs
and gradients read back, the value and gradient of a call through
``rankops.vjp``, and the float64 reference that conformance.oracle judges
non-finite results against.
"""

from __future__ import annotations

import warnings
from typing import Any

import array_api_compat
import numpy as np

import rankops

from . import oracle
from .operators import Spec, _vectors
from .strategies import INT_DTYPES, Example, rounded


def array(backend: Any, device: Any, values: np.ndarray, dtype: str) -> Any:
    """``values`` as a ``dtype`` array of ``backend`` (bfloat16 built in the framework itself)."""
    if dtype != "bfloat16":
        return backend.asarray(values.astype(dtype), device=device)
    xp = backend.namespace()
    return xp.astype(backend.asarray(values.astype(np.float32), device=device), xp.bfloat16)


def to_numpy(backend: Any, a: Any) -> np.ndarray:
    """float64 NumPy copy of any output (bool kept)."""
    xp = array_api_compat.array_namespace(a)
    if str(a.dtype).endswith("bfloat16"):
        a = xp.astype(a, xp.float32)
    out = backend.to_numpy(a)
    return out if out.dtype == bool else out.astype(np.float64)


def as_rows(a: np.ndarray, batch: tuple[int, ...]) -> np.ndarray:
    """(rows, rest): the batch axes flattened (the output's trailing axes kept)."""
    return a.reshape((int(np.prod(batch)), -1))


def dtype_name(dtype: Any) -> str:
    return str(dtype).split(".")[-1]


def _cost(x: Any) -> Any:
    """The Sinkhorn example's cost (..., n, n): distances between the row's entries."""
    xp = array_api_compat.array_namespace(x)
    if x.dtype == xp.bool:
        x = xp.astype(x, xp.int32)
    return xp.abs(x[..., :, None] - x[..., None, :])


def first(fun: Any, x: Any) -> Any:
    """The operator's first argument, from the example x: sinkhorn's cost, sort_with's vectors (x is their criterion)."""
    return _cost(x) if fun is rankops.sinkhorn else _vectors(x) if fun is rankops.sort_with else x


def value_and_gradient(
    backend: Any, device: Any, spec: Spec, p: dict, values: np.ndarray, dtype: str, ct_dtype: str | None = None, quiet: bool = False
) -> tuple[np.ndarray, np.ndarray, str]:
    """``(value rows, gradient rows, gradient dtype)`` of the call on ``values`` in ``dtype``, through ``rankops.vjp``.

    The cotangent is a fixed normal draw rounded to ``ct_dtype`` (default: the
    value's dtype), so a float64 reference receives the same cotangent. The
    gradient is the first argument's (sort_with: and its criterion's, x itself).
    """
    x = array(backend, device, values, dtype)
    fun, args, kwargs = spec.call(x, p, lambda v: backend.asarray(v, device=device))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rankops.ConvergenceWarning)
        # IEEE overflow to +-inf is judged on the results (conformance.oracle), not by NumPy's warning
        warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)
        if quiet:
            warnings.simplefilter("ignore", RuntimeWarning)
        value, vjp_fn = rankops.vjp(fun, first(fun, x), *args, **kwargs)
        if fun is rankops.sinkhorn:
            value = value.plan
        own = dtype_name(value.dtype)
        ct = rounded(np.random.default_rng(0).normal(size=tuple(value.shape)), ct_dtype or own)
        grads = vjp_fn(array(backend, device, ct, own))
        batch = values.shape[:-1]  # read back under these filters: Dask computes here
        g = np.concatenate([as_rows(to_numpy(backend, d), batch) for d in grads[: 2 if fun is rankops.sort_with else 1]], axis=-1)
        return as_rows(to_numpy(backend, value), batch), g, dtype_name(grads[0].dtype)


class Reference:
    """The exact references of one example (conformance.oracle), computed on first use.

    ``references``: ``(value rows, gradient rows)`` pairs, each a way to know
    what a finite row's result is beyond the dtype's range: the same call in
    float64 (inputs cast up exactly; not for float64 examples), and the same
    call in the example's own dtype on its rows multiplied by exact powers
    of two, through the operator's homogeneity (NaN rows where the values
    show none). The second decides rows whose natural gradient scale,
    ``1 / max|x|``, lies beyond the range: there the float64 result is
    rounding noise of that scale too, and +-inf is the exact rounding of what
    the operator computes for the normalized row.
    """

    def __init__(self, backend: Any, device: Any, spec: Spec, p: dict, ex: Example, out: np.ndarray, dtype: str) -> None:
        self._args = (backend, device, spec, p)
        self._ex, self._out, self._dtype = ex, out, dtype
        self._result: list[tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def references(self) -> list[tuple[np.ndarray, np.ndarray]]:
        if self._result is None:
            self._result = self._compute()
        return self._result

    def _compute(self) -> list[tuple[np.ndarray, np.ndarray]]:
        ex = self._ex
        x64 = np.asarray(ex.x, dtype=np.float64)
        found = []
        if self._dtype != "float64":  # the same call with every input cast up: exact
            value, grad, _ = value_and_gradient(*self._args, x64, "float64", ct_dtype=self._dtype, quiet=True)
            found.append((value, grad))
        if ex.dtype not in INT_DTYPES:
            found.append(self._normalized(x64))
        return found

    def _normalized(self, x64: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The call on each row times 2**k (exact in the example's dtype), scaled back by the degree of homogeneity."""
        ex = self._ex
        rows = as_rows(x64, ex.x.shape[:-1])
        ks = oracle.exact_scale_exponents(np.where(np.isfinite(rows), rows, 0.0))
        scaled = np.ldexp(rows, ks[:, None]).reshape(ex.x.shape)
        value, grad, _ = value_and_gradient(*self._args, scaled, ex.dtype, quiet=True)
        ref_value, ref_grad = np.full_like(value, np.nan), np.full_like(grad, np.nan)
        for i, k in enumerate(ks):
            d = oracle.homogeneity_degree(self._out[i], value[i], int(k), oracle.homogeneity_rtol(self._dtype))
            if d is not None:  # else NaN: nothing is admitted from this reference in this row
                ref_value[i] = np.ldexp(value[i], -int(k) * d)
                ref_grad[i] = oracle.rescaled_gradient(grad[i], int(k), d)
        return ref_value, ref_grad
