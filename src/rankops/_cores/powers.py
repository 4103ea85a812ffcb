"""Powers and the cubic's root for the p-norm regularizer's closed forms (:mod:`.pnorm`, :mod:`.magnitude`)."""

from __future__ import annotations

from typing import Any

from .._lib._numerics import safe_divide

__all__ = ["power", "odd_power", "cubic_root", "moment_root"]


def power(xp: Any, a: Any, e: float, *, tangent: bool = True) -> Any:
    """``a ** e`` for ``a >= 0``: by products for the closed forms' exponents (a power costs several products), and
    0 at 0 with a zero tangent, where a fractional power's derivative is infinite (forward mode would read inf * 0).

    ``tangent=False``: the value alone, for a result whose tangent nothing reads (the pooling rounds' block values,
    which only place the blocks), without the guards' extra operations.
    """
    if e in _PRODUCTS:
        return _product(a, int(e))
    # a square root where the exponent is one half: a general power costs more
    rule = xp.sqrt if e == 0.5 else (lambda u: u ** e)
    if not tangent:
        return rule(a)
    positive = a > 0
    return xp.where(positive, rule(xp.where(positive, a, xp.ones_like(a))), xp.zeros_like(a))


def odd_power(xp: Any, a: Any, e: float) -> Any:
    """``sign(a) |a| ** e`` (a ``where``, not ``sign``: torch's array-API ``sign`` indexes by a mask, which
    ``torch.func.vmap`` cannot batch); by products for the closed forms' exponents, which need no branch."""
    if e in _PRODUCTS:
        return _product(a, int(e)) if e % 2 else _product(a, int(e) - 1) * xp.abs(a)
    return xp.where(a < 0, -power(xp, -a, e), power(xp, a, e))


# whole exponents up to 8 (p = 1 + 1/e: 2, 3/2, 4/3, 1.25, ...) by products, which are exact to a few roundings and
# cost less than a general power (a logarithm and an exponential per entry)
_PRODUCTS = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)


def _product(a: Any, k: int) -> Any:
    """``a ** k`` for a whole ``k >= 1``, by repeated squaring."""
    result, square = None, a
    while k:
        if k & 1:
            result = square if result is None else result * square
        k >>= 1
        if k:
            square = square * square
    return result


def cubic_root(xp: Any, p: Any, q: Any, *, tangent: bool = True) -> Any:
    """The real root of ``t^3 + p t + q = 0`` for ``p >= 0`` (one real root).

    Cardano's ``t = B - A`` with ``A^3 = |q|/2 + sqrt(D)``, ``AB = p/3``,
    written ``-q / (A^2 + AB + B^2)`` (no difference of close numbers), on
    the equation rescaled by ``s = max(sqrt(p), cbrt|q|)`` so that no power
    overflows, and so that the cube root below is of a number near 1 (the
    power ``1/3``, itself rounded, errs in proportion to ``|log a|``).
    ``tangent``: as for :func:`power`.
    """
    s = xp.maximum(power(xp, p, 0.5, tangent=tangent), power(xp, xp.abs(q), 1.0 / 3.0, tangent=tangent))
    some = s > 0
    s = xp.where(some, s, xp.ones_like(s))
    ps, qs = p / (s * s), q / (s * s * s)
    a = power(xp, xp.abs(qs) / 2.0 + power(xp, qs * qs / 4.0 + ps * ps * ps / 27.0, 0.5, tangent=tangent), 1.0 / 3.0, tangent=tangent)
    if tangent:
        b = safe_divide(xp, ps / 3.0, a)
    else:  # a > 0 wherever s > 0 (|qs| or ps is positive there): one guard for both divisions
        a = xp.where(some, a, xp.ones_like(a))
        b = ps / 3.0 / a
        return xp.where(some, -qs / (a * a + ps / 3.0 + b * b) * s, xp.zeros_like(s))
    return xp.where(some, -safe_divide(xp, qs, a * a + ps / 3.0 + b * b) * s, xp.zeros_like(s))


def moment_root(xp: Any, q: float, total_w: Any, m: Any, m2: Any, m3: Any = None, *, tangent: bool = True) -> Any:
    """The root ``t`` of ``sum_B (d_i + t)^(q-1) = W`` at q = 3 or 4, for a block every term of which is
    nonnegative there, from its size ``m`` and centred moments ``m2 = sum d^2``, ``m3 = sum d^3`` (``sum d = 0``):
    ``t = sqrt((W - m2) / m)`` at q = 3, the real root of ``t^3 + 3 (m2 / m) t + (m3 - W) / m = 0`` at q = 4
    (``m3`` only there). ``tangent``: as for :func:`power`."""
    if q == 3.0:
        return power(xp, xp.clip((total_w - m2) / m, 0.0, None), 0.5, tangent=tangent)
    return cubic_root(xp, 3.0 * m2 / m, (m3 - total_w) / m, tangent=tangent)
