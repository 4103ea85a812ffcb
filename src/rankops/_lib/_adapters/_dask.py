"""Dask: map the NumPy implementation over blocks of the batch axes.

The operator axis is rechunked into one chunk (sorting needs the whole row),
batch axes keep the caller's chunking, so the task graph grows with the
number of chunks and never with the work done inside a block (Sinkhorn
iterations included). Small parameter arrays (quantile levels, targets,
target weights) reach every block whole.
"""

from __future__ import annotations

import math
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
    *,
    error_tail: tuple[int, ...] | None = None,
    **params: Any,
) -> Any:
    """``impl(np_xp, block, **arrays, **params)`` on each block of batch rows.

    ``tail`` is the shape that replaces the operator axis in the output. With
    ``error_tail`` the core returns ``(value, error)``: each block packs both
    along one trailing axis, so the core runs once per block, and the result
    is the pair of lazy slices.
    """
    arrays = arrays or {}
    nb = x.ndim - 1
    x = x.rechunk({nb: -1})
    batch = _LOWER[:nb]
    args: list[Any] = [x, batch + "z"]
    letters = iter(_UPPER)
    for a in arrays.values():
        args += [a.rechunk(-1), "".join(next(letters) for _ in range(a.ndim))]
    names = list(arrays)

    def apply(xb: np.ndarray, param_blocks: tuple[np.ndarray, ...]) -> Any:
        return impl(np_xp, xb, **dict(zip(names, param_blocks)), **params)

    if error_tail is None:
        out_tail = _LOWER[nb : nb + len(tail)]
        return da.blockwise(
            lambda xb, *ps: np.asarray(apply(xb, ps)),
            batch + out_tail,
            *args,
            new_axes=dict(zip(out_tail, tail)),
            concatenate=True,
            dtype=dtype,
            meta=np.empty((0,) * (nb + len(tail)), dtype=dtype),
        )
    size, err_size = math.prod(tail), math.prod(error_tail)

    def packed_block(xb: np.ndarray, *ps: np.ndarray) -> np.ndarray:
        out, err = apply(xb, ps)
        flat = [np.reshape(np.asarray(a, dtype=dtype), xb.shape[:nb] + (k,)) for a, k in ((out, size), (err, err_size))]
        return np.concatenate(flat, axis=-1)

    packed = da.blockwise(
        packed_block, batch + "Z", *args, new_axes={"Z": size + err_size}, concatenate=True, dtype=dtype,
        meta=np.empty((0,) * (nb + 1), dtype=dtype),
    )
    batch_shape = x.shape[:nb]
    return packed[..., :size].reshape(batch_shape + tail), packed[..., size:].reshape(batch_shape + error_tail)


def sinkhorn(solve_weights: Callable[..., Any], cost: Any, a: Any, b: Any, params: dict[str, Any]) -> Any:
    """:func:`rankops.sinkhorn` on a Dask cost: one packed block per batch chunk.

    Each block solves its problems with NumPy and packs plan (n, m), f, g,
    error and the iteration count into one (n + 1, m + 2) array, so the
    solver runs once per block; the result's fields are lazy slices of it.
    """
    from ...sinkhorn import SinkhornResult

    compute, out_dtype, opts = params["compute"], params["out_dtype"], params["opts"]
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
        res = solve_weights(np_xp, c, **given, **params)
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
        # an empty batch ran no iteration (and max has no identity)
        n_iter=(packed[..., n, m + 1].max() if math.prod(batch_shape) else da.zeros((), dtype=compute)).astype(np.int64),
        error=error,
        converged=error <= opts["tol"],
    )


# -- pullbacks for rankops.vjp: each block recomputes its forward, then pulls back ----------
# Recomputing keeps the graph free of intermediate plans (a block's forward is
# cheap next to holding it) and keeps tasks independent, as in the forward.


