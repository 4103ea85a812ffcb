"""Each block's root of the p-norm regularized fit (:mod:`.pnorm`), from its entries.

For a block B of data ``y`` (``d_i = y_i - mean_B(y)``) and weight ``W_B``,
the root ``t = mean_B(y) - v_B`` of ``sum_B phi(d_i + t) = W_B``,
``phi(u) = u |u|^(q-2)``: :func:`shift` where every term is nonnegative at
the root (the rank's blocks, and the top-k polytope's free block), in
closed form at q = 2, 3 and 4, by Newton's steps on the block's centred
moments at q = 5 and 6 and over its entries at any other q, each falling
from an upper bound; :func:`signed_shift` where terms change sign, by
safeguarded Newton's steps; :func:`sort_shift` for the soft sort's blocks,
whose data (its ranks) step evenly, from their size, weight and step (at q
= 3 and 4 in closed form, elsewhere in (2, 6] by :mod:`.stepped`).
:func:`per_block` solves a root once per block where that pays.
"""

from __future__ import annotations

import math
from typing import Any

from .._lib._numerics import safe_divide
from . import windows
from .power_sums import centred, centred_moments, falling_moment_root, stepped_blocks, stepped_root, stepped_second_moment
from .powers import falling_newton, falling_start, moment_root, odd_power, phi_and_slope, power
from . import stepped
from .subsets import Subset

__all__ = ["shift", "moment_shift", "slotted", "slotted_sort", "signed_shift", "sort_shift", "per_block", "MOMENT_ROOTS", "BLOCK_SHARE", "BLOCK_ENTRIES"]


def shift(xp: Any, adapter: Any, starts: Any, y: Any, w: Any, q: float, tangent: bool = True, step: float | None = None,
          about_first: bool = False, precise: bool = False) -> tuple[Any, Any, Any]:
    """``(mean, d, t)`` per entry: ``mean_B(y)``, ``d = y - mean_B(y)``, ``t = mean_B(y) - v_B`` for the block root ``v_B``
    (one number per block). ``tangent``: as for :func:`.powers.power`; ``step``, ``about_first``: as for
    :func:`.power_sums.centred`; ``precise``: its sums and the moments' as ``adapter.segment_sum``'s (an output's)."""
    m, total_w, mean, d = centred(xp, adapter, starts, y, w, step, about_first, precise)
    if q == 2.0:
        return mean, d, total_w / m
    if q in MOMENT_ROOTS:
        moments = centred_moments(xp, adapter, starts, d, int(q) - 1, precise)
        return mean, d, moment_shift(xp, adapter, starts, total_w, m, moments, q, tangent)

    share = total_w / m  # the residual as sum_B (phi(a_i) - W_B / |B|): a scatter-add adds one entry at a time, and
    # terms of W_B / |B|'s size round at W_B's (a float32 soft block of 10^5 ranks: all 5 off); centred, at their spread's size

    def newton(t: Any) -> Any:
        a = xp.clip(d + t, 0.0, None)
        slope = power(xp, a, q - 2.0)  # phi(a) = a phi'(a) / (q - 1): one general power a step
        terms = adapter.segment_sum(xp, starts, xp.stack([a * slope - share, slope]))
        return t - safe_divide(xp, terms[0, ...], (q - 1.0) * terms[1, ...])

    if q > 3.0:  # the power means' bound (q - 1 >= 2), else Jensen's
        start = falling_start(xp, share, centred_moments(xp, adapter, starts, d, 2)[0] / m, q - 1.0, tangent=tangent)
    else:
        start = power(xp, xp.clip(share, 0.0, None), 1.0 / (q - 1.0))
    return mean, d, falling_newton(xp, adapter, newton, start, q, like=(d, total_w))


# the q whose block roots follow from the block's size, weight and centred moments up to M_(q-1) (:func:`moment_shift`)
MOMENT_ROOTS = (3.0, 4.0, 5.0, 6.0)


def slotted(xp: Any, adapter: Any, slots: tuple[Any, Any], y: Any, w: Any, q: float, highest: int) -> tuple[Any, tuple[Any, ...]]:
    """``(values, form)`` at a q of :data:`MOMENT_ROOTS`, each block solved once in an adapter's slots (``slots``: its
    ``segment_slots``, ``(total, read)``): each entry's block value ``mean_B(y) - t`` (:func:`shift`'s, no tangent), and
    each block's :func:`.power_sums.block_form` ``(mean, W, m, M2, ..., M_highest)`` in its slot. The same sums, and
    the same numbers, as those per entry; every entry of a block reads its one value (no first entry's to read), and no
    sum is read back but the means. An empty slot holds a one-entry block of weight 1 at 0 (no 0 / 0)."""
    total, read = slots
    sums = total(xp.stack([xp.ones_like(y), y, w]))
    some = sums[0, ...] > 0
    m = xp.where(some, sums[0, ...], 1.0)
    mean = sums[1, ...] / m
    total_w = xp.where(some, sums[2, ...], 1.0)
    d = y - read(mean, exact=True)
    powers = [d * d]
    for _ in range(highest - 2):
        powers.append(powers[-1] * d)
    stacked = total(xp.stack(powers))
    moments = tuple(stacked[i, ...] for i in range(highest - 1))
    # a slot is a block of its own: the root once per slot
    t = moment_shift(xp, adapter, xp.ones_like(some), total_w, m, moments, q, tangent=False)
    return read(mean - t), (mean, total_w, m, *moments)


