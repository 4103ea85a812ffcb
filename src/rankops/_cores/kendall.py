r"""Pair counts between permutations: Kendall and Mallows kernels (Jiao & Vert 2015, 2017; paper 000).

For two vectors ``x``, ``y`` of ``p`` entries, let ``n_c`` / ``n_d`` count the
concordant / discordant pairs ``i < j`` (a pair tied in either vector is
neither) and ``P = p (p - 1) / 2``. With the embedding
``Phi_ij(x) = sign(x_i - x_j)`` (``i < j``),

- ``n_c - n_d = <Phi(x), Phi(y)>`` and ``n_c + n_d = <|Phi(x)|, |Phi(y)|>``,

so the Kendall kernel ``(n_c - n_d) / P`` (Kendall's tau-a) is a Gram matrix,
hence positive definite, and the Mallows kernel ``exp(-lam n_d)`` with
``n_d = (<|Phi(x)|, |Phi(y)|> - <Phi(x), Phi(y)>) / 2`` is one too (000:
Jiao & Vert's theorem). Two ways count them for all ``N x M`` pairs:

- :func:`by_signs`: the embeddings of a block of rows ``i`` at a time,
  multiplied as matrices: ``N M p^2 / 2`` multiply-adds (BLAS), memory
  bounded by the block budget. Fast for short vectors.
- :func:`by_merges`: Knight's (1966) O(p log p) count per pair. Sort the
  pair by ``(x, y)``; the discordant pairs are then the strict inversions of
  ``y``, counted over ``log2 p`` levels of sorted halves with one row-wise
  ``searchsorted`` each (merge sort's argument); tied pairs come from run
  lengths. O(N M p log^2 p) work in array operations, for long vectors.
"""

from __future__ import annotations

import math
from typing import Any

from .._lib._adapters import get_adapter
from .._lib._compat import index_dtype, device as _device
from .isotonic import block_starts
from .permutation import BLOCK_BYTES

__all__ = ["by_signs", "by_merges", "SIGNS_UP_TO"]

# by_signs up to this p, by_merges above. Measured on a 2-core CPU with N = M = 16 (python -m benchmarks.kernels):
# merges overtakes signs near p = 3000 on NumPy and p = 200 on torch; 1024 splits the difference
SIGNS_UP_TO = 1024


def _signs(xp: Any, rows: Any, cols: Any) -> Any:
    """``sign(rows_i - cols_j)`` by comparisons: exact for infinities and subnormals."""
    d = rows[..., :, None], cols[..., None, :]
    return xp.astype(d[0] > d[1], rows.dtype) - xp.astype(d[0] < d[1], rows.dtype)


