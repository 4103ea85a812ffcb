r"""The soft sort's block equation where its data step evenly, at q = 5, 6 and any q in (2, 6) that is no integer
(:mod:`.pnorm`'s ``signed`` fit).

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
  (x^2 - x - 1/3)``);
- any other q: the same two sums of powers ``sum_(j < K) (b + j)^(q-1)``
  (Hurwitz zeta's differences), a few terms directly and the rest by
  Euler-Maclaurin's formula (:func:`_power_sums`).

H is odd in ``tau`` (the steps are symmetric about the mean), so ``tau =
sign(W) R(|W| / c^(q-1))``. For q >= 3 it is convex for ``tau >= 0`` (for
each pair ``tau +- x``, ``phi''`` is odd and increasing in ``|u|``), and
Newton's method from an upper bound of R falls to it monotonically: ``min(L
/ H'(0), (m - 1) / 2 + (L / m)^(1/(q-1)))`` (H lies above its tangent at 0,
and past the block's half-length every term exceeds ``L / m``); below q = 3
(``phi''`` falls in ``|u|``) the steps are kept inside the bracket ``[0,
(m - 1) / 2 + (L / m)^(1/(q-1))]``, else halve it. Each step costs elementwise
operations on one number per block: no segmented sum, where Newton's steps
over a block's entries sum them every step.
"""

from __future__ import annotations

from typing import Any

from .._lib._adapters import get_adapter
from .._lib._compat import device as _device
from .._lib._numerics import safe_divide
from .powers import falling_newton, power

__all__ = ["STEPPED", "solves", "unit_root"]

STEPPED = (5.0, 6.0)  # the whole q whose sort blocks this module solves (q = 3 and 4 have closed forms)
# the largest q it takes: a block of 10^5 unit steps sums powers up to m^(q-1), 1e25 at q = 6 (float32 overflows at 3e38)
HIGHEST = 6.0
HEAD = 4  # the terms of a sum of powers added one by one before its Euler-Maclaurin tail (:func:`_power_sums`)
# B_2i / (2i)!, i = 1 ... 6: the Euler-Maclaurin formula's corrections
_BERNOULLI = (1.0 / 12.0, -1.0 / 720.0, 1.0 / 30240.0, -1.0 / 1209600.0, 1.0 / 47900160.0, -691.0 / 1307674368000.0)


def solves(q: float) -> bool:
    """Whether :func:`unit_root` solves the sort's blocks at ``q``: 5, 6, and any q in (2, 6] that is no integer."""
    return q in STEPPED or (2.0 < q <= HIGHEST and q != round(q))


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


def _power_sums(xp: Any, b: Any, k: Any, e: float) -> tuple[Any, Any]:
    """``(sum_(j < k) (b + j)^e, sum_(j < k) (b + j)^(e - 1))`` for ``b >= 0``, a whole ``k >= 0`` and ``e > 1``: the
    first :data:`HEAD` terms directly, the rest by Euler-Maclaurin's formula from ``x0 = b + HEAD`` to ``x1 = b + k -
    1``, ``int f + (f(x0) + f(x1)) / 2 + sum_i B_2i / (2i)! (f^(2i-1)(x1) - f^(2i-1)(x0))`` to its sixth term: past
    ``x0 >= 4`` each term is about ``(e / 2 pi x0)^2`` of the last, so the sum errs by less than 1e-13 of itself for
    ``e < 5`` (a Hurwitz zeta's difference, in terms of powers alone)."""
    one = xp.ones_like(b)
    # the head's terms along a new last axis: one power and one sum for all of them
    j = xp.arange(HEAD, dtype=b.dtype, device=_device(b))
    x = b[..., None] + j
    xf = xp.where(k[..., None] > j, power(xp, x, e - 1.0, tangent=False), 0.0)
    head_e, head_f = xp.sum(x * xf, axis=-1), xp.sum(xf, axis=-1)
    far = k > float(HEAD)

    # both ends of the tail stacked on a new first axis: the far end counts +, the near one -
    ends = xp.stack([xp.where(far, b + k - 1.0, one), xp.where(far, b + float(HEAD), one)])
    below2 = power(xp, ends, e - 2.0, tangent=False)  # x^(e-2): every power below by products and quotients
    z = 1.0 / (ends * ends)
    x0 = ends[1, ...]
    # the span from the counts, not the ends' difference, which rounds at a far start in float32 (0 where no tail)
    grows = xp.log1p(xp.where(far, k - float(HEAD + 1), 0.0) / x0)

    def tail(g: float, xg1: Any) -> Any:
        """Euler-Maclaurin's sum of ``x^g`` over the tail, given ``x^(g-1)`` at its ends: the integral's difference
        ``(x1^(g+1) - x0^(g+1)) / (g + 1)`` as ``x0^(g+1) expm1((g + 1) log1p((x1 - x0) / x0))``, free of the
        cancellation of two powers of a far start (a block whose root lies far past it); the corrections
        ``B_2i / (2i)! g (g - 1) ... (g - 2i + 2) x^(g - 2i + 1)`` by Horner's rule in ``1 / x^2``."""
        coefficients, falling = [], g
        for i, bern in enumerate(_BERNOULLI):
            if i:
                falling = falling * (g - 2.0 * i + 1.0) * (g - 2.0 * i)
            coefficients.append(bern * falling)
        series = coefficients[-1] * z
        for c in coefficients[-2:0:-1]:
            series = (series + c) * z
        at = xg1 * (series + coefficients[0] + 0.5 * ends)  # + f(x) / 2 = x^g / 2
        x0g1 = xg1[1, ...]
        x0g = x0 * x0g1  # x0^g times a factor of about the span: no power past the sum's own size
        return x0g * (x0 * xp.expm1((g + 1.0) * grows) / (g + 1.0)) + at[0, ...] - at[1, ...] + x0g

    rest_e = tail(e, ends * below2)
    rest_f = tail(e - 1.0, below2)
    return head_e + xp.where(far, rest_e, 0.0), head_f + xp.where(far, rest_f, 0.0)


