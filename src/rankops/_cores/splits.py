r"""An isotonic fit by threshold splits, for losses whose pools have no block form (Hochbaum 2001).

For a separable convex loss ``sum_i f_i(v_i)`` fitted increasing, the
entries fitted above a value t are the suffix that minimises the sum of
``f'_i(t)`` over it (the threshold form, :mod:`.one_block`), and the fit
splits there into two independent fits. A segment whose suffix sums
``Phi(s) = sum_(i >= s) f'_i(r)`` at its own root r (where their total is 0)
are all at least 0 is one block of its own fit (these sums are the
multipliers of its order constraints); otherwise the first minimiser of
``Phi`` splits it into the entries fitted below r and those at or above.
Each level splits every segment that is not one block at once, so the
levels form a tree over the blocks' values, about ``log2`` of their number
deep on the rows tried, where pooling rounds (:func:`.isotonic.pool_runs`)
take one round per block a chain takes in: a p-norm row of 10^5 entries
at p = 1.4 settles in 12 levels where its rounds ran for minutes.

Where values can be read now, on a CPU, for rows the pooling rounds leave.
The suffix sums are formed in float64: in float32 the sums inside a long
block are large and their rounding splits it where its true sums are 0.
"""

from __future__ import annotations

from typing import Any

from .._lib._compat import device as _device
from . import isotonic
from .blocks import put_rows, take_in_range
from .powers import odd_power
from .subsets import Subset

__all__ = ["split_starts", "fit_left", "COST", "LEVELS"]

# the pooling rounds' ``merge_cost`` before the splits (:func:`.isotonic.pool_runs`): at the default softness a row of
# 1000 settles in its rounds for less than its splits would cost, a chain that snowballs leaves them within ten
COST = 8.0
LEVELS = 4  # levels per ceil(log2 n) before a row is left to the pooling rounds (a tree of blocks that deep is lopsided)
_ROUNDING = 64.0  # a suffix sum below 0 by at most this many units in the last place of its terms' sum is 0


def split_starts(xp: Any, adapter: Any, rules: Any, y: Any, w: Any, q: float) -> tuple[Any, Any]:
    """``(starts, fitted)`` for rows ``y``, weights ``w`` (increasing order, the last axis) of the p-norm loss
    ``f_i(v) = |y_i - v|^q / q + w_i v`` (``f'_i(v) = w_i - phi(y_i - v)``, ``phi(u) = sign(u) |u|^(q-1)``):
    ``starts`` True where a block of the fit begins, found by threshold splits with ``rules.pooled`` a segment's root
    (roots of either sign of their terms); ``fitted`` per row, False where it took more than :data:`LEVELS` ``log2 n``
    levels (its ``starts`` then mean nothing). A segment that a level does not split is a block: the next level
    solves only the entries of those it split (:class:`.subsets.Subset`). Reads values."""
    n = y.shape[-1]
    yw = xp.astype(xp.stack([y, w]), xp.float64)
    starts = xp.broadcast_to(xp.arange(n, device=_device(y)) == 0, y.shape)
    open_ = xp.ones(y.shape, dtype=xp.bool, device=_device(y))  # entries of the segments still to test
    for _ in range(LEVELS * (n - 1).bit_length() + 1):
        part = Subset(xp, open_)
        if part.size == 0:
            break
        s, ys, ws = part.take(starts)[None, :], *part.take(yw)[:, None, :]
        root = rules.pooled(xp, adapter, s, None, xp.stack([ys, ws]), False)
        slope = ws - odd_power(xp, ys - root, q - 1.0)
        # Phi(s) = (the segment's total) - (its sum before s), from one running sum of the row
        before = xp.cumulative_sum(slope, axis=-1) - slope
        phi = adapter.segment_sum(xp, s, slope) - (before - adapter.segment_first(xp, s, before))
        phi = xp.where(s, xp.inf, phi)  # a split needs entries on either side
        tiny = _ROUNDING * xp.finfo(xp.float64).eps * adapter.segment_sum(xp, s, xp.abs(slope))
        split = _first_minima(xp, adapter, s, phi) & (phi < -tiny)
        was_split = adapter.segment_sum(xp, s, xp.astype(split, xp.float64)) > 0
        no = xp.zeros_like(open_)
        starts, open_ = starts | part.put(split[0, ...], no), part.put(was_split[0, ...], no)
    return starts, ~xp.any(open_, axis=-1)


def _first_minima(xp: Any, adapter: Any, starts: Any, a: Any) -> Any:
    """True at each segment's first minimum of ``a`` (the last axis): a stable sort by value, then by segment, puts
    it at the segment's first place (the segments in order, each as long as before)."""
    pos = xp.astype(xp.arange(a.shape[-1], device=_device(a)), xp.float64)  # exact below 2^53
    segment = xp.cumulative_sum(xp.astype(starts, xp.int64), axis=-1)
    by_value = xp.argsort(a, axis=-1, stable=True)
    order = xp.take_along_axis(by_value, xp.argsort(xp.take_along_axis(segment, by_value, axis=-1), axis=-1, stable=True), axis=-1)
    return pos == adapter.segment_first(xp, starts, xp.astype(order, xp.float64))


def fit_left(xp: Any, adapter: Any, rules: Any, roots: Any, v: Any, y: Any, w: Any, q: float, left: Any) -> Any:
    """The pooling rounds' values ``v`` (rows ``y``, weights ``w``, ``rules`` the rounds') with the rows flagged
    ``left`` fitted again by threshold splits (:func:`split_starts`, ``roots`` its rules), then pooled from those
    blocks in ``v``'s precision (:func:`.isotonic.pool_runs`: a drop their rounding leaves); a row whose splits do
    not settle is pooled on from ``v``'s blocks."""
    shape, n = v.shape, v.shape[-1]
    v, y, w = (xp.reshape(a, (-1, n)) for a in (v, y, w))
    left = xp.reshape(left, (-1,))
    rows = xp.nonzero(left)[0]
    sub = tuple(take_in_range(xp, a, rows, axis=0) for a in (v, y, w))
    starts, fitted = split_starts(xp, adapter, roots, sub[1], sub[2], q)
    yw = xp.stack(sub[1:])
    starts = xp.where(fitted[:, None], starts, isotonic.block_starts(xp, sub[0]))
    start = xp.where(fitted[:, None], adapter.segment_first(xp, starts, rules.pooled(xp, adapter, starts, None, yw, False)), sub[0])
    fit, _, _ = isotonic.pool_runs(xp, adapter, rules, start, yw, n, starts=starts)
    return xp.reshape(put_rows(xp, left, fit, v), shape)