def by_signs(xp: Any, x: Any, y: Any) -> tuple[Any, Any]:
    """``(n_c - n_d, n_c + n_d)`` for every pair of rows of ``x`` (..., N, p) and ``y`` (..., M, p), as floats (..., N, M)."""
    p = x.shape[-1]
    n, m = x.shape[-2], y.shape[-2]
    batch = math.prod(x.shape[:-2]) or 1
    dev = _device(x)
    # rows i of a block pair only with columns j > i: the block's rows see x[..., i0:]
    per_row = 3 * batch * (n + m) * p * (xp.finfo(x.dtype).bits // 8)  # signs, mask product, abs
    block = max(1, min(p, BLOCK_BYTES // per_row))
    dot = xp.zeros(x.shape[:-2] + (n, m), dtype=x.dtype, device=dev)
    both = xp.zeros_like(dot)
    for i0 in range(0, p - 1, block):
        i1 = min(i0 + block, p - 1)
        later = xp.arange(i0, p, device=dev)[None, :] > xp.arange(i0, i1, device=dev)[:, None]
        keep = xp.astype(later, x.dtype)
        sx = _signs(xp, x[..., i0:i1], x[..., i0:]) * keep
        sy = _signs(xp, y[..., i0:i1], y[..., i0:]) * keep
        flat = (i1 - i0) * (p - i0)
        sx = xp.reshape(sx, x.shape[:-1] + (flat,))
        sy = xp.reshape(sy, y.shape[:-1] + (flat,))
        dot = dot + xp.matmul(sx, xp.matrix_transpose(sy))
        both = both + xp.matmul(xp.abs(sx), xp.matrix_transpose(xp.abs(sy)))
    return dot, both


def _tied_pairs(xp: Any, adapter: Any, starts: Any) -> Any:
    """``sum_runs c (c - 1) / 2`` along the last axis, from the runs' ``starts``: each entry counts its run's earlier entries."""
    idx = index_dtype(xp, _device(starts))
    pos = xp.broadcast_to(xp.arange(starts.shape[-1], dtype=idx, device=_device(starts)), starts.shape)
    return xp.sum(pos - adapter.segment_first(xp, starts, pos), axis=-1)


def _inversions(xp: Any, adapter: Any, z: Any) -> Any:
    """Strict inversions ``#{i < j: z_i > z_j}`` along the last axis: merge sort's levels, each counted by ``searchsorted``."""
    p = z.shape[-1]
    idx = index_dtype(xp, _device(z))
    if p == 1:
        return xp.zeros(z.shape[:-1], dtype=idx, device=_device(z))
    big = 1 << (p - 1).bit_length()
    if big > p:  # +inf at the end: larger than or equal to everything, after everything
        pad = xp.full(z.shape[:-1] + (big - p,), math.inf, dtype=z.dtype, device=_device(z))
        z = xp.concat([z, pad], axis=-1)
    total = xp.sum(xp.astype(z[..., 0::2] > z[..., 1::2], idx), axis=-1)
    h = 2
    while h < big:
        halves = adapter.sort(xp, xp.reshape(z, z.shape[:-1] + (big // h, h)))
        left, right = halves[..., 0::2, :], halves[..., 1::2, :]
        # each entry of a right half, against the left half's entries above it
        above = h - adapter.searchsorted(xp, left, right, side="right")
        total = total + xp.sum(xp.sum(above, axis=-1), axis=-1)
        h *= 2
    return total


def by_merges(xp: Any, x: Any, y: Any) -> tuple[Any, Any]:
    """:func:`by_signs`'s counts by Knight's sort-and-count, O(p log^2 p) per pair (blocks of rows of ``x``)."""
    adapter = get_adapter(xp)
    p, n, m = x.shape[-1], x.shape[-2], y.shape[-2]
    batch = math.prod(x.shape[:-2]) or 1
    pairs = p * (p - 1) // 2
    # each vector's own ties, once: x sorted is what every pair's lexicographic order puts x in
    x_sorted = adapter.sort(xp, x)
    starts_x_all = block_starts(xp, x_sorted)
    tied_x_all = _tied_pairs(xp, adapter, starts_x_all)  # (..., N)
    # y's stable order, shared by every pair: the secondary key of the lexicographic sort
    y_sorted, y_order = adapter.sort_order(xp, y)
    tied_y = _tied_pairs(xp, adapter, block_starts(xp, y_sorted))  # (..., M)
    rows = max(1, BLOCK_BYTES // (8 * 4 * batch * m * p))  # about four (block, M, p) temporaries of 8 bytes
    dots, boths = [], []
    for a0 in range(0, n, rows):
        xa = xp.expand_dims(x[..., a0 : min(a0 + rows, n), :], axis=-2)  # (..., r, 1, p)
        shape = xa.shape[:-3] + (xa.shape[-3], m, p)
        # lexicographic order by (x, y): stable sort by x of the pair already in y's order
        x_by_y = adapter.take(xp, xp.broadcast_to(xa, shape), xp.broadcast_to(xp.expand_dims(y_order, axis=-3), shape))
        second = adapter.sort_order(xp, x_by_y)[1]
        ys = adapter.take(xp, xp.broadcast_to(xp.expand_dims(y_sorted, axis=-3), shape), second)
        discordant = _inversions(xp, adapter, ys)
        starts_x = xp.expand_dims(starts_x_all[..., a0 : min(a0 + rows, n), :], axis=-2)  # x in that order: sorted
        tied_x = xp.expand_dims(tied_x_all[..., a0 : min(a0 + rows, n)], axis=-1)
        tied_xy = _tied_pairs(xp, adapter, starts_x | block_starts(xp, ys))
        both = pairs - tied_x - xp.expand_dims(tied_y, axis=-2) + tied_xy
        dots.append(xp.astype(both - 2 * discordant, x.dtype))
        boths.append(xp.astype(both, x.dtype))
    cat = (lambda parts: parts[0]) if len(dots) == 1 else (lambda parts: xp.concat(parts, axis=-2))
    return cat(dots), cat(boths)
