"""The binary search of a projection with one free block over its breakpoints.

The projections onto the top-k polytope (:func:`.pnorm.capped`; Sander et
al. 2023) and the top-k in magnitude (:mod:`.magnitude`) hold every entry
at 0, at its cap, or free, and the free entries form one block: which one
is fixed by the interval of the threshold between two of the 2n
breakpoints, where the shares' sum, increasing along them, crosses k.
"""

from __future__ import annotations

import math
from typing import Any

from .._lib._compat import device as _device

__all__ = ["search_breakpoints"]


def search_breakpoints(xp: Any, adapter: Any, top: Any, bottom: Any, total: Any, k: Any) -> tuple[Any, Any, Any]:
    """The binary search of a one-free-block projection (:func:`.pnorm.capped`, :mod:`.magnitude`) over its 2n breakpoints
    in decreasing order: each entry's upper one (past it, the entry is at its cap) at place ``bottom``, its lower one
    (above it, at 0) at ``top``; ``total(j)``, increasing in j, is the shares' sum at the j-th breakpoint (at j = 0 it
    is below k). Finds the smallest j with ``total(j) >= k`` in ``ceil(log2 2n)`` evaluations, and returns
    ``(capped, free, whole)``: the entries at their cap on the interval that holds the threshold, those free there,
    and the rows where no breakpoint reaches k (j = 2n).

    The evaluations are one loop (``adapter.repeat``), traced once: a compiler's graph does not grow with n. ``top``,
    ``bottom`` and what ``total`` reads must not be views of one array (torch's ``while_loop`` refuses aliased
    inputs)."""
    n = top.shape[-1]
    steps = math.ceil(math.log2(2 * n))

    def lift(state: Any) -> Any:
        """The last breakpoint known below k, moved on by the step (a power of two, halved each time) where the
        total there is still below k (a candidate past 2n - 1 reads the last breakpoint's): the steps sum to at least
        2n - 1. One read of ``below`` per step, where lo, hi and their midpoint doubled the expression a compiler
        inlines."""
        below, step = state
        short = total(adapter.clip(xp, below + step, None, 2 * n - 1)) < k
        return below + xp.astype(short, below.dtype) * step, step // 2

    device = _device(top)
    # a power, not a shift: torch 2.11's symbolic shapes cannot shift by a symbol (every size a symbol under compile)
    start = (xp.zeros(top.shape[:-1] + (1,), dtype=top.dtype, device=device), xp.asarray(2 ** (steps - 1), dtype=top.dtype, device=device))
    below, _ = adapter.repeat(xp, lift, start, steps, steps, like=(top, bottom, k), differentiated=False)
    hi = adapter.clip(xp, below + 1, None, 2 * n)
    whole = hi >= 2 * n
    return bottom < hi, (top < hi) & (bottom >= hi) & ~whole, whole
