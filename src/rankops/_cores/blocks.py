"""A batch's blocks (runs of equal values of an isotonic fit), one entry each, and pooling rounds over them.

The rows of a batch lie end to end along one axis: each block holds its
value, its statistics (a tuple: for the p-norm losses the block form of
:class:`.power_sums.PowerSums`, its mean, weight, size and centred moments,
whose combination about a joint mean is exact) and its row's first and last
block; a group of consecutive blocks becomes one block by combining them
(:func:`combined`). :func:`pool_rounds` runs the pooling rounds of
:func:`.isotonic.pool_runs` on this form: each round pools every maximal run
of blocks each above the next (Best & Chakravarti 1990: adjacent violators
end in one block) and the arrays shrink to the blocks left, so a round
costs in proportion to them, not to the row's length. Used where values can
be read now, on a CPU (:mod:`.windows`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._lib._adapters import get_adapter
from .._lib._compat import cumulative_sum, device as _device, index_dtype

__all__ = ["Blocks", "find_drops", "combined", "regroup", "pool_rounds", "take_in_range"]


def take_in_range(xp: Any, a: Any, index: Any, axis: int = 0) -> Any:
    """``xp.take(a, index, axis=axis)`` for an ``index`` in range and non-negative, as every index of these blocks is:
    the backend's own gather (``adapter.select``; array-api-compat's torch ``take`` first wraps negative indices,
    three kernels more per call, and these rounds gather a few dozen times)."""
    return get_adapter(xp).select(xp, a, index, axis)


def put_rows(xp: Any, flagged: Any, part: Any, rest: Any) -> Any:
    """``rest`` (2-D) with its ``flagged`` rows replaced by ``part``'s, which holds one for each of them in order (as
    :func:`take_in_range` of ``rest`` at ``xp.nonzero(flagged)[0]`` lists them)."""
    place = xp.clip(cumulative_sum(xp, xp.astype(flagged, index_dtype(xp, _device(rest)))) - 1, 0, None)
    return xp.where(flagged[:, None], take_in_range(xp, part, place, axis=0), rest)


def find_drops(value: Any, first: Any) -> Any:
    """True between two blocks of one row (``first``: each block's row's first block) where the first is above the
    second."""
    return (value[:-1] > value[1:]) & (first[:-1] == first[1:])


@dataclasses.dataclass(frozen=True)
class Blocks:
    """The blocks of a batch of rows, one entry each along one axis: value, statistics (``rules.block_data``: a
    tuple), and its row's first and last block; ``starts`` (the entries' flattened block starts) spreads them back;
    ``idx`` the index dtype; ``low`` each block's first datum where the rules give the data (``rules.block_low``: the
    p-norm rank's at q = 3 and 5, whose rows increase), else None."""

    value: Any
    data: tuple[Any, ...]
    row_first: Any
    row_last: Any
    starts: Any
    idx: Any
    low: Any = None

    @property
    def low_row(self) -> int:
        """The row of ``low`` in a :meth:`table`, past the value's and the statistics' (the sums' ``form``)."""
        return 1 + len(self.data)

    def table(self, xp: Any) -> Any:
        """The blocks' values and statistics, one column each: value, the block form's rows, then ``low`` (if any)."""
        return xp.stack([self.value, *self.data, *(() if self.low is None else (self.low,))])

    def from_table(self, table: Any, **changes: Any) -> Blocks:
        """These blocks with the columns of a :meth:`table` (regrouped) and ``changes``."""
        low = self.low_row
        return dataclasses.replace(self, value=table[0, ...], data=tuple(table[i, ...] for i in range(1, low)),
                                   low=table[low, ...] if table.shape[0] > low else None, **changes)

    def of_entries(self, xp: Any) -> Any:
        """Each flattened entry's block (an index into ``value``), from ``starts``."""
        return cumulative_sum(xp, xp.astype(self.starts, self.idx)) - 1

    @classmethod
    def of(cls, xp: Any, adapter: Any, rules: Any, v: Any, w: Any) -> Blocks:
        n = v.shape[-1]
        idx = index_dtype(xp, _device(v))
        rows = xp.reshape(v, (-1, n))
        first = xp.ones((rows.shape[0], 1), dtype=xp.bool, device=_device(v))
        starts = xp.concat([first, rows[:, 1:] != rows[:, :-1]], axis=-1)
        data = rules.block_data(xp, adapter, starts, w, v)
        low = getattr(rules, "block_low", lambda *a: None)(xp, w, v)
        starts = xp.reshape(starts, (-1,))
        heads = xp.nonzero(starts)[0]
        first, last = _row_ends(xp, heads // n, idx)

        def at_heads(a: Any) -> Any:
            return take_in_range(xp, xp.reshape(a, (-1,)), heads)

        return cls(value=at_heads(v), data=tuple(at_heads(a) for a in data), row_first=first, row_last=last, starts=starts,
                   idx=idx, low=None if low is None else at_heads(low))

    def regrouped(self, xp: Any, adapter: Any, sums: Any, starts: Any, value: Any, owner: Any) -> tuple[Blocks, Any]:
        """``(blocks, owner)``: the groups of consecutive blocks that ``starts`` begins (within rows) as blocks
        (:func:`regroup`, ``value`` the groups' values, per block); ``owner``: each block of a former grouping (these
        blocks: None) in its group now."""
        table, heads, group = regroup(xp, adapter, sums, self.table(xp), starts, value)
        first, last = (take_in_range(xp, group, take_in_range(xp, a, heads)) for a in (self.row_first, self.row_last))
        owner = group if owner is None else take_in_range(xp, group, owner)
        return self.from_table(table, row_first=first, row_last=last), owner

    def with_owner(self, xp: Any, of_entries: Any, owner: Any) -> Blocks:
        """These blocks, their entries' starts from ``owner`` (each former block's block) and the former blocks'
        ``of_entries``."""
        if owner is None:
            return self
        block = take_in_range(xp, owner, of_entries)
        starts = xp.concat([xp.ones((1,), dtype=xp.bool, device=_device(block)), block[1:] != block[:-1]])
        return dataclasses.replace(self, starts=starts)


def _row_ends(xp: Any, row: Any, idx: Any) -> tuple[Any, Any]:
    """Each block's row's first and last block, from ``row`` (nondecreasing, equal within a row and only there): the
    rows' first and last blocks listed in order, each block taking its row's by its row's place among them (a running
    count), in a few passes where two searches of every block in ``row`` cost O(n log n)."""
    one = xp.ones((1,), dtype=xp.bool, device=_device(row))
    change = row[1:] != row[:-1]
    begins = xp.concat([one, change])
    place = cumulative_sum(xp, xp.astype(begins, idx)) - 1
    return (take_in_range(xp, xp.astype(xp.nonzero(begins)[0], idx, copy=False), place),
            take_in_range(xp, xp.astype(xp.nonzero(xp.concat([change, one]))[0], idx, copy=False), place))


def pool_rounds(xp: Any, adapter: Any, sums: Any, blocks: Blocks, leave: int, rounds: int) -> Blocks:
    """The pooling rounds of :func:`.isotonic.pool_runs` over ``blocks`` (:func:`_pool_round`), the arrays shrinking
    to the blocks left. They stop once no drop is left, or at most ``leave`` in all and fewer than half as many as a
    round before (a chain that snowballs), or after ``rounds`` rounds."""
    table = blocks.table(xp)
    row, owner, before = blocks.row_first, None, 0  # row: any number shared by a row's blocks alone
    for _ in range(rounds):
        down = find_drops(table[0, ...], row)
        now = int(xp.sum(xp.astype(down, blocks.idx)))
        if now == 0 or (now <= leave and 2 * now > before):
            break
        before = now
        table, row, owner = _pool_round(xp, adapter, sums, table, row, down, owner)
    if owner is None:
        return blocks
    first, last = _row_ends(xp, row, blocks.idx)
    return blocks.from_table(table, row_first=first, row_last=last).with_owner(xp, blocks.of_entries(xp), owner)


def _pool_round(xp: Any, adapter: Any, sums: Any, table: Any, row: Any, down: Any, owner: Any) -> tuple[Any, Any, Any]:
    """``(table, row, owner)`` after one pooling round over blocks (``table``: their values and statistics, one column
    each; ``row``: each one's row): every maximal run of blocks, each above the next (``down``, :func:`find_drops`), one
    block (:func:`regroup`, of the value its statistics give); ``owner`` as :meth:`Blocks.regrouped`'s."""
    one = xp.ones((1,), dtype=xp.bool, device=_device(table))
    table, heads, group = regroup(xp, adapter, sums, table, xp.concat([one, ~down]))
    return table, take_in_range(xp, row, heads), group if owner is None else take_in_range(xp, group, owner)


def regroup(xp: Any, adapter: Any, sums: Any, table: Any, starts: Any, value: Any = None) -> tuple[Any, Any, Any]:
    """``(table, heads, group)``: the groups of consecutive blocks that ``starts`` begins (``table``: each block's value
    and statistics, one column each) as the columns of a new table, each group's first block (``heads``) and each
    block's group. A group of several blocks takes their statistics combined (:func:`combined`) and the value
    ``value`` holds at its first block (None: the value they give, :meth:`.power_sums.PowerSums.block_value`), and
    its first block's ``low`` (the row past the statistics, :class:`Blocks`); only those are combined (as one row), and
    a block alone keeps its column."""
    dev, idx = _device(table), index_dtype(xp, _device(table))
    low_row = 1 + sums.form
    group = cumulative_sum(xp, xp.astype(starts, idx)) - 1
    heads = xp.nonzero(starts)[0]
    several = ~(starts & xp.concat([starts[1:], xp.ones((1,), dtype=xp.bool, device=dev)]))
    at = xp.nonzero(several)[0]
    if at.shape[0] == 0:  # nothing to combine: every block begins a group, and the table stands as it is
        return table, heads, group
    part = take_in_range(xp, starts, at)
    firsts = xp.nonzero(part)[0]
    taken = take_in_range(xp, table, at, axis=-1)
    data = combined(xp, adapter, sums, part, cumulative_sum(xp, xp.astype(part, idx)) - 1, firsts,
                    tuple(xp.unstack(taken[1:low_row, ...])))
    first_value = sums.block_value(xp, data) if value is None else take_in_range(xp, value, take_in_range(xp, at, firsts))
    low = () if table.shape[0] == low_row else (take_in_range(xp, taken[low_row, ...], firsts),)  # the group's first block's
    pooled = xp.stack([first_value, *data, *low])
    # each new block: its group's (the groups of several in order, placed after the table's columns), or the block it
    # was; one gather of both by a chosen column, where a choice between two gathers of every row is a branch per number
    changed = take_in_range(xp, several, heads)
    place = cumulative_sum(xp, xp.astype(changed, idx)) - 1 + table.shape[-1]
    column = xp.where(changed, place, heads)
    return take_in_range(xp, xp.concat([table, pooled], axis=-1), column, axis=-1), heads, group


def combined(xp: Any, adapter: Any, sums: Any, starts: Any, group: Any, heads: Any, data: tuple[Any, ...]) -> tuple[Any, ...]:
    """The block form ``(mean, W, m, M2, ..., M_k)`` (``sums.form`` numbers) of each group of blocks (``starts``: True
    where one begins, ``group`` each block's, ``heads`` their first blocks), one per group: the moments about the
    group's mean, summed."""
    return sums.combined(xp, data, take_in_range(xp, data[0], heads),
                         lambda g: adapter.segment_totals(xp, starts, group, heads, g), lambda a: take_in_range(xp, a, group))
