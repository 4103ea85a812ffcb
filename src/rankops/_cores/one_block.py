r"""An isotonic fit guessed as one block between short blocks at its ends, and the optimality check that proves it.

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
one block, and the p = 4/3 rank one block between a few blocks of one or two
entries at its ends; at strength 0.1 rows of 10^5 hold one block of two
thirds of the row or more (p = 4/3, 1.35, 1.4, 3/2). The pooling rounds
reach such a block one neighbour at a time. It follows from the fit's
threshold form: the entries fitted at or above a value t are the suffix that
minimises ``Phi_t(k) = sum_(i >= k) f'_i(t)``, whose first minimiser
``c(t)`` rises with t. The block that holds the row's middle entry is found
as a search over values: the entries ``low..high-1`` are those fitted
between two values (``c`` at them), so whole blocks, and their pooled value
lies between their least and greatest; ``c`` at it cuts them, and the side
that holds the middle entry is kept. The set shrinks at every step until it
is one block, whose value cuts it at its own end (both its first entry and
the one past its last minimise ``Phi``); rows of one block take one step,
the others a few (three to nine on the rows tried). Each end is split into
the decreasing runs of its one-entry values (one pooling round's blocks),
and a row whose guess passes the check (with a margin for rounding: a row within rounding of
another partition is no guess) is fitted. The others go to the rounds, with
the block pooled where it passes the check alone (a block of its own fit is
reached by pool-adjacent-violators' steps inside it, so the whole row's fit
holds it in one block). A batch whose rows are far from one block (few drops
between their one-entry values, or a block of less than a quarter of a row)
gives up after a few operations.
"""
from __future__ import annotations

from typing import Any, Callable

from .._lib._compat import cumulative_sum, device as _device, index_dtype, wide_dtype
from .._lib._numerics import centred_within, safe_divide
from .blocks import put_rows, take_in_range
from .powers import odd_power, phi_and_slope

__all__ = ["guessed_first", "guessed_in_graph", "guessed_fit", "fit_rows", "DROPPING", "SHORTEST"]

# a batch is guessed where a row's one-entry values drop between at least this share of their neighbours: the weights'
# steps outrun the data's. Rows that were one block (with ends) dropped at 0.76-1 of them (p = 3/2, 4/3, 5/4 ranks
# of normal rows, n = 200 to 10^5, strength 0.01 to 10 and the default), the others at 0.86 at most, and the default
# softness's and strength 0.1's rows of 1000 at 0.55 at most, which skip the guess for a few operations. At a q with
# no closed forms or moments (``DROPPING[1]``) the rounds' alternative, threshold splits, costs more, and rows that
# hold a block of most of their entries drop at 0.62 (p = 1.35, 10^5 entries, strength 0.1) or 0.67-0.72 (p = 1.3,
# 1000, the default softness), the default softness's rows at 0.52 at most
DROPPING = (0.75, 0.55)
SHORTEST = 128  # shorter rows pool to the end for less than the guess's few dozen operations
SEARCHES, SMALLEST = 12, 4  # steps at most; a batch whose sets all hold less than 1 / SMALLEST of a row gives up


def guessed_first(xp: Any, adapter: Any, v0: Any, y: Any, w: Any, q: float, fit: Callable[..., tuple[Any, Any, Any]],
                  solve: Callable[[Any, Any, Any], tuple[Any, Any, Any]], root: Callable[..., Any]) -> tuple[Any, Any, Any]:
    """``(v, d, t)`` of the fit of one-entry values ``v0`` (rows ``y``, weights ``w``, increasing order, the last
    axis): each row of at least :data:`SHORTEST` entries guessed (:func:`guessed_fit`, ``solve(starts, y, w)`` its
    solve, ``root`` its block's root), the others by ``fit(v0, y, w)`` (2-D rows) from the guess's start
    (:func:`fit_rows`). Reads values."""
    n, shape = v0.shape[-1], v0.shape
    if n < SHORTEST:
        return fit(v0, y, w)
    out = fit_rows(xp, tuple(xp.reshape(a, (-1, n)) for a in (v0, y, w)), fit,
                   lambda v0, y, w: guessed_fit(xp, adapter, v0, y, w, q, lambda starts: solve(starts, y, w), root))
    return tuple(xp.reshape(a, shape) for a in out)


