r"""Isotonic regression's merge rounds, in two forms: one per round on eager backends, one loop where loops compile once.

The row (padded to ``2^L`` entries) is split into segments of 1, 2, 4, ...
entries; at the round of half-length ``h`` each pair of neighbouring
solved halves, ``L`` (left) and ``R`` (right), is merged (:func:`.isotonic.fit`
states the rule): a suffix of ``L`` and a prefix of ``R`` pool into one
value, found from each half's sums running outward from the boundary and
one search per entry into the other half (:func:`_halves_round` states the
tests). A round costs O(n log n); no n x n anything.

- :func:`_halves_round`, ``h`` a number: the row reshaped to
  ``(pairs, 2, h)``, each half a row of the backend's own scan and
  ``searchsorted``: few operations per round, which an eager backend (NumPy,
  torch, CuPy, Dask) pays per operation. Compiled, its ``L`` rounds are
  ``L`` program sections of different shapes.
- :func:`_round`, ``h`` an array: every array keeps the row's shape and
  what depends on ``h`` comes from positions, so the ``L`` rounds are one
  loop (on JAX) and the program does not grow with the row. Sums within
  each half run by doubling over offsets ``d = 1, 2, 4, ...`` that stay
  inside the half, the counts by a binary search: the sums (only those
  that run outward from the boundary, the ones the tests read) and every
  search of a round are one loop (:func:`_sweep`) of one gather per step,
  as many steps as a half of ``h`` entries needs (``log2 h`` + 1: O(n
  log^2 n) in all), and both tests read their sums with one gather (a
  compiled program ends a kernel at each gather). The
  loops run in a custom rule's forward, which no autodiff traces: on JAX
  they are ``while`` loops (the adapter's ``repeat(differentiated=False)``),
  which stop at that count and which ``jax.grad`` leaves whole.
"""

from __future__ import annotations

from typing import Any

from .._lib._compat import index_dtype, device as _device

__all__ = ["merge_rounds", "merge_lengths", "padded_length", "SHORT_MERGE_FROM"]


SHORT_MERGE_FROM = 1024  # rows padded to this length or more try merge rounds over a quarter or a half of it


def padded_length(n: int) -> int:
    """The length the merge rounds pad a row of ``n`` to: the next power of two (:func:`.isotonic.merge_rows`)."""
    return 1 << (n - 1).bit_length()


