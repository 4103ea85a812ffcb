"""The host route of Sander et al.'s reference code, written here as a comparison point: sequential PAV compiled by
numba on the host, reached from JAX through ``jax.pure_callback`` (benchmark-only: needs ``numba``).

The p = 4/3 top-k mask and soft rank: ``v``, the decreasing fit of ``sum (1/4)(z_i - v_i)^4 + w_i v_i`` (q = 4),
pooled left to right; each block's value solves ``sum_B (z_i - v)^3 = W_B``, a cubic in the block's running sums (one
real root). The mask is ``(z - v)^3`` for the top-k polytope's weights ``w``, the rank for ``w = (n, ..., 1)``.
Forward only: the comparison times the pooling, which is where the two routes differ.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _compiled() -> Any:
    import numba

    @numba.njit(cache=False)
    def block_value(m: float, s1: float, s2: float, s3: float, w: float) -> float:
        """The root of ``sum (z_i - v)^3 = w`` from the block's size and power sums: ``t = mean - v`` solves ``m t^3
        + 3 M2 t + M3 - w = 0`` (centred moments), by Cardano's formula."""
        mean = s1 / m
        m2 = s2 - s1 * mean
        m3 = s3 - 3.0 * mean * s2 + 2.0 * s1 * mean * mean
        p, q = 3.0 * m2 / m, (m3 - w) / m
        d = math.sqrt(q * q / 4.0 + p * p * p / 27.0)
        a = np.cbrt(abs(q) / 2.0 + d)
        t = 0.0 if a == 0.0 else -q / (a * a + p / 3.0 + (p / (3.0 * a)) ** 2)
        return mean - t

    @numba.njit(cache=False)
    def pav_rows(z: np.ndarray, w: np.ndarray) -> np.ndarray:
        rows, n = z.shape
        out = np.empty_like(z)
        start = np.empty(n, np.int64)
        sums = np.empty((n, 5))  # count, sum z, sum z^2, sum z^3, sum w
        value = np.empty(n)
        for r in range(rows):
            top = 0
            for i in range(n):
                x = z[r, i]
                start[top] = i
                sums[top, 0], sums[top, 1], sums[top, 2], sums[top, 3], sums[top, 4] = 1.0, x, x * x, x * x * x, w[i]
                value[top] = block_value(1.0, x, x * x, x * x * x, w[i])
                top += 1
                while top > 1 and value[top - 2] <= value[top - 1]:
                    for c in range(5):
                        sums[top - 2, c] += sums[top - 1, c]
                    top -= 1
                    value[top - 1] = block_value(sums[top - 1, 0], sums[top - 1, 1], sums[top - 1, 2], sums[top - 1, 3], sums[top - 1, 4])
            for b in range(top):
                stop = n if b == top - 1 else start[b + 1]
                for i in range(start[b], stop):
                    d = z[r, i] - value[b]
                    out[r, i] = d * d * d if d > 0 else 0.0
        return out

    return pav_rows


_PAV = None


def _projection_callback(x: Any, w: np.ndarray, strength: float) -> Any:
    """The p = 4/3 projection of ``x / strength`` (JAX array, rows along the last axis) onto the permutahedron of the
    decreasing weights ``w``, in ``x``'s order, through ``jax.pure_callback``."""
    global _PAV
    import jax
    import jax.numpy as jnp

    if _PAV is None:
        _PAV = _compiled()
    n = x.shape[-1]
    order = jnp.argsort(-x, axis=-1)
    z = jnp.take_along_axis(x, order, axis=-1) / strength

    def host(rows: np.ndarray) -> np.ndarray:
        flat = np.asarray(rows, dtype=np.float64).reshape(-1, n)
        return _PAV(flat, w).astype(rows.dtype).reshape(rows.shape)

    mu = jax.pure_callback(host, jax.ShapeDtypeStruct(z.shape, z.dtype), z, vmap_method="broadcast_all")
    return jnp.take_along_axis(mu, jnp.argsort(order, axis=-1), axis=-1)


def topk_mask_callback(x: Any, k: int, strength: float) -> Any:
    """The p = 4/3 top-k mask of ``x / strength``: the projection onto the permutahedron of ``(1, ..., 1, 0, ...)``."""
    return _projection_callback(x, np.clip(k - np.arange(x.shape[-1]), 0.0, 1.0), strength)


def rank_callback(x: Any, strength: float) -> Any:
    """The p = 4/3 soft rank of ``x / strength`` (ascending): the projection onto the permutahedron of ``(n, ..., 1)``."""
    n = x.shape[-1]
    return _projection_callback(x, np.arange(n, 0, -1, dtype=np.float64), strength)
