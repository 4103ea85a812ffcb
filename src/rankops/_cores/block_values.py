"""The permutahedron's soft sort written from its fit's blocks (Blondel et al. 2020, Prop. 3).

The l2 and KL sorts fit ``y = rho / strength - s`` (``s`` the row sorted
decreasing, ``rho = (n, ..., 1)``); on a block B of that fit the sort is
``mean_B(s) + (rho - mean_B(rho)) / strength`` (l2) or ``LSE_B(s) + log
softmax_B(rho / strength)`` (kl). :func:`pooled_sorts` writes these on
``s - s_first`` and on the ranks' steps within the block, whose mean and
log-sum have closed forms, so that no value carries the rounding of ``y``,
a number of the size of ``n / strength``; :func:`sorted_values` guards them
against a fit whose rounding split a block.
"""

from __future__ import annotations

from typing import Any

from .._lib._compat import is_array
from . import isotonic, windows
from .subsets import Subset, one_entry_blocks

__all__ = ["sorted_values", "pooled_sorts", "SORT_SHARE"]


def sorted_values(xp: Any, adapter: Any, starts: Any, sol: Any, y: Any, s: Any, rho: Any, strength: Any,
                  regularization: str, weight: Any = None) -> tuple[Any, Any]:
    """``(sort, blocks)``: the soft sort (decreasing, as ``s``) from the fit ``sol`` of ``y = rho / strength - s`` and
    its blocks (``starts``), each block's closed form (:func:`pooled_sorts`) where it agrees with the direct ``s -
    (sol - y)`` to the rounding of ``y``, else the direct form; and the blocks those forms were written on (True where
    one begins), which the backward averages over.

    Rounding can split a block, and a part's own means are not its block's:
    under ``jax.jit`` the KL fit of a tied row of 3 x 10^4 leaves a block as
    two runs 1 ulp apart (the closed form of one run 0.6 off; 4e-6 of the
    largest value without what follows, 6e-8 with it). The merge rounds'
    tests split it (:mod:`.merges`, ``_round``): an entry's test sums its
    own block's later entries, each 0 in exact arithmetic but not in the
    KL's logs, so entries of one value test apart. Tests that skip the own
    block (``whole_blocks``) keep it whole, for 4-36% more of the KL's time
    under ``jit``. Instead, neighbouring runs within ``eps`` times their size
    are taken as one block (a wider margin pools distinct blocks: a row at the default softness
    holds many within a few ulps of ``y``, and joined at 16 ulps a row of
    3 x 10^4 came out 4.5e-5 of its largest value off, against 3e-7), and an
    entry whose closed form strays from the direct one by more than 16 ulps
    of ``max |y|`` keeps the direct one. A masked entry (``weight`` 0), out
    of the objective, keeps the direct form, and ``s`` where it is a block
    alone (the KL's fit puts it at -inf). The KL sort's gradient is each
    block's average (``permutahedron._block_average``) over the runs taken
    as one here: over the split runs, it was 5.4 off under ``jax.jit`` at
    the default softness on rows of 2000 normal entries whose float64
    gradient is at most 4.2 (the values within 3e-7). The l2 sort's keeps
    the fit's own blocks: two of them may lie that close (float32, 10^4
    normal entries at the default softness: joined, its gradient was 1.07
    off, 2.4e-7 apart).
    """
    d = sol - y
    after, before = sol[..., 1:], sol[..., :-1]
    if weight is not None and regularization == "kl":  # a masked entry's fit is -inf: no gap from it
        after, before = (xp.where(xp.isfinite(a), a, 0.0) for a in (after, before))
    near = xp.abs(after - before) <= xp.finfo(d.dtype).eps * xp.abs(before)
    joined = starts & ~xp.concat([xp.zeros_like(starts[..., :1]), near], axis=-1)
    exact = _closed_forms(xp, adapter, joined, s, rho, strength, regularization, weight)
    kept = xp.abs(exact + d - s) <= 16.0 * xp.finfo(d.dtype).eps * xp.max(xp.abs(y), axis=-1, keepdims=True)
    if weight is not None:
        d = xp.where(one_entry_blocks(xp, starts) & (weight == 0), 0.0, d)
        kept = kept & (weight > 0)
    return xp.where(kept, exact, s - d), joined


