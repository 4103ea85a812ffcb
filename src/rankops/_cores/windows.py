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
   over the blocks, or at q = 3 pooling rounds over them);
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

from .._lib._compat import cumulative_sum, device as _device, on_cpu
from .blocks import Blocks, find_drops, pool_rounds, take_in_range

__all__ = ["eager_on_cpu", "finish", "pool_and_finish", "few_blocks", "drops_left", "pays", "readable_on_cpu", "rows_of", "FEWEST", "GROWTH", "RADIUS", "SHARE", "SHORTEST"]

RADIUS = 16  # blocks on either side of a drop in the first windows
GROWTH = 16  # a window too small grows by this factor (each try is a fit of its own: few tries)
SHARE = 1024  # the pooling rounds stop where a row's drops stopped halving at most max(FEWEST, n / SHARE) of them
FEWEST = 4
SHORTEST = 128  # shorter rows pool to the end: their rounds cost less than the windows' few dozen operations


def few_blocks(xp: Any, rules: Any, starts: Any) -> bool:
    """Whether the pooling rounds of pooled values whose blocks ``starts`` begins go on over those blocks
    (:func:`pool_and_finish`): where they are at most ``rules.block_share`` of the entries. A round over blocks costs
    about twice as much per block as one over the entries per entry where each entry's root is cheap; measured for
    the p-norm rank after its first round (torch, B = 20, n = 1000 and B = 1, n = 10^5): at p = 3/2 the blocks paid at
    0.50-0.54 of the entries and not at 0.60, at p = 4/3 (a cubic root per entry, over the segments that changed,
    :class:`.subsets.ChangedSegments`) they paid at 0.22-0.58 and not at 0.83."""
    return int(xp.sum(xp.astype(starts, xp.int32))) <= rules.block_share * math.prod(starts.shape)


def pays(v: Any) -> bool:
    """Whether the windows pay for ``v``: on a CPU, where a pooling round costs in proportion to n. On a GPU a round
    is a few kernel launches whatever n, and the windows' own launches and reads would add to them."""
    return on_cpu(v)


def eager_on_cpu(xp: Any, adapter: Any, fn: Callable[..., Any], arrays: tuple[Any, ...], like: tuple[int, ...] = (0,),
                 **params: Any) -> tuple[Any, ...]:
    """``fn(xp, *arrays, **params)`` (as :meth:`eagerly`'s ``like``), a fit whose rounds read values where that pays
    (:func:`pays`): there a compiled graph runs it as one eager node (:meth:`eagerly`), in which its rounds and
    windows read values as eager code does. Compiled, their loops held about half the kernels of a permutahedron's
    graph and ran no faster than eager code; on a GPU they stay in the graph, their rounds fused."""
    if pays(arrays[0]):
        return adapter.eagerly(xp, fn, arrays, like=like, **params)
    return tuple(fn(xp, *arrays, **params))


def readable_on_cpu(adapter: Any, *arrays: Any) -> bool:
    """Whether a fit may read ``arrays``' values now to save work: every one of them concrete (a traced one among
    constants, as a sort's data beside its ranks under ``torch.func``, would be read as a batch), on a CPU where that
    pays (:func:`pays`), and holding entries."""
    return all(adapter.is_concrete(a) for a in arrays) and pays(arrays[0]) and 0 not in arrays[0].shape


def rows_of(xp: Any, w: Any, v: Any) -> Any:
    """``w`` broadcast to ``v`` as 2-D rows (None: ones like ``v``), the layout the rules' ``block_data`` reads."""
    n = v.shape[-1]
    return xp.reshape(xp.ones_like(v) if w is None else xp.broadcast_to(w, v.shape), (-1, n))


