"""Numerics the array API standard lacks, written with ``xp`` calls only.

Frameworks with fused kernels override these through their adapter
(:mod:`._adapters`); array-api-strict, NumPy, CuPy and Dask use them as is.
"""

from __future__ import annotations

import math
from typing import Any

from ._compat import is_array as _is_array


def finite_max(xp: Any, z: Any, axis: int) -> Any:
    # Shifting by a non-finite max would turn -inf - -inf or inf - inf into
    # NaN; shifting by 0 instead keeps all-(-inf) rows at -inf and lets a
    # +inf entry dominate, as the unshifted formula would.
    m = xp.max(z, axis=axis, keepdims=True)
    return xp.where(xp.isfinite(m), m, xp.zeros_like(m))


def exact_centre(xp: Any, low: Any, high: Any) -> Any:
    """The midrange ``c = low / 2 + high / 2`` of rows whose entries lie in ``[low, high]``, where subtracting it is
    exact for every entry, and 0 elsewhere.

    For a computation invariant under a shift of the row: ``x - c`` keeps the
    entries' differences exactly where the row lies far from 0, where ``x /
    scale`` rounds each by a unit in the last place of ``x``, much against the
    row's spread. With ``|c| >= high - low`` every entry lies within a factor 2
    of ``c`` (Sterbenz: ``x - c`` exact); a row nearer 0 (or with an outlier)
    keeps its own entries, whose smallest differences ``x - c`` would round
    away. ``low``, ``high``: finite (the caller's rows), keepdims.
    """
    centre = 0.5 * low + 0.5 * high
    return xp.where(_kept(xp, centre, low, high), centre, 0.0)


def midrange_kept(xp: Any, low: Any, high: Any) -> Any:
    """Where :func:`exact_centre` is the midrange, not 0."""
    return _kept(xp, 0.5 * low + 0.5 * high, low, high)


def _kept(xp: Any, centre: Any, low: Any, high: Any) -> Any:
    return xp.abs(centre) >= high - low


def logsumexp(xp: Any, z: Any, axis: int = -1, total: Any = None) -> Any:
    """``log(sum(exp(z), axis))`` without overflow (max-shifted); ``total``: the sum along ``axis`` (keepdims) to use
    (None: ``xp.sum``)."""
    m = finite_max(xp, z, axis)
    e = xp.exp(z - m)
    s = xp.sum(e, axis=axis, keepdims=True) if total is None else total(e)
    return xp.squeeze(xp.log(s) + m, axis=axis)


def logaddexp(xp: Any, a: Any, b: Any) -> Any:
    """``log(exp(a) + exp(b))`` that keeps NaN rows quiet.

    NumPy's ``logaddexp`` warns on NaN input, and the textbook
    ``max + log1p(exp(-|a - b|))`` on ``-inf - -inf``: equal operands
    (both ``-inf`` included) are compared as 0 apart instead.
    """
    same = a == b
    zero = xp.zeros_like(a)
    gap = xp.abs(xp.where(same, zero, a) - xp.where(same, zero, b))
    return xp.maximum(a, b) + xp.log1p(xp.exp(-gap))


def softmax(xp: Any, z: Any, axis: int = -1) -> Any:
    """``exp(z) / sum(exp(z), axis)`` without overflow (max-shifted)."""
    e = xp.exp(z - finite_max(xp, z, axis))
    return e / xp.sum(e, axis=axis, keepdims=True)


def _finite_power(xp: Any, d: Any, power: float) -> Any:
    """``d ** power`` for ``d >= 0`` and a number ``power > 0``: inf where it would overflow, without computing the
    overflow (NumPy warns of one; a distance that large weighs nothing in a softmax either way)."""
    if power <= 1.0:
        return d**power
    ceiling = (0.5 * float(xp.finfo(d.dtype).max)) ** (1.0 / power)
    return xp.where(d > ceiling, xp.full_like(d, math.inf), xp.minimum(d, xp.full_like(d, ceiling)) ** power)


