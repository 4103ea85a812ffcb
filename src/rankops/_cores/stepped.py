r"""The soft sort's block equation where its data step evenly, at q = 5 and 6 (:mod:`.pnorm`'s ``signed`` fit).

The soft sort projects ``rho / strength`` onto the permutahedron of the
sorted row, so the data of its isotonic fit are the ranks, and any block of
``m`` of them is ``c (j - (m - 1) / 2)`` about its mean (``j = 0 ... m - 1``,
``c`` the step). Its root ``t = c tau`` of ``sum_B phi(d_j + t) = W``,
``phi(u) = sign(u) |u|^(q-1)``, is that of

    H(tau) = sum_j phi(tau + j - (m - 1) / 2) = W / c^(q-1),

a function of ``m`` and ``tau`` alone:

- q = 6 (``phi(u) = u^5``): ``H = m tau^5 + 10 S2 tau^3 + 5 S4 tau``, with
  the block's unit-step moments ``S2 = m (m^2 - 1) / 12`` and ``S4 = m (m^2 -
  1) (3 m^2 - 7) / 240`` (its odd ones 0);
- q = 5: the magnitudes of the positive terms step by 1 from ``p0 = k -
  ((m - 1) / 2 - tau)`` in (0, 1] (``k`` terms negative) to ``(m - 1) / 2 +
  tau``, those of the negative ones from ``1 - p0`` to ``(m - 1) / 2 -
  tau``, and a sum of powers stepping by 1 is a difference of Bernoulli
  polynomials, ``sum_(j < K) (b + j)^4 = (B5(b + K) - B5(b)) / 5``: with ``A
  = (m + 1) / 2 + tau``, ``A' = (m + 1) / 2 - tau`` and ``B5(1 - x) =
  -B5(x)``, ``5 H = B5(A) - B5(A') - 2 B5(p0)`` and ``H' = B4(A) + B4(A') - 2
  B4(p0)``, each polynomial in factored form (``B5(x) = x (x - 1/2) (x - 1)
  (x^2 - x - 1/3)``).

H is odd in ``tau`` (the steps are symmetric about the mean) and convex for
``tau >= 0`` (for each pair ``tau +- x``, ``phi'' `` is odd and increasing in
``|u|``), so ``tau = sign(W) R(|W| / c^(q-1))``, and Newton's method from an
upper bound of R falls to it monotonically: ``min(L / H'(0), (m - 1) / 2 +
(L / m)^(1/(q-1)))`` (H lies above its tangent at 0, and past the block's
half-length every term exceeds ``L / m``). Each step costs a few dozen
elementwise operations on one number per block: no segmented sum, where
Newton's steps over a block's entries sum them every step.
"""

from __future__ import annotations

from typing import Any

from .._lib._adapters import get_adapter
from .._lib._numerics import safe_divide
from .powers import newton_steps, power

__all__ = ["STEPPED", "unit_root"]

STEPPED = (5.0, 6.0)  # the q whose sort blocks this module solves (q = 3 and 4 have closed forms)


def _bernoulli(x: Any) -> tuple[Any, Any]:
    """``(B4(x) + 1/30, B5(x))``: Bernoulli's polynomials, ``B4``'s constant left out (it cancels in ``H'``)."""
    g = x * (x - 1.0)
    return g * g, g * (x - 0.5) * (g - 1.0 / 3.0)


def _terms(xp: Any, q: float, tau: Any, m: Any, s2: Any, s4: Any) -> tuple[Any, Any]:
    """``(H(tau), H'(tau))`` for ``tau >= 0``; at q = 5 both times 5 (``level`` is scaled alike)."""
    if q == 6.0:
        t2 = tau * tau
        return tau * (m * t2 * t2 + 10.0 * s2 * t2 + 5.0 * s4), 5.0 * (m * t2 * t2 + 6.0 * s2 * t2 + s4)
    below = (m - 1.0) / 2.0 - tau  # the negative terms: j < below (a term at exactly 0 counts either way)
    p0 = xp.clip(xp.floor(below) + 1.0, 0.0, None) - below
    d4, d5 = _bernoulli(below + 1.0)
    u4, u5 = _bernoulli(m - below)
    p4, p5 = _bernoulli(p0)
    return u5 - d5 - 2.0 * p5, 5.0 * (u4 + d4 - 2.0 * p4)


def unit_root(xp: Any, q: float, level: Any, m: Any) -> Any:
    """``tau`` with ``H(tau) = level`` (the module's docstring) for blocks of ``m >= 1`` unit steps, elementwise."""
    m2, half = m * m, (m - 1.0) / 2.0
    s2, s4 = m * (m2 - 1.0) / 12.0, m * (m2 - 1.0) * (3.0 * m2 - 7.0) / 240.0
    big = xp.abs(level)
    if q == 6.0:
        past = half + power(xp, big / m, 0.2)  # one entry: this bound is its root
        start = xp.minimum(safe_divide(xp, big, _terms(xp, q, xp.zeros_like(big), m, s2, s4)[1], past), past)
        r = _fall(xp, q, big, m, s2, s4, start, half)
        return xp.where(level < 0, -r, r)
    # q = 5: at tau >= half every term is nonnegative, H = m tau^4 + 6 S2 tau^2 + S4, whose root is a quadratic's in
    # tau^2 (a one-entry block's too); below it the Bernoulli form, which there cancels no more than the terms do
    h2 = half * half
    at_half = (m * h2 + 6.0 * s2) * h2 + s4
    rest = xp.clip(big - s4, 0.0, None)
    outside = safe_divide(xp, rest, 3.0 * s2 + xp.sqrt(9.0 * s2 * s2 + m * rest))  # tau^2 (0 where rest is)
    inside = xp.minimum(big, at_half)  # the root of those outside is half, where their steps stay
    slope_half = 4.0 * half * (m * h2 + 3.0 * s2)
    start = xp.clip(half - safe_divide(xp, at_half - inside, slope_half), 0.0, None)
    start = xp.minimum(start, safe_divide(xp, 5.0 * inside, _terms(xp, q, xp.zeros_like(big), m, s2, s4)[1], half))
    r = xp.where(big >= at_half, xp.sqrt(outside), _fall(xp, q, 5.0 * inside, m, s2, s4, start, half))
    return xp.where(level < 0, -r, r)


def _fall(xp: Any, q: float, big: Any, m: Any, s2: Any, s4: Any, start: Any, half: Any) -> Any:
    """Newton's steps on ``H(tau) = big`` from ``start`` at or above the root, falling to it (H convex there)."""

    def step(tau: Any) -> Any:
        h, slope = _terms(xp, q, tau, m, s2, s4)
        return tau - safe_divide(xp, h - big, slope)

    # the steps stop once none falls by more than a few units in the last place of the block's half-length or the
    # start: H's terms cancel to that precision where the root lies inside the block (far below its half-length)
    ulps = 8.0 * xp.finfo(start.dtype).eps * (start + half)

    def moved(old: tuple[Any], new: tuple[Any]) -> Any:
        return xp.any(old[0] - new[0] > ulps)

    return get_adapter(xp).settle(xp, lambda state: (step(state[0]),), (start,), moved, newton_steps(q), 2, like=(start,))[0]
