r"""Entropic transport between points of a line: the plan behind every Sinkhorn operator.

Points ``s_i`` (weights ``a``) and targets ``y_j`` (weights ``b``) with the
cost ``C_ij = h(y_j - s_i)``, ``h(d) = |d| ** power``; the plan solves the
problem of :mod:`.sinkhorn`, warm-started at the exact unregularised
potentials (:mod:`.monotone`) when ``h`` is convex.

Differentiated implicitly (with ``epsilon`` a number), the gradient in
``s`` never forms the cost or its cotangent. With ``W = P o (alpha 1^T +
1 beta^T) - G o P`` the cotangent of ``C / epsilon`` (:mod:`.implicit`),

    dL/ds_i = -(1/epsilon) sum_j W_ij h'(y_j - s_i),

and for ``power = 2`` (``h'(d) = 2 d``) each sum is a product with ``P``:

    sum_j W_ij (y_j - s_i) = alpha_i (P y - s o P 1)_i + (P (beta o y) - s o P beta)_i
                             - ((G o P) y - s o (G o P) 1)_i,

so the backward holds the plan, its cotangent ``G`` and ``G o P``: three
``(..., n, m)`` arrays, where differentiating the cost by autodiff kept
the differences ``y_j - s_i``, the cost and its cotangent besides. Other
powers form ``P o h'`` once.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from .._lib._adapters import get_adapter
from .._lib._compat import is_array
from .._lib._numerics import abs_power, abs_power_slope, matvec, unbroadcast
from .implicit import dual_cotangents
from .monotone import grid_potentials
from .sinkhorn import DEFAULT_CHECK_EVERY, SolverOptions, fixed_point, scaled_start, solve_vjp

__all__ = ["line_plan_vjp", "cost_fns"]


def cost_fns(xp: Any, power: float) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """``h(d) = |d| ** power`` and its derivative ``h'(d)``, elementwise (``power`` a Python number)."""
    if power == 2.0:
        return (lambda d: d * d), (lambda d: 2.0 * d)
    return (lambda d: abs_power(xp, xp.abs(d), power)), (lambda d: abs_power_slope(xp, xp.abs(d), power) * xp.sign(d))


def line_plan_vjp(
    xp: Any, s: Any, y: Any, log_a: Any, log_b: Any, opts: SolverOptions, *, power: float, exact: str
) -> tuple[Any, Any, Callable[[Any], tuple[Any, Any, Any]]]:
    """The plan ``(..., n, m)`` between ``s`` (..., n) and ``y`` (m,), its marginal error, and the pullback ``dplan -> (ds, dlog_a, dlog_b, depsilon)``.

    ``log_a`` and ``log_b`` broadcast against the plan's batch (``depsilon``
    is None unless epsilon is an array).
    """
    h, h_slope = cost_fns(xp, power)
    # Warm start at the exact unregularised potentials; they solve that problem only for a convex cost.
    warm = power >= 1.0 and s.shape[-1] > 1 and y.shape[0] > 1
    init = grid_potentials(xp, s, log_a, log_b, h) if warm else None
    if not opts.implicit or is_array(opts.epsilon):
        return _autodiff_cost(xp, s, y, log_a, log_b, opts, h, h_slope, exact, init)
    eps = opts.epsilon
    # Python values only in the closures (jax.custom_vjp must not close over traced arrays)
    fwd = functools.partial(_forward, h=h, eps=eps, opts=opts, exact=exact)
    bwd = functools.partial(_backward, h_slope=h_slope, eps=eps, power=power, exact=exact, max_iter=opts.max_iter)
    u0, v0 = scaled_start(xp, init, eps, tuple(s.shape[:-1]), log_a, log_b, s)
    arrays = (s, y, log_a, log_b, u0, v0)
    adapter = get_adapter(xp)
    if adapter.autodiff:
        plan, err = adapter.custom_vjp(xp, fwd, bwd, arrays, n_diff=1)
        res = None
    else:
        (plan, err), res = fwd(xp, *arrays)

    def pullback(dp: Any) -> tuple[Any, Any, Any, Any]:
        ds, _, d_log_a, d_log_b, _, _ = bwd(xp, (plan, s, y, log_a, log_b) if res is None else res, (dp,))
        return ds, d_log_a, d_log_b, None

    return plan, err, pullback