def last_axis_pullback(impl: Callable[..., Any], x: Any, arrays: dict[str, Any], params: dict[str, Any]) -> Callable[..., Any]:
    """Pullback of :func:`map_last_axis`: ``ct -> {"x": dx, name: d_array, ...}``.

    A parameter array's cotangent is summed over the batch: one partial sum
    per block of rows, then a Dask reduction.
    """
    nb = x.ndim - 1
    x = x.rechunk({nb: -1})
    batch = _LOWER[:nb]
    names = list(arrays)
    letters = iter(_UPPER)
    param_args: list[Any] = []
    param_idx: dict[str, str] = {}
    for name, a in arrays.items():
        param_idx[name] = "".join(next(letters) for _ in range(a.ndim))
        param_args += [a.rechunk(-1), param_idx[name]]

    def grads(ct_block: np.ndarray, xb: np.ndarray, *param_blocks: np.ndarray) -> dict[str, Any]:
        return impl.vjp(np_xp, xb, **dict(zip(names, param_blocks)), **params)[1](ct_block)

    def pullback(ct: Any) -> dict[str, Any]:
        ct = ct.rechunk(x.chunks[:nb] + tuple((k,) for k in ct.shape[nb:]))
        args = [ct, batch + _LOWER[nb : ct.ndim], x, batch + "z", *param_args]
        out = {"x": _block_grad(grads, "x", batch + "z", args, x.dtype)}
        for name in names:
            partial = _block_grad(grads, name, batch + param_idx[name], args, x.dtype, adjust={k: 1 for k in batch})
            out[name] = partial.sum(axis=tuple(range(nb)))
        return out

    return pullback


def _block_grad(grads: Callable[..., Any], name: str, index: str, args: list[Any], dtype: Any, adjust: dict | None = None) -> Any:
    nb = len(adjust or ())

    def block(*blocks: np.ndarray) -> np.ndarray:
        g = np.asarray(grads(*blocks)[name])
        return g.reshape((1,) * nb + g.shape) if adjust else g

    return da.blockwise(
        block, index, *args, concatenate=True, dtype=dtype, adjust_chunks=adjust, meta=np.empty((0,) * len(index), dtype=dtype)
    )


def sinkhorn_pullback(solve_weights: Callable[..., Any], cost: Any, a: Any, b: Any, params: dict[str, Any]) -> Callable[..., Any]:
    """Pullback of :func:`sinkhorn`: ``(d_plan, d_f=None, d_g=None) -> {"cost": ..., "a": ..., "b": ...}``."""
    from .._numerics import unbroadcast

    nb = cost.ndim - 2
    n, m = cost.shape[-2:]
    cost = cost.rechunk({nb: -1, nb + 1: -1})
    batch_shape, batch_chunks = cost.shape[:-2], cost.chunks[:-2]
    batch = _LOWER[:nb]
    weights = []
    for name, w, idx, size in (("a", a, "y", n), ("b", b, "z", m)):
        if w is not None:
            full = da.broadcast_to(da.asarray(w), batch_shape + (size,)).rechunk(batch_chunks + ((size,),))
            weights.append((name, w, full, idx))
    present = [name for name, *_ in weights]
    dtype = params["compute"]

    def grads(c: np.ndarray, dp: np.ndarray, df: np.ndarray, dg: np.ndarray, *w: np.ndarray) -> dict[str, Any]:
        return solve_weights.vjp(np_xp, c, **dict(zip(present, w)), **params)[1](dp, df, dg)

    def pullback(d_plan: Any, d_f: Any = None, d_g: Any = None) -> dict[str, Any]:
        cts = []
        for d, shape in ((d_plan, (n, m)), (d_f, (n,)), (d_g, (m,))):
            d = da.zeros(batch_shape + shape, dtype=dtype) if d is None else da.asarray(d)
            cts.append(d.rechunk(batch_chunks + tuple((k,) for k in shape)))
        args = [cost, batch + "yz", cts[0], batch + "yz", cts[1], batch + "y", cts[2], batch + "z"]
        for _, _, full, idx in weights:
            args += [full, batch + idx]
        out = {"cost": _block_grad(grads, "cost", batch + "yz", args, dtype)}
        for name, w, _, idx in weights:
            out[name] = unbroadcast(da, _block_grad(grads, name, batch + idx, args, dtype), tuple(w.shape))
        return out

    return pullback