def _general_terms(xp: Any, e: float, tau: Any, m: Any) -> tuple[Any, Any]:
    """``(H(tau), H'(tau))`` for ``tau >= 0`` at ``phi(u) = sign(u) |u|^e`` (any ``e = q - 1 > 1``): the positive terms'
    magnitudes step by 1 from ``p0``, the negative ones' from ``1 - p0`` (:func:`_terms`), each a sum of powers
    (:func:`_power_sums`)."""
    below = (m - 1.0) / 2.0 - tau
    k = xp.clip(xp.floor(below) + 1.0, 0.0, None)
    p0 = k - below
    # the positive terms' sums and the negative ones' in one call, stacked
    sums_e, sums_f = _power_sums(xp, xp.stack([p0, xp.clip(1.0 - p0, 0.0, None)]), xp.stack([m - k, k]), e)
    return sums_e[0, ...] - sums_e[1, ...], e * (sums_f[0, ...] + sums_f[1, ...])


def _bracketed(xp: Any, e: float, big: Any, m: Any, hi: Any, half: Any) -> Any:
    """The root of ``H(tau) = big`` in ``[0, hi]`` (``H(0) = 0 <= big <= H(hi)``) by Newton's steps from ``hi`` kept
    inside the bracket, else its midpoint (H need not be convex below q = 3, where ``phi''`` falls in ``|u|``), until no
    root moves by more than a few units in the last place of the block's half-length or itself."""

    def step(state: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        tau, lo, hi = state
        h, slope = _general_terms(xp, e, tau, m)
        low = h < big
        lo, hi = xp.where(low, tau, lo), xp.where(low, hi, tau)
        new = tau - safe_divide(xp, h - big, slope)
        return xp.where((new >= lo) & (new <= hi), new, (lo + hi) / 2.0), lo, hi

    eps = 8.0 * xp.finfo(hi.dtype).eps

    def moved(old: tuple[Any, Any, Any], new: tuple[Any, Any, Any]) -> Any:
        return xp.any(xp.abs(old[0] - new[0]) > eps * (new[0] + half))

    zero = xp.zeros_like(hi)
    return get_adapter(xp).settle(xp, step, (hi, zero, hi), moved, 40, 2, like=(hi,))[0]


def unit_root(xp: Any, q: float, level: Any, m: Any) -> Any:
    """``tau`` with ``H(tau) = level`` (the module's docstring) for blocks of ``m >= 1`` unit steps, elementwise."""
    m2, half = m * m, (m - 1.0) / 2.0
    s2, s4 = m * (m2 - 1.0) / 12.0, m * (m2 - 1.0) * (3.0 * m2 - 7.0) / 240.0
    big = xp.abs(level)
    zero = xp.zeros_like(big)
    if q not in STEPPED:
        hi = half + power(xp, big / m, 1.0 / (q - 1.0))
        if q > 3.0:  # convex for tau >= 0: its tangent at 0 bounds the root too
            hi = xp.minimum(hi, safe_divide(xp, big, _general_terms(xp, q - 1.0, zero, m)[1], hi))
        r = _bracketed(xp, q - 1.0, big, m, hi, half)
    elif q == 6.0:
        past = half + power(xp, big / m, 0.2)  # one entry: this bound is its root
        start = xp.minimum(safe_divide(xp, big, _terms(xp, q, zero, m, s2, s4)[1], past), past)
        r = _fall(xp, q, big, m, s2, s4, start, half)
    else:
        # q = 5: at tau >= half every term is nonnegative, H = m tau^4 + 6 S2 tau^2 + S4, whose root is a quadratic's in
        # tau^2 (a one-entry block's too); below it the Bernoulli form, which there cancels no more than the terms do
        h2 = half * half
        at_half = (m * h2 + 6.0 * s2) * h2 + s4
        rest = xp.clip(big - s4, 0.0, None)
        outside = safe_divide(xp, rest, 3.0 * s2 + xp.sqrt(9.0 * s2 * s2 + m * rest))  # tau^2 (0 where rest is)
        inside = xp.minimum(big, at_half)  # the root of those outside is half, where their steps stay
        slope_half = 4.0 * half * (m * h2 + 3.0 * s2)
        start = xp.clip(half - safe_divide(xp, at_half - inside, slope_half), 0.0, None)
        start = xp.minimum(start, safe_divide(xp, 5.0 * inside, _terms(xp, q, zero, m, s2, s4)[1], half))
        r = xp.where(big >= at_half, xp.sqrt(outside), _fall(xp, q, 5.0 * inside, m, s2, s4, start, half))
    return xp.where(level < 0, -r, r)


def _fall(xp: Any, q: float, big: Any, m: Any, s2: Any, s4: Any, start: Any, half: Any) -> Any:
    """Newton's steps on ``H(tau) = big`` from ``start`` at or above the root, falling to it (H convex there), until
    none falls by more than a few units in the last place of the block's half-length or the start: H's terms cancel
    to that precision where the root lies inside the block (far below its half-length)."""

    def step(tau: Any) -> Any:
        h, slope = _terms(xp, q, tau, m, s2, s4)
        return tau - safe_divide(xp, h - big, slope)

    return falling_newton(xp, get_adapter(xp), step, start, q, like=(start,), spread=half)
