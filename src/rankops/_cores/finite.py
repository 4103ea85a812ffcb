r"""Rows that hold inf or NaN: computed as zeros, returned as NaN, with a zero gradient.

A soft rank, sort, CDF, quantile or top-k mask has no meaning on a row
with a non-finite entry: NaN has no place in an order, and ``+-inf`` makes
every scale of the row infinite (``inf - inf`` in the comparisons).
:func:`finite_rows` gives every core it wraps one rule: such a row enters
the core as zeros (no invalid arithmetic, so no NumPy ``RuntimeWarning``),
its floating outputs are NaN throughout (a Sinkhorn core's error too: the
row reads as not converged and is not warned about), and its cotangent is
dropped, so its gradient is exactly 0 (backends' autodiff sees the
selections; a core's own pullback gets a zero cotangent, to which it is
linear). Other rows are untouched. With a ``mask`` only the valid entries
count: padding may hold anything.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

from .._lib._compat import device as _device

__all__ = ["finite_rows"]


def _per_output(rows: Any, value: Any, ndim: int) -> Any:
    """``rows`` (``(..., 1)``, one per row of an ``ndim``-d input) against an output: one value per row, values along
    it, or a matrix."""
    extra = value.ndim - ndim
    return rows[..., 0] if extra < 0 else rows[(..., *(None,) * extra)]


def _nan_unless(xp: Any, good: Any, out: Any, ndim: int) -> Any:
    return xp.where(_per_output(good, out, ndim), out, math.nan) if xp.isdtype(out.dtype, "real floating") else out


def _finite(xp: Any, a: Any, mask: Any, vectors: bool) -> Any:
    """True per row (``(..., 1)``) where every valid entry of ``a`` (each a vector when ``vectors``) is finite."""
    if not xp.isdtype(a.dtype, "real floating"):  # integers and bool are finite (sort_with's vectors may be either)
        return xp.ones(a.shape[: a.ndim - vectors - 1] + (1,), dtype=xp.bool, device=_device(a))
    size = xp.abs(a)
    if vectors:
        size = xp.max(size, axis=-1)
    if mask is not None:
        size = xp.where(mask, size, 0.0)
    # the largest |a| is below inf on a finite row, and NaN (max propagates it, which the standard requires) or inf
    # otherwise: fewer operations than isfinite and all (torch composes isfinite of four)
    return xp.max(size, axis=-1, keepdims=True) < math.inf


def _zeroed(xp: Any, good: Any, a: Any) -> Any:
    return xp.where(good, a, 0.0) if xp.isdtype(a.dtype, "real floating") else a


def finite_rows(rule: Callable[..., Any] | None = None, /, *, also: tuple[str, ...] = (), vectors: bool = False) -> Any:
    """A core rule whose rows holding a non-finite (valid) entry enter as zeros and leave as NaN with no gradient.

    ``also``: parameters laid out like the rows that the rule applies to as
    well (a second variable of the same entries); ``vectors``: ``x`` holds
    a vector per entry (``(..., n, F)``), the rows are then ``also``'s.
    Bare (``@finite_rows``) or with options (``@finite_rows(also=("y",))``).
    """
    if rule is None:
        return lambda r: finite_rows(r, also=also, vectors=vectors)

    @functools.wraps(rule)
    def run(xp: Any, x: Any, opts: Any, **params: Any) -> Any:
        mask = params.get("mask")
        good = _finite(xp, x, mask, vectors)
        for name in also:
            good = good & _finite(xp, params[name], mask, False)
        entered = {name: _zeroed(xp, good, params[name]) for name in also}
        outs, back = rule(xp, _zeroed(xp, good[..., None] if vectors else good, x), opts, **{**params, **entered})
        ndim = x.ndim - vectors
        kept = _per_output(good, outs[0], ndim)

        def pullback(cts: tuple[Any, ...]) -> Any:
            ct = cts[0]
            return back(cts if ct is None else (xp.where(kept, ct, 0.0), *cts[1:]))

        # every floating output is NaN on the row: a Sinkhorn core's error too, so the row reads as not converged
        return tuple(_nan_unless(xp, good, out, ndim) for out in outs), pullback

    return run
