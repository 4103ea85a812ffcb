"""Portable loops along the last axis: the fixed-point driver, row-block scans, prefix scans and searches.

Fixed points. ``iterate`` runs ``step`` in rounds of ``check_every`` iterations. After
each round it measures the per-problem ``error``; a problem within ``tol``
is frozen (``freeze`` keeps its state from then on), and the loop stops once
every problem is. Freezing makes each problem's result depend on that
problem alone, not on when the rest of the batch converges, so a batch, its
rows one by one, Dask blocks and ``jax.vmap`` all give the same numbers.
Problems whose error is NaN cannot improve and count as settled.
The stopping test reads one boolean per round: fine for eager backends;
JAX replaces this driver with ``lax`` control flow (see the JAX adapter).

Scans and searches that the array API standard lacks, in ``xp`` calls only.
The standard has ``cumulative_sum`` but no general scan, no
``logcumsumexp`` and a one-dimensional ``searchsorted``. The portable
versions take ``ceil(log2 n)`` vectorised steps (Hillis & Steele 1986
doubling; a binary search of fixed depth), so they run under ``jax.jit``,
on Dask blocks and on any device; framework adapters replace them with
their native kernels where those exist (``torch.searchsorted``,
``torch.logcumsumexp``, ``jax.lax.associative_scan``).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ._compat import index_dtype, device as _device
from ._numerics import logaddexp


def settled(xp: Any, err: Any, tol: float) -> Any:
    """Within ``tol``, or NaN (no better to be had): one comparison, which NaN fails.

    A boolean ``err`` is already the flag of the problems still unsettled.
    """
    return ~err if err.dtype == xp.bool else ~(err > tol)


def freeze_rows(xp: Any, done: Any, old: tuple[Any, ...], new: tuple[Any, ...]) -> tuple[Any, ...]:
    """Keep ``old`` for the problems flagged in ``done`` (shape: the batch)."""
    done = done[..., None]
    return tuple(xp.where(done, o, w) for o, w in zip(old, new))


def round_count(max_iter: int, check_every: int) -> int:
    """The most rounds of ``check_every`` iterations that ``max_iter`` iterations take (the last may be partial)."""
    return -(-max_iter // check_every)


def run_round(
    xp: Any, step: Callable[..., Any], operands: Any, state: Any, r: Any, done: Any, *, freeze: Callable[..., Any],
    max_iter: int, check_every: int, whole_rounds: bool = False, fori: Callable[..., Any] | None = None,
) -> Any:
    """Round ``r`` (from 0) of :func:`iterate`: ``check_every`` steps from ``state``, then the problems flagged in
    ``done`` (None: none) frozen at ``state``. Every backend's loop runs its rounds through this one rule.

    ``r`` is a number (eager loops: the last round runs only the iterations
    left) or a 0-d array (a traced loop: every round runs ``check_every``
    steps, those past ``max_iter`` no-ops). ``whole_rounds``: ``step(operands,
    state, count)`` runs a round of ``count`` iterations itself. ``fori(count,
    body, init)``: the backend's loop over the steps (``jax.lax.fori_loop``);
    None, a Python loop.
    """
    traced = not isinstance(r, int)
    left = max_iter - r * check_every
    if whole_rounds:
        new = step(operands, state, xp.clip(left, None, check_every) if traced else min(left, check_every))
    else:
        def one(i: Any, t: Any) -> Any:
            new = step(operands, t)
            if not traced:
                return new
            past = i >= left  # the last round may overshoot max_iter: its extra iterations are no-ops
            return tuple(xp.where(past, o, w) for o, w in zip(t, new))

        count = check_every if traced else min(left, check_every)
        if fori is not None:
            new = fori(0, count, one, state)
        else:
            new = state
            for i in range(count):
                new = one(i, new)
    return new if done is None else freeze(xp, done, state, new)


def iterate(
    xp: Any,
    step: Callable[[Any, Any], Any],
    operands: Any,
    state: Any,
    *,
    error: Callable[[Any, Any], Any],
    freeze: Callable[[Any, Any, Any, Any], Any],
    max_iter: int,
    tol: float,
    check_every: int,
    wrap: Callable[[Callable[[Any], Any], Any], Any] | None = None,
    whole_rounds: bool = False,
    early_exit: bool = True,
    all_settled: Callable[[Any], bool] | None = None,
) -> tuple[Any, int, Any]:
    """Return ``(state, n_iter, error)``.

    ``step(operands, state)`` is one iteration, or with ``whole_rounds=True``
    ``step(operands, state, count)`` runs a whole round of ``count <=
    check_every`` iterations; ``error(operands, state)`` is the per-problem
    error (or a boolean flag, True while unsettled); ``freeze(xp, done, old, new)`` returns ``new`` with the problems
    flagged in ``done`` reset to ``old``; ``wrap(run, state)`` may wrap each
    round (checkpointing). ``early_exit=False`` (traced code, which cannot
    read the stopping test) runs every round, settled problems frozen: the
    same numbers, a fixed schedule. ``all_settled(done)`` reads the stopping
    test where ``bool(xp.all(done))`` cannot: ``done`` then stands for more
    problems than its shape shows (``torch.func.vmap``'s, read under the
    map), so every round freezes the settled ones.
    """

    err = done = None
    for r in range(round_count(max_iter, check_every)):
        def run(s: Any, r: int = r, done: Any = done) -> Any:
            return run_round(xp, step, operands, s, r, done, freeze=freeze, max_iter=max_iter, check_every=check_every,
                             whole_rounds=whole_rounds)

        state = run(state) if wrap is None else wrap(run, state)
        err = error(operands, state)
        done = settled(xp, err, tol)
        if early_exit and (bool(xp.all(done)) if all_settled is None else all_settled(done)):
            return state, min((r + 1) * check_every, max_iter), err
        if early_exit and all_settled is None and math.prod(done.shape) == 1:  # one problem, and it goes on: nothing to freeze
            done = None
    return state, max_iter, err


def in_blocks(xp: Any, fn: Callable[..., tuple[Any, ...]], arrays: tuple[Any, ...], cores: tuple[int, ...], size: int | None) -> tuple[Any, ...]:
    """``fn(*arrays)``, run on blocks of at most ``size`` problems of the arrays' common batch (None: the batch whole).

    ``cores``: how many trailing axes of each array belong to one problem;
    each problem's result must be its own. The arrays are broadcast over
    the batch and flattened to one batch axis; ``fn``'s array results are
    concatenated back and shaped over the batch, and its number results
    (iteration counts) combined by their largest.
    """
    batch = tuple(np.broadcast_shapes(*(tuple(a.shape[: a.ndim - k]) for a, k in zip(arrays, cores))))  # shapes only
    total = math.prod(batch)
    if size is None or total <= size:
        return fn(*arrays)
    flat = [xp.reshape(xp.broadcast_to(a, batch + tuple(a.shape[a.ndim - k :])), (-1,) + tuple(a.shape[a.ndim - k :]))
            for a, k in zip(arrays, cores)]
    outs = [fn(*(a[start : min(start + size, total), ...] for a in flat)) for start in range(0, total, size)]
    return tuple(
        max(parts) if isinstance(parts[0], int) else xp.reshape(xp.concat(list(parts), axis=0), batch + tuple(parts[0].shape[1:]))
        for parts in zip(*outs)
    )


def scan_blocks(xp: Any, body: Callable[[Any, Any], Any], carry: Any, xs: tuple[Any, ...], block: int) -> tuple[Any, tuple[Any, ...]]:
    """Run ``body(carry, blocks) -> (carry, ys)`` over consecutive ``block``-long slices of the last axis of ``xs``.

    Returns the final carry and each of ``ys`` concatenated along the last
    axis. The eager loop of NumPy, CuPy, torch and array-api-strict; JAX
    replaces it with ``lax.scan`` (see the JAX adapter).
    """
    n = xs[0].shape[-1]
    outs = []
    for start in range(0, n, block):
        # the standard leaves out-of-bounds slice stops unspecified: clamp
        carry, ys = body(carry, tuple(x[..., start : min(start + block, n)] for x in xs))
        outs.append(ys)
    return carry, tuple(parts[0] if len(parts) == 1 else xp.concat(parts, axis=-1) for parts in zip(*outs))


# -- prefix scans and searches ------------------------------------------------------------------------


def _doubling(xp: Any, pairs: tuple[Any, ...], combine: Callable[..., tuple[Any, ...]], reverse: bool) -> tuple[Any, ...]:
    """Inclusive scan of an associative ``combine(earlier, later)`` by doubling.

    At step ``d`` the first ``d`` entries are final already; only the rest
    combine, each with the entry ``d`` places before it.
    """
    if reverse:
        pairs = tuple(xp.flip(p, axis=-1) for p in pairs)
    n = pairs[0].shape[-1]
    d = 1
    while d < n:
        tails = combine(tuple(p[..., : n - d] for p in pairs), tuple(p[..., d:] for p in pairs))
        pairs = tuple(xp.concat([p[..., :d], t], axis=-1) for p, t in zip(pairs, tails))
        d *= 2
    return tuple(xp.flip(p, axis=-1) for p in pairs) if reverse else pairs


# Rows longer than this are scanned in chunks of _CHUNK entries: the same ceil(log2 n)
# steps, but each step of the outer scan runs over n / _CHUNK entries, not n.
_CHUNK = 32
_CHUNKED_FROM = 2048


def _affine(xp: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """The doubling scan of ``h_i = a_i h_(i-1) + b_i``: ``(prod a_0..a_i, h_i)`` for every i."""

    def combine(earlier: tuple[Any, ...], later: tuple[Any, ...]) -> tuple[Any, ...]:
        (a1, b1), (a2, b2) = earlier, later
        return a1 * a2, b2 + a2 * b1

    return _doubling(xp, (a, b), combine, False)


def _chunked(xp: Any, a: Any, b: Any) -> Any:
    n = a.shape[-1]
    if n < _CHUNKED_FROM:
        return _affine(xp, a, b)[1]
    m = -(-n // _CHUNK)
    if m * _CHUNK > n:  # padding at the end (a = 1, b = 0) changes no earlier entry
        pad = a.shape[:-1] + (m * _CHUNK - n,)
        dev = _device(a)
        a = xp.concat([a, xp.ones(pad, dtype=a.dtype, device=dev)], axis=-1)
        b = xp.concat([b, xp.zeros(pad, dtype=b.dtype, device=dev)], axis=-1)
    shape = a.shape[:-1] + (m, _CHUNK)
    prod, h = _affine(xp, xp.reshape(a, shape), xp.reshape(b, shape))
    # what enters each chunk from the ones before it: the scan of the chunks' end values
    ends = _chunked(xp, prod[..., -1], h[..., -1])
    enter = xp.concat([xp.zeros_like(ends[..., :1]), ends[..., :-1]], axis=-1)
    h = h + prod * enter[..., None]
    return xp.reshape(h, a.shape)[..., :n]


def linear_scan(xp: Any, a: Any, b: Any, *, reverse: bool = False) -> Any:
    """``h_0 = b_0``, ``h_i = a_(i-1) h_(i-1) + b_i`` along the last axis (``reverse``: ``h_i = a_i h_(i+1) + b_i`` from the end).

    ``a`` (one entry fewer than ``b``) links neighbours: ``a_i`` carries
    between entries ``i`` and ``i + 1``, the same link both ways. With
    ``0 <= a_i <= 1`` every partial product stays in [0, 1], so the scan
    neither overflows nor cancels: sums of ``exp`` of sorted data are written
    this way (``a_i = exp(-(x_(i+1) - x_i) / alpha)``), and a segmented sum is
    ``a_i = 0`` before each segment start, 1 elsewhere. Long rows run as a
    scan within chunks, then one over the chunks' ends (O(n) work instead of
    O(n log n), in as many steps).
    """
    if reverse:
        a, b = xp.flip(a, axis=-1), xp.flip(b, axis=-1)
    # the first entry has nothing before it: a zero link from h_(-1) = 0
    h = _chunked(xp, xp.concat([xp.zeros_like(b[..., :1]), a], axis=-1), b)
    return xp.flip(h, axis=-1) if reverse else h


def cumlogsumexp(xp: Any, z: Any, *, reverse: bool = False) -> Any:
    """``log(cumsum(exp(z)))`` along the last axis, stable at any scale (``reverse``: suffix sums)."""

    def combine(earlier: tuple[Any, ...], later: tuple[Any, ...]) -> tuple[Any, ...]:
        return (logaddexp(xp, earlier[0], later[0]),)

    return _doubling(xp, (z,), combine, reverse)[0]


def take(xp: Any, a: Any, index: Any) -> Any:
    """``a[..., index]`` per row: ``take_along_axis`` on the last axis (``index`` shares ``a``'s batch shape)."""
    return xp.take_along_axis(a, index, axis=-1)


def searchsorted(xp: Any, sorted_seq: Any, values: Any, *, side: str = "left") -> Any:
    """Row-wise ``searchsorted``: for each of ``values`` (..., k), its insertion index in the row of ``sorted_seq`` (..., m).

    ``side="left"``: the number of entries ``< v``; ``"right"``: ``<= v``.
    A binary search of ``ceil(log2(m + 1))`` gather steps; a NaN row gives
    arbitrary indices in [0, m] (its values are NaN anyway).
    """
    m = sorted_seq.shape[-1]
    dev = _device(values)
    idx_dtype = index_dtype(xp, dev)
    lo = xp.zeros(values.shape, dtype=idx_dtype, device=dev)
    hi = xp.full(values.shape, m, dtype=idx_dtype, device=dev)
    for _ in range(max(1, m.bit_length())):
        mid = (lo + hi) // 2
        probe = take(xp, sorted_seq, xp.clip(mid, 0, m - 1))
        right = probe < values if side == "left" else probe <= values
        active = lo < hi
        lo = xp.where(active & right, mid + 1, lo)
        hi = xp.where(active & ~right, mid, hi)
    return lo


def segment_sum(xp: Any, starts: Any, g: Any) -> Any:
    """Each entry's segment total of ``g``; segments are runs that begin where ``starts`` is True.

    A segmented scan to each segment's end, carried back unchanged: every
    entry of a segment gets the bit-identical total, and no total is the
    difference of two long prefix sums.
    """
    zero = xp.zeros_like(g)
    ends = xp.concat([starts[..., 1:], xp.ones_like(starts[..., :1])], axis=-1)
    links = xp.where(starts, zero, xp.ones_like(g))[..., 1:]  # cut before each start, both ways
    return linear_scan(xp, links, xp.where(ends, linear_scan(xp, links, g), zero), reverse=True)


def segment_max(xp: Any, starts: Any, g: Any) -> Any:
    """Each entry's segment maximum of ``g`` (``starts`` broadcasts against ``g``): a segmented running maximum by
    doubling, forward from each start, then backward from each segment's end (where the first one holds the total)."""
    starts = xp.broadcast_to(starts, g.shape)
    ends = xp.concat([starts[..., 1:], xp.ones_like(starts[..., :1])], axis=-1)

    def combine(earlier: tuple[Any, ...], later: tuple[Any, ...]) -> tuple[Any, ...]:
        (s1, m1), (s2, m2) = earlier, later
        return s1 | s2, xp.where(s2, m2, xp.maximum(m1, m2))  # nothing crosses a segment's first entry

    running = _doubling(xp, (starts, g), combine, False)[1]
    return _doubling(xp, (ends, running), combine, True)[1]


def segment_logsumexp(xp: Any, starts: Any, g: Any) -> Any:
    """Each entry's segment ``log(sum(exp(g)))``: the segment's maximum plus the log of a segmented sum of terms at
    most 1, one of them 1 (no overflow, no total underflow; -inf for a segment of -inf only, with no NumPy warning)."""
    top = segment_max(xp, starts, g)
    ref = xp.where(top > -math.inf, top, xp.zeros_like(top))  # a segment of -inf only: terms exp(-inf) = 0
    total = segment_sum(xp, starts, xp.exp(g - ref))
    some = total > 0
    return xp.where(some, ref + xp.log(xp.where(some, total, xp.ones_like(total))), xp.full_like(total, -math.inf))


def segment_first(xp: Any, starts: Any, g: Any) -> Any:
    """Each entry's segment's first value of ``g``: the first entry's position carried forward exactly (``1 * h +
    0``: positions are finite, where ``g`` may hold an infinity that ``0 * h`` would make NaN), then gathered."""
    starts = xp.broadcast_to(starts, g.shape)
    exact = xp.float64 if g.dtype == xp.float64 else xp.float32  # positions of any row below 2^24 entries
    pos = xp.broadcast_to(xp.arange(g.shape[-1], dtype=exact, device=_device(g)), g.shape)
    zero = xp.zeros_like(pos)
    first = linear_scan(xp, xp.where(starts, zero, xp.ones_like(pos))[..., 1:], xp.where(starts, pos, zero))
    return take(xp, g, xp.astype(first, index_dtype(xp, _device(g))))
