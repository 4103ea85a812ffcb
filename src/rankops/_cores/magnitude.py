r"""Soft top-k in magnitude (Sander, Puigcerver, Djolonga, Peyre & Blondel 2023), sparse and smooth.

The hard operator keeps the k entries of largest ``|x_i|`` and zeroes the
rest: it is the gradient of ``f(x) = 1/2 sum of the k largest x_i^2 =
max over y in C of sum_i y_i x_i^2 / 2``, with ``C = {y in [0, 1]^n : sum y
= k}`` the top-k polytope. Regularizing the conjugate, ``f_eps = (f* + eps
R)*`` with ``R(u) = (1/p) sum |u_i|^p``, p in (1, 2], and mapping the
maximizer ``u`` back through ``u + eps sign(u) |u|^(p-1)`` (the map that
leaves a kept entry exactly ``x_i``) gives, with ``a_i = |x_i|``, ``q = p /
(p - 1)`` and one threshold ``theta >= 0`` per row,

- ``a_i <= theta``: the entry is 0 (exactly: the operator's sparsity);
- ``theta < a_i < theta + eps theta^(p-1)``: ``sign(x_i) ((a_i - theta) +
  ((a_i - theta) / eps)^(q-1))``, the entry blends;
- otherwise ``x_i`` itself (kept),

where ``theta`` solves ``sum_i clip(((a_i - theta) / (eps theta^(p-1)))^(q-1),
0, 1) = k`` (the KKT conditions of the maximization over ``y in C``: a
kept entry has ``y_i = 1``, a blending one ``y_i = u_i / theta``), or is 0
when fewer than k entries are non-zero (then every entry is kept). This is
the isotonic problem ``min over decreasing v of sum (1/q) |s_i - v_i|^q +
eps^(q-1) w_i v_i^2 / 2`` of the paper's code (``s`` the sorted
magnitudes, ``w`` the top-k polytope's vertex) with its one free block at
``v = theta``. For p = 2 the operator is scale-free (``eps`` is the width
of the blending band relative to the threshold); for p < 2,
``f(c x; eps) = c f(x; c^(p-2) eps)``.

The left side decreases in ``theta`` through the breakpoints ``a_i`` (an
entry leaves 0) and ``theta_i`` with ``theta_i + eps theta_i^(p-1) = a_i``
(an entry is kept from there down): a binary search over the 2n breakpoints
finds the interval, on which the blending set is fixed and ``theta`` is the
root of ``sum_blend ((a_i - theta) / eps)^(q-1) = theta (k - #kept)``: a
closed form for p = 2 (linear), 3/2 (quadratic) and 4/3 (a cubic), Newton's
method from an upper bound otherwise (the equation is convex and increasing
in ``mean(a) - theta``).

Derivatives: with ``c_i = (q-1)/eps ((a_i - theta) / eps)^(q-2)`` on the
blending set and ``D = sum_blend c + k - #kept``, ``d out_i / d x_j =
sign_i sign_j (1 + c_i)(delta_ij - c_j / D)`` there, 1 on a kept entry's
diagonal, 0 elsewhere; ``d out_i / d k = sign_i (1 + c_i) theta / D``. The
output is continuous in x and k and smooth between breakpoints; at an
entry's two breakpoints its slope jumps, for every p: from 0 to ``(1 +
c_i)(1 - c_i / D)`` where it starts to blend (``c_i`` is ``1/eps`` for p = 2
and tends to 0 for p < 2: the slope of a soft-thresholding), and to 1 where
it is kept (the box ``y_i <= 1``, as in the top-k mask). In k, the
derivative is infinite for p < 2 where an entry has just been kept (the
blending entries grow as ``(k - #kept)^(p-1)``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._lib._adapters import core, get_adapter, rebuilt, same_shape
from .._lib._compat import is_array
from .._lib._numerics import centred_within, exact_centre, safe_divide
from . import masked
from .breakpoints import search_breakpoints
from .finite import finite_rows
from .pnorm import exponent_of
from .powers import cubic_root, falling_newton, falling_root, phi_and_slope, power, power_sum

__all__ = ["magnitude_core"]


def _kept_band(xp: Any, adapter: Any, a: Any, eps: float, q: float) -> Any:
    """``eps r``, the width of the blending band of an entry of magnitude ``a`` at the threshold ``theta = a - eps r``
    below which it is kept: ``theta + eps theta^(p-1) = a``.

    With ``r = theta^(p-1)`` (so ``theta = r^(q-1)``): ``r^(q-1) + eps r = a``,
    linear (q = 2), quadratic (q = 3), a depressed cubic (q = 4), else
    convex and increasing in r: Newton's iterates fall monotonically from the
    upper bound ``min(a / eps, a^(1/(q-1)))``. The caller subtracts the band
    from ``a`` about its own centre: ``theta`` itself would round at its own
    magnitude.
    """
    if q == 2.0:
        return eps * a / (1.0 + eps)
    if q == 3.0:
        return eps * (2.0 * a / (eps + power(xp, eps * eps + 4.0 * a, 0.5)))
    if q == 4.0:
        return eps * cubic_root(xp, xp.full_like(a, eps), -a)

    def newton(r: Any) -> Any:
        phi, slope = phi_and_slope(xp, r, q, signed=False)
        return xp.clip(r - (phi + eps * r - a) / ((q - 1.0) * slope + eps), 0.0, None)

    start = xp.minimum(a / eps, power(xp, a, 1.0 / (q - 1.0)))
    return eps * falling_newton(xp, adapter, newton, start, q, like=(a,))


def _blend_root(xp: Any, adapter: Any, a: Any, centre: Any, blend: Any, rest: Any, eps: float, q: float) -> tuple[Any, Any]:
    """``(theta, a - theta)`` on the blending set: the root of ``sum_blend ((a_i - theta) / eps)^(q-1) = theta rest``,
    for magnitudes ``centre + a`` (``a`` taken about the row's ``centre``).

    In ``t = mean(a) - theta`` with the blending entries' centred values ``d``
    and moments ``M2``, ``M3`` (no difference of close numbers), the equation
    is ``sum (d_i + t)^(q-1) = eps^(q-1) rest (mean - t)``.
    """
    count = xp.sum(xp.astype(blend, a.dtype), axis=-1, keepdims=True)
    m = xp.where(count > 0, count, xp.ones_like(count))
    about, d = centred_within(xp, a, blend, m)
    mean = centre + about
    e = eps ** (q - 1.0) * rest  # the right side's slope in theta
    # the closed forms at the scale of their root, Jensen's bound (e mean / m)^(1/(q-1)), taken as a product of powers:
    # e mean itself overflows float32 where the root does not (e = 1e10 and mean = 3e29 at p = 4/3, strength 1e4)
    e_root = 1.0 / (q - 1.0)
    s = power(xp, e, e_root) * power(xp, mean / m, e_root)
    scaled = (s > 0) & (s < math.inf)
    s = xp.where(scaled, s, 1.0)
    if q == 2.0:
        t = mean * (e / (m + e))
    elif q == 3.0:  # m t^2 + e t - c = 0, in t / s
        es = e / s
        c = xp.clip(es * (mean / s) - xp.sum(d * d, axis=-1, keepdims=True) / s / s, 0.0, None)
        t = s * (2.0 * c / (es + power(xp, es * es + 4.0 * m * c, 0.5)))
    elif q == 4.0:  # t^3 + P t + Q = 0, P = (3 M2 + e) / m, Q = (M3 - e mean) / m, in t / s (the root is homogeneous)
        m2, m3 = xp.sum(d * d, axis=-1, keepdims=True), xp.sum(d * d * d, axis=-1, keepdims=True)
        es = e / s
        t = s * cubic_root(xp, (3.0 * (m2 / s / s) + es / s) / m, (m3 / s / s / s - es * (mean / s) / s) / m)
    else:
        # in t / s: sum (d / s + t / s)^(q-1) = e' (mean / s - t / s), e' = e / s^(q-2) (as powers of e and mean / m);
        # Jensen: m t^(q-1) <= e (mean - t) <= e mean at the root (t / s at most 1); and theta >= 0
        e_s = xp.where(scaled, power(xp, e, e_root) * power(xp, xp.where(scaled, mean / m, 1.0), (2.0 - q) * e_root), e)
        c_s = e_s * (mean / s)
        start = xp.minimum(mean / s, power(xp, c_s / m, e_root))
        t = s * falling_root(xp, adapter, blend, d / s, c_s, e_s, start, q)
    return centre + (about - t), xp.where(blend, xp.clip(d + t, 0.0, None), 0.0)


def threshold(xp: Any, adapter: Any, a: Any, k: Any, eps: float, q: float) -> tuple[Any, Any, Any, Any, Any]:
    """``(theta, gap, blend, kept, rest)`` for magnitudes ``a >= 0`` and ``k`` of shape ``(..., 1)`` in (0, n].

    ``gap``: ``a - theta`` on the blending set (0 elsewhere); ``blend`` /
    ``kept``: the entries' status; ``rest``: k less the kept count. A binary
    search over the breakpoints in decreasing order
    (:func:`.breakpoints.search_breakpoints`); an entry's status at a breakpoint is read from where its own
    two breakpoints went, not from ``a - theta``, so that it survives the two
    rounding to one number.
    """
    n = a.shape[-1]
    # about the row's midrange where that is exact: the breakpoints near the threshold then keep their differences to a
    # unit in their own last place, where theta would round at its own (6e-5 near 1000 in float32, which the blending
    # slope, 3000 at p = 4/3 and eps = 0.1, made 0.26 where an entry sat on the edge of being kept)
    centre = exact_centre(xp, xp.min(a, axis=-1, keepdims=True), xp.max(a, axis=-1, keepdims=True))
    ac = a - centre
    # unsorted here (a is x's own order): one stable sort of both rows, not adapter.merge_descending's merge
    breaks, order = adapter.sort_order(xp, xp.concat([ac, ac - _kept_band(xp, adapter, a, eps, q)], axis=-1), descending=True)
    place = adapter.invert_permutation(xp, order)
    # arrays of their own, not views of place: see the search
    top, bottom = xp.asarray(place[..., :n], copy=True), xp.asarray(place[..., n:], copy=True)

    def total(j: Any) -> Any:
        """The share sum at ``theta = breaks[j]``: 1 for an entry kept there, its share for one blending."""
        about = adapter.take(xp, breaks, j)  # theta - centre
        theta = centre + about
        positive = theta > 0
        scale = eps * power(xp, xp.where(positive, theta, 1.0), 1.0 / (q - 1.0))
        between = (top < j) & (bottom > j) & positive
        base = xp.where(between, xp.clip((ac - about) / scale, 0.0, 1.0), 0.0)
        return power_sum(xp, xp.where(bottom <= j, 1.0, base), q - 1.0)

    # whole: fewer than k entries are non-zero (at the largest a every entry is 0, below k)
    kept, blend, whole = search_breakpoints(xp, adapter, top, bottom, total, k)
    kept = kept | whole
    rest = k - xp.sum(xp.astype(kept, a.dtype), axis=-1, keepdims=True)
    theta, gap = _blend_root(xp, adapter, ac, centre, blend, rest, eps, q)
    return xp.where(whole, 0.0, theta), gap, blend, kept, rest


@dataclasses.dataclass(frozen=True)
class _Magnitude:
    """The forward and its backward rule (the module docstring's Jacobian)."""

    strength: float
    k: Any  # a Python number, or None when k is an array argument
    q: float
    masked: bool = False

    def fwd(self, xp: Any, x: Any, *rest: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        adapter = get_adapter(xp)
        k_array, _, mask = masked.trailing(rest, False, self.masked)
        eps, q = self.strength, self.q
        count = masked.valid_count(xp, x, mask)
        k, outside = masked.row_k(xp, x, k_array, self.k, count)
        negative = x < 0
        # masked entries come in as 0 (:func:`.masked.zeros_masked_input`): magnitude 0, never kept unless every entry is
        theta, gap, blend, kept, rest = threshold(xp, adapter, xp.abs(x), k, eps, q)
        unit = power(xp, gap / eps, q - 2.0) if q != 2.0 else xp.ones_like(gap)
        magnitude = gap + unit * gap / eps
        value = xp.where(kept, x, xp.where(blend, xp.where(negative, -magnitude, magnitude), 0.0))
        value = xp.where(outside, math.nan, value)
        c = xp.where(blend & ~outside, (q - 1.0) / eps * unit, 0.0)
        d = xp.sum(c, axis=-1, keepdims=True) + xp.where(outside, 0.0, rest)
        return (value,), (negative, blend & ~outside, kept & ~outside, c, d, xp.where(outside, 0.0, theta))

    def bwd(self, xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        (ct,) = cts
        has_k = self.k is None
        none = (None,) * self.masked
        if ct is None:
            return (None,) * (1 + has_k) + none
        negative, blend, kept, c, d, theta = res
        ct = xp.astype(ct, c.dtype, copy=False)
        g = xp.where(blend, (1.0 + c) * xp.where(negative, -ct, ct), 0.0)  # (1 + c_i) sign_i ct_i
        total = xp.sum(g, axis=-1, keepdims=True)
        inner = g - c * safe_divide(xp, total, d)
        dx = xp.where(kept, ct, xp.where(blend, xp.where(negative, -inner, inner), 0.0))
        if not has_k:
            return (dx,) + none
        return (dx, safe_divide(xp, total * theta, d)[..., 0]) + none


@core(output_shapes=same_shape, batched={"k": (), "mask": (0,)})
@masked.zeros_masked_input
@finite_rows
def magnitude_core(xp: Any, x: Any, opts: Any, *, k: Any, mask: Any = None) -> Any:
    """The soft top-k in magnitude of each row (the module docstring); ``mask``: of the valid entries alone (a row
    with fewer than k is NaN)."""
    spec = _Magnitude(opts.strength, None if is_array(k) else k, exponent_of(opts), mask is not None)
    arrays = (x, *((k,) if is_array(k) else ()))
    names = ("x", *(("k",) if is_array(k) else ()))
    (value,), back = masked.backward(xp, spec.fwd, spec.bwd, arrays, names, mask, residuals=rebuilt(spec.fwd))
    return (value if mask is None else masked.short_rows(xp, value, mask, k),), back
