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
  log^2 n) in all), and each test reads its sums with one gather. The
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
    and a half of the padded length from :data:`SHORT_MERGE_FROM` on, then n. The p = 4/3 soft rank of normal
    scores leaves after its pooling rounds a fifth of 10^5 entries as blocks at strength 0.1, and about half of 1000
    at the default softness; the merge rounds cost O(n log^2 n)."""
    big = padded_length(n)
    return (big // 4, big // 2, n) if big >= SHORT_MERGE_FROM else (n,)


def _sweep(xp: Any, adapter: Any, kind: Any, tot: Any, v: Any, pos: Any, k: Any, left: Any, h: Any, r: Any,
           steps: int, queries: list[tuple[Any, Any, Any]]) -> tuple[Any, Any]:
    """``kind``'s inclusive scan of ``tot`` within each half of length ``h = 2^r`` outward from the boundary and every
    one of ``queries``' searches, in one loop of ``r + 1`` steps of one gather each: ``(outward, counts)``.

    - ``outward``: in a left half, the totals from the entry to the half's end; in a right half, from the half's
      start to the entry (the tests read no other sums), by doubling over offsets ``d = 1, 2, ..., h`` that stay
      inside the half (``k``: each entry's offset in it, ``left``: whether it is a left half; the last step, at
      ``d = h``, moves nothing).
    - ``counts[i]``: per entry, how many of the ``h`` sorted values of ``queries[i] = (seq, start, strict)`` from
      ``start`` on are below its ``v`` (``strict``: ``<``, else ``<=``), by a branchless binary search from the bit
      ``h`` down.
    """
    n = v.shape[-1]
    seqs = xp.stack([q[0] for q in queries])
    starts = xp.stack([xp.broadcast_to(q[1], v.shape) for q in queries])
    strict = xp.stack([xp.broadcast_to(q[2], v.shape) for q in queries])
    toward = xp.where(left, xp.ones_like(pos), -xp.ones_like(pos))  # each entry reads the one d nearer the boundary
    room = xp.where(left, h - 1 - k, k)  # how far it may read inside its half

    def step(state: tuple[Any, Any, Any, Any]) -> tuple[Any, Any, Any, Any]:
        u, c, d, bit = state
        other = adapter.take(xp, u, xp.broadcast_to(adapter.clip(xp, pos + toward * d, 0, n - 1), u.shape))
        u = xp.where(room >= d, kind.comb(xp, other, u), u)
        cand = c + bit
        probe = adapter.take(xp, seqs, adapter.clip(xp, starts + cand - 1, 0, n - 1))
        below = xp.where(strict, probe < v, probe <= v)
        return u, xp.where((cand <= h) & below, cand, c), d * 2, bit // 2

    one = xp.asarray(1, dtype=pos.dtype, device=_device(pos))
    c = xp.zeros(starts.shape, dtype=starts.dtype, device=_device(pos))
    u, c, _, _ = adapter.repeat(xp, step, (tot, c, one, h), r + 1, steps, like=(k, h, v), differentiated=False)
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
    (:func:`_sweep`), and each half's count of pooling entries a difference of one cumulative sum (integers: exact)."""
    n = v.shape[-1]
    dev = _device(v)
    idx = index_dtype(xp, dev)
    pos = xp.broadcast_to(xp.arange(n, dtype=idx, device=dev), v.shape)
    k = pos % h  # offset in the half
    half_start = pos - k
    left = (pos // h) % 2 == 0
    seg = pos - pos % (2 * h)  # the segment's first entry
    other = xp.where(left, half_start + h, half_start - h)  # the other half's first entry
    centre = adapter.take(xp, data[0], seg + h - 1) if kind.centred else None
    tot = xp.stack(kind.stats(xp, v, data, centre))
    count = tot.shape[0]
    ident = kind.identity
    # the searches: the other half's values below each entry (a left one's R < L, a right one's L <= R); the own
    # half's entries beyond each entry's whole block, for a kind that needs it (L: <=, R: <); and, for a kind with
    # ``signs``, the entries of each half whose data lie below the entry's value
    queries = [(v, other, left)]
    if kind.whole_blocks:
        queries.append((v, half_start, ~left))
    if kind.signs:
        true = xp.ones(v.shape, dtype=xp.bool, device=dev)
        queries += [(data[0], other, true), (data[0], half_start, true)]
    outward, found = _sweep(xp, adapter, kind, tot, v, pos, k, left, h, r, steps, queries)

    def at(i: Any, some: Any) -> tuple[Any, ...]:
        got = adapter.take(xp, outward, xp.broadcast_to(adapter.clip(xp, i, 0, n - 1), outward.shape))
        got = xp.where(some, got, ident)
        return tuple(got[s, ...] for s in range(count))

    def test(first: Any, bound: Any, prefix: Any, under: Any) -> Any:
        """``sum_S f'(v)`` over a right half's ``bound`` first entries from ``first`` on where ``prefix``, else
        ``-sum_S f'(v)`` over a left half from ``first`` on, its first ``bound`` entries left out; ``under``: how
        many of the half's data lie below v (``kind.signs``)."""
        whole = at(xp.where(prefix, first + bound - 1, first + bound), xp.where(prefix, bound > 0, bound < h))
        lower = None
        if kind.signs:  # and over those of S's entries whose data lie below v (data rows are sorted)
            cut = xp.where(prefix, xp.minimum(bound, under), xp.maximum(bound, under))
            part = at(xp.where(prefix, first + cut - 1, first + cut), xp.where(prefix, cut > 0, cut < h))
            lower = tuple(xp.where(prefix, b, a - b) for a, b in zip(whole, part))
        return xp.where(prefix, kind.below(xp, whole, v, centre, lower), kind.above(xp, whole, v, centre, lower))

    under_other, under_own = (found[-2, ...], found[-1, ...]) if kind.signs else (None, None)
    # a left entry's prefix of R (< L), a right one's suffix of L (> R)
    cross = test(other, found[0, ...], left, under_other)
    # the own half's entries beyond each entry, away from the boundary: after it in L, before it in R (after or
    # before its whole block, for a kind that needs it)
    beyond = test(half_start, found[1, ...] if kind.whole_blocks else xp.where(left, k + 1, k), ~left, under_own)
    pools = (cross > beyond) & (cross > ident)
    # each half's count of pooling entries, from the row's running count (one column of 0 before it)
    running = xp.cumulative_sum(xp.astype(pools, idx), axis=-1)
    running = xp.concat([xp.zeros(v.shape[:-1] + (1,), dtype=idx, device=dev), running], axis=-1)
    middle = adapter.take(xp, running, seg + h)
    start = h - (middle - adapter.take(xp, running, seg))  # the pool: left[start:] + right[:stop]
    stop = adapter.take(xp, running, seg + 2 * h) - middle
    sums = tuple(kind.comb(xp, a, b) for a, b in zip(at(seg + start, start < h), at(seg + h + stop - 1, stop > 0)))
    pooled = kind.value(xp, sums, adapter.take(xp, v, seg + h - 1), centre)
    inner = pos - seg
    return xp.where((inner >= start) & (inner < h + stop), pooled, v)


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