def abs_power(xp: Any, d: Any, power: Any) -> Any:
    """``d ** power`` for ``d >= 0``, whose derivative (under autodiff too) is 0 at ``d = 0``.

    For ``power < 1`` the derivative ``power d ** (power - 1)`` is infinite
    at 0, and an autodiff ``0 * inf`` would make the whole row's gradient NaN.
    A zero here is an item compared with itself (identically 0: derivative
    0) or an exact tie (a cusp, where we take the subgradient 0, as for
    ``|x|`` at 0). The inner ``where`` keeps the infinite branch out of the
    graph altogether. ``power`` may be a 0-d array (a learnable exponent).
    """
    if not _is_array(power) and power == 1.0:
        return d
    if not _is_array(power) and power > 1.0:
        return _finite_power(xp, d, power)
    zero = d == 0
    return xp.where(zero, xp.zeros_like(d), xp.where(zero, xp.ones_like(d), d) ** power)


def abs_power_slope(xp: Any, d: Any, power: Any) -> Any:
    """Derivative of :func:`abs_power` in ``d``: ``power d ** (power - 1)``, 0 at ``d = 0``."""
    if not _is_array(power) and power == 1.0:
        return xp.ones_like(d)
    if not _is_array(power) and power > 1.0:
        return power * _finite_power(xp, d, power - 1.0)
    zero = d == 0
    return xp.where(zero, xp.zeros_like(d), power * xp.where(zero, xp.ones_like(d), d) ** (power - 1.0))


def safe_divide(xp: Any, num: Any, den: Any, fallback: Any = None) -> Any:
    """``num / den`` where ``den > 0``, else ``fallback`` (None: 0, as an empty row, column or marginal moves
    nothing), with no division by a zero ``den`` anywhere."""
    some = den > 0
    q = num / xp.where(some, den, xp.ones_like(den))
    return xp.where(some, q, xp.zeros_like(q) if fallback is None else fallback)


def safe_log_divide(xp: Any, num: Any, den: Any, fallback: Any) -> Any:
    """``num - den``, the log of a ratio from the logs of its terms, where ``den > -inf``, else ``fallback``: the
    log-domain :func:`safe_divide` (an empty sum's log is ``-inf``, and ``-inf - -inf`` is NaN)."""
    some = den > -math.inf
    return xp.where(some, num - xp.where(some, den, xp.zeros_like(den)), fallback)


def centred_within(xp: Any, a: Any, members: Any, m: Any) -> tuple[Any, Any]:
    """``(mean, d)`` along the last axis: the mean of ``a``'s members (``members`` True; ``m`` their count, at least
    1) and ``d = a - mean`` on them, 0 elsewhere, in two passes. The first pass's mean rounds at its own magnitude, and
    ``d`` from it sums to ``m`` times that rounding, not 0: a root in closed form, which takes the centred values to
    sum to 0, carries the sum into every entry (float32 entries near 1000 lost a thousandth). The second pass takes
    their mean out, at the magnitude of the members' spread."""
    first = xp.sum(xp.where(members, a, 0.0), axis=-1, keepdims=True) / m
    d = xp.where(members, a - first, 0.0)
    residual = xp.sum(d, axis=-1, keepdims=True) / m
    return first + residual, xp.where(members, d - residual, 0.0)


def checked_weights(xp: Any, w: Any) -> tuple[Any, Any]:
    """``(w, valid)``: weights along the last axis with the rows outside their domain (a negative or non-finite
    entry, or all zero) replaced by ones, and the flag (``(..., 1)``) of the rows that were inside.

    Such a row's result is NaN, not a number that looks valid; no check reads values (it would sync the device and
    break ``jax.jit``), and the replaced row is computed quietly, then dropped.
    """
    valid = xp.all((w >= 0) & xp.isfinite(w), axis=-1, keepdims=True) & xp.any(w > 0, axis=-1, keepdims=True)
    return xp.where(valid, w, 1.0), valid


