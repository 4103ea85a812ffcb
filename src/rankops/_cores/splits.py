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

from .._lib._compat import accumulation_dtype, device as _device
from .._lib._numerics import safe_divide
from . import isotonic
from .blocks import put_rows, take_in_range
from .powers import phi_and_slope
from .subsets import Subset

__all__ = ["split_starts", "fit_left", "cost", "LEVELS"]

# the pooling rounds' ``merge_cost`` before the splits (:func:`.isotonic.pool_runs`): at the default softness a row of
# 1000 settles in its rounds for less than its splits would cost, a chain that snowballs leaves them within ten
COST = 8.0
# where the rounds cannot count the blocks (``merge_all``): ``TRACED_COST log2 n`` rounds before a row stalls out
TRACED_COST = 2.0
LEVELS = 4  # levels per ceil(log2 n) before a row is left to the pooling rounds (a tree of blocks that deep is lopsided)


def cost(adapter: Any, v: Any) -> float:
    """The pooling rounds' ``merge_cost`` before the splits: :data:`COST` where the rounds count a row's blocks
    (:meth:`reads_in_eager_node`), else :data:`TRACED_COST`."""
    return COST if adapter.reads_in_eager_node(v) else TRACED_COST


def split_starts(xp: Any, adapter: Any, shift: Any, y: Any, w: Any, q: float) -> tuple[Any, Any]:
    """``(starts, fitted)`` for rows ``y``, weights ``w`` (increasing order, the last axis) of the p-norm loss
    ``f_i(v) = |y_i - v|^q / q + w_i v`` (``f'_i(v) = w_i - phi(y_i - v)``, ``phi(u) = sign(u) |u|^(q-1)``):
    ``starts`` True where a block of the fit begins, found by threshold splits; ``fitted`` per row, False where it
    took more than :data:`LEVELS` ``log2 n`` levels (its ``starts`` then mean nothing). ``shift(xp, adapter,
    starts, y, w)``: a segment's root (terms of either sign) as ``(mean, d, t)``, ``d + t`` each entry's ``y_i - v``.
    Where values can be read now, the next level solves only the entries of the segments a level split
    (:class:`.subsets.Subset`: a segment it did not split is a block); elsewhere every level runs over every entry,
    until none splits."""
    n = y.shape[-1]
    yw = xp.astype(xp.stack([y, w]), accumulation_dtype(xp, y))
    starts = xp.broadcast_to(xp.arange(n, device=_device(y)) == 0, y.shape)
    open_ = xp.ones(y.shape, dtype=xp.bool, device=_device(y))  # entries of the segments still to test
    # the first level only solves the whole rows (``primed`` False): one call of ``shift`` for a compiler to trace;
    # the state leads with ``u``, traced wherever the data are (a sort's ``y``, its ranks, is a constant)
    state = (xp.zeros_like(yw[0, ...]), starts, open_, xp.zeros((), dtype=xp.bool, device=_device(y)))
    levels, concrete = LEVELS * (n - 1).bit_length() + 2, adapter.is_concrete(y) and adapter.is_concrete(w)
    if not concrete:
        def level(state: tuple[Any, ...]) -> tuple[Any, ...]:
            split, was_split, u = _split(xp, adapter, shift, state[1], state[0], yw, q, state[3])
            return u, state[1] | (split & state[2]), (was_split | ~state[3]) & state[2], xp.ones_like(state[3])

        state = adapter.settle(xp, level, state, lambda old, new: xp.any(new[2]), levels, 1, like=(yw,))
    for _ in range(levels if concrete else 0):
        part = Subset(xp, state[2])
        if part.size == 0:
            break
        split, was_split, u = (a[0, ...] for a in _split(xp, adapter, shift, part.take(state[1])[None, :], part.take(
            state[0])[None, :], part.take(yw)[:, None, :], q, state[3]))
        no = xp.zeros_like(open_)
        state = part.put(u, state[0]), state[1] | part.put(split, no), part.put(was_split | ~state[3], no), xp.ones_like(state[3])
    return state[1], ~xp.any(state[2], axis=-1)


