"""Chains of violators pooled in one step, in arrays of fixed shapes: pooling rounds that finish snowballing chains
where they cannot stop to read how many drops are left (``jax.jit``, a GPU).

A pooling round (:func:`.isotonic.pool_runs`) pools every run of drops at
once, and most rows settle within a few rounds; but a row may end on a
few chains that snowball, a block taking one neighbour per round: the
p = 3/2 soft rank of 10^5 normal entries at strength 0.1 ends on one over
about 1,200 blocks, the p = 3/2 soft sort at the default softness on four
over about 190, the KL soft rank of B = 20 rows of 1000 at the default
softness twice the rounds of ``"l2"``'s, and the l2 soft sort of a row of
10^5 at the default softness 68 and the merge rounds. Where values can be read now,
on a CPU, :mod:`.windows` finishes such rows. Elsewhere, in each round once
a row's drops stopped halving, :class:`Extension` takes the first
:data:`DROPS` drops of each row and pools each with its neighbours block by
block, to the right while the pool stands above the block that follows it
and to the left while it stands below the block before it, within a window
of blocks.

Each such pool is a sequence of steps of pool-adjacent-violators (the two
blocks of the drop first, then each block that violates the pool), so the
fit is the same whatever order they come in (Best & Chakravarti 1990), and
pools that share no block may be taken together. A pool's value comes from
its blocks' statistics, through the loss's ``rule``: for the p-norm losses
their size, weight, mean and centred moments (:class:`.power_sums.PowerSums`,
exact along such steps, where a pool keeps every entry above its value, or
for the sort's evenly stepped ranks :class:`.power_sums.SteppedSignedSums`),
for the KL loss the log-sums of its data and weights (:class:`LogSums`). A
window that ends inside a chain takes it to its last block; the next round
goes on.
"""

from __future__ import annotations

import math
from typing import Any

from .._lib._compat import cumulative_sum, device as _device, index_dtype
from .._lib._numerics import safe_divide, safe_log_divide

__all__ = ["Extension", "BlockRows", "LogSums", "MeanSums", "DROPS", "SPAN"]

DROPS = 4  # drops per row that a round extends, each to both sides
SPAN = 4  # a window holds n / (SPAN DROPS) blocks: its 2 DROPS windows together half a row's length


