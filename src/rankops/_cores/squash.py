r"""The squash ``g``: each row mapped into [0, 1] before the transport cost (Cuturi et al. 2019, Sec. 5).

``"sigmoid"`` of the standardized row (the g~ of Cuturi et al. 2019),
``"arctan"`` likewise, ``"minmax"`` (affine onto [0, 1]) or ``None``
(inputs used as they are). Standardizing first divides by the row's largest
magnitude, so rows at 1e-30 or 1e30 give the same result as rows at 1 and
nothing overflows in float32. Each squash comes with its pullback, written
against the array API (``rankops.vjp`` uses it where the backend has no
autodiff). With a ``support`` (a mask, or weights of 0 elsewhere) the
statistics run over the supported entries only.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from .._lib._adapters import get_adapter
from .._lib._compat import device as _device
from .._lib._numerics import exact_centre, midrange_kept, safe_divide

__all__ = ["SQUASHES", "squash_vjp", "squash_parts"]

SQUASHES = ("sigmoid", "arctan", "minmax", None)

Pullback = Callable[..., Any]


def squash_vjp(xp: Any, x: Any, method: str | None) -> tuple[Any, Pullback]:
    """The squashed row and its pullback ``d(squashed) -> dx``."""
    y, unit_back, scale = squash_parts(xp, x, None, method)
    return y, lambda dy: unit_back(dy) / scale


def squash_parts(xp: Any, x: Any, support: Any, method: str | None) -> tuple[Any, Pullback, Any]:
    """``(g(x), unit pullback, scale)``, the pullback being ``dx = unit_pullback(dy) / scale``.

    ``scale`` (..., 1) is the row's largest magnitude (1 without a squash).
    The division comes last and is the caller's to place: a cotangent
    ``dy`` beyond the dtype's range can still give a finite ``dx``, and
    the transport's backward applies ``scale`` together with its own
    normalization (:mod:`rankops._solvers.line`). ``support`` (bool, or
    None: all): the entries the statistics see (those with mass); the
    others map to 1/2 and get no gradient.
    """
    if method is None:
        return x, lambda dy: dy, 1.0
    if support is not None:
        return _supported_squash(xp, x, support, method)
    # Dividing by the largest magnitude first keeps the squares below in range
    # for rows at 1e30 (and above subnormals for rows at 1e-30). The result does
    # not depend on this scale, so its gradient is exactly 0: it is stopped for
    # autodiff too, whose scale**-2 terms would otherwise underflow to inf - inf
    # on subnormal rows.
    adapter = get_adapter(xp)
    # every squash is invariant under a shift of the row (float32 ranks of 10^4 + N(0, 1) were 0.026 off)
    x = x - row_centre(xp, x)
    scale = xp.max(xp.abs(x), axis=-1, keepdims=True)
    # where arithmetic flushes subnormals, a subnormal row is a row of zeros: a constant row
    least = xp.finfo(x.dtype).smallest_normal if adapter.flushes_subnormals else 0.0
    scale = adapter.stop_gradient(xp, xp.where((scale > least) & xp.isfinite(scale), scale, xp.ones_like(scale)))
    z = x / scale
    if method == "minmax":
        y, minmax_back = _minmax_vjp(xp, z)
        return y, minmax_back, scale
    z = z - xp.mean(z, axis=-1, keepdims=True)  # exactly 0 on a constant row (all entries are +-1 now)
    var = xp.mean(z * z, axis=-1, keepdims=True)
    spread = var > 0
    # sqrt only of positive values: sqrt'(0) = inf would turn a constant row's gradient into NaN
    sigma = xp.sqrt(xp.where(spread, var, xp.ones_like(var)))
    z = z / sigma
    y = 1.0 / (1.0 + xp.exp(-z)) if method == "sigmoid" else 0.5 + xp.atan(z) / math.pi

    def pullback(dy: Any) -> Any:
        dz = dy * y * (1.0 - y) if method == "sigmoid" else dy / (math.pi * (1.0 + z * z))
        # standardization (a layer norm): remove the components along 1 and along z
        dz = dz - xp.where(spread, z * xp.mean(dz * z, axis=-1, keepdims=True), xp.zeros_like(dz))
        dz = dz / sigma
        return dz - xp.mean(dz, axis=-1, keepdims=True)

    return y, pullback, scale


def _range(xp: Any, x: Any, support: Any) -> tuple[Any, Any, Any, Any]:
    """``(x for the max, x for the min, high, low)`` of each row over ``support`` (keepdims; a row without support:
    its range 0 to 0)."""
    high_at = x if support is None else xp.where(support, x, -math.inf)
    low_at = x if support is None else xp.where(support, x, math.inf)
    high, low = xp.max(high_at, axis=-1, keepdims=True), xp.min(low_at, axis=-1, keepdims=True)
    if support is not None:
        high, low = xp.where(xp.isfinite(high), high, 0.0), xp.where(xp.isfinite(low), low, 0.0)
    return high_at, low_at, high, low


def row_centre(xp: Any, x: Any, support: Any = None) -> Any:
    """Each row's :func:`.._lib._numerics.exact_centre` over ``support`` (keepdims; 0 on a row without support), with
    no gradient: for what is invariant under a shift of the row, or moves with it."""
    _, _, high, low = _range(xp, x, support)
    return get_adapter(xp).stop_gradient(xp, exact_centre(xp, low, high))


def row_centre_pullback(xp: Any, x: Any, support: Any, ct: Any) -> Any:
    """``x``'s cotangent from ``ct``, that of :func:`row_centre` (keepdims), for a computation that differentiates
    through it: ``ct / 2`` on the row's smallest and largest entries over ``support`` (the first of equal ones) where
    the centre is the midrange, 0 where it is 0."""
    high_at, low_at, high, low = _range(xp, x, support)
    used = midrange_kept(xp, low, high)
    place = xp.arange(x.shape[-1], device=_device(x))
    ends = xp.astype(place == xp.argmax(high_at, axis=-1, keepdims=True), x.dtype) + xp.astype(
        place == xp.argmin(low_at, axis=-1, keepdims=True), x.dtype)
    return xp.where(used, 0.5 * ct, 0.0) * ends


def _supported_squash(xp: Any, x: Any, support: Any, method: str) -> tuple[Any, Pullback, Any]:
    """:func:`squash_parts` with the row's statistics over ``support`` only (a mask, or weights of 0 elsewhere)."""
    adapter = get_adapter(xp)
    support = xp.broadcast_to(support, x.shape)
    x = xp.where(support, x - row_centre(xp, x, support), 0.0)  # padding (NaN, inf) reaches no statistic
    scale = xp.max(xp.abs(x), axis=-1, keepdims=True)
    least = xp.finfo(x.dtype).smallest_normal if adapter.flushes_subnormals else 0.0
    scale = adapter.stop_gradient(xp, xp.where((scale > least) & xp.isfinite(scale), scale, xp.ones_like(scale)))
    z = x / scale
    count = xp.sum(xp.astype(support, x.dtype), axis=-1, keepdims=True)
    inv_count = safe_divide(xp, xp.ones_like(count), count)
    half = xp.full_like(z, 0.5)
    if method == "minmax":
        lo = xp.min(xp.where(support, z, math.inf), axis=-1, keepdims=True)
        hi = xp.max(xp.where(support, z, -math.inf), axis=-1, keepdims=True)
        span = hi - lo
        spread = span > 0  # False on a constant row and on a row without support
        safe = xp.where(spread, span, xp.ones_like(span))
        y = xp.where(spread & support, (z - xp.where(spread, lo, xp.zeros_like(lo))) / safe, half)

        def minmax_back(dy: Any) -> Any:
            dy = xp.where(spread & support, dy, xp.zeros_like(dy)) / safe
            d_lo = -xp.sum(dy * (1.0 - y), axis=-1, keepdims=True)
            d_hi = -xp.sum(dy * y, axis=-1, keepdims=True)
            at_lo = xp.astype((z == lo) & support, x.dtype)
            at_hi = xp.astype((z == hi) & support, x.dtype)
            return (dy + d_lo * safe_divide(xp, at_lo, xp.sum(at_lo, axis=-1, keepdims=True))
                    + d_hi * safe_divide(xp, at_hi, xp.sum(at_hi, axis=-1, keepdims=True)))

        return y, minmax_back, scale

    def mean(v: Any) -> Any:
        return xp.sum(xp.where(support, v, xp.zeros_like(v)), axis=-1, keepdims=True) * inv_count

    z = xp.where(support, z - mean(z), xp.zeros_like(z))
    var = mean(z * z)
    spread = var > 0
    sigma = xp.sqrt(xp.where(spread, var, xp.ones_like(var)))
    z = z / sigma
    y = 1.0 / (1.0 + xp.exp(-z)) if method == "sigmoid" else 0.5 + xp.atan(z) / math.pi  # 1/2 where z = 0: off the support

    def pullback(dy: Any) -> Any:
        dy = xp.where(support, dy, xp.zeros_like(dy))
        dz = dy * y * (1.0 - y) if method == "sigmoid" else dy / (math.pi * (1.0 + z * z))
        dz = dz - xp.where(spread, z * mean(dz * z), xp.zeros_like(dz))
        dz = dz / sigma
        return xp.where(support, dz - mean(dz), xp.zeros_like(dz))

    return y, pullback, scale


def _minmax_vjp(xp: Any, x: Any) -> tuple[Any, Pullback]:
    lo = xp.min(x, axis=-1, keepdims=True)
    hi = xp.max(x, axis=-1, keepdims=True)
    span = hi - lo
    spread = span > 0
    safe = xp.where(spread, span, xp.ones_like(span))
    y = xp.where(spread, (x - lo) / safe, xp.full_like(x, 0.5))

    def pullback(dy: Any) -> Any:
        dy = xp.where(spread, dy, xp.zeros_like(dy)) / safe
        d_lo = -xp.sum(dy * (1.0 - y), axis=-1, keepdims=True)  # lo moves x - lo and the span
        d_hi = -xp.sum(dy * y, axis=-1, keepdims=True)
        # min / max share their gradient evenly among tied extremes, as torch and JAX do
        at_lo = xp.astype(x == lo, x.dtype)
        at_hi = xp.astype(x == hi, x.dtype)
        return dy + d_lo * at_lo / xp.sum(at_lo, axis=-1, keepdims=True) + d_hi * at_hi / xp.sum(at_hi, axis=-1, keepdims=True)

    return y, pullback
