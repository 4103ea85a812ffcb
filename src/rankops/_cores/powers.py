"""Powers and the cubic's root for the p-norm regularizer's closed forms (:mod:`.pnorm`, :mod:`.magnitude`)."""

from __future__ import annotations

import math
from typing import Any

from .._lib._adapters import get_adapter
from .._lib._numerics import safe_divide

__all__ = ["newton_steps", "falling_newton", "falling_start", "falling_root", "power", "odd_power", "phi_and_slope", "power_sum", "cubic_root", "moment_root", "stepped_signed_square_root"]


def newton_steps(q: float) -> int:
    """Newton steps for a q without a closed form: the iterates fall monotonically from the upper bound, slowly
    while far from the root (by about a factor ``1 - 1/(q-1)`` per step, for a large q), then quadratically. Checked
    against the sequential PAV on rows spread over 10^-3..10^3: p = 1.25 settles within 10 steps, 1.05 within 15,
    1.02 within 40, 1.01 within 60 (the count grows as 1 / (p - 1))."""
    return 16 + math.ceil(q / 2)


def falling_newton(xp: Any, adapter: Any, step: Any, start: Any, q: float, like: tuple[Any, ...],
                   spread: Any = None) -> Any:
    """Newton's method on a convex increasing equation from an upper bound ``start`` of its root (``step(t)``: the
    next iterate), whose iterates therefore fall monotonically: they stop once none falls by more than a few units in
    the last place of ``start`` (8 eps |start|; of ``|start| + spread`` where the equation's terms cancel to the
    precision of a ``spread`` of its data), checked every two steps, within :func:`newton_steps` (q) steps
    (``adapter.settle``; ``like``: the arrays the iterates vary with, for ``shard_map``)."""
    ulps = 8.0 * xp.finfo(start.dtype).eps * (xp.abs(start) if spread is None else xp.abs(start) + spread)

    def moved(old: tuple[Any], new: tuple[Any]) -> Any:
        return xp.any(old[0] - new[0] > ulps)

    return adapter.settle(xp, lambda state: (step(state[0]),), (start,), moved, newton_steps(q), 2, like=like)[0]


def falling_start(xp: Any, mean_w: Any, mean_square: Any, k: float, *, tangent: bool = True) -> Any:
    """An upper bound of the root t of ``mean_B (d_i + t)^k = mean_w`` (``k >= 2``, ``mean_B d = 0``, every term
    nonnegative at the root) from the block's ``mean_square = mean_B d^2``: by the power means, ``mean (d + t)^k >=
    (mean (d + t)^2)^(k/2) = (mean_square + t^2)^(k/2)``, so ``t^2 <= mean_w^(2/k) - mean_square``. Jensen's bound
    ``mean_w^(1/k)`` (``mean_square = 0``) stands far above the root of a block whose data spread, where Newton's
    steps from above fall slowly. ``tangent``: as for :func:`power`."""
    return power(xp, xp.clip(power(xp, xp.clip(mean_w, 0.0, None), 2.0 / k, tangent=tangent) - mean_square, 0.0, None),
                 0.5, tangent=tangent)


def falling_root(xp: Any, adapter: Any, free: Any, d: Any, c: Any, e: Any, start: Any, q: float) -> Any:
    """The root t of ``sum_free (d_i + t)^(q-1) = c - e t`` over each row (``e >= 0``) by Newton's method from an upper
    bound ``start``: the left side minus the right is convex and increasing, so the iterates fall monotonically
    (:func:`falling_newton`)."""

    def newton(t: Any) -> Any:
        a = xp.where(free, xp.clip(d + t, 0.0, None), 0.0)
        r = power(xp, a, q - 2.0)  # a^(q-1) = a a^(q-2): one general power a step
        h = xp.sum(a * r, axis=-1, keepdims=True) - (c - e * t)
        slope = (q - 1.0) * xp.sum(r, axis=-1, keepdims=True) + e
        return t - safe_divide(xp, h, slope)

    return falling_newton(xp, adapter, newton, start, q, like=(d,))


def power(xp: Any, a: Any, e: float, *, tangent: bool = True) -> Any:
    """``a ** e`` for ``a >= 0``: by products for the closed forms' exponents (a power costs several products), and
    0 at 0 with a zero tangent, where a fractional power's derivative is infinite (forward mode would read inf * 0).

    ``tangent=False``: the value alone, for a result whose tangent nothing reads (the pooling rounds' block values,
    which only place the blocks), without the guards' extra operations.
    """
    if e in _PRODUCTS:
        return _product(a, int(e))
    # a square root where the exponent is one half, the adapter's cube root where it is a third (p = 4/3's one-entry
    # blocks, on JAX a logarithm and a Newton step): a general power costs more
    if e == 0.5:
        rule = xp.sqrt
    elif e == 1.0 / 3.0:
        rule = lambda u: get_adapter(xp).cube_root(xp, u)  # noqa: E731
    else:
        rule = lambda u: u ** e  # noqa: E731
    if not tangent:
        return rule(a)
    positive = a > 0
    return xp.where(positive, rule(xp.where(positive, a, xp.ones_like(a))), xp.zeros_like(a))