def slotted_sort(xp: Any, adapter: Any, slots: tuple[Any, Any], starts: Any, y: Any, w: Any, q: float) -> tuple[Any, tuple[Any, ...]]:
    """:func:`sort_shift` at q = 3 to 6 in an adapter's slots (as :func:`slotted`): each block's size, weight, first
    datum and step in one scatter (:func:`.power_sums.stepped_blocks`), its root once per slot; ``(values, form)``,
    each entry's value read back and each block's :func:`.power_sums.stepped_block_form` in its slot."""
    m, total_w, first, step = stepped_blocks(xp, adapter, starts, y, w, slots)
    mean = first + step * ((m - 1.0) / 2.0)
    t = _stepped_roots(xp, adapter, xp.ones_like(m, dtype=xp.bool), q, total_w, m, step)  # a slot: a block of its own
    return slots[1](mean - t), (mean, total_w, m, stepped_second_moment(m, step), xp.zeros_like(m))


def moment_shift(xp: Any, adapter: Any, starts: Any, total_w: Any, m: Any, moments: tuple[Any, ...], q: float,
                 tangent: bool = True) -> Any:
    """:func:`shift`'s root ``t`` at a q of :data:`MOMENT_ROOTS` from each block's weight, size and centred moments
    ``moments = (M_2, ..., M_k)``, ``k >= q - 1`` (one number per block, per entry; ``starts`` True where a block
    begins): a square root at q = 3, the cubic's root at q = 4 (:func:`.powers.moment_root`), Newton's steps on the
    moments' polynomial at q = 5 and 6 (:func:`.power_sums.falling_moment_root`: summed once, where a step over the
    block's entries sums them all); past q = 3 once per block where that pays (:func:`per_block`)."""
    if q == 3.0:
        return moment_root(xp, q, total_w, m, moments[0], tangent=tangent)
    if q == 4.0:
        return per_block(xp, adapter, starts, lambda *a: moment_root(xp, q, *a, tangent=tangent), total_w, m,
                         *moments[:2], q=q, tangent=tangent)
    degree = int(q) - 1
    return per_block(xp, adapter, starts, lambda w, m, *a: falling_moment_root(xp, degree, w, m, a), total_w, m,
                     *moments[:degree - 1], q=q, tangent=tangent)


BLOCK_SHARE, BLOCK_ENTRIES = 0.5, 1 << 15  # :func:`per_block`'s gate (below it, the gathers cost more than the cubic)


def per_block(xp: Any, adapter: Any, starts: Any, root: Any, total_w: Any, m: Any, *moments: Any, q: float, tangent: bool,
              alone: Any = None, fewest: int | None = None) -> Any:
    """A block's ``root(total_w, m, *moments)`` (the cubic's, or Newton's steps) of arrays that hold one number per
    block (``starts``: True where one begins): where values can be read now, on a CPU, in a batch of at least
    ``fewest`` entries (None: ``BLOCK_ENTRIES``) whose blocks of several have first entries at most ``BLOCK_SHARE``
    of them, on those alone (:class:`.subsets.Subset`), spread over their blocks, and a one-entry block in closed
    form ``W^(1/(q-1))`` (or ``alone``, each entry's); elsewhere on every entry."""
    totals = (total_w, m, *moments)
    fewest = BLOCK_ENTRIES if fewest is None else fewest
    if math.prod(starts.shape) < fewest or not windows.readable_on_cpu(adapter, starts, *totals):
        return root(*totals)
    several = m > 1
    firsts = Subset(xp, starts & several)
    if firsts.share() > BLOCK_SHARE:
        return root(*totals)
    if alone is None:
        alone = power(xp, xp.clip(total_w, 0.0, None), 1.0 / (q - 1.0), tangent=tangent)
    if firsts.size == 0:
        return alone
    return xp.where(several, firsts.spread(root(*(firsts.take(a) for a in totals))), alone)


# safeguarded Newton steps for a block equation whose terms change sign (the soft sort's): each halves the bracket
_SIGNED_STEPS, _SIGNED_ROUND = 60, 2  # at worst, then converge quadratically; steps between looks at whether a root moves


