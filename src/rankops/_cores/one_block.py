r"""An isotonic fit guessed as one block between short blocks at its ends, and the optimality check that proves it.

For the increasing fit of separable convex losses ``f_i`` (here the p-norm
rank's, :mod:`.pnorm`: ``f_i(v) = (1/q) |y_i - v|^q + w_i v``), a partition
of a row into blocks, each at the root of ``sum_B f'_i(v_B) = 0``, is the
fit if and only if (Best & Chakravarti 1990; Robertson, Wright & Dykstra
1988, Thm. 1.3.5)

1. the block values do not decrease along the row, and
2. within each block every proper suffix has ``sum f'_i(v_B) >= 0`` (moving
   that suffix up, which keeps the order, would lower the objective
   otherwise).

Both are O(n) array operations. At strength 1 the p = 3/2 rank of a row is
one block, and the p = 4/3 rank one block between a few blocks of one or two
entries at its ends; the same holds for long rows at strength 0.1. The
pooling rounds reach such a block one neighbour at a time. Its ends follow
from the fit's threshold form: the entries fitted at or above a value t are
the suffix that minimises ``Phi_t(k) = sum_(i >= k) f'_i(t)``, and at the
block's own value both its first entry and the one past its last minimise
it. So the block's value on the whole row gives its ends, its value on
those ends gives them again, a few times; each end is split into the
decreasing runs of its one-entry values (one pooling round's blocks), and a
row whose guess passes the check (with a margin for rounding: a row within
rounding of another partition is no guess) is fitted. The others go to the
rounds, with the block pooled where it passes the check alone (a block of
its own fit is reached by pool-adjacent-violators' steps inside it, so the
whole row's fit holds it in one block). A batch whose rows are far from one
block (few drops between their one-entry values, or a first block of less
than half a row) gives up after a few operations.
"""
from __future__ import annotations

from typing import Any, Callable

from .._lib._compat import cumulative_sum, device as _device, index_dtype
from .._lib._numerics import centred_within
from .blocks import put_rows, take_in_range
from .powers import odd_power

__all__ = ["guessed_first", "guessed_fit", "fit_rows", "GUESSES", "DROPPING", "SHORTEST"]

GUESSES = 4  # the ends found again from the block's new value at most this often
# a batch is guessed where a row's one-entry values drop between at least this share of their neighbours: the weights'
# steps outrun the data's. Rows that were one block (with ends) dropped at 0.76-1 of them (p = 3/2, 4/3, 5/4 ranks
# of normal rows, n = 200 to 10^5, strength 0.01 to 10 and the default), the others at 0.86 at most, and the default
# softness's and strength 0.1's rows of 1000 at 0.55 at most, which skip the guess for a few operations
DROPPING = 0.75
SHORTEST = 128  # shorter rows pool to the end for less than the guess's few dozen operations


def guessed_first(xp: Any, adapter: Any, v0: Any, y: Any, w: Any, q: float, fit: Callable[..., tuple[Any, Any, Any]],
                  solve: Callable[[Any, Any, Any], tuple[Any, Any, Any]], root: Callable[..., Any]) -> tuple[Any, Any, Any]:
    """``(v, d, t)`` of the fit of one-entry values ``v0`` (rows ``y``, weights ``w``, increasing order, the last
    axis): each row of at least :data:`SHORTEST` entries guessed (:func:`guessed_fit`, ``solve(starts, y, w)`` its
    solve, ``root`` its block's root), the others by ``fit(v0, y, w)`` (2-D rows) from the guess's start
    (:func:`fit_rows`). Reads values."""
    n, shape = v0.shape[-1], v0.shape
    if n < SHORTEST:
        return fit(v0, y, w)
    out = fit_rows(xp, tuple(xp.reshape(a, (-1, n)) for a in (v0, y, w)), fit,
                   lambda v0, y, w: guessed_fit(xp, adapter, v0, y, w, q, lambda starts: solve(starts, y, w), root))
    return tuple(xp.reshape(a, shape) for a in out)


