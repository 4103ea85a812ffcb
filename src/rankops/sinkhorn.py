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
the L1 gap of the other marginal, ``sum_j |(P^T 1)_j - b_j|``, per problem,
plus that of the rows, which is rounding only unless ``C / epsilon`` exceeds
the float's precision (then the plan is meaningless, and this says so).
Everything stays in the log domain, so small ``epsilon`` cannot overflow.

Iterations run in blocks of ``check_every``; a problem whose error is
within ``tol`` after a block is frozen there, and the solver stops once all
are (or at ``max_iter``). Each problem's result therefore depends on that
problem alone: batched, one by one, in Dask blocks or under ``jax.vmap``.

Gradients are those of the unrolled iterations by default. torch
checkpoints each block; JAX runs the loop as a ``lax.while_loop`` under a
``custom_vjp`` that stores the potentials at block starts and replays only
the blocks that ran, so ``jit``, ``vmap`` and ``grad`` all apply and memory
holds one block's kernels at a time, not one per iteration. ``implicit=True``
differentiates the fixed point instead (:mod:`rankops._implicit`): the
backward keeps the final plan only.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Callable, NamedTuple

import array_api_compat
import numpy as np

from ._implicit import fixed_point_vjp
from ._lib._adapters import get_adapter
from ._lib._apply import Recorded, call, is_recording, record, with_value
from ._lib._loops import freeze_rows
from ._lib._warnings import caller_stacklevel
from ._lib._numerics import safe_divide
from ._lib._compat import check_same_device, is_array, is_lazy_blockwise, namespace, real_float_dtypes
from ._lib._validation import boolean, positive_count, positive_scalar

__all__ = [
    "sinkhorn", "SinkhornResult", "SinkhornInfo", "ConvergenceWarning", "DEFAULT_MAX_ITER", "DEFAULT_TOL", "DEFAULT_CHECK_EVERY",
]

DEFAULT_MAX_ITER = 2000
DEFAULT_TOL = 1e-3
DEFAULT_CHECK_EVERY = 10


class SinkhornResult(NamedTuple):
    """Solution of a batch of entropic OT problems (a NamedTuple: a JAX pytree)."""

    plan: Any  # (..., n, m) transport plan
    f: Any  # (..., n) dual potential of the rows
    g: Any  # (..., m) dual potential of the columns
    n_iter: Any  # iterations run (a Python int, or a 0-d int array under JAX)
    error: Any  # (...,) L1 error of both marginals at exit (the rows' part is rounding)
    converged: Any  # (...,) bool: error <= tol


class SinkhornInfo(NamedTuple):
    """Convergence of the transport problems behind one operator call (``return_info=True``).

    One entry per problem, i.e. per row of the input (per row and level for
    :func:`rankops.soft_quantile` with an array of levels); arrays in the
    input's namespace and device, detached from autodiff.
    """

    converged: Any  # bool: error <= tol when the solver stopped
    error: Any  # L1 error of both marginals at exit, in the dtype the operator computed in


class ConvergenceWarning(RuntimeWarning):
    """Sinkhorn stopped at ``max_iter`` with a marginal error above ``tol`` in some row."""


def solve_vjp(
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
    implicit: bool = False,
) -> tuple[SinkhornResult, Callable[..., Any]]:
    """Solve on prepared arrays: ``log_a`` (..., n) and ``log_b`` (..., m) broadcast against ``cost``.

    Works on scaled potentials ``u = f / epsilon``, ``v = g / epsilon`` so the
    cost is divided by epsilon once, not at every iteration. The plan's rows
    sum exactly to ``a`` (the last update is f's); ``exact="columns"`` adds a
    final g-update so that its columns sum exactly to ``b`` instead, which
    makes ``b^-1 P^T x`` an exact convex combination (soft sorts, quantiles).

    ``implicit=True`` hides the iterations from the host's autodiff: the plan
    and potentials get the gradient of the fixed point
    (:mod:`rankops._implicit`), computed from the final plan alone.

    Returns the result and its pullback ``(dplan, df=None, dg=None) ->
    (dcost, dlog_a, dlog_b, depsilon)`` by the implicit rule, which is how
    backends without autodiff differentiate (``depsilon`` is None unless
    epsilon is an array).
    """
    c = cost / epsilon
    fwd = functools.partial(_fixed_point, max_iter=max_iter, tol=tol, check_every=check_every, exact=exact)
    bwd = functools.partial(fixed_point_vjp, exact=exact, max_iter=max_iter, cost_shape=tuple(c.shape))
    if implicit:
        plan, u, v, err, n_iter = get_adapter(xp).custom_vjp(xp, fwd, bwd, (c, log_a, log_b), n_diff=3)
    else:
        plan, u, v, err, n_iter = fwd(xp, c, log_a, log_b)[0]

    def pullback(d_plan: Any, d_f: Any = None, d_g: Any = None) -> tuple[Any, Any, Any, Any]:
        d_u = None if d_f is None else d_f * epsilon
        d_v = None if d_g is None else d_g * epsilon
        d_c, d_log_a, d_log_b = bwd(xp, (plan, log_a, log_b), (d_plan, d_u, d_v))
        d_eps = None
        if is_array(epsilon):
            d_eps = -xp.sum(d_c * c) / epsilon
            for d, w in ((d_f, u), (d_g, v)):
                if d is not None:
                    d_eps = d_eps + xp.sum(d * w)
        return d_c / epsilon, d_log_a, d_log_b, d_eps

    return SinkhornResult(plan, u * epsilon, v * epsilon, n_iter, err, err <= tol), pullback


