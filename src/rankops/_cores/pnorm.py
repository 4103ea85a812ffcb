r"""p-norm regularized projections onto a permutahedron (Sander, Puigcerver, Djolonga, Peyre & Blondel 2023).

For ``p`` in (1, 2], ``q = p / (p - 1)`` its conjugate exponent (q >= 2),
a score row ``z`` sorted decreasing and a weight row ``w`` decreasing and
non-negative, the projection

    mu = argmax over mu in P(w) of  <mu, z> - (1/p) sum_i |mu_i|^p

(``P(w)``: the permutahedron of ``w``, the convex hull of its permutations)
is, by Blondel et al. 2020 (Prop. 3) with the regularizer's conjugate
``(1/q) |y|^q``, ``mu_i = (z_i - v_i)^(q - 1)`` with ``v`` the decreasing
fit

    v = argmin over v_1 >= ... >= v_n of  sum_i (1/q) |z_i - v_i|^q + w_i v_i.

Each block B of ``v`` holds the root of ``sum_(i in B) (z_i - v)^(q-1) =
W_B`` (``W_B = sum_B w``). Every block that pooling adjacent violators
forms keeps all its entries at or above its value (a one-entry block sits at
``z_i - w_i^(1/(q-1)) <= z_i``; a pooled run's value lies below its last
block's, whose entries are the run's smallest), so the equation has no
sign changes and, with ``t = mean_B(z) - v`` and ``d_i = z_i - mean_B(z)``
(centred moments ``M2``, ``M3``), it is

- ``q = 2`` (``p = 2``, the ``l2`` projection): ``t = W_B / |B|``;
- ``q = 3`` (``p = 3/2``): ``M2 + |B| t^2 = W_B``, a square root;
- ``q = 4`` (``p = 4/3``): ``|B| t^3 + 3 M2 t + M3 - W_B = 0``, a cubic
  with one real root (Cardano's, in a form free of cancellation);
- any other q: Newton's method from the upper bound ``(W_B / |B|)^(1/(q-1))``
  (Jensen): the equation is convex and increasing in t there, so the
  iterates decrease monotonically to the root.

The pooling rounds of :mod:`.isotonic` (whole decreasing runs at once) run
until every row settles: there are no merge rounds for this loss. The
output is written from ``d + t`` per block, never as ``z - v``: a
one-entry block gives ``w_i`` itself, so the top-k masks hold exact zeros
and ones (their sparsity).

The Jacobian is block-wise: with ``phi'_i = (q - 1)(z_i - v_B)^(q-2)``,
``d mu_i / d z_j = phi'_i (delta_ij - phi'_j / sum_B phi')`` and
``d mu_i / d W_B = phi'_i / sum_B phi'`` (both 0 on a block where
``mu`` is 0, for q > 2).
"""

from __future__ import annotations

import math
from typing import Any

from .._lib._numerics import safe_divide
from . import isotonic

__all__ = ["exponent", "project", "slope"]



def _newton_steps(q: float) -> int:
    """Newton steps for a q without a closed form: the iterates fall monotonically from the upper bound, slowly
    while far from the root (by about a factor ``1 - 1/(q-1)`` per step, for a large q), then quadratically. Checked
    against the sequential PAV on rows spread over 10^-3..10^3: p = 1.25 settles within 10 steps, 1.05 within 15,
    1.02 within 40, 1.01 within 60 (the count grows as 1 / (p - 1))."""
    return 16 + math.ceil(q / 2)


def exponent(p: float) -> float:
    """``q = p / (p - 1)``, the conjugate exponent of ``p``."""
    return p / (p - 1.0)


def _shift(xp: Any, adapter: Any, starts: Any, y: Any, w: Any, q: float) -> tuple[Any, Any, Any]:
    """``(mean, d, t)`` per entry: ``mean_B(y)``, ``d = y - mean_B(y)`` and ``t = mean_B(y) - v_B`` for the block
    root ``v_B`` (``mean`` and ``t`` the same number on every entry of a block)."""
    sums = adapter.segment_sum(xp, starts, xp.stack([xp.ones_like(y), y, w]))
    m, total_w = sums[0, ...], sums[2, ...]
    mean = sums[1, ...] / m
    d = y - mean  # exactly 0 on a one-entry block
    if q == 2.0:
        return mean, d, total_w / m
    if q == 3.0:
        m2 = adapter.segment_sum(xp, starts, d * d)
        return mean, d, xp.sqrt(xp.clip((total_w - m2) / m, 0.0, None))
    if q == 4.0:
        moments = adapter.segment_sum(xp, starts, xp.stack([d * d, d * d * d]))
        return mean, d, _cubic_root(xp, 3.0 * moments[0, ...] / m, (moments[1, ...] - total_w) / m)
    t = (total_w / m) ** (1.0 / (q - 1.0))
    for _ in range(_newton_steps(q)):
        a = xp.clip(d + t, 0.0, None)
        terms = adapter.segment_sum(xp, starts, xp.stack([a ** (q - 1.0), a ** (q - 2.0)]))
        t = t - safe_divide(xp, terms[0, ...] - total_w, (q - 1.0) * terms[1, ...])
    return mean, d, t