def merge_lengths(n: int) -> tuple[int, ...]:
    """The rows' lengths, shortest first, that merge rounds over the blocks of a row of ``n`` may run over where they
    cannot count the blocks (:func:`.power_sums.merge_fit`): the shortest that holds every row's blocks. A quarter
    and a half of the padded length from :data:`SHORT_MERGE_FROM` on, then the padded length (the rows of blocks are
    built at it, so that no merge program pads them again): the merge rounds cost O(n log^2 n), and a row that stalls
    out of the pooling rounds may hold a fifth or half of its entries as blocks."""
    big = padded_length(n)
    return (big // 4, big // 2, big) if big >= SHORT_MERGE_FROM else (big,)


def _places(xp: Any, shape: tuple[int, ...], h: Any, dev: Any) -> tuple[Any, Any, Any, Any, Any, Any]:
    """Per entry of rows of ``shape`` in the round of half-length ``h = 2^r`` (an array): ``(pos, k, left,
    half_start, seg, other)``, its position, its offset in its half, whether that is a left half, the half's first
    entry, the segment's and the other half's. Bit operations on ``h``, which a compiler copies into each kernel that
    reads them (a division or remainder it computes once, in a kernel of its own; passed into a loop, an array of its
    own)."""
    pos = xp.broadcast_to(xp.arange(shape[-1], dtype=h.dtype, device=dev), shape)
    k = xp.bitwise_and(pos, h - 1)
    half_start = pos - k
    left = xp.bitwise_and(pos, h) == 0
    other = xp.where(left, half_start + h, half_start - h)
    return pos, k, left, half_start, xp.where(left, half_start, other), other


def _sweep(xp: Any, adapter: Any, kind: Any, tot: Any, v: Any, h: Any, r: Any, steps: int,
           queries: list[tuple[Any, bool, Any]]) -> tuple[Any, Any]:
    """``kind``'s inclusive scan of ``tot`` within each half of length ``h = 2^r`` outward from the boundary and every
    one of ``queries``' searches, in one loop of ``r + 1`` steps of one gather each: ``(outward, counts)``.

    - ``outward``: in a left half, the totals from the entry to the half's end; in a right half, from the half's
      start to the entry (the tests read no other sums), by doubling over offsets ``d = 1, 2, ..., h`` that stay
      inside the half (the last step, at ``d = h``, moves nothing).
    - ``counts[i]``: per entry, how many of the ``h`` sorted values of ``queries[i] = (seq, other, strict)`` in the
      other half (``other``) or its own are below its ``v`` (``strict(left)``: ``<`` where True, else ``<=``), by a
      branchless binary search from the bit ``h`` down.

    Positions are computed in the step from ``h`` (:func:`_places`), so that the loop carries only the data.
    """
    n = v.shape[-1]
    dev = _device(v)
    seqs = xp.stack([q[0] for q in queries])

    def step(state: tuple[Any, Any, Any, Any]) -> tuple[Any, Any, Any, Any]:
        u, c, d, bit = state
        pos, k, left, half_start, _, other_half = _places(xp, v.shape, h, dev)
        # each entry reads the one d nearer the boundary, as far as its half reaches
        near = xp.where(left, pos + d, pos - d)
        other = adapter.take(xp, u, xp.broadcast_to(adapter.clip(xp, near, 0, n - 1), u.shape))
        u = xp.where(xp.where(left, h - 1 - k, k) >= d, kind.comb(xp, other, u), u)
        starts = xp.stack([other_half if q[1] else half_start for q in queries])
        strict = xp.stack([q[2](left) for q in queries])
        cand = c + bit
        probe = adapter.take(xp, seqs, adapter.clip(xp, starts + cand - 1, 0, n - 1))
        below = xp.where(strict, probe < v, probe <= v)
        return u, xp.where((cand <= h) & below, cand, c), d * 2, bit // 2

    one = xp.asarray(1, dtype=h.dtype, device=dev)
    c = xp.zeros((len(queries),) + tuple(v.shape), dtype=h.dtype, device=dev)
    u, c, _, _ = adapter.repeat(xp, step, (tot, c, one, h), r + 1, steps, like=(h, v), differentiated=False)
    return u, c


def _halves_round(xp: Any, adapter: Any, kind: Any, v: Any, data: tuple[Any, ...], h: int) -> Any:
    """One round of a Python loop (``h`` a number): the row as (pairs, 2, h), each half a row of the backend's own scan and
    search.

    ``L_j`` pools iff ``sum_(R_i < L_j) f'(L_j) > -sum_(L after j) f'(L_j)``
    (the merged objective decreases past ``L_j``; for ``"l2"``,
    ``sum_(R_i < L_j) w (L_j - R_i) > sum_(k > j) w (L_k - L_j)``), ``R_i``
    iff the mirror inequality holds. The right-hand sides need no search of
    the other half: the segments are sorted, and an equal neighbour adds 0
    (a kind whose sums are of its data, not of its solved values, takes the
    entries beyond j's whole block: one search within the half). The
    left-hand side must also be above the empty sum, so an entry with
    nothing to violate never pools on the rounding of the right-hand side.
    """
    batch, big = v.shape[:-1], v.shape[-1]
    pairs = big // (2 * h)
    dev = _device(v)
    shape = batch + (pairs, 2, h)
    vv = xp.reshape(v, shape)
    dd = tuple(xp.reshape(a, shape) for a in data)
    # the boundary: each pair's left half's last entry of its first data row (kinds with sums of powers, which
    # run outward from it so that they stay small where the tests read them)
    centre = dd[0][..., :1, -1:] if kind.centred else None
    # every total and both halves in one array, so each scan and lookup is one call
    tot = xp.stack(kind.stats(xp, vv, dd, centre))
    count = tot.shape[0]
    edge = xp.full(tot.shape[:-2] + (1,), kind.identity, dtype=v.dtype, device=dev)
    # pre[k]: the totals of the right half's first k entries; suf[j]: of the left half's entries from j on (the
    # sums that run outward from the boundary, the only ones the tests read)
    pre = xp.concat([edge, kind.cum(xp, adapter, tot[..., 1, :], False)], axis=-1)
    suf = xp.concat([kind.cum(xp, adapter, tot[..., 0, :], True), edge], axis=-1)
    left, right = vv[..., 0, :], vv[..., 1, :]
    c = None if centre is None else centre[..., 0, :]

    def at(sums: Any, i: Any) -> tuple[Any, ...]:
        got = adapter.take(xp, sums, xp.broadcast_to(i, (count,) + tuple(i.shape)))
        return tuple(got[s, ...] for s in range(count))

    def rows(sums: Any) -> tuple[Any, ...]:
        return tuple(sums[s, ...] for s in range(count))

    def prefix(i: Any, ref: Any) -> Any:
        """``sum_S f'(ref)`` over R's first ``i`` entries."""
        lower = None
        if kind.signs:  # and over those of them whose data lie below ref (data rows are sorted)
            lower = at(pre, xp.minimum(i, adapter.searchsorted(xp, dd[0][..., 1, :], ref, side="left")))
        return kind.below(xp, at(pre, i), ref, c, lower)

    def suffix(i: Any, ref: Any) -> Any:
        """``-sum_S f'(ref)`` over L's entries from ``i`` on."""
        whole, lower = at(suf, i), None
        if kind.signs:
            upper = at(suf, xp.maximum(i, adapter.searchsorted(xp, dd[0][..., 0, :], ref, side="left")))
            lower = tuple(a - b for a, b in zip(whole, upper))
        return kind.above(xp, whole, ref, c, lower)

    cross_l = prefix(adapter.searchsorted(xp, right, left, side="left"), left)
    cross_r = suffix(adapter.searchsorted(xp, left, right, side="right"), right)
    if kind.whole_blocks:
        beyond_l = suffix(adapter.searchsorted(xp, left, left, side="right"), left)
        beyond_r = prefix(adapter.searchsorted(xp, right, right, side="left"), right)
    else:
        beyond_l = kind.above(xp, rows(suf[..., 1:]), left, c, None)
        beyond_r = kind.below(xp, rows(pre[..., :h]), right, c, None)
    pool_l = (cross_l > beyond_l) & (cross_l > kind.identity)
    pool_r = (cross_r > beyond_r) & (cross_r > kind.identity)
    idx = index_dtype(xp, dev)
    start = h - xp.sum(xp.astype(pool_l, idx), axis=-1, keepdims=True)  # the pool: left[start:] + right[:stop]
    stop = xp.sum(xp.astype(pool_r, idx), axis=-1, keepdims=True)
    sums = tuple(kind.comb(xp, a, b) for a, b in zip(at(suf, start), at(pre, stop)))
    pooled = kind.value(xp, sums, left[..., -1:], c)
    # masks from the pool's ends, so that values and sums agree even where rounding
    # breaks a test's monotonicity (only between values equal up to rounding)
    pos = xp.reshape(xp.arange(2 * h, dtype=idx, device=dev), (2, h))
    inside = (pos >= start[..., None]) & (pos < (h + stop)[..., None])
    return xp.reshape(xp.where(inside, pooled[..., None], vv), batch + (big,))


def _round(xp: Any, adapter: Any, kind: Any, v: Any, data: tuple[Any, ...], h: Any, r: Any, steps: int) -> Any:
    """One round of the loop (``h = 2^r`` an array): :func:`_halves_round`'s tests on positions, every array
    row-shaped; its scans and searches are one loop of the ``r + 1`` steps a half of ``h`` entries needs
    (:func:`_sweep`), each half's count of pooling entries one sum per half (integers: exact), and the reads at
    positions that the same step knows stacked into one gather each, as every gather ends a compiled kernel."""
    n = v.shape[-1]
    dev = _device(v)
    idx = index_dtype(xp, dev)
    pos, k, left, half_start, seg, other = _places(xp, v.shape, h, dev)
    # the boundary entry's value and, for a kind with sums of powers, its data (the sums' centre)
    edge = _gather(xp, adapter, xp.stack([v, data[0]] if kind.centred else [v]), [seg + h - 1])[0]
    centre = edge[1, ...] if kind.centred else None
    tot = xp.stack(kind.stats(xp, v, data, centre))
    count = tot.shape[0]
    ident = kind.identity
    # the searches: the other half's values below each entry (a left one's R < L, a right one's L <= R); the own
    # half's entries beyond each entry's whole block, for a kind that needs it (L: <=, R: <); and, for a kind with
    # ``signs``, the entries of each half whose data lie below the entry's value
    queries: list[tuple[Any, bool, Any]] = [(v, True, lambda left: left)]
    if kind.whole_blocks:
        queries.append((v, False, lambda left: ~left))
    if kind.signs:
        queries += [(data[0], True, xp.ones_like), (data[0], False, xp.ones_like)]
    outward, found = _sweep(xp, adapter, kind, tot, v, h, r, steps, queries)

    def at(spans: list[tuple[Any, Any]]) -> list[tuple[Any, ...]]:
        """The sums over each span ``(last, some)`` (its entry nearest the boundary; ``some``: it holds any)."""
        got = _gather(xp, adapter, outward, [adapter.clip(xp, i, 0, n - 1) for i, _ in spans])
        return [tuple(xp.where(some, g[s, ...], ident) for s in range(count)) for g, (_, some) in zip(got, spans)]

    def spans(first: Any, bound: Any, prefix: Any, under: Any) -> list[tuple[Any, Any]]:
        """A test's spans: a right half's ``bound`` first entries from ``first`` on where ``prefix``, else a left
        half from ``first`` on, its first ``bound`` entries left out; and for a kind with ``signs`` the part of it
        whose data lie below v (``under`` of the half's data do; data rows are sorted)."""
        cuts = [bound] + ([xp.where(prefix, xp.minimum(bound, under), xp.maximum(bound, under))] if kind.signs else [])
        return [(xp.where(prefix, first + c - 1, first + c), xp.where(prefix, c > 0, c < h)) for c in cuts]

    def test(sums: list[tuple[Any, ...]], prefix: Any) -> Any:
        """``sum_S f'(v)`` over a prefix's span, else ``-sum_S f'(v)`` over a suffix's (:func:`spans`)."""
        whole, lower = sums[0], None
        if kind.signs:
            lower = tuple(xp.where(prefix, b, a - b) for a, b in zip(whole, sums[1]))
        return xp.where(prefix, kind.below(xp, whole, v, centre, lower), kind.above(xp, whole, v, centre, lower))

    under_other, under_own = (found[-2, ...], found[-1, ...]) if kind.signs else (None, None)
    # a left entry's prefix of R (< L), a right one's suffix of L (> R); and the own half's entries beyond each
    # entry, away from the boundary: after it in L, before it in R (after or before its whole block, for a kind
    # that needs it)
    cross_spans = spans(other, found[0, ...], left, under_other)
    beyond = found[1, ...] if kind.whole_blocks else xp.where(left, k + 1, k)
    sums = at(cross_spans + spans(half_start, beyond, ~left, under_own))
    cross, beyond = test(sums[:len(cross_spans)], left), test(sums[len(cross_spans):], ~left)
    pools = (cross > beyond) & (cross > ident)
    # each half's count of pooling entries (one slot per half; the slots past the row's halves stay unread)
    line, line_k = _places(xp, (n,), h, dev)[:2]
    counts = adapter.segment_totals(xp, line_k == 0, xp.bitwise_right_shift(line, r), xp.minimum(line * h, n - 1),
                                    xp.astype(pools, idx))
    pair = xp.bitwise_right_shift(seg, r)
    in_left, stop = (c[0, ...] for c in _gather(xp, adapter, counts[None, ...], [pair, pair + 1]))
    start = h - in_left  # the pool: left[start:] + right[:stop]
    ends = at([(seg + start, start < h), (seg + h + stop - 1, stop > 0)])
    pooled = kind.value(xp, tuple(kind.comb(xp, a, b) for a, b in zip(*ends)), edge[0, ...], centre)
    inner = pos - seg
    return xp.where((inner >= start) & (inner < h + stop), pooled, v)


def _gather(xp: Any, adapter: Any, a: Any, indices: list[Any]) -> list[Any]:
    """For each of ``indices`` (row-shaped), the entries of the arrays stacked on ``a``'s first axis at it: one
    gather for all."""
    size, shape = a.shape[0], a.shape
    got = adapter.take(xp, xp.concat([a] * len(indices), axis=0),
                       xp.concat([xp.broadcast_to(i, shape) for i in indices], axis=0))
    return [got[j * size:(j + 1) * size, ...] for j in range(len(indices))]


def merge_rounds(xp: Any, adapter: Any, kind: Any, v: Any, data: tuple[Any, ...]) -> Any:
    """All ``L = log2`` (length) rounds on rows whose length is a power of two, each of ``data`` shaped like ``v``.

    ``kind`` gives the loss's sums: ``stats(xp, v, data, centre)`` the
    per-entry terms (``centre``: each segment's boundary entry of
    ``data[0]`` where ``kind.centred``, else None), ``cum`` / ``comb`` /
    ``identity`` their scan, ``below`` / ``above`` the loss's derivative
    at a value summed over a set below / above it (the tests; a kind with
    ``signs`` also gets the sums over the set's entries whose ``data[0]``,
    sorted along the row, lies below that value), ``value`` a pool's value
    from its sums, and ``whole_blocks`` whether a test must skip the rest
    of an entry's own block.

    A backend that compiles a loop's body once (``adapter.compiles_loops``: JAX)
    runs the rounds as one loop with ``h`` an array (:func:`_round`); the
    others run a Python loop with ``h`` a number (:func:`_halves_round`),
    where each half is a row of the backend's own scan and search: fewer,
    larger operations per round, which an eager backend pays per operation.
    The two forms evaluate the same tests.
    """
    n = v.shape[-1]
    steps = (n - 1).bit_length()
    dev = _device(v)
    if not adapter.compiles_loops:
        h = 1
        while h < n:
            v = _halves_round(xp, adapter, kind, v, data, h)
            h *= 2
        return v

    def body(state: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        u, h, r = state
        return _round(xp, adapter, kind, u, data, h, r, steps), h * 2, r + 1

    one, zero = (xp.asarray(i, dtype=index_dtype(xp, dev), device=dev) for i in (1, 0))
    v, _, _ = adapter.repeat(xp, body, (v, one, zero), steps, steps, like=data, differentiated=False)
    return v