def signed_shift(xp: Any, adapter: Any, starts: Any, y: Any, w: Any, q: float, near: Any = None) -> tuple[Any, Any, Any]:
    """:func:`shift` for ``sum_B phi(y_i - v) = W_B`` with ``phi(u) = sign(u) |u|^(q-1)``, terms of either sign
    (the soft sort: its weights are the data). ``h(t) = sum_B phi(d_i + t) - W_B`` increases in t and lies in
    ``[-D - (W-/|B|)^(1/(q-1)), D + (W+/|B|)^(1/(q-1))]`` (``D = sum_B |d|``): Newton's step where it stays inside
    the bracket, else its midpoint (the start, or a value ``near`` the root); for a one-entry block, its closed form.
    ``y`` increases along each block. (The soft sort's blocks at q = 3 to 6 have closed forms or cheaper steps:
    :func:`sort_shift`.)"""
    m, total_w, mean, d = centred(xp, adapter, starts, y, w, about_first=True)
    e = 1.0 / (q - 1.0)
    alone = odd_power(xp, total_w, e)
    if q == 2.0:
        return mean, d, total_w / m

    def roots(_: Any) -> tuple[Any]:
        spread = adapter.segment_sum(xp, starts, xp.abs(d))
        share = total_w / m  # h summed as sum_B (phi(u_i) - W_B / |B|), as :func:`shift`'s residual
        lo, hi = -spread - power(xp, xp.clip(-share, 0.0, None), e), spread + power(xp, xp.clip(share, 0.0, None), e)
        start = xp.where(m == 1, alone, (lo + hi) / 2.0 if near is None else xp.clip(mean - near, lo, hi))

        def newton(state: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
            t, lo, hi = state
            u = d + t
            phi, slope = phi_and_slope(xp, u, q)
            terms = adapter.segment_sum(xp, starts, xp.stack([phi - share, (q - 1.0) * slope]))
            h = terms[0, ...]
            lo, hi = xp.where(h < 0, t, lo), xp.where(h < 0, hi, t)
            step = t - safe_divide(xp, h, terms[1, ...])
            # the bracket closed: a root at its end (a one-entry block's, or a closed form's start) is kept
            return xp.where((step >= lo) & (step <= hi) & (terms[1, ...] > 0), step, (lo + hi) / 2.0), lo, hi

        # one loop (a compiled backend traces the step once), not the steps unrolled into the pooling round's body, in
        # rounds of a few steps until no root moves by more than a few units in its last place
        ulps = 8.0 * xp.finfo(d.dtype).eps * (spread + xp.abs(start))

        def moved(old: tuple[Any, Any, Any], new: tuple[Any, Any, Any]) -> Any:
            return xp.any(xp.abs(new[0] - old[0]) > ulps)

        t, _, _ = adapter.settle(xp, newton, (start, lo, hi), moved, _SIGNED_STEPS, _SIGNED_ROUND, like=(d, total_w))
        return (xp.where(m == 1, alone, t),)

    # a batch of one-entry blocks (a soft sort's rows at strength 1 and below, as a rule) has every root in closed form:
    # where the flag is read now, or under jax.jit (a branch), the rest is skipped (called in the pooling loop's body)
    return mean, d, adapter.unless(xp, xp.all(m == 1), roots, (alone,), in_loop=True)[0]


def sort_shift(xp: Any, adapter: Any, starts: Any, y: Any, w: Any, q: float, near: Any = None) -> tuple[Any, Any, Any]:
    """:func:`signed_shift` for the soft sort, whose blocks' data step evenly (its ranks: exact multiples of a power of
    two): at q = 3 to 6 from each block's size, weight, first datum and step (its first two data's difference, exact),
    the mean and ``d`` in closed form, exact to one rounding where sums of the data would round at their total, and the
    root from the block's size, weight and step (:func:`.power_sums.stepped_root`: closed forms at q = 3 and 4,
    :func:`.stepped.unit_root`'s Newton's steps on one number per entry in (2, 6]; at a q that is no integer where
    values can be read now, on a CPU, once per block); no segmented sum past the block's size and weight (``near``
    unread). At any other q, and at a q that is no integer elsewhere, :func:`signed_shift`."""
    whole = q == round(q)
    # at a q that is no integer the roots' sums of general powers cost a few dozen powers a step on every entry where
    # they cannot run once per block (jax.jit, a GPU): there Newton's steps over the entries cost less
    if (q not in (3.0, 4.0) and not stepped.solves(q)) or not (whole or windows.readable_on_cpu(adapter, w)):
        return signed_shift(xp, adapter, starts, y, w, q, near)
    m, total_w, first, step = stepped_blocks(xp, adapter, starts, y, w)
    half = step * ((m - 1.0) / 2.0)
    return first + half, (y - first) - half, _stepped_roots(xp, adapter, starts, q, total_w, m, step)


def _stepped_roots(xp: Any, adapter: Any, starts: Any, q: float, total_w: Any, m: Any, step: Any) -> Any:
    """The roots of blocks of ``m`` data stepping by ``step`` (:func:`.power_sums.stepped_root`), none where no block
    has a step (a branch: every block one entry, or equal data)."""
    alone = odd_power(xp, total_w / m, 1.0 / (q - 1.0))  # one entry, or equal data (step 0): every term shares t's sign

    def roots(_: Any) -> tuple[Any]:
        # once per block of several where values can be read, from BLOCK_ENTRIES entries on; at a q that is no integer
        # at any length (Newton's steps on sums of general powers cost more per number than the gathers)
        return (per_block(xp, adapter, starts, lambda *a: stepped_root(xp, q, *a), total_w, m, step, q=q, tangent=False,
                          alone=alone, fewest=None if q == round(q) else 0),)

    return adapter.unless(xp, ~xp.any(step > 0), roots, (alone,), in_loop=True)[0]
