r"""Sinkhorn-Knopp scaling of nonnegative square matrices towards doubly stochastic ones.

Sinkhorn (1964) and Sinkhorn & Knopp (1967): alternately divide the
columns and the rows of ``P`` by their sums,

    P <- P / (1^T P),    P <- P / (P 1),

until every row sum and column sum is within ``tol`` of 1 (checked after
each pair of divisions), or ``max_iter`` pairs ran. NeuralNDCG (Pobrotyn &
Bialobrzeski 2021) applies it to NeuralSort's row-stochastic matrix, whose
columns need not sum to 1. Unlike :mod:`rankops._solvers.sinkhorn` (an
entropic transport in the log domain, differentiated implicitly), this is
the plain multiplicative scaling of a given matrix, differentiated through
its iterations by the backend's autodiff.
"""

from __future__ import annotations

import math
from typing import Any

from .._lib._adapters import custom_backward, get_adapter
from .._lib._compat import device as _device

__all__ = ["scale_to_doubly_stochastic"]

# the floor of a row or column sum: an empty one stays 0 rather than 0 / 0 (allRank's value)
_FLOOR = 1e-10


def _reciprocal(xp: Any, total: Any) -> Any:
    return 1 / get_adapter(xp).clip(xp, total, _FLOOR)


def _scaled(xp: Any, p: Any, row_w: Any, col_w: Any, *, max_iter: int, tol: float) -> Any:
    """The iterations on a prepared ``p`` (its padding's block ones); ``row_w``, ``col_w``: 1.0 on the valid rows, columns.

    The state is ``(P, its column sums, its error)``. A matrix whose error is
    within ``tol`` (or NaN) is settled: its step multiplies by ones, which
    leaves it bit for bit, so the loop needs no freezing pass over the
    matrices. The column sums the error measured are the next step's divisors,
    taken as reciprocals (the backward of a product, not of a quotient).
    """
    adapter = get_adapter(xp)

    def off(ops: Any, q: Any, col_sums: Any) -> Any:
        rw, cw = ops
        q = adapter.stop_gradient(xp, q)
        off_rows = xp.abs(xp.sum(q, axis=-1) - 1) * rw
        off_cols = xp.abs(adapter.stop_gradient(xp, col_sums) - 1) * cw
        return xp.maximum(xp.max(off_rows, axis=-1), xp.max(off_cols, axis=-1))

    def step(ops: Any, state: Any) -> Any:
        q, col_sums, err = state
        moving = (err > tol)[..., None]  # NaN: settled, as the loop counts it
        q = q * xp.where(moving, _reciprocal(xp, col_sums), 1.0)[..., None, :]
        q = q * xp.where(moving[..., None], _reciprocal(xp, xp.sum(q, axis=-1, keepdims=True)), 1.0)
        col_sums = xp.sum(q, axis=-2)
        return q, col_sums, off(ops, q, col_sums)

    def error(ops: Any, state: Any) -> Any:
        return state[2]

    def unchanged(xp_: Any, done: Any, old: Any, new: Any) -> Any:
        return new  # a settled matrix's step already kept it

    start = (p, xp.sum(p, axis=-2), xp.full(tuple(p.shape[:-2]), math.inf, dtype=p.dtype, device=_device(p)))
    (q, _, _), _, _ = adapter.iterate(xp, step, (row_w, col_w), start, error=error, freeze=unchanged, max_iter=max_iter, tol=tol,
                                      check_every=1)
    return q


def replayed_vjp(xp: Any, p: Any, row_w: Any, col_w: Any, ct: Any, *, max_iter: int, tol: float) -> tuple[Any]:
    """The gradient of ``sum(ct * _scaled(p))`` in ``p``, by running the iterations again under the backend's autodiff.

    What a compiled torch graph calls, as one op (``rankops::eager``), in
    place of the iterations it cannot differentiate as a loop: eagerly, the
    loop stops where the forward's did.
    """
    _, _, pull = get_adapter(xp).autodiff_vjp(lambda a: (_scaled(xp, a, row_w, col_w, max_iter=max_iter, tol=tol),), [p],
                                              lambda outs: outs)
    return (pull((ct,))[0],)


def scale_to_doubly_stochastic(xp: Any, p: Any, rows: Any, cols: Any, *, max_iter: int, tol: float) -> Any:
    """``p`` (..., n, n) scaled on its block of valid ``rows`` x ``cols`` (bool, (..., n) each; 0 elsewhere).

    Each matrix stops on its own (its result does not depend on the rest of
    the batch): within ``tol`` when the largest ``|row sum - 1|`` and
    ``|column sum - 1|`` over its valid rows and columns are.
    """
    keep = rows[..., :, None] & cols[..., None, :]
    # The padding's own block is ones while scaling (allRank's device): an all-zero row or column would be divided
    # by the floor at every step, and its gradient multiplied by 1 / floor as often, overflowing to NaN.
    spare = ~rows[..., :, None] & ~cols[..., None, :]
    p = xp.where(keep, p, xp.where(spare, xp.ones_like(p), xp.zeros_like(p)))
    row_w, col_w = xp.astype(rows, p.dtype), xp.astype(cols, p.dtype)
    adapter = get_adapter(xp)
    if adapter.replays_loops((p,)):
        # a compiling backend that cannot differentiate a loop with an exit test: the forward one loop op (no gradient
        # traced through it), the backward the iterations replayed eagerly under the backend's autodiff
        statics = {"max_iter": max_iter, "tol": tol}

        def forward(xp_: Any, *arrays: Any) -> Any:
            return (_scaled(xp_, *arrays, **statics),), arrays

        def backward(xp_: Any, res: Any, cts: Any) -> Any:
            (d_p,) = adapter.eagerly(xp_, replayed_vjp, (*res, cts[0]), like=(0,), **statics)
            return d_p, xp_.zeros_like(res[1]), xp_.zeros_like(res[2])

        (q,), _ = custom_backward(xp, forward, backward, (p, row_w, col_w), names=None, n_diff=1, linear=False)
    else:
        q = _scaled(xp, p, row_w, col_w, max_iter=max_iter, tol=tol)
    return xp.where(keep, q, xp.zeros_like(q))