SORT_SHARE = 0.5  # _closed_forms solves the blocks of several alone where they hold at most this share of the batch


def _closed_forms(xp: Any, adapter: Any, starts: Any, s: Any, rho: Any, strength: Any, regularization: str,
                  weight: Any) -> Any:
    """:func:`pooled_sorts`; where values can be read now, on a CPU, over the entries in blocks of several alone when
    they are at most :data:`SORT_SHARE` of the batch (:class:`.subsets.Subset`; a one-entry block is ``s``): at
    strength 1 a row of 10^5 normal entries holds few, and its segmented sums over the whole row cost a third of
    the call."""
    if weight is None and not is_array(strength) and windows.readable_on_cpu(adapter, s):
        several = Subset(xp, ~one_entry_blocks(xp, starts))
        if several.share() <= SORT_SHARE:
            if several.size == 0:
                return s
            part = pooled_sorts(xp, adapter, several.take(starts), several.take(s), several.take(rho), strength, regularization)
            return several.put(part, s)
    return pooled_sorts(xp, adapter, starts, s, rho, strength, regularization, weight)


def pooled_sorts(xp: Any, adapter: Any, starts: Any, s: Any, rho: Any, strength: Any, regularization: str,
                 weight: Any = None) -> Any:
    """The sort projection on each block (decreasing, as ``s``): ``mean_B(s) + (rho - mean_B(rho)) / strength`` (l2),
    ``LSE_B(s) + log softmax_B(rho / strength)`` (kl), the fitted blocks' values.

    These equal ``s - (sol - y)`` with ``y = rho / strength - s`` and ``sol``
    the fit, but are written on ``s - s_first`` and on ``k = rho_first - rho``
    (0, 1, 2, ... over a block, whose means and log-sums have closed forms):
    ``y`` holds ``rho / strength``, which rounds every rank of a long row (in
    float32 at n = 3 x 10^4 and strength 10, by 1e-4), and the direct form
    carries that rounding into every value. A one-entry block is exactly
    ``s`` here. ``weight``: 0 on a masked tail, which counts in no sum (the
    caller keeps its entries).
    """
    first = isotonic.block_first(xp, adapter, starts, xp.stack([s, xp.broadcast_to(rho, s.shape)]))
    d = xp.where(starts, 0.0, s - first[0, ...])
    k = first[1, ...] - rho  # steps from the block's first entry: rho falls by one over its valid entries
    one = xp.ones_like(s) if weight is None else weight
    # l2: a block's total of its spread, of the spread's size; kl: its shares, whose running sum's error grows with the
    # block's length (as the rank's, ``permutahedron._pooled_ranks``)
    sums = isotonic.block_sums(xp, adapter, starts, xp.stack([one, one * (d if regularization == "l2" else xp.exp(d))]),
                               precise=regularization == "kl")
    count, total = sums[0, ...], sums[1, ...]
    if weight is not None:  # a block of masked entries only: no values (the caller keeps theirs)
        count, total = (xp.where(count > 0, a, xp.ones_like(a)) for a in (count, total))
    if regularization == "l2":
        return first[0, ...] + total / count + (0.5 * (count - 1.0) - k) / strength
    # sum over the block of exp(-j / strength), j = 0 .. m - 1: (1 - r^m) / (1 - r) for r = exp(-1 / strength)
    log_total = xp.log(xp.expm1(-count / strength) / xp.expm1(xp.zeros_like(count) - 1.0 / strength))
    return first[0, ...] + xp.log(total) - k / strength - log_total