def guessed_in_graph(xp: Any, adapter: Any, v0: Any, y: Any, w: Any, q: float, fit: Callable[..., tuple[Any, Any, Any]],
                     solve: Callable[[Any, Any, Any], tuple[Any, Any, Any]], root: Callable[..., Any]) -> tuple[Any, Any, Any]:
    """:func:`guessed_first` where values are not read as the fit runs (``jax.jit``, a GPU): every row guessed
    (:func:`guessed_fit`, its search a fixed number of steps) where some row's one-entry values drop as often as
    :data:`DROPPING` asks (``adapter.shortcut``; else no row is fitted and each starts from ``v0``), then ``fit(start,
    y, w)`` for every row unless all are fitted (``adapter.unless``), each fitted row taking the guess's numbers. A
    row that is one block then costs the guess's few sums instead of the rounds by which its block takes in one
    neighbour at a time."""
    n, shape = v0.shape[-1], v0.shape
    if n < SHORTEST:
        return fit(v0, y, w, pooled=False)
    rows = tuple(xp.reshape(a, (-1, n)) for a in (v0, y, w))
    qualifies = _drops_often(xp, rows[0][..., 1:] < rows[0][..., :-1], y.dtype, q)

    # either route is a valid start (a guess only saves rounds), so a backend that cannot read the flag takes none
    no = xp.zeros(rows[0].shape[:-1], dtype=xp.bool, device=_device(v0))
    fitted, start, *numbers = adapter.shortcut(xp, qualifies, lambda: guessed_fit(
        xp, adapter, *rows, q, lambda starts: solve(starts, *rows[1:]), root), lambda: (no, *(rows[0],) * 4))

    def rest(guess: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(xp.where(fitted[:, None], g, f) for g, f in zip(guess, fit(start, *rows[1:])))

    # the rounds traced once (a compiler's time), from the guess's start: the one-entry values where none was taken
    out = adapter.unless(xp, xp.all(fitted), rest, tuple(numbers))
    return tuple(xp.reshape(a, shape) for a in out)


def _drops_often(xp: Any, drops: Any, dtype: Any, q: float) -> Any:
    """Whether some row's one-entry values drop (``drops``, between neighbours) as often as :data:`DROPPING` asks at
    ``q``: the batch is guessed (a 0-d bool)."""
    return xp.any(xp.mean(xp.astype(drops, dtype), axis=-1) >= DROPPING[0 if float(q).is_integer() else 1])


def guessed_fit(xp: Any, adapter: Any, v0: Any, y: Any, w: Any, q: float, solve: Callable[[Any], tuple[Any, Any, Any]],
                root: Callable[..., Any]) -> tuple[Any, Any, Any, Any, Any]:
    """``(fitted, start, v, d, t)`` for rows ``y`` (weights ``w``, one-entry values ``v0``, increasing order, 2-D),
    each guessed as one block between short blocks at its ends. ``fitted``: per row, whether its guess is the fit
    (then ``v``, ``d``, ``t`` as :func:`.pnorm.fitted_blocks` returns them); ``start``: values to pool from, ``v0`` with the block
    pooled where it is one block of its own fit (its suffixes hold), which a fit of the whole row then holds in one
    block (pooling it first is a sequence of pool-adjacent-violators' steps); ``solve(starts)``: ``(mean, d, t)`` of
    the blocks that ``starts`` begins (the fit's own solve, so that a fitted row's numbers are those the rounds would
    end on); ``root(d, members, total_w, m)``: the root ``t`` of one block per row (``d`` centred on its ``members``,
    ``m`` of them, ``total_w`` their weight; :func:`.pnorm.capped`'s). Where values can be read now, a batch whose rows
    drop too seldom, or none of whose sets holds a quarter of its row, is given up; elsewhere every row is guessed."""
    n, dev = y.shape[-1], _device(y)
    reads = adapter.is_concrete(v0) and adapter.is_concrete(y)
    no = xp.zeros(y.shape[:-1], dtype=xp.bool, device=dev)
    drops = v0[..., 1:] < v0[..., :-1]
    integer, wide = float(q).is_integer(), wide_dtype(xp, y)
    if reads and not bool(_drops_often(xp, drops, y.dtype, q)):
        return no, v0, v0, v0, v0
    idx = index_dtype(xp, dev)
    every = xp.arange(n + 1, dtype=idx, device=dev)[None, :]  # the suffixes' first entries, n the empty one
    pos = every[..., :n]
    low = xp.zeros(y.shape[:-1] + (1,), dtype=idx, device=dev)  # the set: entries low..high-1, whole blocks of the fit
    high = xp.full_like(low, n)
    # at a q without closed forms or moments in float64 where the device has it: a set one entry larger than a block of
    # 10^5 has a value within float32's rounding of the block's, which then cannot cut it, and the threshold splits
    # that such a row goes to otherwise cost far more than the wider sums (at an integer q the windows finish it)
    searched = y.dtype if integer else wide
    low, high = _search(xp, adapter, xp.astype(y, searched), xp.astype(w, searched), q, root, every, low, high)
    if reads and not bool(xp.any(SMALLEST * (high - low) >= n)):
        return no, v0, v0, v0, v0
    first, last = low, high - 1
    inside = (pos >= first) & (pos <= last)
    whole = reads and not bool(xp.any(~inside))  # every row one block: its sums are the row's
    starts = pos == first
    if not whole:  # the ends: each decreasing run of one-entry values one block (a pooling round's)
        drop = xp.concat([xp.zeros_like(inside[..., :1]), drops], axis=-1)
        joins = drop & (((pos <= first) & (pos > 0)) | (pos > last + 1))  # with the entry before it, in the same end
        starts = starts | (~inside & ~joins)
    mean, d, t = solve(starts)
    v = mean - t
    suffix, margin, a = _suffix_sums(xp, adapter, starts, whole, y, w, v, d, t, q)
    holds = (starts | (suffix >= margin)) & (a >= 0)
    # in float32 a long block's sums round by more than their margin, which is no bound there: a block that does not
    # hold is checked again, precisely
    unsure = xp.any(inside & ~holds, axis=-1)
    if wide != y.dtype and (not reads or bool(xp.any(unsure))):
        suffix, margin, a = _suffix_sums(xp, adapter, starts, whole, y, w, v, d, t, q, wide=wide)
        holds = (starts | (suffix >= margin)) & (a >= 0)
    one = xp.all(holds | ~inside, axis=-1, keepdims=True)
    rises = xp.all(v[..., 1:] >= v[..., :-1], axis=-1)
    return xp.all(holds, axis=-1) & rises, xp.where(one & inside, v, v0), v, d, t


def _search(xp: Any, adapter: Any, y: Any, w: Any, q: float, root: Callable[..., Any], every: Any, low: Any,
            high: Any) -> tuple[Any, Any]:
    """Each row's set ``low..high-1`` (whole blocks of the fit, the middle entry among them) cut at its value until it
    is one block (the module docstring), for at most :data:`SEARCHES` steps; a batch all of whose sets hold less than
    ``1 / SMALLEST`` of their row stops there (where values can be read now: elsewhere every step runs, a set that is
    one block cutting to itself)."""
    n, pos = y.shape[-1], every[..., :-1]

    def step(state: tuple[Any, Any]) -> tuple[Any, Any]:
        low, high = state
        cut = _first_at_or_above(xp, y, w, q, _level(xp, y, w, q, (pos >= low) & (pos < high), root), every, low, high)
        below = cut <= n // 2  # the middle entry is fitted at or above the set's value: the upper part holds it
        return xp.where(below, cut, low), xp.where(below, high, cut)

    def moved(old: tuple[Any, Any], new: tuple[Any, Any]) -> Any:
        return xp.any((new[0] != old[0]) | (new[1] != old[1])) & xp.any(SMALLEST * (new[1] - new[0]) >= n)

    return tuple(adapter.settle(xp, step, (low, high), moved, SEARCHES, 1, like=(y, w)))


def _suffix_sums(xp: Any, adapter: Any, starts: Any, whole: bool, y: Any, w: Any, v: Any, d: Any, t: Any, q: float,
                 wide: Any = None) -> tuple[Any, Any, Any]:
    """``(suffix, margin, a)``: per entry, the sum of ``f'_i`` from it to its block's end at the block's value ``v``
    (``starts``: True where a block begins; ``whole``: each row one block; ``d + t = y - v``), a bound on that sum's
    rounding, and ``a = y - v``.

    ``wide`` (float64 where the device has it; None: the rows' own dtype):
    the sums in that dtype, at each block's value taken one Newton step
    further there: in float32 the running sums of a long row, and the terms
    at a root found in float32, round by more than the sums that decide (a
    p = 1.4 row of 10^5 entries at strength 0.1: a bound of 10^4 on sums
    whose least was 1.2). From a root within float32's rounding the step
    leaves it within float64's, as the roots' error moves every term of a
    block alike.
    """
    within = (lambda g: xp.sum(g, axis=-1, keepdims=True)) if whole else (lambda g: adapter.segment_sum(xp, starts, g))
    if wide is not None:
        y, w, v = (xp.astype(b, wide) for b in (y, w, v))
        step, slope = _signed_newton_step(xp, within, y - v, w, q)
        a = y - v + step
        phi = odd_power(xp, a, q - 1.0)
        # the size of each term: the magnitudes it cancels, and what a's rounding at the size of y and v moves it by
        size = w + xp.abs(phi) + slope * (xp.abs(y) + xp.abs(v))
    else:
        a = d + t
        phi, size = odd_power(xp, a, q - 1.0), w + odd_power(xp, xp.abs(d) + xp.abs(t), q - 1.0)
    terms = xp.stack([w - phi, size])
    running = cumulative_sum(xp, terms) - terms  # before each entry
    # each suffix sum from the row's running sums: the block's total less the sum before the entry
    suffix = within(terms) - (running if whole else running - adapter.segment_first(xp, starts, running))
    # the shortest suffixes, which decide whether a set one entry past a block is one (in float32 the running sums of
    # 10^5 entries round by 10^3, and such a set's last term was -3.5), from their terms alone at the block's value: a
    # block's last entry, and the suffix past its first entry, 0 less the first's term (the root's rounding moves
    # the whole block's sum, but one term by no more than its size's rounding). Each other suffix's size takes in the
    # largest running sum's (the sums run one entry at a time)
    last = xp.concat([starts[..., 1:], xp.ones_like(starts[..., :1])], axis=-1)
    second = xp.concat([xp.zeros_like(starts[..., :1]), starts[..., :-1]], axis=-1) & ~starts
    before = xp.concat([xp.zeros_like(terms[..., :1]), terms[..., :-1]], axis=-1)  # the term before each entry
    summed = xp.stack([suffix[0, ...], suffix[1, ...] + xp.max(xp.abs(running[0, ...]), axis=-1, keepdims=True)])
    suffix = xp.where(last, terms, xp.where(second, xp.stack([-before[0, ...], before[1, ...]]), summed))
    # a suffix sum's rounding: a few units in the last place of its size; a suffix within it of 0 might split the
    # block, and the row goes to the rounds
    return suffix[0, ...], 8.0 * xp.finfo(a.dtype).eps * suffix[1, ...], a


def _first_at_or_above(xp: Any, y: Any, w: Any, q: float, level: Any, every: Any, low: Any, high: Any) -> Any:
    """Per row, the first entry fitted at or above ``level`` (``n``: none), known to lie in ``low..high`` (``every``:
    the places 0..n): the first minimiser there of the suffix sums ``Phi(k) = sum_(i >= k) f'_i(level)``, ``Phi(n) =
    0``."""
    slope = w - odd_power(xp, y - level, q - 1.0)
    phi = xp.flip(cumulative_sum(xp, xp.flip(slope, axis=-1)), axis=-1)
    phi = xp.concat([phi, xp.zeros_like(phi[..., :1])], axis=-1)
    big = xp.asarray(float("inf"), dtype=phi.dtype, device=_device(phi))
    return xp.astype(xp.argmin(xp.where((every >= low) & (every <= high), phi, big), axis=-1, keepdims=True), every.dtype)


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
    return tuple(put_rows(xp, ~fitted, r, g) for g, r in zip(guessed, rest))


def _level(xp: Any, y: Any, w: Any, q: float, inside: Any, root: Callable[..., Any]) -> Any:
    """The value ``v`` of each row's set (``inside``): the root of ``sum phi(y_i - v) = W`` over it, ``phi(u) = u
    |u|^(q-2)``, as its mean less the ``root`` of its centred entries (two passes,
    :func:`.._lib._numerics.centred_within`), then one Newton step on the equation's signed terms: the root takes
    every term at or above 0 (its entries above the value, as a block of the fit's), which puts the value of a set
    with entries below it too high, at or past its greatest block's (a search would stop there)."""
    m = xp.sum(xp.astype(inside, y.dtype), axis=-1, keepdims=True)
    mean, d = centred_within(xp, y, inside, m)
    total_w = xp.sum(xp.where(inside, w, 0.0), axis=-1, keepdims=True)
    t = root(d, inside, total_w, m)
    if q in (2.0, 4.0):  # a mean, and the cubic in the set's moments: the signed equation's own root
        return mean - t
    step, _ = _signed_newton_step(xp, lambda g: xp.sum(g, axis=-1, keepdims=True), xp.where(inside, d + t, 0.0),
                                  xp.where(inside, w, 0.0), q)
    return mean - (t + step)


def _signed_newton_step(xp: Any, within: Callable[[Any], Any], a: Any, w: Any, q: float) -> tuple[Any, Any]:
    """``(step, slope)``: one Newton step on each set's equation ``sum phi(a_i) = sum w_i`` (``a = y - v``, ``phi(a) = a
    |a|^(q-2)`` with its sign; ``within(g)``: each set's sum of ``g``, per entry or per row), the amount every ``a`` of
    the set rises by (its value falls by), and each term's ``phi'(a)``. An entry with ``a`` and ``w`` 0 adds nothing."""
    phi, slope = phi_and_slope(xp, a, q, tangent=False)
    slope = (q - 1.0) * slope
    totals = within(xp.stack([w - phi, slope]))
    return safe_divide(xp, totals[0, ...], totals[1, ...]), slope
