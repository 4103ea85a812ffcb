r"""An isotonic fit guessed as one block with one-entry tails, and the optimality check that proves a guess.

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
one block and the p = 4/3 rank one block between a few one-entry blocks at
its ends (whose ``f'`` at the block's value has one sign: a prefix below it,
``f' > 0``, a suffix above it, ``f' < 0``), where the pooling rounds take
one neighbour at a time; the same holds for long rows at strength 0.1. So
the tails are found from the signs of ``f'`` at the block's value, the
block's value again on what is left, a few times, and a row whose guess
passes the check (with a margin for rounding: a row within rounding of
another partition is no guess) is fitted. The others go to the rounds, with
the block pooled where it passes the check alone (a block of its own fit is
reached by pool-adjacent-violators' steps inside it, so the whole row's fit
holds it in one block; a p = 4/3 row whose end blocks are not all one entry
at strength 1). A batch whose rows are far from one block (few drops between
their one-entry values, or a first block of less than half a row) gives up
after a few operations.
"""

from __future__ import annotations

from typing import Any, Callable

from .._lib._compat import device as _device, index_dtype
from .blocks import take_in_range
from .powers import moment_root, odd_power

__all__ = ["guessed_first", "guessed_fit", "fit_rows", "GUESSES", "DROPPING", "SHORTEST"]

GUESSES = 4  # the tails found again from the block's new value at most this often
# a batch is guessed where a row's one-entry values drop between at least this share of their neighbours: the weights'
# steps outrun the data's. Rows that were one block (with tails) dropped at 0.76-1 of them (p = 3/2, 4/3, 5/4 ranks
# of normal rows, n = 200 to 10^5, strength 0.01 to 10 and the default), the others at 0.86 at most, and the default
# softness's and strength 0.1's rows of 1000 at 0.55 at most, which skip the guess for a few operations
DROPPING = 0.75
SHORTEST = 128  # shorter rows pool to the end for less than the guess's few dozen operations


def guessed_first(xp: Any, adapter: Any, v0: Any, y: Any, w: Any, q: float, fit: Callable[..., tuple[Any, Any, Any]],
                  solve: Callable[[Any, Any, Any], tuple[Any, Any, Any]]) -> tuple[Any, Any, Any]:
    """``(v, d, t)`` of the fit of one-entry values ``v0`` (rows ``y``, weights ``w``, increasing order, the last
    axis): each row of at least :data:`SHORTEST` entries guessed (:func:`guessed_fit`, ``solve(starts, y, w)`` its
    solve), the others by ``fit(v0, y, w)`` (2-D rows) from the guess's start (:func:`fit_rows`). Reads values."""
    n, shape = v0.shape[-1], v0.shape
    if n < SHORTEST:
        return fit(v0, y, w)
    out = fit_rows(xp, tuple(xp.reshape(a, (-1, n)) for a in (v0, y, w)), fit,
                   lambda v0, y, w: guessed_fit(xp, adapter, v0, y, w, q, lambda starts: solve(starts, y, w)))
    return tuple(xp.reshape(a, shape) for a in out)