def odd_power(xp: Any, a: Any, e: float) -> Any:
    """``sign(a) |a| ** e`` (a ``where``, not ``sign``: torch's array-API ``sign`` indexes by a mask, which
    ``torch.func.vmap`` cannot batch); by products for the closed forms' exponents, which need no branch."""
    if e in _PRODUCTS:
        return _product(a, int(e)) if e % 2 else _product(a, int(e) - 1) * xp.abs(a)
    # one power of |a|: a ``where`` between two powers would evaluate both at every entry
    magnitude = power(xp, xp.abs(a), e)
    return xp.where(a < 0, -magnitude, magnitude)


def phi_and_slope(xp: Any, a: Any, q: float, *, signed: bool = True, tangent: bool = True) -> tuple[Any, Any]:
    """``(phi(a), |a|^(q-2))`` for ``phi(a) = sign(a) |a|^(q-1)`` (q >= 2), whose derivative is ``(q - 1) |a|^(q-2)``: at
    a q - 2 that is no whole exponent from one general power, ``phi(a) = a |a|^(q-2)`` (a power costs a logarithm and
    an exponential, the product one rounding); at a whole one by products, as :func:`odd_power` (``signed``, else
    :func:`power` of an ``a >= 0``). ``tangent``: as for :func:`power`."""
    if q == 2.0:
        return a, xp.ones_like(a)
    slope = power(xp, xp.abs(a) if signed else a, q - 2.0, tangent=tangent)
    if q - 2.0 not in _PRODUCTS:
        return a * slope, slope
    return (odd_power(xp, a, q - 1.0) if signed else power(xp, a, q - 1.0, tangent=tangent)), slope


def power_sum(xp: Any, a: Any, e: float) -> Any:
    """``sum a^e`` over the last axis (kept) for ``a >= 0``; at a whole ``e`` from 2 where the backend sums products
    faster as a dot (``adapter.sums_products_by_dot``: JAX, whose CPU reduction of a fused ``a (a a)`` over one long
    row is one chain of additions, its dot vectorized), the dot of ``a^(e-1)`` with ``a``. (A general power costs more
    than the chain: summed where it is computed.)"""
    if e in _PRODUCTS[1:] and get_adapter(xp).sums_products_by_dot:
        return xp.vecdot(power(xp, a, e - 1.0), a, axis=-1)[..., None]
    return xp.sum(power(xp, a, e), axis=-1, keepdims=True)


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


def cubic_root(xp: Any, p: Any, q: Any) -> Any:
    """The real root of ``t^3 + p t + q = 0`` for ``p >= 0`` (one real root).

    Cardano's ``t = B - A`` with ``A^3 = |q|/2 + sqrt(D)``, ``AB = p/3``,
    written ``-q / (A^2 + AB + B^2)`` (no difference of close numbers), on
    the equation rescaled by ``s = max(sqrt(p), cbrt|q|)`` so that no power
    overflows, and so that the cube root below is of a number near 1 (the
    power ``1/3``, itself rounded, errs in proportion to ``|log a|``).

    The root is homogeneous, ``t(p, q) = s t(p / s^2, q / s^3)`` for every
    ``s > 0``, so ``s`` carries no derivative: its powers need no guard
    where ``p`` or ``q`` is 0 (an infinite slope there), and where ``s > 0``
    one of ``p / s^2``, ``|q| / s^3`` is 1, so every later power is of a
    positive number; where ``s = 0`` (the root is 0, and q too) ``p / s^2`` is
    set to 1 before any power. ``torch.compile`` inlines every read of a
    value into each of its uses, so the formula reads each value as few
    times as it can (a guard reads its argument twice, ``x * x`` twice):
    guards around each power had inductor walk thousands of copies of it.
    """
    # the scale by the adapter's cube root of |q| (a power; on JAX a logarithm and a Newton step): any scale near it
    # serves, as the root is the scale times the cube root of a number near 1, which takes the scale's error out
    adapter = get_adapter(xp)
    s = adapter.stop_gradient(xp, xp.maximum(xp.sqrt(p), adapter.cube_root(xp, xp.abs(q))))
    some = s > 0
    s = xp.where(some, s, xp.ones_like(s))
    s2 = xp.square(s)  # one read where s * s takes two
    ps = xp.where(some, p / s2, xp.ones_like(s))
    qs = q / (s2 * s)
    a = _cube_root(xp, xp.abs(qs) / 2.0 + xp.sqrt(xp.square(qs) / 4.0 + xp.square(ps) * ps / 27.0))
    b = ps / 3.0 / a
    return xp.where(some, -qs / (xp.square(a) + ps / 3.0 + xp.square(b)) * s, xp.zeros_like(s))


