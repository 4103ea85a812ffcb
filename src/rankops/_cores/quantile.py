r"""Sinkhorn quantiles: three targets, the level read off the middle one (after Cuturi, Teboul & Vert 2019, Eq. 4).

Per row and level q, the n squashed entries (weights 1/n) are sent to
targets (0, 1/2, 1) weighted (c - t/2, t, 1 - c - t/2) for a filler weight
t, shrunk near the ends, with c = (q (n - 1) + 1/2) / n: NumPy's linear
position q (n - 1) of the order statistics (``centered=True``; with filler
1/n the limit epsilon -> 0 is ``numpy.quantile(x, q)``; c = q for weighted
entries), or (q (1 - t), t, (1 - q)(1 - t)) (Eq. 4, ``centered=False``);
the quantile is the middle entry of the soft sort, ``x . P[:, 1] /
sum(P[:, 1])``. Every level is its own transport
problem, all of them in one batched solve (:func:`.transport.plan_vjp`).
"""

from __future__ import annotations

import math
from typing import Any

from .._lib._adapters import core
from .._lib._compat import is_array, device as _device
from .._lib._numerics import unbroadcast
from .entries import Entries
from .finite import finite_rows
from .transport import REPORTED, WEIGHTS, TransportSettings, grads, plan_vjp, weights_cotangent

__all__ = ["quantile_core", "MIN_FILLER"]

MIN_FILLER = 1e-6  # the centred filler's floor, relative to t: levels 0 and 1 still read a (soft) order statistic


def _level_weights(xp: Any, q: Any, t: float, centered: bool) -> tuple[Any, Any]:
    """Target weights ``b`` (..., L, 3) of the levels ``q`` (..., L, 1), and the pullback ``d_b -> d_q`` (..., L).

    ``centered=False``: 001 Eq. 4, ``(q (1 - t), t, (1 - q)(1 - t))``, whose
    middle block of mass covers ``[q - t q, q + t (1 - q)]``, centred at
    ``q + t (1/2 - q)``. ``centered=True``: ``(q - t'/2, t', 1 - q - t'/2)``
    with ``t' = min(t, 2 min(q, 1 - q))``, never below ``MIN_FILLER t`` (the
    block ``[q - t'/2, q + t'/2]``, centred on q, shrinking near the ends; at
    levels 0 and 1 it holds only the soft minimum or maximum).
    """
    if not centered:
        b = xp.concat([q * (1 - t), xp.full_like(q, t), (1 - q) * (1 - t)], axis=-1)
        return b, lambda d_b: (d_b[..., 0] - d_b[..., 2]) * (1 - t)
    near = 2 * xp.minimum(q, 1 - q)
    shrunk = (near < t) & (near > MIN_FILLER * t)
    width = xp.where(shrunk, near, xp.where(near <= MIN_FILLER * t, xp.full_like(q, MIN_FILLER * t), xp.full_like(q, t)))
    zero = xp.zeros_like(q)
    lo, hi = xp.maximum(q - width / 2, zero), xp.maximum(1 - q - width / 2, zero)
    # the middle weight is the width less its clipped parts, not 1 - lo - hi:
    # in float32, 1 - (1 - 5e-9) is 0, and a level-0 quantile would read nothing
    mid = width - xp.maximum(width / 2 - q, zero) - xp.maximum(width / 2 - (1 - q), zero)
    b = xp.concat([lo, mid, hi], axis=-1)

    def pullback(d_b: Any) -> Any:
        d_width = xp.where(shrunk, xp.where(q < 0.5, 2 * xp.ones_like(q), -2 * xp.ones_like(q)), zero)
        d_lo = xp.where(q - width / 2 > 0, 1 - d_width / 2, zero)
        d_hi = xp.where(1 - q - width / 2 > 0, -1 - d_width / 2, zero)
        return (d_b[..., :1] * d_lo + d_b[..., 1:2] * (-d_lo - d_hi) + d_b[..., 2:] * d_hi)[..., 0]

    return b, pullback


def _quantile_shapes(shape: tuple[int, ...], opts: TransportSettings, params: dict[str, Any]) -> dict[str, Any]:
    q = params["q"]
    levels = (q.shape[0],) if is_array(q) else ()
    return {"value": levels, "error": levels}


