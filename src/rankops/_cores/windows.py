r"""The last violators of a pooling fit, each solved alone in a window of blocks around it.

A pooling round (:func:`.isotonic.pool_runs`) costs O(n) however few blocks
are still above their successor, and rows often end on a few chains that
snowball: a block taking one neighbour per round, for tens of rounds (the KL
soft rank of 10^5 normal entries: 76 drops after four rounds, 8 after eight,
then one to four for seventeen more). On a backend that reads values now,
the rounds stop once a row holds few drops, and the fit is finished here:

1. each block becomes one entry, with its value and its statistics (the
   fit's losses are *block-compressible*: a pooled block acts as one entry
   of its total weight, for least squares ``W_B = sum_B w`` and for the KL
   loss ``log W_B = LSE_B(log w)``, and for the p-norm losses of
   :mod:`.pnorm` as its size, weight, mean and centred moments, the merge
   rounds' block form of :class:`.power_sums.PowerSums`);
2. every drop gets a window of ``radius`` blocks on either side, clipped to
   its row, and overlapping or touching windows join;
3. the windows, side by side as the rows of a small problem, are fitted by
   the caller's ``solve`` (the same pooling rounds, as many as a whole row
   may take, then the merge rounds; for the p-norm losses, the merge rounds
   over the blocks);
4. a window whose fit ends above its right neighbour or starts below its
   left one is too small: every window grows (by ``GROWTH``) and step 3
   runs again (at most until each window is its whole row).

Why this is the fit of the whole row: pool-adjacent-violators reaches the
same optimum whatever order it pools violating neighbours in (Best and
Chakravarti 1990). Pooling inside a window pools violators of the whole row,
and once no window's fit violates its neighbours, no drop is left anywhere
(outside the windows there was none): the row is fitted. The cost is a few
O(n) array operations once, and rounds over the windows' blocks only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from .._lib._compat import device as _device, index_dtype, on_cpu

__all__ = ["finish", "drops_left", "pays", "rows_of", "FEWEST", "GROWTH", "RADIUS", "SHARE", "SHORTEST"]

RADIUS = 16  # blocks on either side of a drop in the first windows
GROWTH = 16  # a window too small grows by this factor (each try is a fit of its own: few tries)
SHARE = 1024  # the pooling rounds stop where a row's drops stopped halving at most max(FEWEST, n / SHARE) of them
FEWEST = 4
SHORTEST = 128  # shorter rows pool to the end: their rounds cost less than the windows' few dozen operations


def pays(v: Any) -> bool:
    """Whether the windows pay for ``v``: on a CPU, where a pooling round costs in proportion to n. On a GPU a round
    is a few kernel launches whatever n, and the windows' own launches and reads would add to them."""
    return on_cpu(v)


def rows_of(xp: Any, w: Any, v: Any) -> Any:
    """``w`` broadcast to ``v`` as 2-D rows (None: ones like ``v``), the layout the rules' ``block_data`` reads."""
    n = v.shape[-1]
    return xp.reshape(xp.ones_like(v) if w is None else xp.broadcast_to(w, v.shape), (-1, n))


