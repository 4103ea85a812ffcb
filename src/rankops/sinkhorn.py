r"""Batched log-domain Sinkhorn: the transport solver behind the OT operators.

For a cost ``C`` of shape ``(..., n, m)`` and marginals ``a`` (n) and ``b``
(m), the entropic optimal transport problem (Cuturi, Teboul & Vert 2019,
Eq. 3; Cuturi et al. 2019, Alg. 2)

    min_P <P, C> - epsilon H(P)   subject to   P 1 = a,  P^T 1 = b

is solved by alternating the dual updates

    g_j <- epsilon log b_j - epsilon logsumexp_i((f_i - C_ij) / epsilon)
    f_i <- epsilon log a_i - epsilon logsumexp_j((g_j - C_ij) / epsilon)

from ``f = g = 0``; the plan is ``P_ij = exp((f_i + g_j - C_ij) / epsilon)``.
After each f-update the rows of P sum exactly to ``a``; the reported error is
the L1 gap of the other marginal, ``sum_j |(P^T 1)_j - b_j|``, per problem.
Everything stays in the log domain, so small ``epsilon`` cannot overflow.

Iterations run in blocks of ``check_every``; a problem whose error is
within ``tol`` after a block is frozen there, and the solver stops once all
are (or at ``max_iter``). Each problem's result therefore depends on that
problem alone: batched, one by one, in Dask blocks or under ``jax.vmap``.

Gradients are those of the unrolled iterations. torch checkpoints each
block; JAX runs the loop as a ``lax.while_loop`` under a ``custom_vjp`` that
stores the potentials at block starts and replays only the blocks that ran,
so ``jit``, ``vmap`` and ``grad`` all apply and memory holds one block's
kernels at a time, not one per iteration.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import array_api_compat
import numpy as np

from ._lib._adapters import get_adapter
from ._lib._apply import call
from ._lib._compat import check_same_device, is_array, is_lazy_blockwise, namespace, real_float_dtypes
from ._lib._validation import boolean, positive_count, positive_scalar

__all__ = ["sinkhorn", "SinkhornResult", "DEFAULT_MAX_ITER", "DEFAULT_TOL", "DEFAULT_CHECK_EVERY"]

DEFAULT_MAX_ITER = 2000
DEFAULT_TOL = 1e-3
DEFAULT_CHECK_EVERY = 10


class SinkhornResult(NamedTuple):
    """Solution of a batch of entropic OT problems (a NamedTuple: a JAX pytree)."""

    plan: Any  # (..., n, m) transport plan
    f: Any  # (..., n) dual potential of the rows
    g: Any  # (..., m) dual potential of the columns
    n_iter: Any  # iterations run (a Python int, or a 0-d int array under JAX)
    error: Any  # (...,) L1 error of the column marginal at exit
    converged: Any  # (...,) bool: error <= tol


def solve(
    xp: Any,
    cost: Any,
    log_a: Any,
    log_b: Any,
    *,
    epsilon: Any,
    max_iter: int,
    tol: float,
    check_every: int = DEFAULT_CHECK_EVERY,
    exact: str = "rows",
) -> SinkhornResult:
    """Core solver on prepared arrays: ``log_a`` (..., n) and ``log_b`` (..., m) broadcast against ``cost``.

    Works on scaled potentials ``u = f / epsilon``, ``v = g / epsilon`` so the
    cost is divided by epsilon once, not at every iteration. The plan's rows
    sum exactly to ``a`` (the last update is f's); ``exact="columns"`` adds a
    final g-update so that its columns sum exactly to ``b`` instead, which
    makes ``b^-1 P^T x`` an exact convex combination (soft sorts, quantiles).
    """
    adapter = get_adapter(xp)
    lse = adapter.logsumexp
    c = cost / epsilon
    # The loop's functions take their arrays explicitly (no closure over them),
    # so an adapter can differentiate through the loop with a custom rule.
    operands = (c, log_a, log_b)

    def step(ops: tuple[Any, Any, Any], state: tuple[Any, Any]) -> tuple[Any, Any]:
        c_, la, lb = ops
        v = lb - lse(xp, state[0][..., :, None] - c_, -2)
        u = la - lse(xp, v[..., None, :] - c_, -1)
        return u, v

    def error(ops: tuple[Any, Any, Any], state: tuple[Any, Any]) -> Any:
        c_, _, lb = ops
        u, v = state
        column = xp.exp(v + lse(xp, u[..., :, None] - c_, -2))
        return xp.sum(xp.abs(column - xp.exp(lb)), axis=-1)

    # Shapes only (Python tuples): the batch of the cost and of both marginals.
    batch = np.broadcast_shapes(tuple(c.shape[:-2]), tuple(log_a.shape[:-1]), tuple(log_b.shape[:-1]))
    device = array_api_compat.device(c)
    u0 = xp.zeros(batch + (c.shape[-2],), dtype=c.dtype, device=device)
    v0 = xp.zeros(batch + (c.shape[-1],), dtype=c.dtype, device=device)
    (u, v), n_iter, err = adapter.iterate(
        xp, step, operands, (u0, v0), error=error, freeze=_freeze_rows, max_iter=max_iter, tol=tol, check_every=check_every
    )
    if exact == "columns":
        v = log_b - lse(xp, u[..., :, None] - c, -2)
    plan = xp.exp(u[..., :, None] + v[..., None, :] - c)
    return SinkhornResult(plan, u * epsilon, v * epsilon, n_iter, err, err <= tol)


def _freeze_rows(xp: Any, done: Any, old: tuple[Any, ...], new: tuple[Any, ...]) -> tuple[Any, ...]:
    """Keep ``old`` for the problems flagged in ``done`` (shape: the batch)."""
    return tuple(xp.where(done[..., None], o, w) for o, w in zip(old, new))


def check_solver_options(epsilon: Any, max_iter: Any, tol: Any, implicit: Any) -> dict[str, Any]:
    """Validate the options shared by the solver and every Sinkhorn operator."""
    if boolean(implicit, "implicit"):
        raise NotImplementedError(
            "implicit=True (gradients by implicit differentiation of the Sinkhorn fixed point) is not "
            "implemented yet; use implicit=False (gradients unrolled through the iterations)"
        )
    tol = positive_scalar(tol, "tol")
    if is_array(tol):
        raise TypeError("tol must be a Python number, not an array")
    return {"epsilon": positive_scalar(epsilon, "epsilon"), "max_iter": positive_count(max_iter, "max_iter"), "tol": tol}


def sinkhorn(
    cost: Any,
    a: Any = None,
    b: Any = None,
    /,
    *,
    epsilon: Any,
    max_iter: int = DEFAULT_MAX_ITER,
    tol: float = DEFAULT_TOL,
    implicit: bool = False,
) -> SinkhornResult:
    """Solve a batch of entropic optimal transport problems.

    Parameters
    ----------
    cost : array, shape (..., n, m)
        Cost matrices; leading axes are batch axes.
    a, b : array, shape (..., n) and (..., m), optional
        Marginals (non-negative, summing to one); uniform when omitted. Their
        leading axes broadcast against those of ``cost``.
    epsilon : float > 0
        Entropic regularisation, in the units of ``cost``.
    max_iter : int >= 1
        Iteration budget.
    tol : float > 0
        Stop once every problem's column-marginal L1 error is below ``tol``.
    implicit : bool
        Gradients by implicit differentiation (not implemented yet).

    Returns
    -------
    SinkhornResult with ``plan``, ``f``, ``g``, ``n_iter``, ``error``,
    ``converged``; arrays in the namespace, device and dtype of ``cost``.
    """
    opts = check_solver_options(epsilon, max_iter, tol, implicit)
    given = {"cost": cost, **{k: v for k, v in (("a", a), ("b", b)) if v is not None}}
    xp = namespace(*given.values(), names=tuple(given))
    check_same_device(xp, tuple(given.values()), tuple(given))
    compute, out_dtype = real_float_dtypes(xp, cost, "cost")
    if cost.ndim < 2:
        raise ValueError(f"cost must have shape (..., n, m), got {tuple(cost.shape)}")
    n, m = cost.shape[-2], cost.shape[-1]
    if n == 0 or m == 0:
        raise ValueError(f"cost has an empty axis: shape {tuple(cost.shape)}")
    for name, w, size in (("a", a, n), ("b", b, m)):
        if w is not None and (w.ndim < 1 or w.shape[-1] != size):
            raise ValueError(f"{name} must have shape (..., {size}) to match cost {tuple(cost.shape)}, got {tuple(w.shape)}")
        if w is not None and xp.isdtype(w.dtype, "complex floating"):
            raise TypeError(f"{name} must be real-valued")
    if is_lazy_blockwise(xp):
        from ._lib._adapters import _dask

        return _dask.sinkhorn(_solve_weights, cost, a, b, compute, out_dtype, opts)
    weights = {k: v for k, v in (("a", a), ("b", b)) if v is not None}
    return call(xp, _solve_weights, cost, weights, {"compute": compute, "out_dtype": out_dtype, "opts": opts})


def log_weights(xp: Any, w: Any, size: int, dtype: Any, device: Any) -> Any:
    """``log(w)`` in ``dtype``, or the uniform ``-log(size)`` when ``w`` is None."""
    if w is None:
        return xp.full((size,), -math.log(size), dtype=dtype, device=device)
    return xp.log(xp.astype(w, dtype))


def _solve_weights(
    xp: Any, cost: Any, a: Any = None, b: Any = None, *, compute: Any, out_dtype: Any, opts: dict[str, Any]
) -> SinkhornResult:
    """:func:`sinkhorn` after validation, on one backend's arrays (a Dask block too)."""
    device = array_api_compat.device(cost)
    cost_c = xp.astype(cost, compute) if cost.dtype != compute else cost
    log_a = log_weights(xp, a, cost.shape[-2], compute, device)
    log_b = log_weights(xp, b, cost.shape[-1], compute, device)
    res = solve(xp, cost_c, log_a, log_b, **opts)
    if compute != out_dtype:
        res = res._replace(plan=xp.astype(res.plan, out_dtype), f=xp.astype(res.f, out_dtype), g=xp.astype(res.g, out_dtype))
    return res