def _cube_root(xp: Any, a: Any) -> Any:
    """``a^(1/3)`` for ``a > 0`` as ``exp(log(a) / 3)``: for the numbers near 1 that :func:`cubic_root` takes it to
    (from 3^(-3/2) to 1.04: one of ``|q| / s^3``, ``p / s^2`` is 1, the other at most 1), as exact as the power
    ``1/3``, and cheaper on XLA's CPU than its power, which handles negative bases and every special case (as cheap
    elsewhere)."""
    return xp.exp(xp.log(a) / 3.0)


def moment_root(xp: Any, q: float, total_w: Any, m: Any, m2: Any, m3: Any = None, *, tangent: bool = True) -> Any:
    """The root ``t`` of ``sum_B (d_i + t)^(q-1) = W`` at q = 3 or 4, for a block every term of which is
    nonnegative there, from its size ``m`` and centred moments ``m2 = sum d^2``, ``m3 = sum d^3`` (``sum d = 0``):
    ``t = sqrt((W - m2) / m)`` at q = 3, the real root of ``t^3 + 3 (m2 / m) t + (m3 - W) / m = 0`` at q = 4
    (``m3`` only there). ``tangent``: as for :func:`power` (q = 3; the cubic's root needs no guard)."""
    if q == 3.0:
        return power(xp, xp.clip((total_w - m2) / m, 0.0, None), 0.5, tangent=tangent)
    return cubic_root(xp, 3.0 * m2 / m, (m3 - total_w) / m)


def _rising_root(xp: Any, a: Any, b: Any, c: Any) -> Any:
    """The root of ``a t^2 + b t + c = 0`` on the quadratic's increasing side (``2 a t + b = sqrt(b^2 - 4ac) > 0``
    there), in the form without cancellation for either sign of b: ``-2c / (b + sqrt)`` for b >= 0, else
    ``(sqrt - b) / 2a`` (where b < 0, ``a t > 0``: a is no 0)."""
    root = xp.sqrt(xp.clip(b * b - 4.0 * a * c, 0.0, None))
    return xp.where(b >= 0, safe_divide(xp, -2.0 * c, b + root), (root - b) / (2.0 * xp.where(a == 0, xp.ones_like(a), a)))


def stepped_signed_square_root(xp: Any, total_w: Any, m: Any, m2: Any) -> Any:
    """The root ``t`` of ``h(t) = sum_B (d_i + t) |d_i + t| = W`` (the p = 3/2 soft sort's block equation, terms of
    either sign, ``h`` increasing) for a block whose data step evenly (the soft sort's ranks), from its size ``m``,
    weight ``W`` and centred second moment ``m2`` alone (their step ``c``: ``m2 = c^2 m (m^2 - 1) / 12``).

    With ``M = m - 1`` and ``s = M - 2j``, ``h(-d_j) = c^2 s (s^2 + 3M^2 + 6M + 2) / 12`` (sums of squares of the
    steps on either side of entry j), so the entries negative at the root are the ``k = ceil((M - s*) / 2)`` first,
    ``s*`` the real root of ``s^3 + (3M^2 + 6M + 2) s = 12 W / c^2``; their sums of d and d^2 are in closed form, and
    ``t`` is the root of that stretch's quadratic.
    A one-entry block: ``t = sign(W) sqrt|W|``.
    """
    several = m > 1
    mm = xp.where(several, m, 2.0 * xp.ones_like(m))
    c2 = xp.clip(12.0 * m2 / (mm * (mm * mm - 1.0)), 0.0, None)
    c = xp.sqrt(c2)
    big_m = mm - 1.0
    level = 12.0 * total_w / xp.where(c2 > 0, c2, xp.ones_like(c2))
    s = cubic_root(xp, 3.0 * big_m * big_m + 6.0 * big_m + 2.0, -level)
    k = xp.clip(xp.ceil((big_m - s) / 2.0), 0.0, mm)
    mu = big_m / 2.0
    l1 = c * k * (k - mm) / 2.0
    l2 = c2 * k * ((k - 1.0) * (2.0 * k - 1.0 - 6.0 * mu) / 6.0 + mu * mu)
    t = _rising_root(xp, mm - 2.0 * k, -4.0 * l1, m2 - 2.0 * l2 - total_w)
    # c = 0 (a block of equal data: every term shares t's sign) or one entry: the root of m t |t| = W
    alone = odd_power(xp, total_w / m, 0.5)
    return xp.where(several & (c2 > 0), t, alone)