@core(output_shapes=_quantile_shapes, outputs=REPORTED, batched=WEIGHTS)
@finite_rows
def quantile_core(xp: Any, x: Any, opts: TransportSettings, *, q: Any, weights: Any = None, mask: Any = None) -> Any:
    """Levels ``q``: a Python float (output drops the axis) or a 1-D array (axis -> levels), all in one batched solve.

    ``mask`` (or weights of 0): the quantiles of each row's valid entries alone (NumPy's position q (n_v - 1)).
    """
    entries = Entries(xp, x, weights, mask)
    if not is_array(q):
        (out, err), back = _levels_core(xp, x, opts, xp.asarray([q], dtype=x.dtype, device=_device(x)), entries)

        def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
            grads = back((cts[0][..., None],))
            del grads["q"]  # a Python level is not differentiated
            return grads

        return (out[..., 0], err[..., 0]), pullback
    return _levels_core(xp, x, opts, xp.astype(q, x.dtype), entries)


def _levels_core(xp: Any, x: Any, opts: TransportSettings, levels: Any, entries: Entries) -> Any:
    """Each level's middle sorted value ``x . Q[:, 1] / sum(Q[:, 1])``, ``Q = P diag(1 / b)`` (its columns sum to 1).

    Reading the plan divided by its column weights keeps the plan's
    cotangent at ``x``'s size: the middle weight of level 0 or 1 is as small
    as ``MIN_FILLER`` times the filler, and ``x / b_1`` of a float32 row
    at 1e30 overflows.
    """
    y = xp.asarray([0.0, 0.5, 1.0], dtype=x.dtype, device=_device(x))
    x, weights = entries.zero_masked(xp, x), entries.weights
    # the centred block sits at NumPy's linear position q (n - 1) (0-based), the CDF level (q (n - 1) + 1/2) / n;
    # weighted entries have no such position: there it sits at q. A mask's rows have n_v entries each.
    n = entries.count if entries.user_weights is None else float(x.shape[-1])
    if is_array(n):  # a row without a valid entry (NaN below) is read as one of n_v = 1
        n = xp.maximum(n, xp.ones_like(n))
    centered = opts.centered and entries.user_weights is None
    slope = (n - 1) / n if centered else 1.0
    centre = levels * slope + (0.5 / n if centered else 0.0)  # (L,), or (..., L) with a mask
    b, centre_back = _level_weights(xp, centre[..., None], opts.filler, opts.centered)  # (..., L, 3)
    # an empty side block (a level below the filler's half-width) gets a tiny weight that keeps log finite
    floor = xp.finfo(x.dtype).smallest_normal
    log_b = xp.log(xp.maximum(b, xp.full_like(b, floor)))
    xl = x[..., None, :]
    wl = None if weights is None else weights[..., None, :]
    p, err, plan_back = plan_vjp(xp, xl, y, log_b, opts, exact="columns", weights=wl, per_target=True)  # (..., L, n, 3)
    valid = (levels >= 0) & (levels <= 1)  # levels are data: out of range -> NaN, no check
    # an invalid level's middle weight is negative, floored: its column may hold no mass at all
    mass = xp.where(valid, xp.sum(p[..., 1], axis=-1), xp.ones_like(p[..., 0, 1]))  # (..., L)
    out = xp.matmul(x[..., None, None, :], p)[..., 0, 1] / mass

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct_m = xp.where(valid, cts[0], xp.zeros_like(cts[0])) / mass  # (..., L)
        zero = xp.zeros_like(p[..., :1])
        dp = xp.concat([zero, (xl - out[..., None])[..., None] * ct_m[..., None, None], zero], axis=-1)
        dx, d_log_a, d_log_b, d_eps = plan_back(dp)
        dx = xp.sum(dx, axis=-2) + xp.sum(p[..., 1] * ct_m[..., None], axis=-2)
        d_b = xp.where(b > floor, d_log_b / xp.where(b > floor, b, xp.ones_like(b)), xp.zeros_like(b))
        d_q = unbroadcast(xp, centre_back(d_b) * slope, tuple(levels.shape))
        d_w = None if wl is None else weights_cotangent(xp, wl, x.dtype, d_log_a)[..., 0, :]
        return grads(dx, d_eps, q=xp.where(valid, d_q, xp.zeros_like(d_q)), weights=d_w)

    # an invalid level is a data problem, like a NaN input: NaN value and error, no convergence warning
    nan = xp.full_like(out, math.nan)
    value, err = xp.where(valid, out, nan), xp.where(valid, err, nan)
    if entries.support is None:
        return (value, err), pullback
    # a row without a valid entry is NaN at every level
    some = xp.broadcast_to(xp.any(entries.support, axis=-1, keepdims=True), tuple(value.shape))
    return entries.as_masked_operator(xp, (value, err), pullback, some)