def _split(xp: Any, adapter: Any, shift: Any, s: Any, u: Any, yw: Any, q: float, primed: Any) -> tuple[Any, Any, Any]:
    """``(split, was_split, u)`` for the segments that ``s`` begins, ``u = y - v`` at each one's root: True where a
    new block starts (each segment's first minimiser of its suffix sums ``Phi``, where one is below 0 and the two
    parts' roots rise across it), and on the entries of a segment so split; ``u`` at the roots of the parts. Not
    ``primed`` (a 0-d bool; ``u`` not yet solved): no split, ``u`` at the segments' roots."""
    y, w = yw[0, ...], yw[1, ...]
    phi, slope = phi_and_slope(xp, u, q, tangent=False)
    terms = xp.stack([w - phi, (q - 1.0) * slope])
    terms = xp.concat([terms, xp.abs(terms[:1, ...])])  # f'_i at the root, its derivative, |f'_i|
    # within each segment, in one scan: the sums before each entry, and from it to the segment's end (reversed)
    links = xp.broadcast_to(xp.astype(~s[..., 1:], u.dtype), terms.shape[:-1] + (u.shape[-1] - 1,))
    shifted = xp.where(s, 0.0, xp.concat([xp.zeros_like(terms[..., :1]), terms[..., :-1]], axis=-1))
    sums = adapter.linear_scan(xp, xp.concat([links, xp.flip(links, axis=-1)]), xp.concat([shifted, xp.flip(terms, axis=-1)]))
    before, after = sums[:3, ...], xp.flip(sums[3:, ...], axis=-1)
    # Phi at the exact root r, to first order from the root found: the segment's total h = sum f'_i (0 at r) taken
    # out of each part in proportion to its share of the derivative; from the shorter side in |f'| (its rounding)
    h, curve = after[0, ...] + before[0, ...], adapter.segment_sum(xp, s, terms[1, ...])
    phi = xp.where(after[2, ...] <= before[2, ...], after[0, ...] - h * safe_divide(xp, after[1, ...], curve),
                   h * safe_divide(xp, before[1, ...], curve) - before[0, ...])
    found = _first_minima(xp, adapter, s, xp.where(s, xp.inf, phi)) & (phi < 0.0) & ~s & primed
    # a split stands where the parts' roots, each as exact as its value, rise across it (they do wherever Phi < 0),
    # solved from the segment's root (one number per part); ``u`` from the parts' own differences: no cancellation
    mean, d, t = shift(xp, adapter, s | found, y, w, near=adapter.segment_first(xp, s | found, y - u))
    value = mean - t
    split = found & xp.concat([xp.zeros_like(found[..., :1]), value[..., 1:] > value[..., :-1]], axis=-1)
    return split, adapter.segment_sum(xp, s, xp.astype(split, u.dtype)) > 0, d + t


def _first_minima(xp: Any, adapter: Any, starts: Any, a: Any) -> Any:
    """True at each segment's first minimum of ``a`` (the last axis): its position, negated, is the largest among
    the entries that hold the minimum."""
    neg = -xp.astype(xp.arange(a.shape[-1], device=_device(a)), a.dtype)  # exact below 2^24 in float32
    at = adapter.segment_max(xp, starts, -a) == -a
    return adapter.segment_max(xp, starts, xp.where(at, neg, xp.asarray(-xp.inf, dtype=a.dtype, device=_device(a)))) == neg


def fit_left(xp: Any, adapter: Any, rules: Any, shift: Any, v: Any, y: Any, w: Any, q: float, left: Any) -> Any:
    """The pooling rounds' values ``v`` (rows ``y``, weights ``w``, ``rules`` the rounds') with the rows flagged
    ``left`` fitted again by threshold splits (:func:`split_starts`, ``shift`` as there), then pooled from those
    blocks in ``v``'s precision (:func:`.isotonic.pool_runs`: a drop their rounding leaves); a row whose splits do
    not settle is pooled on from ``v``'s blocks. Where the flags cannot be read now, every row is split."""
    shape, n = v.shape, v.shape[-1]
    v, y, w = (xp.reshape(a, (-1, n)) for a in (v, y, w))
    left = xp.reshape(left, (-1,))
    read = all(adapter.is_concrete(a) for a in (v, y, w, left))
    rows = xp.nonzero(left)[0] if read else None
    sub = tuple(take_in_range(xp, a, rows, axis=0) for a in (v, y, w)) if read else (v, y, w)
    starts, fitted = split_starts(xp, adapter, shift, sub[1], sub[2], q)
    yw = xp.stack(sub[1:])
    starts = xp.where(fitted[:, None], starts, isotonic.block_starts(xp, sub[0]))
    start = xp.where(fitted[:, None], adapter.segment_first(xp, starts, rules.pooled(xp, adapter, starts, None, yw, False)), sub[0])
    fit, _, _ = isotonic.pool_runs(xp, adapter, rules, start, yw, n, starts=starts)
    return xp.reshape(put_rows(xp, left, fit, v) if read else xp.where(left[:, None], fit, v), shape)
