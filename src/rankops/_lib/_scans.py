"""Scans and searches along the last axis that the array API standard lacks, in ``xp`` calls only.

The standard has ``cumulative_sum`` but no general scan, no
``logcumsumexp`` and a one-dimensional ``searchsorted``. These portable
versions take ``ceil(log2 n)`` vectorised steps (Hillis & Steele 1986
doubling; a binary search of fixed depth), so they run under ``jax.jit``,
on Dask blocks and on any device; framework adapters replace them with
their native kernels where those exist (``torch.searchsorted``,
``torch.logcumsumexp``, ``jax.lax.associative_scan``).
"""

from __future__ import annotations

from typing import Any, Callable

import array_api_compat

from ._compat import index_dtype
from ._numerics import logaddexp

__all__ = ["linear_scan", "cumlogsumexp", "searchsorted", "take", "segment_sum", "segment_first"]


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
        dev = array_api_compat.device(a)
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
    """``h_i = a_i h_(i-1) + b_i`` along the last axis with ``h_(-1) = 0`` (``reverse``: from the end).

    With ``0 <= a_i <= 1`` every partial product stays in [0, 1], so the
    scan neither overflows nor cancels: sums of ``exp`` of sorted data are
    written this way (``a_i = exp(-(x_i - x_(i-1)) / alpha)``), and a
    segmented sum is ``a_i = 0`` at each segment start, 1 elsewhere. Long
    rows run as a scan within chunks, then one over the chunks' ends
    (O(n) work instead of O(n log n), in as many steps).
    """
    if reverse:
        return xp.flip(_chunked(xp, xp.flip(a, axis=-1), xp.flip(b, axis=-1)), axis=-1)
    return _chunked(xp, a, b)


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
    dev = array_api_compat.device(values)
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
    running = linear_scan(xp, xp.where(starts, zero, xp.ones_like(g)), g)
    return linear_scan(xp, xp.where(ends, zero, xp.ones_like(g)), xp.where(ends, running, zero), reverse=True)


def segment_first(xp: Any, starts: Any, g: Any) -> Any:
    """Each entry's segment's first value of ``g`` (carried forward exactly: ``1 * h + 0``)."""
    zero = xp.zeros_like(g)
    return linear_scan(xp, xp.where(starts, zero, xp.ones_like(g)), xp.where(starts, g, zero))
