"""Numerics the array API standard lacks, written with ``xp`` calls only.

Frameworks with fused kernels override these through their adapter
(:mod:`._adapters`); array-api-strict, NumPy, CuPy and Dask use them as is.
"""

from __future__ import annotations

from typing import Any

from ._compat import is_array as _is_array


def finite_max(xp: Any, z: Any, axis: int) -> Any:
    # Shifting by a non-finite max would turn -inf - -inf or inf - inf into
    # NaN; shifting by 0 instead keeps all-(-inf) rows at -inf and lets a
    # +inf entry dominate, as the unshifted formula would.
    m = xp.max(z, axis=axis, keepdims=True)
    return xp.where(xp.isfinite(m), m, xp.zeros_like(m))


def logsumexp(xp: Any, z: Any, axis: int = -1) -> Any:
    """``log(sum(exp(z), axis))`` without overflow (max-shifted)."""
    m = finite_max(xp, z, axis)
    s = xp.sum(xp.exp(z - m), axis=axis, keepdims=True)
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
        return d**power
    zero = d == 0
    return xp.where(zero, xp.zeros_like(d), xp.where(zero, xp.ones_like(d), d) ** power)


def abs_power_slope(xp: Any, d: Any, power: Any) -> Any:
    """Derivative of :func:`abs_power` in ``d``: ``power d ** (power - 1)``, 0 at ``d = 0``."""
    if not _is_array(power) and power == 1.0:
        return xp.ones_like(d)
    if not _is_array(power) and power > 1.0:
        return power * d ** (power - 1.0)
    zero = d == 0
    return xp.where(zero, xp.zeros_like(d), power * xp.where(zero, xp.ones_like(d), d) ** (power - 1.0))


def safe_divide(xp: Any, num: Any, den: Any) -> Any:
    """``num / den`` where ``den > 0``, else 0 (an empty row, column or marginal moves nothing)."""
    q = num / xp.where(den > 0, den, xp.ones_like(den))
    return xp.where(den > 0, q, xp.zeros_like(q))


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