def guessed_fit(xp: Any, adapter: Any, v0: Any, y: Any, w: Any, q: float,
                solve: Callable[[Any], tuple[Any, Any, Any]]) -> tuple[Any, Any, Any, Any, Any]:
    """``(fitted, start, v, d, t)`` for rows ``y`` (weights ``w``, one-entry values ``v0``, increasing order, 2-D),
    each guessed as one block with one-entry tails. ``fitted``: per row, whether its guess is the fit (then ``v``,
    ``d``, ``t`` as :func:`.pnorm.fitted_blocks` returns them); ``start``: values to pool from, ``v0`` with the block
    pooled where it is one block of its own fit (its suffixes hold), which a fit of the whole row then holds in one
    block (pooling it first is a sequence of pool-adjacent-violators' steps); ``solve(starts)``: ``(mean, d, t)`` of
    the blocks that ``starts`` begins (the fit's own solve, so that a fitted row's numbers are those the rounds would
    end on). Reads values: a row whose block holds less than half of it after its first tails is given up."""
    n = y.shape[-1]
    no = xp.zeros(y.shape[:-1], dtype=xp.bool)
    if not bool(xp.any(xp.mean(xp.astype(v0[..., 1:] < v0[..., :-1], y.dtype), axis=-1) >= DROPPING)):
        return no, v0, v0, v0, v0
    idx = index_dtype(xp, _device(y))
    pos = xp.arange(n, dtype=idx, device=_device(y))[None, :]
    first = xp.zeros(y.shape[:-1] + (1,), dtype=idx)  # the block: entries first..last
    last = xp.full_like(first, n - 1)
    for i in range(GUESSES + 1):
        inside = (pos >= first) & (pos <= last)
        level = _level(xp, adapter, y, w, q, inside, first, solve)  # the block's value
        slope = w - odd_power(xp, y - level, q - 1.0)  # f'_i there
        # the tails: the longest prefix with f' > 0 and suffix with f' < 0
        below = xp.sum(xp.astype(xp.cumulative_sum(xp.astype(slope <= 0, idx), axis=-1) == 0, idx), axis=-1, keepdims=True)
        above = xp.sum(xp.astype(xp.flip(xp.cumulative_sum(xp.astype(xp.flip(slope, axis=-1) >= 0, idx), axis=-1), axis=-1)
                                 == 0, idx), axis=-1, keepdims=True)
        new_first, new_last = xp.minimum(below, n - 1), xp.maximum(n - 1 - above, below)
        if i == GUESSES or bool(xp.all((new_first == first) & (new_last == last))):
            break
        if i == 0 and not bool(xp.any(2 * (new_last - new_first + 1) >= n)):
            return no, v0, v0, v0, v0
        first, last = new_first, new_last
    mean, d, t = solve((pos <= first) | (pos > last))
    v, a = mean - t, d + t
    inside = (pos >= first) & (pos <= last)
    slope = xp.where(inside, w - odd_power(xp, a, q - 1.0), 0.0)
    # a suffix sum's rounding: a few units in the last place of its terms' magnitudes and of the largest partial sum
    # (the sums run one entry at a time); a suffix within it of 0 might split the block, and the row goes to the rounds
    size = xp.where(inside, w + odd_power(xp, xp.abs(d) + xp.abs(t), q - 1.0), 0.0)
    suffix, scale = (xp.flip(xp.cumulative_sum(xp.flip(s, axis=-1), axis=-1), axis=-1) for s in (slope, size))
    margin = 8.0 * xp.finfo(y.dtype).eps * (scale + xp.max(xp.abs(suffix), axis=-1, keepdims=True))
    one = xp.all(xp.where(inside & (pos > first), suffix >= margin, True) & xp.where(inside, a >= 0, True), axis=-1,
                 keepdims=True)
    rises = xp.all(v[..., 1:] >= v[..., :-1], axis=-1)
    return one[..., 0] & rises, xp.where(one & inside, v, v0), v, d, t


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
    place = xp.clip(xp.cumulative_sum(xp.astype(~fitted, left.dtype)) - 1, 0, None)
    return tuple(xp.where(fitted[:, None], g, take_in_range(xp, r, place, axis=0)) for g, r in zip(guessed, rest))


def _level(xp: Any, adapter: Any, y: Any, w: Any, q: float, inside: Any, first: Any,
           solve: Callable[[Any], tuple[Any, Any, Any]]) -> Any:
    """The value of each row's block (``inside``, from ``first`` on), from its moments about its first entry: row
    sums where the root has a closed form (q = 2, 3, 4; :func:`.powers.moment_root`), else ``solve``'s."""
    if q not in (2.0, 3.0, 4.0):
        mean, _, t = solve(~inside | (xp.arange(y.shape[-1], dtype=first.dtype, device=_device(y))[None, :] == first))
        return adapter.take(xp, mean - t, first)
    low = adapter.take(xp, y, first)
    m = xp.sum(xp.astype(inside, y.dtype), axis=-1, keepdims=True)
    c = xp.where(inside, y - low, 0.0)
    shift = xp.sum(c, axis=-1, keepdims=True) / m
    d = xp.where(inside, c - shift, 0.0)
    total_w = xp.sum(xp.where(inside, w, 0.0), axis=-1, keepdims=True)
    moments = (xp.sum(d * d, axis=-1, keepdims=True),) + ((xp.sum(d * d * d, axis=-1, keepdims=True),) if q == 4.0 else ())
    return low + shift - (total_w / m if q == 2.0 else moment_root(xp, q, total_w, m, *moments))
