"""Dask: map the NumPy implementation over blocks of the batch axes.

The operator axis is rechunked into one chunk (sorting needs the whole row),
batch axes keep the caller's chunking, so the task graph grows with the
number of chunks and never with the work done inside a block (Sinkhorn
iterations included). Small parameter arrays (quantile levels, targets,
target weights) reach every block whole.
"""

from __future__ import annotations

import string
from typing import Any, Callable

import array_api_compat.numpy as np_xp
import dask.array as da
import numpy as np

_LOWER = string.ascii_lowercase
_UPPER = string.ascii_uppercase


def map_last_axis(
    impl: Callable[..., Any],
    x: Any,
    tail: tuple[int, ...],
    dtype: Any,
    arrays: dict[str, Any] | None = None,
    **params: Any,
) -> Any:
    """``impl(np_xp, block, **arrays, **params)`` on each block of batch rows.

    ``tail`` is the shape that replaces the operator axis in the output.
    """
    arrays = arrays or {}
    nb = x.ndim - 1
    x = x.rechunk({nb: -1})
    batch = _LOWER[:nb]
    out_tail = _LOWER[nb : nb + len(tail)]
    args: list[Any] = [x, batch + "z"]
    letters = iter(_UPPER)
    for a in arrays.values():
        args += [a.rechunk(-1), "".join(next(letters) for _ in range(a.ndim))]
    names = list(arrays)

    def block(xb: np.ndarray, *param_blocks: np.ndarray) -> np.ndarray:
        return np.asarray(impl(np_xp, xb, **dict(zip(names, param_blocks)), **params))

    return da.blockwise(
        block,
        batch + out_tail,
        *args,
        new_axes=dict(zip(out_tail, tail)),
        concatenate=True,
        dtype=dtype,
        meta=np.empty((0,) * (nb + len(tail)), dtype=dtype),
    )


def sinkhorn(solve_weights: Callable[..., Any], cost: Any, a: Any, b: Any, compute: Any, out_dtype: Any, opts: dict) -> Any:
    """:func:`rankops.sinkhorn` on a Dask cost: one packed block per batch chunk.

    Each block solves its problems with NumPy and packs plan (n, m), f, g,
    error and the iteration count into one (n + 1, m + 2) array, so the
    solver runs once per block; the result's fields are lazy slices of it.
    """
    from ...sinkhorn import SinkhornResult

    nb = cost.ndim - 2
    n, m = cost.shape[-2:]
    cost = cost.rechunk({nb: -1, nb + 1: -1})
    batch_shape, batch_chunks = cost.shape[:-2], cost.chunks[:-2]
    batch = _LOWER[:nb]
    args: list[Any] = [cost, batch + "yz"]
    present = []
    for name, w, idx, size in (("a", a, "y", n), ("b", b, "z", m)):
        if w is not None:
            w = da.broadcast_to(da.asarray(w), batch_shape + (size,)).rechunk(batch_chunks + ((size,),))
            args += [w, batch + idx]
            present.append(name)

    def block(c: np.ndarray, *weights: np.ndarray) -> np.ndarray:
        given = dict(zip(present, weights))
        res = solve_weights(np_xp, c, given.get("a"), given.get("b"), compute=compute, out_dtype=out_dtype, opts=opts)
        packed = np.zeros(c.shape[:-2] + (n + 1, m + 2), dtype=compute)
        packed[..., :n, :m] = res.plan
        packed[..., :n, m] = res.f
        packed[..., n, :m] = res.g
        packed[..., n, m] = res.error
        packed[..., n, m + 1] = res.n_iter
        return packed

    packed = da.blockwise(
        block, batch + "NM", *args, new_axes={"N": n + 1, "M": m + 2}, concatenate=True, dtype=compute,
        meta=np.empty((0,) * (nb + 2), dtype=compute),
    )
    error = packed[..., n, m]
    return SinkhornResult(
        plan=packed[..., :n, :m].astype(out_dtype),
        f=packed[..., :n, m].astype(out_dtype),
        g=packed[..., n, :m].astype(out_dtype),
        n_iter=packed[..., n, m + 1].max().astype(np.int64),
        error=error,
        converged=error <= opts["tol"],
    )
