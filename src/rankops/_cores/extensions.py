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
block, in legs: to the right while the pool stands above the block that
follows it, then to the left while it stands below the block before it,
and again while a leftward leg took a block (at most :data:`LEGS` legs),
within a window of blocks to either side of the drop. A chain that turns
(a pool that grew to one side now stands below the block on its other
side: the soft sort's middle block at the default softness) ends in one
round, where one-sided pools took a round per turn.

Each such pool is a sequence of steps of pool-adjacent-violators (the two
blocks of the drop first, then each block that violates the pool), so the
fit is the same whatever order they come in (Best & Chakravarti 1990), and
pools that share no block may be taken together. A pool's value comes from
its blocks' statistics, through the loss's ``rule``: for the p-norm losses
their size, weight, mean and centred moments (:class:`.power_sums.PowerSums`,
exact along such steps, where a pool keeps every entry above its value, or
for the sort's evenly stepped ranks :class:`.power_sums.SteppedSignedSums`),
for the KL loss the log-sums of its data and weights (:class:`LogSums`): each
side's running totals from the drop outward, any pool of a prefix of each
side the join of two of them (a sum, or a sum in logs), never a difference.
A window that ends inside a chain takes it to its last block; the next round
goes on.
"""

from __future__ import annotations

import math
from typing import Any

from .._lib._compat import cumulative_sum, device as _device, index_dtype
from .._lib._numerics import logaddexp, safe_divide, safe_log_divide

__all__ = ["Extension", "InSlots", "BlockRows", "LogSums", "MeanSums", "DROPS", "SPAN", "NARROWEST", "LEGS"]

DROPS = 4  # drops per row that a round extends, each to both sides
# a window's side holds n / (SPAN DROPS) blocks, at least NARROWEST, rounded up to a multiple of 16, the pieces in which
# XLA's CPU scans run (they pad a side of another length to them); a narrower window costs less a leg, and a chain
# longer than it goes on in the next round
SPAN, NARROWEST = 16, 64
LEGS = 8  # at most, of a window's pool, rightward then leftward: a chain that turns back LEGS - 1 times ends in a round


class Extension:
    """The pooling rounds' extension of chains (:func:`.isotonic.pool_runs`'s ``extend``) for a loss whose ``rule``
    values a range of blocks from their statistics: each entry's block's, handed over by the round where its rules
    have ``forms`` (``rules.pooled_blocks``), else ``rule.block_stats(xp, adapter, starts, data)`` (of the rounds'
    weights, the row and its weights stacked); ``rule.running(xp, adapter, blocks, inside)``,
    ``(totals, centre)``: the running totals along each side of each window (``blocks`` laid out ``(..., 2, width)``,
    the sides from the drop leftward and rightward; ``inside`` False past a row's end), stacked on a first axis, about
    a ``centre`` of shape ``(..., 1)``; ``rule.joined(xp, a, b)``, the totals of two disjoint sets of blocks from
    theirs; and ``rule.level(xp, totals, centre)``, the value of the blocks whose totals these are."""

    def __init__(self, rule: Any) -> None:
        self.rule = rule

    def after_round(self, xp: Any, adapter: Any, u: Any, starts: Any, data: Any, chains: Any,
                    stats: tuple[Any, ...] | None = None) -> tuple[Any, Any]:
        """``(u, starts)`` after a pooling round, pooled on (:meth:`__call__`) where the 0-d ``chains`` holds (some
        row's drops stopped halving); a backend that reads the flag skips the rest (under ``jax.jit``, a branch).
        ``stats``: the blocks' statistics, ``rule.block_stats``' (the round's own; :class:`InSlots`: one per block), or
        None."""
        slotted = isinstance(stats, InSlots)
        # the statistics pass through the branch unchanged (its result has its operand's structure)
        return adapter.unless(xp, ~chains, lambda us: (*self(xp, adapter, *us[:2], data, us[2:] or None, slotted), *us[2:]),
                              (u, starts, *(stats or ())), in_loop=True)[:2]

    def __call__(self, xp: Any, adapter: Any, u: Any, starts: Any, data: Any,
                 stats: tuple[Any, ...] | None = None, slotted: bool = False) -> tuple[Any, Any]:
        """``(u, starts)`` with the first :data:`DROPS` drops of each row pooled on to both sides (:data:`LEGS` legs,
        each window's two sides an axis), the pools that share no block with a larger one kept. ``stats``: each
        entry's block's statistics (``rule.block_stats``), where the caller has them (``slotted``: each block's, at
        its number)."""
        n = u.shape[-1]
        dev = _device(u)
        idx = index_dtype(xp, dev)
        drops = min(DROPS, n - 1)
        width = min(-(-max(-(-n // (SPAN * drops)), NARROWEST) // 16) * 16, n)  # blocks a side
        ordinal = cumulative_sum(xp, xp.astype(starts, idx)) - 1  # each entry's block, from 0
        # the first drops of each row: the boundaries (i between entries i and i + 1) where their count reaches 1, 2, ...
        counted = cumulative_sum(xp, xp.astype(u[..., :-1] > u[..., 1:], idx))
        wanted = xp.broadcast_to(xp.arange(1, drops + 1, dtype=idx, device=dev), u.shape[:-1] + (drops,))
        at = adapter.searchsorted(xp, counted, wanted, side="left")
        real = at < n - 1
        # each drop's window: the blocks from the one before the drop leftward (side 0) and from the one after it
        # rightward (side 1), and each block's first entry by one search of the ordinals (n past the row's last
        # block, 0 before its first)
        base = adapter.take(xp, ordinal, xp.clip(at, 0, n - 2))[..., None, None]
        step = xp.arange(width + 1, dtype=idx, device=dev)
        block = xp.concat([base - step, base + 1 + step], axis=-2)  # (..., drops, 2, width + 1)
        windows = xp.reshape(block, block.shape[:-3] + (2 * drops, width + 1))
        first = xp.reshape(_block_firsts(xp, adapter, starts, ordinal, windows), block.shape)
        inside = (block >= 0) & (block <= ordinal[..., -1:, None, None])
        at_first = xp.clip(first, 0, n - 1)

        def gather(a: Any, count: int, at: Any = at_first) -> Any:
            where = at[..., :count]
            return xp.reshape(adapter.take(xp, a, xp.reshape(where, where.shape[:-3] + (2 * drops * count,))),
                              where.shape)

        stats = self.rule.block_stats(xp, adapter, starts, data) if stats is None else stats
        at_stats = xp.clip(block, 0, n - 1) if slotted else at_first
        totals, centre = self.rule.running(xp, adapter, tuple(gather(a, width, at_stats) for a in stats), inside[..., :width])
        value, after = gather(u, width + 1), inside[..., 1:]

        def pick(a: Any, i: Any) -> Any:  # each window's total at i, of stacked totals
            return adapter.take(xp, a, xp.broadcast_to(i[..., None], a.shape[:-1] + (1,)))

        def legs(reach: tuple[Any, Any]) -> tuple[Any, Any]:
            """A rightward leg, then a leftward one, from the pool of the blocks up to ``reach`` (leftward, rightward):
            a leg takes the next block of its side only if that block violates the pool, up to the first that does
            not (or the window's end: the next round goes on)."""
            for side in (1, 0):
                # each side read from the one array inside the loop: a compiled torch graph's while_loop (the legs, on
                # a GPU) refuses inputs that alias one another, as two views of it would
                other = pick(totals[..., 1 - side, :], reach[1 - side])
                pooled = self.rule.level(xp, self.rule.joined(xp, other, totals[..., side, :]), centre)
                beyond = value[..., side, 1:]
                violates = after[..., side, :] & (pooled > beyond if side else pooled < beyond)
                taken = violates | (step[:width] < reach[side][..., None])
                size = xp.sum(xp.astype(cumulative_sum(xp, xp.astype(~taken, idx)) == 0, idx), axis=-1)
                grown = xp.astype(xp.clip(size, None, width - 1), at.dtype)
                reach = (reach[0], grown) if side else (grown, reach[1])
            return reach

        def moved(old: tuple[Any, Any], new: tuple[Any, Any]) -> Any:
            # a leftward leg that took nothing left the pool where the rightward leg before it stopped: settled
            return xp.any(new[0] != old[0])

        l, r = adapter.settle(xp, legs, (xp.zeros_like(at), xp.zeros_like(at)), moved, LEGS // 2, 1, like=(u,))
        level = self.rule.level(xp, self.rule.joined(xp, pick(totals[..., 0, :], l), pick(totals[..., 1, :], r)),
                                centre)[..., 0]
        begin = pick(first[..., 0, :], l)[..., 0]
        stop = pick(first[..., 1, :], r + 1)[..., 0] - 1
        return _levelled(xp, u, starts, real, l + r, begin, stop, level)


class InSlots(tuple):  # type: ignore[type-arg]
    """Blocks' statistics laid out one per block, block b of a row at index b of its last axis (an adapter's
    ``segment_slots``), where the extension would read them at each block's first entry."""


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
    (from the data, as the pooling rounds' values are: the rounds hand them over), which a set of blocks sums in
    logs."""

    @staticmethod
    def running(xp: Any, adapter: Any, blocks: tuple[Any, ...], inside: Any) -> tuple[Any, None]:
        # -inf past a row's end (a sum of nothing)
        return adapter.cumlogsumexp(xp, xp.where(inside, xp.stack(blocks), -math.inf)), None

    @staticmethod
    def joined(xp: Any, a: Any, b: Any) -> Any:
        return logaddexp(xp, a, b)

    @staticmethod
    def level(xp: Any, totals: Any, centre: None) -> Any:
        return safe_log_divide(xp, totals[0, ...], totals[1, ...], -math.inf)


class MeanSums:
    """The least-squares loss's rule (:data:`.isotonic.KINDS` ``"l2"``: ``sum_i w_i (v_i - y_i)^2``): a range's value
    is its weighted mean, so a block's statistics are its mean and weight (the rounds hand them over), and a set of
    blocks sums their weights and their weighted offsets from one block's mean (no sum of values of the row's
    size)."""

    @staticmethod
    def running(xp: Any, adapter: Any, blocks: tuple[Any, ...], inside: Any) -> tuple[Any, Any]:
        mean, weight = blocks
        centre = mean[..., :1, :1]
        terms = xp.stack([weight * (mean - centre), weight])
        return cumulative_sum(xp, xp.where(inside, terms, xp.zeros_like(terms))), centre[..., 0]

    @staticmethod
    def joined(xp: Any, a: Any, b: Any) -> Any:
        return a + b

    @staticmethod
    def level(xp: Any, totals: Any, centre: Any) -> Any:
        return centre + safe_divide(xp, totals[0, ...], totals[1, ...])


class BlockRows:
    """A rule for rows of blocks, one entry each (:func:`.power_sums.pool_blocks`, the windows' fit: ``data`` stacks
    ``sums``' block form, :class:`.power_sums.PowerSums`): a segment's statistics are its blocks' forms combined, and
    ``sums`` values a range of such segments (:meth:`.power_sums.PowerSums.level`)."""

    def __init__(self, sums: Any) -> None:
        self.sums = sums
        self.running, self.joined, self.level = sums.running, sums.joined, sums.level  # a range's value: the sums'

    def block_stats(self, xp: Any, adapter: Any, starts: Any, data: Any) -> tuple[Any, ...]:
        """Each entry's segment in the block form ``(mean, W, m, M2, ..., M_k)``: its mean as its first block's plus the
        others' weighted offsets from it (a sum of ``m * mean`` rounds at its total), its moments about that mean."""
        form = tuple(xp.unstack(data))
        return self.sums.combined(xp, form, adapter.segment_first(xp, starts, form[0]),
                                  lambda g: adapter.segment_sum(xp, starts, g), lambda a: a)


def _levelled(xp: Any, u: Any, starts: Any, valid: Any, size: Any, begin: Any, stop: Any, level: Any) -> tuple[Any, Any]:
    """``(u, starts)`` with the pools from ``begin`` to ``stop`` (entries) at their ``level``, each one block: of the
    ``valid`` pools, those that meet no valid pool of more blocks (``size``), nor one of as many before them (so the
    pools kept share no block: of two that meet, one has more blocks, or as many and comes first)."""
    meets = valid[..., :, None] & valid[..., None, :] & (begin[..., :, None] <= stop[..., None, :]) & (
        begin[..., None, :] <= stop[..., :, None])
    drops = begin.shape[-1]
    earlier = xp.arange(drops, device=_device(u))[:, None] < xp.arange(drops, device=_device(u))[None, :]
    larger = (size[..., :, None] > size[..., None, :]) | ((size[..., :, None] == size[..., None, :]) & earlier)
    keep = valid & ~xp.any(meets & larger, axis=-2)  # pool j gives way to a pool i that meets it and is larger
    at = xp.astype(xp.arange(u.shape[-1], device=_device(u)), begin.dtype)
    inner = xp.zeros_like(starts)
    for j in range(drops):  # a few pools, each an elementwise pass (no array of pools by entries)
        taken = keep[..., j:j + 1] & (at >= begin[..., j:j + 1]) & (at <= stop[..., j:j + 1])
        u = xp.where(taken, level[..., j:j + 1], u)
        inner = inner | (taken & (at > begin[..., j:j + 1]))
    return u, starts & ~inner