def drops_left(n: int) -> int:
    """The drops a row of ``n`` entries may keep when its pooling rounds stop."""
    return max(FEWEST, n // SHARE)


def finish(xp: Any, adapter: Any, rules: Any, v: Any, w: Any, solve: Callable[[Any, Any], Any]) -> Any:
    """The fit of ``v`` (values of pooled blocks, last axis; ``w`` weights as ``rules`` reads them, or None: unit)
    finished in windows around its drops; ``solve(values, data)`` fits the rows of a 2-D problem, ``data`` the tuple
    of the blocks' statistics (``rules.block_data``) laid out as ``values``."""
    blocks = _Blocks.of(xp, adapter, rules, v, w)
    drops = xp.nonzero((blocks.value[:-1] > blocks.value[1:]) & (blocks.row_first[:-1] == blocks.row_first[1:]))[0]
    if drops.shape[0] == 0:
        return v
    radius = RADIUS
    while True:
        begin, end = _windows(xp, blocks, drops, radius)
        fitted, holds = _fit_windows(xp, adapter, rules, blocks, begin, end, solve)
        if holds or radius >= blocks.value.shape[0]:  # at that radius every window is a whole row
            return xp.reshape(_spread(xp, adapter, blocks, begin, end, fitted), v.shape)
        radius *= GROWTH


@dataclasses.dataclass(frozen=True)
class _Blocks:
    """The blocks of a batch of rows, one entry each along one axis: value, statistics (``rules.block_data``: a
    tuple), and its row's first and last block; ``starts`` (the entries' flattened block starts) spreads them back;
    ``idx`` the index dtype."""

    value: Any
    data: tuple[Any, ...]
    row_first: Any
    row_last: Any
    starts: Any
    idx: Any

    @classmethod
    def of(cls, xp: Any, adapter: Any, rules: Any, v: Any, w: Any) -> _Blocks:
        n = v.shape[-1]
        idx = index_dtype(xp, _device(v))
        rows = xp.reshape(v, (-1, n))
        first = xp.ones((rows.shape[0], 1), dtype=xp.bool, device=_device(v))
        starts = xp.concat([first, rows[:, 1:] != rows[:, :-1]], axis=-1)
        data = rules.block_data(xp, adapter, starts, w, v)
        starts = xp.reshape(starts, (-1,))
        heads = xp.nonzero(starts)[0]
        row = heads // n
        return cls(value=xp.take(xp.reshape(v, (-1,)), heads), data=tuple(xp.take(xp.reshape(a, (-1,)), heads) for a in data),
                   row_first=xp.astype(adapter.searchsorted(xp, row, row, side="left"), idx),
                   row_last=xp.astype(adapter.searchsorted(xp, row, row, side="right"), idx) - 1, starts=starts, idx=idx)


def _windows(xp: Any, blocks: _Blocks, drops: Any, radius: int) -> tuple[Any, Any]:
    """``(begin, end)``, the windows' first and last blocks: ``radius`` blocks either side of each drop (a drop
    between blocks j and j + 1), within its row; windows that overlap or touch in a row are one."""
    lowest, highest = xp.take(blocks.row_first, drops), xp.take(blocks.row_last, drops + 1)
    lo = xp.maximum(drops - radius, lowest)
    hi = xp.minimum(drops + 1 + radius, highest)  # nondecreasing along the drops, as lo is
    dev = _device(drops)
    opens = xp.concat([xp.ones((1,), dtype=xp.bool, device=dev), (lo[1:] > hi[:-1] + 1) | (lowest[1:] != lowest[:-1])])
    at = xp.nonzero(opens)[0]
    last = xp.concat([at[1:] - 1, xp.asarray([drops.shape[0] - 1], dtype=at.dtype, device=dev)])
    return xp.take(lo, at), xp.take(hi, last)


def _fit_windows(xp: Any, adapter: Any, rules: Any, blocks: _Blocks, begin: Any, end: Any,
                 solve: Callable[[Any, Any], Any]) -> tuple[Any, bool]:
    """``(fit, holds)``: the windows fitted as the rows of one problem, right-aligned (the padding on the left, from
    the window's first block, never moves a fit: ``rules.pad``), and whether every window's fit lies between its
    neighbours outside it."""
    length = int(xp.max(end - begin)) + 1
    index = end[:, None] - xp.arange(length - 1, -1, -1, dtype=blocks.idx, device=_device(end))[None, :]
    real = index >= begin[:, None]
    index = xp.where(real, index, begin[:, None])
    first = tuple(xp.take(a, begin)[:, None] for a in (blocks.value, *blocks.data))
    pad_value, pad_data = rules.pad(xp, first[0], first[1:])
    fitted = solve(xp.where(real, _gather(xp, blocks.value, index), pad_value),
                   tuple(xp.where(real, _gather(xp, a, index), pad) for a, pad in zip(blocks.data, pad_data)))
    # the neighbours outside each window (none at a row's ends)
    k = blocks.value.shape[0]
    before = xp.where(begin > xp.take(blocks.row_first, begin), xp.take(blocks.value, xp.clip(begin - 1, 0, None)), -math.inf)
    after = xp.where(end < xp.take(blocks.row_last, end), xp.take(blocks.value, xp.clip(end + 1, None, k - 1)), math.inf)
    first = adapter.take(xp, fitted, (length - 1 - (end - begin))[:, None])[:, 0]
    return fitted, bool(xp.all((first >= before) & (fitted[:, -1] <= after)))


def _spread(xp: Any, adapter: Any, blocks: _Blocks, begin: Any, end: Any, fitted: Any) -> Any:
    """Every entry's value: its block's, from the window that holds the block, else as it was."""
    length = fitted.shape[-1]
    block = xp.arange(blocks.value.shape[0], dtype=blocks.idx, device=_device(begin))
    window = xp.clip(xp.astype(adapter.searchsorted(xp, begin, block, side="right"), blocks.idx) - 1, 0, None)
    last = xp.take(end, window)
    inside = (xp.take(begin, window) <= block) & (block <= last)
    entry = xp.where(inside, window * length + (length - 1) - (last - block), xp.zeros_like(block))
    value = xp.where(inside, xp.take(xp.reshape(fitted, (-1,)), entry), blocks.value)
    return xp.take(value, xp.cumulative_sum(xp.astype(blocks.starts, blocks.idx)) - 1)


def _gather(xp: Any, a: Any, index: Any) -> Any:
    """``a[index]`` for a 1-D ``a`` and an index array of any shape."""
    return xp.reshape(xp.take(a, xp.reshape(index, (-1,))), index.shape)
