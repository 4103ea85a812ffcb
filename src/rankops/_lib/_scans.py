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

__all__ = ["linear_scan", "cumlogsumexp", "searchsorted", "take"]


def _shift(xp: Any, a: Any, d: int, fill: float) -> Any:
    """``a`` moved ``d`` places right along the last axis, ``fill`` entering at the left."""
    pad = xp.full(a.shape[:-1] + (d,), fill, dtype=a.dtype, device=array_api_compat.device(a))
    return xp.concat([pad, a[..., : a.shape[-1] - d]], axis=-1)


def _doubling(xp: Any, pairs: tuple[Any, ...], combine: Callable[..., tuple[Any, ...]], fills: tuple[float, ...], reverse: bool) -> tuple[Any, ...]:
    """Inclusive scan of an associative ``combine(earlier, later)`` by doubling."""
    if reverse:
        pairs = tuple(xp.flip(p, axis=-1) for p in pairs)
    n = pairs[0].shape[-1]
    d = 1
    while d < n:
        earlier = tuple(_shift(xp, p, d, f) for p, f in zip(pairs, fills))
        pairs = combine(earlier, pairs)
        d *= 2
    return tuple(xp.flip(p, axis=-1) for p in pairs) if reverse else pairs


def linear_scan(xp: Any, a: Any, b: Any, *, reverse: bool = False) -> Any:
    """``h_i = a_i h_(i-1) + b_i`` along the last axis with ``h_(-1) = 0`` (``reverse``: from the end).

    With ``0 <= a_i <= 1`` every partial product stays in [0, 1], so the
    scan neither overflows nor cancels: sums of ``exp`` of sorted data are
    written this way (``a_i = exp(-(x_i - x_(i-1)) / alpha)``), and a
    segmented sum is ``a_i = 0`` at each segment start, 1 elsewhere.
    """

    def combine(earlier: tuple[Any, ...], later: tuple[Any, ...]) -> tuple[Any, ...]:
        (a1, b1), (a2, b2) = earlier, later
        return a1 * a2, b2 + a2 * b1

    return _doubling(xp, (a, b), combine, (1.0, 0.0), reverse)[1]


def cumlogsumexp(xp: Any, z: Any, *, reverse: bool = False) -> Any:
    """``log(cumsum(exp(z)))`` along the last axis, stable at any scale (``reverse``: suffix sums)."""

    def combine(earlier: tuple[Any, ...], later: tuple[Any, ...]) -> tuple[Any, ...]:
        return (logaddexp(xp, earlier[0], later[0]),)

    return _doubling(xp, (z,), combine, (-float("inf"),), reverse)[0]


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