def unbroadcast(xp: Any, g: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``g`` over the axes that broadcasting added to an array of ``shape``."""
    lead = g.ndim - len(shape)
    if lead:
        g = xp.sum(g, axis=tuple(range(lead)))
    axes = tuple(i for i, k in enumerate(shape) if k == 1 and g.shape[i] != 1)
    return xp.sum(g, axis=axes, keepdims=True) if axes else g


def matvec(xp: Any, a: Any, v: Any) -> Any:
    """Batched matrix-vector product ``a @ v`` over the last axis of ``v`` (``xp.matmul`` needs a column)."""
    return xp.matmul(a, v[..., None])[..., 0]


def vecmat(xp: Any, v: Any, a: Any) -> Any:
    """Batched ``v @ a`` over the second-to-last axis of ``a`` (a row vector: ``a^T v`` without a transpose)."""
    return xp.matmul(v[..., None, :], a)[..., 0, :]


# erfc(t), t >= 0: a series below _ERF_CUT, a continued fraction from there on; with these
# term counts the absolute error is below 2e-15 on [0, inf) (tests/test_numerics.py, against SciPy).
# The series gives erfc as 1 - erf, whose rounding, relative to erfc(2.5) = 4e-4, is 2.5e-13 in float64
# but 1.5e-4 in float32: there the fraction starts at 1 (erfc(1) = 0.16), where 50 terms give 1e-8.
_ERF_CUT, _ERF_CUT_SINGLE, _ERF_SERIES, _ERF_FRACTION = 2.5, 1.0, 40, 50


def log_sigmoid(xp: Any, z: Any) -> Any:
    """``log(1 / (1 + exp(-z)))`` without overflow, smooth at 0 on every backend.

    ``-log1p(exp(-z))`` for z >= 0, ``z - log1p(exp(z))`` below, each branch
    fed only its own half (neither overflows, in value or gradient), with no
    ``min`` or ``abs``, whose subgradients at 0 backends choose differently.
    """
    zero = xp.zeros_like(z)
    up = z >= 0
    above, below = xp.where(up, z, zero), xp.where(up, zero, z)
    return xp.where(up, -xp.log1p(xp.exp(-above)), below - xp.log1p(xp.exp(below)))


def sigmoid(xp: Any, z: Any) -> Any:
    """``1 / (1 + exp(-z))`` without overflow (each branch fed only its own half, as :func:`log_sigmoid`)."""
    zero = xp.zeros_like(z)
    up = z >= 0
    e_above, e_below = xp.exp(-xp.where(up, z, zero)), xp.exp(xp.where(up, zero, z))
    return xp.where(up, 1 / (1 + e_above), e_below / (1 + e_below))


def ndtr(xp: Any, u: Any) -> Any:
    """The standard normal CDF ``Phi(u) = erfc(-u / sqrt 2) / 2``: the standard has no ``erf``.

    With ``t = |u| / sqrt 2``: below 2.5, ``erf t = 2/sqrt(pi) e^(-t^2) sum_k
    2^k t^(2k+1) / (2k+1)!!`` (positive terms); from 2.5 on, ``erfc t =
    e^(-t^2) / sqrt(pi) / (t + (1/2) / (t + 1 / (t + (3/2) / (t + ...))))``
    (Abramowitz & Stegun 7.1.6 and 7.1.14); below float64, from 1 on
    (``_ERF_CUT_SINGLE``), so that the lower tail keeps its relative
    precision. Torch and JAX use their own kernels (the adapters' ``ndtr``).
    """
    cut = _ERF_CUT if u.dtype == xp.float64 else _ERF_CUT_SINGLE
    t = xp.abs(u) * (1.0 / math.sqrt(2.0))
    near = xp.where(t < cut, t, xp.zeros_like(t))
    term, total, twice = near, near, 2.0 * near * near
    for k in range(1, _ERF_SERIES + 1):
        term = term * twice / (2 * k + 1)
        total = total + term
    erfc_near = 1.0 - (2.0 / math.sqrt(math.pi)) * xp.exp(-near * near) * total
    far = xp.where(t < cut, xp.full_like(t, cut), t)
    fraction = far
    for k in range(_ERF_FRACTION, 0, -1):
        fraction = far + (k / 2.0) / fraction
    erfc_far = xp.exp(-far * far) / (math.sqrt(math.pi) * fraction)
    half_tail = 0.5 * xp.where(t < cut, erfc_near, erfc_far)
    return xp.where(u < 0, half_tail, 1.0 - half_tail)