def drops_left(n: int) -> int:
    """The drops a row of ``n`` entries may keep when its pooling rounds stop."""
    return max(FEWEST, n // SHARE)


def finish(xp: Any, adapter: Any, rules: Any, v: Any, w: Any, solve: Callable[[Any, Any], Any], sums: Any = None) -> Any:
    """The fit of ``v`` (values of pooled blocks, last axis; ``w`` weights as ``rules`` reads them, or None: unit)
    finished in windows around its drops; ``solve(values, data)`` fits the rows of a 2-D problem, ``data`` the tuple
    of the blocks' statistics (``rules.block_data``) laid out as ``values``. ``sums``: the loss's sums over a set of
    blocks (:class:`.power_sums.PowerSums`), with which each run of drops is first pooled in one step
    (:func:`_pool_runs_of_drops`) before any window is fitted."""
    blocks = Blocks.of(xp, adapter, rules, v, w)
    return _finished(xp, adapter, rules, blocks, v.shape, solve, sums)


def pool_and_finish(xp: Any, adapter: Any, rules: Any, v: Any, w: Any, solve: Callable[[Any, Any], Any], sums: Any,
                    rounds: int) -> Any:
    """:func:`finish` for a loss with ``sums`` whose pooling rounds (:func:`.isotonic.pool_runs`, for up to ``rounds``
    more) run here over the blocks of ``v``, one entry each (:func:`.blocks.pool_rounds`), so that a round costs in
    proportion to the blocks left, not to n; they stop as the pooling rounds' ``leave`` does."""
    blocks = Blocks.of(xp, adapter, rules, v, w)
    blocks = pool_rounds(xp, adapter, sums, blocks, drops_left(v.shape[-1]) * math.prod(v.shape[:-1]), rounds)
    return _finished(xp, adapter, rules, blocks, v.shape, solve, sums)


def _finished(xp: Any, adapter: Any, rules: Any, blocks: Blocks, shape: tuple[int, ...],
              solve: Callable[[Any, Any], Any], sums: Any) -> Any:
    """:func:`finish` from the blocks: the passes (``sums``), then the windows; the entries' values, shaped ``shape``."""
    down = find_drops(blocks.value, blocks.row_first)
    drops = xp.nonzero(down)[0]
    if drops.shape[0] == 0:
        return xp.reshape(take_in_range(xp, blocks.value, blocks.of_entries(xp)), shape)
    if sums is not None:
        # the passes' pools are steps of pool-adjacent-violators: the windows go on from their blocks
        blocks, down = _pool_runs_of_drops(xp, adapter, sums, blocks, down)
        drops = xp.nonzero(down)[0]
        if drops.shape[0] == 0:
            return xp.reshape(take_in_range(xp, blocks.value, blocks.of_entries(xp)), shape)
    radius = RADIUS
    while True:
        begin, end = _windows(xp, blocks, drops, radius)
        fitted, holds = _fit_windows(xp, adapter, rules, blocks, begin, end, solve)
        if holds or radius >= blocks.value.shape[0]:  # at that radius every window is a whole row
            return xp.reshape(_spread(xp, adapter, blocks, begin, end, fitted), shape)
        radius *= GROWTH


def _windows(xp: Any, blocks: Blocks, drops: Any, radius: int) -> tuple[Any, Any]:
    """``(begin, end)``, the windows' first and last blocks: ``radius`` blocks either side of each drop (a drop
    between blocks j and j + 1), within its row; windows that overlap or touch in a row are one."""
    lowest, highest = take_in_range(xp, blocks.row_first, drops), take_in_range(xp, blocks.row_last, drops + 1)
    lo = xp.maximum(drops - radius, lowest)
    hi = xp.minimum(drops + 1 + radius, highest)  # nondecreasing along the drops, as lo is
    dev = _device(drops)
    opens = xp.concat([xp.ones((1,), dtype=xp.bool, device=dev), (lo[1:] > hi[:-1] + 1) | (lowest[1:] != lowest[:-1])])
    at = xp.nonzero(opens)[0]
    last = xp.concat([at[1:] - 1, xp.asarray([drops.shape[0] - 1], dtype=at.dtype, device=dev)])
    return take_in_range(xp, lo, at), take_in_range(xp, hi, last)


def _fit_windows(xp: Any, adapter: Any, rules: Any, blocks: Blocks, begin: Any, end: Any,
                 solve: Callable[[Any, Any], Any]) -> tuple[Any, bool]:
    """``(fit, holds)``: the windows fitted as the rows of one problem, right-aligned (the padding on the left, at
    or below the window's smallest value and from its first block's statistics, never moves a fit: ``rules.pad``), and
    whether every window's fit lies between its neighbours outside it.

    The padding lies at or below every value the window's fit can take (a pool's value lies between its blocks'):
    at the first block's value it would stand above that block once the block pooled with a lower one, and a half
    of the merge rounds that does not increase breaks their tests.
    """
    length = int(xp.max(end - begin)) + 1
    index = end[:, None] - xp.arange(length - 1, -1, -1, dtype=blocks.idx, device=_device(end))[None, :]
    real = index >= begin[:, None]
    index = xp.where(real, index, begin[:, None])
    values = _gather(xp, blocks.value, index)
    low = xp.min(values, axis=-1, keepdims=True)
    pad_value, pad_data = rules.pad(xp, low, tuple(take_in_range(xp, a, begin)[:, None] for a in blocks.data))
    fitted = solve(xp.where(real, values, pad_value),
                   tuple(xp.where(real, _gather(xp, a, index), pad) for a, pad in zip(blocks.data, pad_data)))
    # the neighbours outside each window (none at a row's ends)
    k = blocks.value.shape[0]
    before = xp.where(begin > take_in_range(xp, blocks.row_first, begin), take_in_range(xp, blocks.value, xp.clip(begin - 1, 0, None)), -math.inf)
    after = xp.where(end < take_in_range(xp, blocks.row_last, end), take_in_range(xp, blocks.value, xp.clip(end + 1, None, k - 1)), math.inf)
    first = adapter.take(xp, fitted, (length - 1 - (end - begin))[:, None])[:, 0]
    return fitted, bool(xp.all((first >= before) & (fitted[:, -1] <= after)))


def _spread(xp: Any, adapter: Any, blocks: Blocks, begin: Any, end: Any, fitted: Any) -> Any:
    """Every entry's value: its block's, from the window that holds the block, else as it was."""
    length = fitted.shape[-1]
    block = xp.arange(blocks.value.shape[0], dtype=blocks.idx, device=_device(begin))
    window = xp.clip(xp.astype(adapter.searchsorted(xp, begin, block, side="right"), blocks.idx) - 1, 0, None)
    last = take_in_range(xp, end, window)
    inside = (take_in_range(xp, begin, window) <= block) & (block <= last)
    entry = xp.where(inside, window * length + (length - 1) - (last - block), xp.zeros_like(block))
    value = xp.where(inside, take_in_range(xp, xp.reshape(fitted, (-1,)), entry), blocks.value)
    return take_in_range(xp, value, blocks.of_entries(xp))


def _gather(xp: Any, a: Any, index: Any) -> Any:
    """``a[index]`` for a 1-D ``a`` and an index array of any shape."""
    return xp.reshape(take_in_range(xp, a, xp.reshape(index, (-1,))), index.shape)


PASSES = 2  # min-max passes of :func:`_pool_runs_of_drops`: they cut many runs of drops to a few
EXTENSIONS = 4  # passes that extend runs (:func:`_extend_each_run`) after them


def _pool_runs_of_drops(xp: Any, adapter: Any, sums: Any, blocks: Blocks, down: Any) -> tuple[Blocks, Any]:
    """``(blocks, drops)``: the blocks after the runs of drops (``down``, :func:`.blocks.find_drops`) pooled, one step per run and
    pass, until none is left or for :data:`PASSES` passes (none where ``sums`` give no range's value: ``ranges``), then
    :data:`EXTENSIONS` passes that extend every run to one side, right and left in turn (:func:`_extend_each_run`), and
    the drops left between them.

    A run of drops (blocks ``s`` to ``e``, each above the next) between an
    increasing part on its left and one on its right ends in one block that
    holds it, a suffix of the left part and a prefix of the right (pooling
    adjacent violators), and no other block moves: :func:`_pool_each_run`
    finds it. A pass pools the runs whose pools do not meet, and after it
    the blocks that took one value are one block (their statistics
    combined, :meth:`.power_sums.PowerSums.stats` about their joint mean),
    so that a range never cuts a block: a pool of whole blocks that violate
    is a step of pool-adjacent-violators, whatever the order (Best &
    Chakravarti 1990). A row with no drop left is fitted.
    """
    if sums.signs and blocks.low is None:
        raise ValueError("the min-max passes at q = 3 and 5 read each block's first datum: rules.block_low")
    current, owner = blocks, None  # owner: each of the given blocks' block in ``current`` (None: the same)
    # the min-max passes read any range's value (or, at q = 3 and 5, a bound by its first datum): not where its moments
    # give neither (``sums.ranges``)
    for i, extend in enumerate([False] * (PASSES if sums.ranges else 0) + [True] * EXTENSIONS):
        value, data, first, last = current.value, current.data, current.row_first, current.row_last
        if extend:
            fitted = _extend_each_run(xp, adapter, sums, value, data, first, last, down, current.idx, rightward=i % 2 == 0)
        else:
            fitted = _pool_each_run(xp, adapter, sums, current, down)
        # a drop between two of the blocks is one between their groups (a group's blocks take one value): where none
        # is left, the values alone are the fit, and the groups' statistics are not read
        left = find_drops(fitted, first)
        if not bool(xp.any(left)):
            return dataclasses.replace(current, value=fitted).with_owner(xp, blocks.of_entries(xp), owner), left
        one = xp.ones((1,), dtype=xp.bool, device=_device(value))
        starts = xp.concat([one, (fitted[1:] != fitted[:-1]) | (first[1:] != first[:-1])])
        current, owner = current.regrouped(xp, adapter, sums, starts, fitted, owner)
        down = find_drops(current.value, current.row_first)
    return current.with_owner(xp, blocks.of_entries(xp), owner), down


def _pool_each_run(xp: Any, adapter: Any, sums: Any, blocks: Blocks, down: Any) -> Any:
    """Every block's value after one pass over ``blocks``: each run of drops whose pool meets no other run's pooled.

    The pool's value is the min-max formula's (Robertson, Wright & Dykstra
    1988, Thm. 1.4.4) at the run's first block ``s``: ``max over j <= s of
    min over k >= s of value(j..k)``, over the :data:`RADIUS` blocks left of
    ``s`` and the run with :data:`RADIUS` blocks past it (within the row and
    short of the neighbouring runs): one array of pool values per run, from
    sums running outward from ``s`` (about its mean, as the merge rounds'
    tests). The left blocks above it and the right ones below it join it (the
    parts are increasing). Where two runs' pools would meet, the even ones
    pool (in the order of the runs).

    At q = 3 and 5 (``sums.signs``: ``phi(u) = u |u|^(q-2)``, an even
    power's sign) a range's moments give ``v~``, the least root of ``g(v) =
    sum (y_i - v)^(q-1) = W`` (at q = 5 by Newton's steps from above), which
    is its value ``v`` (the root of ``h(v) = sum phi(y_i - v) = W``) where
    every datum lies at or above ``v`` (there ``g = h``). Each range's term
    in the formula is ``min(v~, y_j)``, ``y_j`` its first and smallest datum
    (``low``, :class:`.blocks.Blocks`): exact where the range's data lie
    above its value, and below its value where some datum does not (``y_j <
    v``). So every term is at most its range's value, and any ``j`` but the
    pool's own first block ``j*`` gives at most the level (the formula's for
    exact values). At ``j*`` every range's data lie at or above the level
    ``L`` and its value is at least ``L``, so ``g(L) = h(L) >= W`` with ``L``
    left of ``g``'s minimum: ``L <= v~``, and ``y_j* >= L``; every term is at
    least ``L``, and the pool's own is exact. The level is the fit's. Tried
    against sequential pool-adjacent-violators in float64 on 1,500 runs at q
    = 3: the same level in each, where ``v~`` alone was wrong in 4% of them.
    """
    value, data, low, idx = blocks.value, blocks.data, blocks.low, blocks.idx
    dev = _device(value)
    no = xp.zeros((1,), dtype=xp.bool, device=dev)
    start, end, lo, hi = _runs(xp, down, blocks.row_first, blocks.row_last)
    big = value.shape[0]
    width = int(xp.max(end - start)) + RADIUS + 1
    left = start[:, None] - xp.arange(1, RADIUS + 1, dtype=idx, device=dev)[None, :]  # blocks s - 1, s - 2, ...
    right = start[:, None] + xp.arange(width, dtype=idx, device=dev)[None, :]  # blocks s, s + 1, ...
    left_in, right_in = left >= lo[:, None], right <= hi[:, None]
    left, right = xp.clip(left, 0, None), xp.clip(right, None, big - 1)
    # every block either side of each run in one gather: value, statistics (and ``low``), one row each
    inside = xp.concat([left_in, right_in], axis=-1)
    table = blocks.table(xp)
    index = xp.concat([left, right], axis=-1)
    near = xp.reshape(take_in_range(xp, table, xp.reshape(index, (-1,)), axis=-1), (table.shape[0],) + index.shape)
    centre = take_in_range(xp, data[0], start)[:, None]
    terms = sums.stats(xp, None, tuple(xp.unstack(near[1:blocks.low_row, ...])), centre)
    terms = xp.where(inside, xp.stack(terms), 0.0)
    # the sums over the blocks from ``s`` to each one, running outward from it: j = s (nothing), s - 1, ...; k = s, ...
    lefts = cumulative_sum(xp, terms[..., :RADIUS])
    lefts = xp.concat([xp.zeros_like(lefts[..., :1]), lefts], axis=-1)
    pools = lefts[..., :, None] + cumulative_sum(xp, terms[..., RADIUS:])[..., None, :]
    pooled = sums.value(xp, tuple(xp.unstack(pools)), centre[..., None], centre[..., None])
    if low is not None:
        # a range's moments give its value where its entries lie above it; elsewhere its first datum stands in (below
        # its value there, so the formula's level is the fit's: :meth:`Blocks.low`)
        pooled = xp.minimum(pooled, xp.concat([take_in_range(xp, low, start)[:, None], near[blocks.low_row, :, :RADIUS]], axis=-1)[:, :, None])
    lowest = xp.min(xp.where(right_in[:, None, :], pooled, math.inf), axis=-1)
    j_in = xp.concat([xp.ones_like(left_in[:, :1]), left_in], axis=-1)
    level = xp.max(xp.where(j_in, lowest, -math.inf), axis=-1)
    # the pool's ends: the left part's blocks above it, the right part's (past e) below it
    above = left_in & (near[0, :, :RADIUS] > level[:, None])
    below = right_in & (right > end[:, None]) & (near[0, :, RADIUS:] < level[:, None])
    begin = start - xp.sum(xp.astype(above, idx), axis=-1)
    stop = end + xp.sum(xp.astype(below, idx), axis=-1)
    meets = begin[1:] <= stop[:-1]
    parity = xp.astype(xp.arange(start.shape[0], dtype=idx, device=dev) % 2, xp.bool)
    taken = xp.nonzero(~parity | ~(xp.concat([no, meets]) | xp.concat([meets, no])))[0]
    return _levelled(xp, adapter, value, *(take_in_range(xp, a, taken) for a in (begin, stop, level)))


def _runs(xp: Any, down: Any, first: Any, last: Any) -> tuple[Any, Any, Any, Any]:
    """``(start, end, lo, hi)`` of each run of drops (``down``, :func:`.blocks.find_drops`): its first and last blocks, and the range
    its pool may take, within its row and short of the neighbouring runs of that row."""
    no = xp.zeros((1,), dtype=xp.bool, device=_device(down))
    start = xp.nonzero(down & ~xp.concat([no, down[:-1]]))[0]  # s: each run's first block
    end = xp.nonzero(down & ~xp.concat([down[1:], no]))[0] + 1  # e: its last
    row = take_in_range(xp, first, start)
    after_same = xp.concat([no, row[1:] == row[:-1]])
    before_same = xp.concat([row[1:] == row[:-1], no])
    lo = xp.where(after_same, xp.concat([row[:1], end[:-1] + 1]), row)
    hi = take_in_range(xp, last, start)
    return start, end, lo, xp.where(before_same, xp.concat([start[1:] - 1, hi[-1:]]), hi)


def _levelled(xp: Any, adapter: Any, value: Any, begin: Any, stop: Any, level: Any) -> Any:
    """``value`` with the blocks from each ``begin`` to its ``stop`` (disjoint ranges, in order) at that ``level``."""
    idx = begin.dtype
    block = xp.arange(value.shape[0], dtype=idx, device=_device(value))
    run = xp.clip(xp.astype(adapter.searchsorted(xp, begin, block, side="right"), idx) - 1, 0, None)
    inside = (block >= take_in_range(xp, begin, run)) & (block <= take_in_range(xp, stop, run))
    return xp.where(inside, take_in_range(xp, level, run), value)


CHAIN = 16  # an extension reaches at most this many times the blocks per run past its run (the next pass goes on)


def _extend_each_run(xp: Any, adapter: Any, sums: Any, value: Any, data: Any, first: Any, last: Any, down: Any, idx: Any,
                     rightward: bool) -> Any:
    """Every block's value after one pass: each run of drops pooled, then extended block by block to one side while
    the pool stands above its next block on the right (``rightward``), or below its next block on the left.

    Each such step pools two adjacent violators, so the pass is a sequence of
    steps of pool-adjacent-violators (for a loss whose pools keep every entry
    above their value, the unsigned p-norm fit, the moments of each pool on
    the way give its value); a run whose first block (last, leftward) another
    run's pool takes sits this pass out, so the pools taken are disjoint. A
    chain that takes one neighbour per pooling round takes one pass here.

    The steps are tried in a window past each run's blocks that grows by
    :data:`GROWTH` for the runs whose pool took all of it (most take a few
    blocks: a row of 10^5 at the default softness has a few dozen runs, each
    of which could reach tens of thousands of blocks), up to :data:`CHAIN`
    times the blocks per run.
    """
    start, end, _, _ = _runs(xp, down, first, last)
    # through the row, other runs' blocks too (a violating block is a step, whatever pooled it): the runs whose own
    # start (end, leftward) another one's pool takes stay out of this pass
    base, limit = (start, take_in_range(xp, last, start)) if rightward else (end, take_in_range(xp, first, start))
    reach, length = xp.abs(limit - base), end - start
    longest = int(xp.max(length))
    cap = longest + max(RADIUS, CHAIN * value.shape[0] // start.shape[0])
    width = min(longest + RADIUS + 1, cap, int(xp.max(reach)) + 1)
    size, level, whole = _extension(xp, adapter, sums, value, data, base, reach, length, width, rightward, idx)
    while width < cap and bool(xp.any(whole)):  # ``whole``: the runs tried again, each with a wider window
        todo = xp.nonzero(whole)[0]
        width = min(width * GROWTH, cap, int(xp.max(take_in_range(xp, reach, todo))) + 1)
        again = _extension(xp, adapter, sums, value, data, *(take_in_range(xp, a, todo) for a in (base, reach, length)),
                           width, rightward, idx)
        slot = xp.clip(cumulative_sum(xp, xp.astype(whole, idx)) - 1, 0, None)  # each run's place among those tried
        size, level, whole = (xp.where(whole, take_in_range(xp, a, slot), b) for a, b in zip(again, (size, level, whole)))
    begin, stop = (start, start + size) if rightward else (end - size, end)
    # how many pools hold each run's own first block (last, leftward): only an earlier run's (a later one's) besides;
    # the pools that begin at or before it less those that stop before it (leftward, a later pool may begin first)
    held = (adapter.searchsorted(xp, xp.sort(begin), base, side="right")
            - adapter.searchsorted(xp, xp.sort(stop), base, side="left"))
    own = xp.nonzero(held == 1)[0]
    return _levelled(xp, adapter, value, *(take_in_range(xp, a, own) for a in (begin, stop, level)))


def _extension(xp: Any, adapter: Any, sums: Any, value: Any, data: Any, base: Any, reach: Any, length: Any, width: int,
               rightward: bool, idx: Any) -> tuple[Any, Any, Any]:
    """``(size, level, whole)`` of the runs from ``base`` (their first block, or last leftward; ``length`` their
    drops, ``reach`` the blocks to their row's end) extended within ``width`` steps: the blocks past ``base`` that
    each pool takes, its value, and whether it took every step of the width (the width's last is then its end)."""
    step = xp.arange(width, dtype=idx, device=_device(value))[None, :]
    index = base[:, None] + step if rightward else base[:, None] - step
    inside = step <= reach[:, None]
    index = xp.clip(index, 0, value.shape[0] - 1)
    centre = take_in_range(xp, data[0], base)[:, None]
    terms = sums.stats(xp, None, tuple(_gather(xp, a, index) for a in data), centre)
    pooled = sums.value(xp, tuple(cumulative_sum(xp, xp.where(inside, t, 0.0)) for t in terms), centre, centre)
    # the next block past each prefix, and whether the pool takes it: the run's own blocks always
    nxt = xp.clip(index + 1 if rightward else index - 1, 0, value.shape[0] - 1)
    has_next = step + 1 <= reach[:, None]
    beyond = _gather(xp, value, nxt)
    violates = (pooled > beyond) if rightward else (pooled < beyond)
    going = (step < length[:, None]) | (has_next & violates)
    # the prefix's length: the steps before the first that stops (one past the last step at the width's end)
    taken = xp.sum(xp.astype(cumulative_sum(xp, xp.astype(~going, idx)) == 0, idx), axis=-1)
    size = xp.clip(taken, None, width - 1)
    return size, xp.reshape(adapter.take(xp, pooled, size[:, None]), (-1,)), taken == width
