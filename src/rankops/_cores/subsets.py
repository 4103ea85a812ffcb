"""A subset of a batch's entries, gathered into one row, solved there and spread back.

Where values can be read now, a solve whose cost is per entry can skip the
entries whose result is already known (a pooling round's unchanged segments,
a fit's one-entry blocks): the chosen entries, in their order along the
flattened batch, form one row, on which segments stay contiguous and keep
their starts; the row's results go back to their places, every other entry
taking its own.
"""

from __future__ import annotations

import math
from typing import Any

from .._lib._compat import cumulative_sum
from .blocks import take_in_range

__all__ = ["Subset", "ChangedSegments", "one_entry_blocks"]


class Subset:
    """The entries of a batch where ``chosen`` (a boolean array of the batch's shape) holds."""

    def __init__(self, xp: Any, chosen: Any) -> None:
        self.xp = xp
        self.shape = chosen.shape
        self.chosen = xp.reshape(chosen, (-1,))
        self.at = xp.nonzero(self.chosen)[0]  # reads the values: the subset's size
        self.size = self.at.shape[0]

    def share(self) -> float:
        """The subset's share of the batch's entries."""
        total = self.chosen.shape[0]
        return self.size / total if total else 0.0

    def take(self, a: Any) -> Any:
        """``a``'s chosen entries as one row; ``a`` broadcasts to the batch's shape, or stacks such arrays along
        leading axes (kept)."""
        xp = self.xp
        lead = a.shape[:max(0, a.ndim - len(self.shape))]
        whole = xp.reshape(xp.broadcast_to(a, lead + self.shape), lead + (self.chosen.shape[0],))
        return take_in_range(xp, whole, self.at, axis=-1)

    def put(self, part: Any, rest: Any) -> Any:
        """The batch with ``part`` (a result per chosen entry, in :meth:`take`'s order) at the chosen entries and
        ``rest`` (the batch's shape) elsewhere."""
        xp = self.xp
        return xp.where(xp.reshape(self.chosen, self.shape), self.spread(part), rest)

    def spread(self, part: Any) -> Any:
        """The batch where each entry takes the result of the last chosen entry at or before it along the flattened
        batch (``part``, one per chosen entry in :meth:`take`'s order): with segments' first entries chosen, each
        entry its segment's."""
        xp = self.xp
        place = xp.clip(cumulative_sum(xp, xp.astype(self.chosen, self.at.dtype)) - 1, 0, None)
        return xp.reshape(take_in_range(xp, part, place), self.shape)


def one_entry_blocks(xp: Any, starts: Any) -> Any:
    """True on an entry that is a block alone: it begins one (``starts``) and the next entry begins another."""
    return starts & xp.concat([starts[..., 1:], xp.ones_like(starts[..., :1])], axis=-1)


class ChangedSegments:
    """``rules.pooled`` on the segments that took in a block in a pooling round (:func:`.isotonic.pool_runs`), every
    other entry's value kept (a :class:`Subset`).

    A row that settles through a few chains that snowball changes a few segments a round, whose solve (roots and
    segmented sums per entry, for the p-norm losses) then costs in proportion to them, not to n. Where they hold more
    than ``share`` of the entries, all are solved (the gathers would cost more than they save; the segments are not
    counted where the entries that joined a block pass the share alone), and as big blocks that keep growing stay big,
    the next 1, 2, 4, ... rounds then solve all without counting. Reads how many entries changed: on a backend that
    reads values now.
    """

    def __init__(self, rules: Any, share: float) -> None:
        self.rules, self.share = rules, share
        self.wait, self.backoff = 0, 1

    def pooled(self, xp: Any, adapter: Any, starts: Any, joined: Any, u: Any, weights: Any, unit: bool) -> Any:
        """``joined``: True on an entry whose block joined its predecessor's this round."""
        if self.wait == 0:
            count = int(xp.sum(xp.astype(joined, xp.int32)))
            if count == 0:
                return u
            changed = None if count > self.share * math.prod(u.shape) else Subset(
                xp, adapter.segment_sum(xp, starts, xp.astype(joined, u.dtype)) > 0)
            if changed is not None and changed.share() <= self.share:
                return changed.put(self.rules.pooled(xp, adapter, changed.take(starts), changed.take(u), changed.take(weights), unit), u)
            self.wait, self.backoff = self.backoff + 1, 2 * self.backoff  # this round's solve of all counts as one
        self.wait -= 1
        return self.rules.pooled(xp, adapter, starts, u, weights, unit)