class Extension:
    """The pooling rounds' extension of chains (:func:`.isotonic.pool_runs`'s ``extend``) for a loss whose ``rule``
    values a range of blocks from their statistics: ``rule.block_stats(xp, adapter, starts, data)``, each entry's
    block's (of the rounds' weights, the row and its weights stacked), and ``rule.prefixes(xp, adapter, blocks,
    inside)``, the value of each window's prefixes of blocks (``blocks`` laid out by window and step, ``inside``
    False past a row's end)."""

    def __init__(self, rule: Any) -> None:
        self.rule = rule

    def after_round(self, xp: Any, adapter: Any, u: Any, starts: Any, data: Any, chains: Any,
                    stats: tuple[Any, ...] | None = None) -> tuple[Any, Any]:
        """``(u, starts)`` after a pooling round, pooled on (:meth:`__call__`) where the 0-d ``chains`` holds (some
        row's drops stopped halving); a backend that reads the flag skips the rest (under ``jax.jit``, a branch).
        ``stats``: the blocks' statistics, ``rule.block_stats``' (the round's own), or None."""
        if stats is None:
            return adapter.unless(xp, ~chains, lambda us: self(xp, adapter, *us, data), (u, starts), in_loop=True)
        # the statistics pass through the branch unchanged (its result has its operand's structure)
        return adapter.unless(xp, ~chains, lambda us: (*self(xp, adapter, *us[:2], data, us[2:]), *us[2:]),
                              (u, starts, *stats), in_loop=True)[:2]

    def __call__(self, xp: Any, adapter: Any, u: Any, starts: Any, data: Any,
                 stats: tuple[Any, ...] | None = None) -> tuple[Any, Any]:
        """``(u, starts)`` with the first :data:`DROPS` drops of each row pooled to the right and to the left (each a
        window of its own: the windows an axis, each with its side), the pools that share no block kept. ``stats``:
        each entry's block's statistics (``rule.block_stats``), where the caller has them."""
        n = u.shape[-1]
        dev = _device(u)
        idx = index_dtype(xp, dev)
        drops = min(DROPS, n - 1)
        width = min(max(-(-n // (SPAN * drops)), 16), n)  # blocks
        ordinal = cumulative_sum(xp, xp.astype(starts, idx)) - 1  # each entry's block, from 0
        # the first drops of each row: the boundaries (i between entries i and i + 1) where their count reaches 1, 2, ...
        counted = cumulative_sum(xp, xp.astype(u[..., :-1] > u[..., 1:], idx))
        wanted = xp.broadcast_to(xp.arange(1, drops + 1, dtype=idx, device=dev), u.shape[:-1] + (drops,))
        at = adapter.searchsorted(xp, counted, wanted, side="left")
        real = xp.concat([at, at], axis=-1) < n - 1
        boundary = xp.clip(at, 0, n - 2)
        right = xp.arange(2 * drops, device=dev) < drops  # the windows' sides: the drops rightward, then leftward
        # each window's base block (left of its drop; right of it, leftward), its blocks from there to its side and the
        # block past them, and the block after the base; their first entries by one search of the ordinals (n past the
        # row's last block, 0 before its first)
        base = xp.concat([adapter.take(xp, ordinal, boundary), adapter.take(xp, ordinal, boundary + 1)], axis=-1)
        step = xp.arange(width + 1, dtype=idx, device=dev)
        block = base[..., None] + xp.where(right[:, None], step, -step)
        queries = xp.concat([block, base[..., None] + 1], axis=-1)
        flat = queries.shape[:-2] + (2 * drops * (width + 2),)
        first = _block_firsts(xp, adapter, starts, ordinal, queries)
        inside = (block >= 0) & (block <= ordinal[..., -1:, None])
        gathered = xp.reshape(xp.clip(first[..., :-1], 0, n - 1), flat[:-1] + (2 * drops * (width + 1),))

        def gather(a: Any) -> Any:
            return xp.reshape(adapter.take(xp, a, gathered), block.shape)

        stats = self.rule.block_stats(xp, adapter, starts, data) if stats is None else stats
        blocks = tuple(gather(a)[..., :width] for a in stats)
        value = gather(u)
        pooled = self.rule.prefixes(xp, adapter, blocks, inside[..., :width])
        # the pool of the blocks up to each takes the next block only if that block violates it: up to the first that
        # does not, or all of a window that holds none such (the next round goes on)
        after = value[..., 1:]
        violates = inside[..., 1:] & xp.where(right[:, None], pooled > after, pooled < after)
        size = xp.sum(xp.astype(cumulative_sum(xp, xp.astype(~violates, idx)) == 0, idx), axis=-1)
        size = xp.clip(size, None, width - 1)
        level = xp.reshape(adapter.take(xp, pooled, size[..., None]), size.shape)
        # the pool's entries: from the base block's first to the last before the block past it (leftward: from the
        # first of its last block to the base block's last)
        reached = xp.reshape(adapter.take(xp, first, xp.where(right, size + 1, size)[..., None]), size.shape)
        begin = xp.where(right, first[..., 0], reached)
        stop = xp.where(right, reached, first[..., -1]) - 1
        return _levelled(xp, u, starts, right, real & (size > 0), size, begin, stop, level)


def _block_firsts(xp: Any, adapter: Any, starts: Any, ordinal: Any, queries: Any) -> Any:
    """The first entry of each row's blocks numbered ``queries`` (``ordinal``: each entry's block, from 0; ``starts``
    True where one begins): 0 before the row's first block, n past its last, as a search of the ordinals gives.

    One inverse permutation instead of that search: the permutation that puts each block's first entry at its
    block's number, and every other entry after the row's blocks in row order, is inverted (a scatter), and its
    first places read back."""
    n = starts.shape[-1]
    blocks = ordinal[..., -1:] + 1
    place = xp.where(starts, ordinal, blocks + xp.arange(n, dtype=ordinal.dtype, device=_device(ordinal)) - ordinal - 1)
    firsts = adapter.invert_permutation(xp, place)
    shape = queries.shape
    flat = xp.reshape(queries, shape[:-2] + (shape[-2] * shape[-1],))
    # a number below 0 reads block 0's first entry, 0 (a row's first entry begins its first block)
    found = adapter.take(xp, firsts, xp.clip(flat, 0, n - 1))
    return xp.reshape(xp.where(flat >= blocks, xp.full_like(found, n), found), shape)


class LogSums:
    """The KL loss's rule (:data:`.isotonic.KINDS` ``"kl"``: ``sum_i exp(y_i - v_i) + exp(w_i) v_i``, weights as
    logs): a range's value is ``LSE(y) - LSE(w)`` over its entries, so a block's statistics are its two log-sums
    (from the data, as the pooling rounds' values are) and a prefix of blocks sums them in logs."""

    @staticmethod
    def block_stats(xp: Any, adapter: Any, starts: Any, data: Any) -> tuple[Any, Any]:
        lse = adapter.segment_logsumexp(xp, starts, data)
        return lse[0, ...], lse[1, ...]

    @staticmethod
    def prefixes(xp: Any, adapter: Any, blocks: tuple[Any, ...], inside: Any) -> Any:
        totals = adapter.cumlogsumexp(xp, xp.where(inside, xp.stack(blocks), -math.inf))
        # -inf for an empty prefix (a window past its row's end: its pools are not kept)
        return safe_log_divide(xp, totals[0, ...], totals[1, ...], -math.inf)


class MeanSums:
    """The least-squares loss's rule (:data:`.isotonic.KINDS` ``"l2"``: ``sum_i w_i (v_i - y_i)^2``): a range's value
    is its weighted mean, so a block's statistics are its mean and weight, and a prefix of blocks sums their weights
    and their weighted offsets from the first block's mean (no sum of values of the row's size)."""

    @staticmethod
    def block_stats(xp: Any, adapter: Any, starts: Any, data: Any) -> tuple[Any, Any]:
        y, w = data[0, ...], data[1, ...]
        totals = adapter.segment_sum(xp, starts, xp.stack([w * y, w]))
        # a block of zero weight (a masked entry) fits any value: its entry's own, as the pooling rounds' plain mean
        return safe_divide(xp, totals[0, ...], totals[1, ...], y), totals[1, ...]

    @staticmethod
    def prefixes(xp: Any, adapter: Any, blocks: tuple[Any, ...], inside: Any) -> Any:
        mean, weight = blocks
        centre = mean[..., :1]
        totals = cumulative_sum(xp, xp.where(inside, xp.stack([weight * (mean - centre), weight]), 0.0))
        return centre + safe_divide(xp, totals[0, ...], totals[1, ...])


class BlockRows:
    """A rule for rows of blocks, one entry each (:func:`.power_sums.pool_blocks`, the windows' fit: ``data`` stacks
    ``sums``' block form, :class:`.power_sums.PowerSums`): a segment's statistics are its blocks' forms combined, and
    ``sums`` values a range of such segments (:meth:`.power_sums.PowerSums.prefixes`)."""

    def __init__(self, sums: Any) -> None:
        self.sums = sums

    def block_stats(self, xp: Any, adapter: Any, starts: Any, data: Any) -> tuple[Any, ...]:
        """Each entry's segment in the block form ``(mean, W, m, M2, ..., M_k)``: its mean as its first block's plus the
        others' weighted offsets from it (a sum of ``m * mean`` rounds at its total), its moments about that mean."""
        form = tuple(xp.unstack(data))
        return self.sums.combined(xp, form, adapter.segment_first(xp, starts, form[0]),
                                  lambda g: adapter.segment_sum(xp, starts, g), lambda a: a)

    def prefixes(self, xp: Any, adapter: Any, blocks: tuple[Any, ...], inside: Any) -> Any:
        return self.sums.prefixes(xp, adapter, blocks, inside)


def _levelled(xp: Any, u: Any, starts: Any, right: Any, valid: Any, size: Any, begin: Any, stop: Any,
              level: Any) -> tuple[Any, Any]:
    """``(u, starts)`` with the pools from ``begin`` to ``stop`` (entries; the first half of the last axis rightward,
    the second leftward: ``right``; ``size``: the blocks each took past its base) at their ``level``, each one block:
    of the ``valid`` pools, those that hold their own base alone among their side's (its first entry, or its last
    leftward: so the pools of a side share no block) and that meet no such pool of the other side that took more
    blocks (on a tie, the rightward one is kept). The sides are halves, not a mask of the pools: a compiled torch
    graph folds such a mask into its index arithmetic, where inductor cannot compare two of them."""
    half = begin.shape[-1] // 2
    base = xp.where(right, begin, stop)

    def among(d: Any, e: Any) -> Any:
        """Pool by pool of ``d`` (a slice of the last axis), pool by pool of ``e``: whether ``e``'s holds ``d``'s base,
        and whether the two meet."""
        holds = valid[..., None, e] & (begin[..., None, e] <= base[..., d, None]) & (
            stop[..., None, e] >= base[..., d, None])
        meets = (begin[..., d, None] <= stop[..., None, e]) & (begin[..., None, e] <= stop[..., d, None])
        return holds, meets

    rightward, leftward = slice(None, half), slice(half, None)
    alone = valid & xp.concat([xp.sum(xp.astype(among(d, d)[0], begin.dtype), axis=-1) == 1
                               for d in (rightward, leftward)], axis=-1)
    # a rightward pool gives way to a leftward one that took more blocks, a leftward one to a rightward one that took
    # as many or more
    left_wins = among(rightward, leftward)[1] & alone[..., None, leftward] & (
        size[..., None, leftward] > size[..., rightward, None])
    right_wins = among(leftward, rightward)[1] & alone[..., None, rightward] & (
        size[..., None, rightward] >= size[..., leftward, None])
    keep = alone & ~xp.concat([xp.any(left_wins, axis=-1), xp.any(right_wins, axis=-1)], axis=-1)
    at = xp.astype(xp.arange(u.shape[-1], device=_device(u)), begin.dtype)
    inner = xp.zeros_like(starts)
    for j in range(begin.shape[-1]):  # a few pools, each an elementwise pass (no array of pools by entries)
        taken = keep[..., j:j + 1] & (at >= begin[..., j:j + 1]) & (at <= stop[..., j:j + 1])
        u = xp.where(taken, level[..., j:j + 1], u)
        inner = inner | (taken & (at > begin[..., j:j + 1]))
    return u, starts & ~inner