def _cubic_root(xp: Any, p: Any, q: Any) -> Any:
    """The real root of ``t^3 + p t + q = 0`` for ``p >= 0`` (one real root).

    Cardano's ``t = B - A`` with ``A^3 = |q|/2 + sqrt(D)``, ``AB = p/3``,
    written ``-q / (A^2 + AB + B^2)`` (no difference of close numbers), on
    the equation rescaled by ``s = max(sqrt(p), cbrt|q|)`` so that no power
    overflows.
    """
    s = xp.maximum(xp.sqrt(p), xp.abs(q) ** (1.0 / 3.0))
    some = s > 0
    s = xp.where(some, s, xp.ones_like(s))
    ps, qs = p / (s * s), q / (s * s * s)
    a = (xp.abs(qs) / 2.0 + xp.sqrt(qs * qs / 4.0 + ps * ps * ps / 27.0)) ** (1.0 / 3.0)
    b = safe_divide(xp, ps / 3.0, a)
    return xp.where(some, -qs / (a * a + ps / 3.0 + b * b) * s, xp.zeros_like(s))


class _Rules:
    """The pooling rounds' rule (:func:`.isotonic.pool_runs`) for this loss: a segment's value from its entries
    (``yw`` stacks the row and its weights: the value is no function of the segments' own values)."""

    identity = 0.0

    def __init__(self, q: float) -> None:
        self.q = q

    def pooled(self, xp: Any, adapter: Any, starts: Any, u: Any, yw: Any, unit: bool) -> Any:
        y, w = yw[0, ...], yw[1, ...]
        mean, _, t = _shift(xp, adapter, starts, y, w, self.q)
        return mean - t  # one number per segment: its entries stay one block


def project(xp: Any, adapter: Any, z: Any, w: Any, q: float, valid: Any = None) -> tuple[Any, Any, Any]:
    """``(mu, share, starts)`` along the last axis, in the sorted order of ``z`` (decreasing; ``w`` decreasing, >= 0).

    ``share``: ``phi' / sum_B phi'`` per entry (the Jacobian's weights, 0 on a
    block where mu is 0); ``starts``: True where a block begins. ``valid``:
    False on a masked tail (sorted last, ``w`` 0 there), whose entries are
    set below every block value of the valid ones: each stays a block of its
    own (no drop among equal values, none from the last valid block) with mu 0.
    """
    if valid is not None:
        # every block value of the valid entries is at least min z - W^(1/(q-1)) (t_B <= (W_B / |B|)^(1/(q-1)))
        far = xp.min(xp.where(valid, z, xp.full_like(z, float("inf"))), axis=-1, keepdims=True)
        far = xp.where(xp.isfinite(far), far, xp.zeros_like(far))
        below = far - xp.sum(w, axis=-1, keepdims=True) ** (1.0 / (q - 1.0)) - 1.0
        z = xp.where(valid, z, below)
    # the decreasing fit is the increasing fit of the reversed row, reversed
    y, wf = xp.flip(z, axis=-1), xp.flip(xp.broadcast_to(w, z.shape), axis=-1)
    yw = xp.stack([y, wf])
    n = z.shape[-1]
    v0 = y - wf ** (1.0 / (q - 1.0))  # one-entry blocks
    v = v0
    if n > 1:
        v, _, _ = isotonic.pool_runs(xp, adapter, _Rules(q), v0, yw, n)
    starts = isotonic.block_starts(xp, v)
    _, d, t = _shift(xp, adapter, starts, y, wf, q)
    a = xp.clip(d + t, 0.0, None)
    mu = a if q == 2.0 else a ** (q - 1.0)
    dphi = xp.ones_like(a) if q == 2.0 else (q - 1.0) * a ** (q - 2.0)
    share = safe_divide(xp, dphi, isotonic.block_sums(xp, adapter, starts, dphi))
    # back in z's order: a block's start is its first entry in that order (the reversed block's last)
    ends = isotonic.block_starts(xp, xp.flip(v, axis=-1))
    return xp.flip(mu, axis=-1), xp.flip(share, axis=-1), ends


def slope(xp: Any, mu: Any, q: float) -> Any:
    """``phi' = (q - 1) mu^((q-2)/(q-1))``, the derivative of ``mu = (z - v)^(q-1)`` in z at fixed v."""
    if q == 2.0:
        return xp.ones_like(mu)
    return (q - 1.0) * xp.clip(mu, 0.0, None) ** ((q - 2.0) / (q - 1.0))