def guessed_fit(xp: Any, adapter: Any, v0: Any, y: Any, w: Any, q: float, solve: Callable[[Any], tuple[Any, Any, Any]],
                root: Callable[..., Any]) -> tuple[Any, Any, Any, Any, Any]:
    """``(fitted, start, v, d, t)`` for rows ``y`` (weights ``w``, one-entry values ``v0``, increasing order, 2-D),
    each guessed as one block between short blocks at its ends. ``fitted``: per row, whether its guess is the fit
    (then ``v``, ``d``, ``t`` as :func:`.pnorm.fitted_blocks` returns them); ``start``: values to pool from, ``v0`` with the block
    pooled where it is one block of its own fit (its suffixes hold), which a fit of the whole row then holds in one
    block (pooling it first is a sequence of pool-adjacent-violators' steps); ``solve(starts)``: ``(mean, d, t)`` of
    the blocks that ``starts`` begins (the fit's own solve, so that a fitted row's numbers are those the rounds would
    end on); ``root(d, members, total_w, m)``: the root ``t`` of one block per row (``d`` centred on its ``members``,
    ``m`` of them, ``total_w`` their weight; :func:`.pnorm.capped`'s). Reads values: a batch none of whose blocks holds half its row after the first ends is given up."""
    n, dev = y.shape[-1], _device(y)
    no = xp.zeros(y.shape[:-1], dtype=xp.bool, device=dev)
    drops = v0[..., 1:] < v0[..., :-1]
    if not bool(xp.any(xp.mean(xp.astype(drops, y.dtype), axis=-1) >= DROPPING)):
        return no, v0, v0, v0, v0
    idx = index_dtype(xp, dev)
    every = xp.arange(n + 1, dtype=idx, device=dev)[None, :]  # the suffixes' first entries, n the empty one
    pos = every[..., :n]
    first = xp.zeros(y.shape[:-1] + (1,), dtype=idx, device=dev)  # the block: entries first..last
    last = xp.full_like(first, n - 1)
    for i in range(GUESSES + 1):
        inside = (pos >= first) & (pos <= last)
        new_first, new_last = _ends(xp, y, w, q, _level(xp, y, w, inside, root), every, (first + last) // 2)
        if i == GUESSES or bool(xp.all((new_first == first) & (new_last == last))):
            break
        if i == 0 and not bool(xp.any(2 * (new_last - new_first + 1) >= n)):
            return no, v0, v0, v0, v0
        first, last = new_first, new_last
    inside = (pos >= first) & (pos <= last)
    whole = not bool(xp.any(~inside))  # every row one block: its sums are the row's
    starts = pos == first
    if not whole:  # the ends: each decreasing run of one-entry values one block (a pooling round's)
        drop = xp.concat([xp.zeros_like(inside[..., :1]), drops], axis=-1)
        joins = drop & (((pos <= first) & (pos > 0)) | (pos > last + 1))  # with the entry before it, in the same end
        starts = starts | (~inside & ~joins)
    mean, d, t = solve(starts)
    v, a = mean - t, d + t
    # each block's suffix sums of f' at its value (and of its terms' sizes), from the row's running sums: the block's
    # total less the sum before the entry
    terms = xp.stack([w - odd_power(xp, a, q - 1.0), w + odd_power(xp, xp.abs(d) + xp.abs(t), q - 1.0)])
    running = cumulative_sum(xp, terms) - terms  # before each entry
    if whole:
        suffix = xp.sum(terms, axis=-1, keepdims=True) - running
    else:
        suffix = adapter.segment_sum(xp, starts, terms) - (running - adapter.segment_first(xp, starts, running))
    # a suffix sum's rounding: a few units in the last place of its terms' magnitudes and of the largest running sum
    # (the sums run one entry at a time); a suffix within it of 0 might split the block, and the row goes to the rounds
    margin = 8.0 * xp.finfo(y.dtype).eps * (suffix[1, ...] + xp.max(xp.abs(running[0, ...]), axis=-1, keepdims=True))
    suffix = suffix[0, ...]
    holds = (starts | (suffix >= margin)) & (a >= 0)
    one = xp.all(holds | ~inside, axis=-1, keepdims=True)
    rises = xp.all(v[..., 1:] >= v[..., :-1], axis=-1)
    return xp.all(holds, axis=-1) & rises, xp.where(one & inside, v, v0), v, d, t


def _ends(xp: Any, y: Any, w: Any, q: float, level: Any, every: Any, mid: Any) -> tuple[Any, Any]:
    """The first and last entries of each row's block at ``level`` (an entry ``mid`` inside it; ``every``: the places
    0..n of the suffix sums): by the threshold
    form of the fit (the entries fitted at or above a value t are the suffix that minimises the sum of ``f'_i(t)``
    over it), the first minimiser of the suffix sums ``Phi(k)`` at or before ``mid``, and the last after it less one
    (at the block's own value both ends minimise: its sum is 0, its suffixes' at least 0)."""
    slope = w - odd_power(xp, y - level, q - 1.0)
    phi = xp.flip(cumulative_sum(xp, xp.flip(slope, axis=-1)), axis=-1)  # Phi(k), k = 0..n-1; Phi(n) = 0
    phi = xp.concat([phi, xp.zeros_like(phi[..., :1])], axis=-1)
    big = xp.asarray(float("inf"), dtype=phi.dtype, device=_device(phi))
    first = xp.argmin(xp.where(every <= mid, phi, big), axis=-1, keepdims=True)
    after = xp.flip(xp.where(every > mid, phi, big), axis=-1)
    last = (phi.shape[-1] - 1) - xp.argmin(after, axis=-1, keepdims=True) - 1
    return xp.astype(first, every.dtype), xp.astype(xp.maximum(last, first), every.dtype)


def fit_rows(xp: Any, rows: tuple[Any, ...], fit: Callable[..., tuple[Any, ...]], guess: Callable[..., tuple[Any, ...]]) -> tuple[Any, ...]:
    """``fit(start, *rest)`` (``rows = (v0, *rest)``, 2-D, results shaped like them) where :func:`guessed_fit`'s
    ``guess(*rows)`` does not hold, from its ``start``; its numbers where it does: those rows skip ``fit``."""
    fitted, start, *guessed = guess(*rows)
    if bool(xp.all(fitted)):
        return tuple(guessed)
    rows = (start, *rows[1:])
    if not bool(xp.any(fitted)):
        return fit(*rows)
    left = xp.nonzero(~fitted)[0]
    rest = fit(*(take_in_range(xp, r, left, axis=0) for r in rows))
    return tuple(put_rows(xp, ~fitted, r, g) for g, r in zip(guessed, rest))


def _level(xp: Any, y: Any, w: Any, inside: Any, root: Callable[..., Any]) -> Any:
    """The value of each row's block (``inside``): its mean less the ``root`` of its centred entries (two passes,
    :func:`.._lib._numerics.centred_within`)."""
    m = xp.sum(xp.astype(inside, y.dtype), axis=-1, keepdims=True)
    mean, d = centred_within(xp, y, inside, m)
    return mean - root(d, inside, xp.sum(xp.where(inside, w, 0.0), axis=-1, keepdims=True), m)