def _autodiff_cost(xp: Any, s: Any, y: Any, log_a: Any, log_b: Any, opts: SolverOptions, h: Any, h_slope: Any,
                   exact: str, init: Any) -> tuple[Any, Any, Any]:
    """Unrolled, or a learnable epsilon: the cost formed and handed to :func:`.sinkhorn.solve_vjp`."""
    # The differences are recomputed in the pullback, and the cost is passed without a name:
    # neither stays alive through the solve (each is a whole (..., n, m) array).
    res, solve_back = solve_vjp(xp, h(y - s[..., :, None]), log_a, log_b, opts, exact=exact, init=init)

    def pullback(dp: Any) -> tuple[Any, Any, Any, Any]:
        d_cost, d_log_a, d_log_b, d_eps = solve_back(dp)
        ds = -xp.sum(d_cost * h_slope(y - s[..., :, None]), axis=-1)
        return unbroadcast(xp, ds, tuple(s.shape)), d_log_a, d_log_b, d_eps

    return res.plan, res.error, pullback


def _forward(xp: Any, s: Any, y: Any, log_a: Any, log_b: Any, u0: Any, v0: Any, *, h: Any, eps: float,
             opts: SolverOptions, exact: str) -> tuple[tuple[Any, Any], tuple[Any, ...]]:
    """``((plan, error), residuals)``; the scaled cost lives only inside this call."""
    (plan, _, _, err, _), _ = fixed_point(
        xp, h(y - s[..., :, None]) / eps, log_a, log_b, u0, v0, max_iter=opts.max_iter, tol=opts.tol,
        check_every=DEFAULT_CHECK_EVERY, exact=exact,
    )
    return (plan, err), (plan, s, y, log_a, log_b)


def _backward(xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...], *, h_slope: Any, eps: float, power: float,
              exact: str, max_iter: int) -> tuple[Any, ...]:
    """Cotangents of ``(s, y, log_a, log_b, u0, v0)`` from the plan's.

    The targets are constants here, and the start's cotangents are zero:
    the fixed point does not depend on where the iterations began.
    """
    p, s, y, log_a, log_b = res
    ct = cts[0]
    if ct is None:  # torch: the plan was not used
        return (xp.zeros_like(s), None, None, None, None, None)
    gp = ct * p
    r, c_sum = xp.sum(gp, axis=-1), xp.sum(gp, axis=-2)
    alpha, beta, a, b = dual_cotangents(xp, p, r, c_sum, log_a, log_b, exact=exact, max_iter=max_iter)
    sb = xp.broadcast_to(s, r.shape)
    if power == 2.0:
        # sum_j W_ij (y_j - s_i), from products with P and G o P (module docstring)
        w_y = alpha * matvec(xp, p, y) + matvec(xp, p, beta * y) - matvec(xp, gp, y)
        w_1 = alpha * xp.sum(p, axis=-1) + matvec(xp, p, beta) - r
        ds = -(2.0 / eps) * (w_y - sb * w_1)
    else:
        del gp
        ph = p * h_slope(y - sb[..., :, None])
        ds = -(1.0 / eps) * (alpha * xp.sum(ph, axis=-1) + matvec(xp, ph, beta) - xp.sum(ct * ph, axis=-1))
    return (
        unbroadcast(xp, ds, tuple(s.shape)), xp.zeros_like(y), unbroadcast(xp, alpha * a, tuple(log_a.shape)),
        unbroadcast(xp, beta * b, tuple(log_b.shape)), xp.zeros_like(r), xp.zeros_like(c_sum),
    )