def _fixed_point(
    xp: Any, c: Any, log_a: Any, log_b: Any, *, max_iter: int, tol: float, check_every: int, exact: str
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Run the iterations on the scaled cost ``c = C / epsilon``.

    Returns ``((plan, u, v, error, n_iter), residuals)``, the residuals being
    what the implicit backward needs: the plan and both log-marginals.
    """
    adapter = get_adapter(xp)
    lse = adapter.logsumexp
    # The loop's functions take their arrays explicitly (no closure over them),
    # so an adapter can differentiate through the loop with a custom rule.
    operands = (c, log_a, log_b)

    def step(ops: tuple[Any, Any, Any], state: tuple[Any, Any]) -> tuple[Any, Any]:
        c_, la, lb = ops
        v = lb - lse(xp, state[0][..., :, None] - c_, -2)
        u = la - lse(xp, v[..., None, :] - c_, -1)
        return u, v

    def error(ops: tuple[Any, Any, Any], state: tuple[Any, Any]) -> Any:
        # Both marginals of the plan exactly as it is returned. The rows are exact after an
        # f-update in exact arithmetic, so their part is rounding, except where cost / epsilon
        # outgrows the float's precision (1e16 in float64, with squash=None and large inputs):
        # the plan is then meaningless, and this says so instead of a silent "converged".
        c_, la, lb = ops
        return _marginal_error(xp, _plan(xp, c_, *state), la, lb)

    # Shapes only (Python tuples): the batch of the cost and of both marginals.
    batch = np.broadcast_shapes(tuple(c.shape[:-2]), tuple(log_a.shape[:-1]), tuple(log_b.shape[:-1]))
    device = array_api_compat.device(c)
    u0 = xp.zeros(batch + (c.shape[-2],), dtype=c.dtype, device=device)
    v0 = xp.zeros(batch + (c.shape[-1],), dtype=c.dtype, device=device)
    (u, v), n_iter, err = adapter.iterate(
        xp, step, operands, (u0, v0), error=error, freeze=freeze_rows, max_iter=max_iter, tol=tol, check_every=check_every
    )
    if exact == "columns":
        v = log_b - lse(xp, u[..., :, None] - c, -2)
        plan = xp.exp((u[..., :, None] - c) + v[..., None, :])  # rounded as the last (column) update was
        # The plan returned is this one: its error (rows now) is what callers must see. It is
        # at most the columns' error before the update, except beyond float precision.
        err = _marginal_error(xp, plan, log_a, log_b)
    else:
        plan = _plan(xp, c, u, v)
    return (plan, u, v, err, n_iter), (plan, log_a, log_b)


def _marginal_error(xp: Any, p: Any, log_a: Any, log_b: Any) -> Any:
    """L1 errors of both marginals of ``p``, per problem."""
    column = xp.sum(xp.abs(xp.sum(p, axis=-2) - xp.exp(log_b)), axis=-1)
    return column + xp.sum(xp.abs(xp.sum(p, axis=-1) - xp.exp(log_a)), axis=-1)


def _plan(xp: Any, c: Any, u: Any, v: Any) -> Any:
    """``exp(u_i + v_j - c_ij)``, rounded as the f-update was, so that its rows are those the update made exact."""
    return xp.exp((v[..., None, :] - c) + u[..., :, None])


def check_solver_options(epsilon: Any, max_iter: Any, tol: Any, implicit: Any) -> dict[str, Any]:
    """Validate the options shared by the solver and every Sinkhorn operator."""
    tol = positive_scalar(tol, "tol")
    if is_array(tol):
        raise TypeError("tol must be a Python number, not an array")
    return {
        "epsilon": positive_scalar(epsilon, "epsilon"),
        "max_iter": positive_count(max_iter, "max_iter"),
        "tol": tol,
        "implicit": boolean(implicit, "implicit"),
    }


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
        False (default): gradients through the iterations. True: gradients
        by implicit differentiation of the fixed point (memory independent
        of the iteration count); ``f`` and ``g`` share a free constant, so
        only the plan, ``f_i + g_j`` and ``<a, f> + <b, g>`` get exact
        gradients that way, and ``error`` gets none.

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
    params = {"compute": compute, "out_dtype": out_dtype, "opts": opts}
    if is_lazy_blockwise(xp):
        from ._lib._adapters import _dask

        if is_recording():
            record(Recorded(None, _dask.sinkhorn_pullback(_solve_weights, cost, a, b, params)))
        return _dask.sinkhorn(_solve_weights, cost, a, b, params)
    weights = {k: v for k, v in (("a", a), ("b", b)) if v is not None}
    if is_recording():
        res, pullback = _solve_weights_vjp(xp, cost, **weights, **params)
        record(Recorded(None, pullback))
        return res
    return call(xp, _solve_weights, cost, weights, params)


def warn_if_unconverged(xp: Any, error: Any, opts: dict[str, Any], where: str) -> None:
    """Warn (:class:`ConvergenceWarning`) when some problem stopped above ``tol``.

    Reads values, so only where they exist now: not on tracers (``jax.jit``,
    ``grad``, ``vmap``, ``torch.func``) nor on Dask's lazy arrays. The eager
    solver loop has read its error at every block already, so the read costs
    no extra device sync there. A NaN error (a NaN or infinite input row) is
    a data problem, not a convergence one, and does not warn.
    """
    if is_lazy_blockwise(xp) or not get_adapter(xp).is_concrete(error):
        return
    bad = error > opts["tol"]
    if not bool(xp.any(bad)):
        return
    count = int(xp.sum(xp.astype(bad, xp.int32)))
    worst = float(xp.max(xp.where(bad, error, xp.zeros_like(error))))
    warnings.warn(
        f"{where}: Sinkhorn stopped at max_iter={opts['max_iter']} with a marginal error above tol={opts['tol']:g} in "
        f"{count} of {math.prod(error.shape)} transport problem(s) (largest {worst:.3g}); raise max_iter or epsilon, or pass "
        "return_info=True to see which ones",
        ConvergenceWarning,
        stacklevel=caller_stacklevel(),
    )


def log_weights(xp: Any, w: Any, size: int, dtype: Any, device: Any) -> Any:
    """``log(w)`` in ``dtype``, or the uniform ``-log(size)`` when ``w`` is None."""
    if w is None:
        return xp.full((size,), -math.log(size), dtype=dtype, device=device)
    return xp.log(xp.astype(w, dtype))


def _solve_weights_vjp(
    xp: Any, cost: Any, a: Any = None, b: Any = None, *, compute: Any, out_dtype: Any, opts: dict[str, Any]
) -> tuple[SinkhornResult, Callable[..., dict[str, Any]]]:
    """:func:`sinkhorn` after validation, on one backend's arrays (a Dask block too), with its pullback.

    The pullback maps cotangents of ``(plan, f, g)`` (None: zero) to those of
    ``cost``, of the marginals given and of an array ``epsilon``.
    """
    device = array_api_compat.device(cost)
    cost_c = xp.astype(cost, compute) if cost.dtype != compute else cost
    log_a = log_weights(xp, a, cost.shape[-2], compute, device)
    log_b = log_weights(xp, b, cost.shape[-1], compute, device)
    res, solve_back = solve_vjp(xp, cost_c, log_a, log_b, **opts)
    if compute != out_dtype:
        res = res._replace(plan=xp.astype(res.plan, out_dtype), f=xp.astype(res.f, out_dtype), g=xp.astype(res.g, out_dtype))

    def pullback(d_plan: Any, d_f: Any = None, d_g: Any = None) -> dict[str, Any]:
        cts = [None if d is None else xp.astype(d, compute) for d in (d_plan, d_f, d_g)]
        if cts[0] is None:
            cts[0] = xp.zeros_like(res.plan, dtype=compute)
        d_cost, d_log_a, d_log_b, d_eps = solve_back(*cts)
        grads = {"cost": d_cost}
        for name, w, d in (("a", a, d_log_a), ("b", b, d_log_b)):
            if w is not None:  # d/dw log(w) = 1/w; an empty entry (w = 0) moves nothing
                grads[name] = safe_divide(xp, d, xp.astype(w, compute))
        if d_eps is not None:
            grads["epsilon"] = d_eps
        return grads

    return res, pullback


_solve_weights = with_value(_solve_weights_vjp)
