r"""Gradient of the Sinkhorn plan by implicit differentiation of its fixed point.

With scaled cost ``c = C / epsilon`` and scaled potentials ``(u, v)``, the
plan ``P_ij = exp(u_i + v_j - c_ij)`` solves the marginal equations

    F(u, v; c, a, b) = (P 1 - a,  P^T 1 - b) = 0.

By the implicit function theorem (as in Luise et al. 2018, Eisenberger et
al. 2022 "A unified framework for implicit Sinkhorn differentiation"), a
cotangent ``G`` on ``P`` (and ``du``, ``dv`` on the potentials) pulls back
through the fixed point as

    r = (G o P) 1 + du,     s = (G o P)^T 1 + dv,
    [ diag(P 1)   P          ] [alpha]   [r]
    [ P^T         diag(P^T 1)] [beta ] = [s],

    dL/dc_ij  = P_ij (alpha_i + beta_j - G_ij),
    dL/dlog a = alpha o a,     dL/dlog b = beta o b.

The system is singular along ``(1, -1)`` (the potentials are defined up to
a constant), and consistent. We eliminate the larger side and solve the
Schur complement ``diag(P^T 1) - P^T diag(P 1)^-1 P`` by conjugate gradient
in the scaled variable ``y = sqrt(P^T 1) o beta``: the operator is then
``I - K^T K`` with ``K = diag(P 1)^-1/2 P diag(P^T 1)^-1/2``, whose null
vector ``sqrt(P^T 1)`` is deflated by adding its projector. CG needs about
``sqrt(kappa)`` products with ``P`` where Sinkhorn needed about ``kappa``
iterations, and it keeps only O(n + m) vectors besides ``P``, so the
backward's memory does not depend on how many iterations the forward ran.

The remaining constant is the one the unrolled plan fixes: when the last
update is f's (rows exact), shifting ``log b`` by a constant leaves the plan
unchanged, so ``sum(dL/dlog b) = 0``; symmetrically for columns.
"""

from __future__ import annotations

import functools
from typing import Any

from .._lib._adapters import PortableAdapter, get_adapter
from .._lib._loops import freeze_rows, in_blocks
from .._lib._numerics import matvec, safe_divide, unbroadcast

__all__ = ["fixed_point_vjp", "dual_cotangents", "solve_dual"]

CHECK_EVERY = 10


def _mT(xp: Any, a: Any) -> Any:
    return xp.matrix_transpose(a)


def _safe_inverse(xp: Any, d: Any) -> Any:
    """``1 / d`` where ``d`` is at least the smallest normal number, else 0: an empty row or column has no potential to move.

    A mass below the normal range counts as empty: its inverse is beyond the
    dtype's range (float32 columns of 1e-40 after three iterations of a
    near-hard plan gave inf, then NaN), and XLA on CPU flushes it to 0 anyway.
    """
    return safe_divide(xp, 1.0, xp.where(d >= xp.finfo(d.dtype).smallest_normal, d, xp.zeros_like(d)))


def _cg_tolerance(xp: Any, dtype: Any) -> float:
    # Relative residual CG can reach in the working precision (float32 stalls near 1e-6).
    return 1e-10 if dtype == xp.float64 else 1e-5


def _norm(xp: Any, v: Any) -> Any:
    return xp.sqrt(xp.sum(v * v, axis=-1, keepdims=True))


def _schur_solve(
    xp: Any, adapter: PortableAdapter, p: Any, r: Any, s: Any, max_iter: int, steps: int | None = None, guarded: bool = True
) -> tuple[Any, Any]:
    """Solve the system above for ``(alpha, beta)`` by eliminating ``alpha`` (the rows of ``p``).

    ``steps``: that many CG iterations, with no convergence check (no
    host sync, one loop body): an approximate solve; None: to the dtype's reach.
    ``guarded=False``: the same map in operations JAX can transpose (forward
    mode): the two guards below that read the right-hand side's size are
    left to the solve, which the backend sees as one linear solve.
    """
    # The system is linear: solve for a right-hand side of unit size and scale
    # back, so that CG's squared norms stay in range when the cotangent is
    # large (a soft sort of values near 1e30 in float32).
    if guarded:
        unit = _unit(xp, adapter, xp.maximum(xp.max(xp.abs(r), axis=-1, keepdims=True), xp.max(xp.abs(s), axis=-1, keepdims=True)))
        r, s = r / unit, s / unit
    row = xp.sum(p, axis=-1)
    col = xp.sum(p, axis=-2)
    inv_row = _safe_inverse(xp, row)
    # The column scaling is a preconditioner and q (the deflation) picks the free constant: the solution's
    # effect on the plan depends on neither, so autodiff (an unrolled polish differentiates this solve's matrix)
    # sees them as constants; their square roots' derivatives are unbounded at an empty column (NaN gradients
    # of saturated plans on JAX).
    held = adapter.stop_gradient(xp, col)
    inv_sqrt_col = xp.sqrt(_safe_inverse(xp, held))
    q = xp.sqrt(held)
    q = q * _safe_inverse(xp, xp.sqrt(xp.sum(q * q, axis=-1, keepdims=True)))
    carried = matvec(xp, _mT(xp, p), r * inv_row)
    rhs = (s - carried) * inv_sqrt_col
    ops = (p, inv_row, inv_sqrt_col, q)
    if guarded:
        # CG stops at a residual relative to the terms whose difference rhs is, not to rhs: on a
        # saturated plan (blocks of a permutation) rhs cancels to rounding, and solving that
        # rounding to a relative tolerance along the near-null directions of the decoupled
        # blocks amplified it into gradients of 1e4 where the exact one is 1e-11.
        terms = _norm(xp, s * inv_sqrt_col) + _norm(xp, carried * inv_sqrt_col)
        rhs = xp.where(_norm(xp, rhs) <= _cg_tolerance(xp, p.dtype) * terms, xp.zeros_like(rhs), rhs)
        y = _cg(xp, adapter, ops, rhs, terms, max_iter=max_iter, steps=steps)
    else:
        def solve(b: Any) -> Any:
            size = _unit(xp, adapter, xp.max(xp.abs(b), axis=-1, keepdims=True))
            unit_b = b / size
            return _cg(xp, adapter, ops, unit_b, _norm(xp, unit_b), max_iter=max_iter, steps=steps) * size

        y = adapter.linear_solve(xp, lambda v: _schur(xp, ops, v), solve, rhs)
    beta = y * inv_sqrt_col
    alpha = (r - matvec(xp, p, beta)) * inv_row
    return (alpha * unit, beta * unit) if guarded else (alpha, beta)


def _unit(xp: Any, adapter: PortableAdapter, size: Any) -> Any:
    """``size`` where it is positive and finite, else 1, held constant: the scale a linear solve divides by and restores."""
    return adapter.stop_gradient(xp, xp.where((size > 0) & xp.isfinite(size), size, xp.ones_like(size)))


def _schur(xp: Any, ops: tuple[Any, ...], y: Any) -> Any:
    """The deflated Schur complement ``I - K^T K + q q^T`` applied to ``y``, from ``ops = (p, 1 / row, 1 / sqrt(col), q, ...)``."""
    p, inv_row, inv_sqrt_col, q = ops[:4]
    kk = matvec(xp, _mT(xp, p), matvec(xp, p, y * inv_sqrt_col) * inv_row) * inv_sqrt_col
    return y - kk + q * xp.sum(q * y, axis=-1, keepdims=True)


def _cg(xp: Any, adapter: PortableAdapter, ops: tuple[Any, ...], rhs: Any, terms: Any, *, max_iter: int, steps: int | None) -> Any:
    """Conjugate gradient on the deflated Schur complement of ``ops = (p, 1 / row, 1 / sqrt(col), q)``, from 0.

    It stops at a residual within the dtype's tolerance of ``terms``, or after ``steps`` iterations when given.
    """

    def step(ops_: tuple[Any, ...], state: tuple[Any, ...]) -> tuple[Any, ...]:
        y, res, d, rr = state
        ad = _schur(xp, ops_, d)
        dad = xp.sum(d * ad, axis=-1, keepdims=True)
        step_len = safe_divide(xp, rr, dad)
        y = y + step_len * d
        res = res - step_len * ad
        rr_new = xp.sum(res * res, axis=-1, keepdims=True)
        ratio = safe_divide(xp, rr_new, rr)
        return y, res, res + ratio * d, rr_new

    def error(ops_: tuple[Any, ...], state: tuple[Any, ...]) -> Any:
        return xp.sqrt(state[3][..., 0]) * _safe_inverse(xp, ops_[-1][..., 0])

    operands = (*ops, terms)
    state = (xp.zeros_like(rhs), rhs, rhs, xp.sum(rhs * rhs, axis=-1, keepdims=True))
    if steps is not None:
        return adapter.repeat(xp, lambda st: step(operands, st), state, steps, steps)[0]
    (y, _, _, _), _, _ = adapter.iterate(
        xp, step, operands, state, error=error, freeze=freeze_rows, max_iter=max_iter, tol=_cg_tolerance(xp, rhs.dtype),
        check_every=CHECK_EVERY,
    )
    return y


def solve_dual(
    xp: Any, p: Any, r: Any, s: Any, *, max_iter: int, steps: int | None = None, guarded: bool = True
) -> tuple[Any, Any]:
    """``(alpha, beta)`` solving the system above for right-hand sides ``(r, s)``, up to its free constant.

    ``steps``: a fixed number of CG iterations; ``guarded=False``: in
    operations JAX can transpose (:func:`_schur_solve`).
    """
    # eagerly: a compiled graph calls CG as one op that keeps its early exit
    eagerly = get_adapter(xp).eagerly
    if p.shape[-2] >= p.shape[-1]:
        return eagerly(xp, _blocked_solve, (p, r, s), like=(1, 2), max_iter=max_iter, steps=steps, guarded=guarded)  # type: ignore[return-value]
    beta, alpha = eagerly(xp, _blocked_solve, (_mT(xp, p), s, r), like=(1, 2), max_iter=max_iter, steps=steps, guarded=guarded)
    return alpha, beta


def _blocked_solve(xp: Any, p: Any, r: Any, s: Any, **kwargs: Any) -> tuple[Any, Any]:
    """:func:`_schur_solve` in blocks of problems whose plans fit in a CPU core's cache (as the forward's iterations)."""
    adapter = get_adapter(xp)  # here, not passed: eagerly() hands this function only arrays and Python values
    solve = functools.partial(_schur_solve, xp, adapter, **kwargs)
    return in_blocks(xp, solve, (p, r, s), (2, 1, 1), adapter.cache_block(xp, p, 2, few_passes=True))  # type: ignore[return-value]


def dual_cotangents(
    xp: Any, p: Any, r: Any, s: Any, log_a: Any, log_b: Any, *, exact: str, max_iter: int, guarded: bool = True
) -> tuple[Any, Any, Any, Any]:
    """``(alpha, beta, a, b)``: the system above solved for right-hand sides ``(r, s)``, its constant fixed as the last update fixes it.

    ``guarded``: as in :func:`solve_dual`.
    """
    alpha, beta = solve_dual(xp, p, r, s, max_iter=max_iter, guarded=guarded)
    a, b = xp.exp(log_a), xp.exp(log_b)
    # Fix the free constant as the exact final update does (module docstring).
    if exact == "columns":
        shift = -xp.sum(alpha * a, axis=-1, keepdims=True) / xp.sum(a, axis=-1, keepdims=True)
    else:
        shift = xp.sum(beta * b, axis=-1, keepdims=True) / xp.sum(b, axis=-1, keepdims=True)
    return alpha + shift, beta - shift, a, b


def fixed_point_vjp(
    xp: Any,
    residuals: tuple[Any, Any, Any],
    cotangents: tuple[Any, Any, Any],
    *,
    exact: str,
    max_iter: int,
    cost_shape: tuple[int, ...],
    guarded: bool = True,
) -> tuple[Any, Any, Any]:
    """``(dc, dlog_a, dlog_b)`` from the cotangents of ``(plan, u, v)`` (None: zero).

    Each cotangent has its input's shape (``cost_shape`` for ``c``): the
    marginals and the cost may have been broadcast against each other.
    ``guarded=False``: in operations JAX can transpose (:func:`solve_dual`).
    """
    p, log_a, log_b = residuals
    ct_p, ct_u, ct_v = cotangents
    gp = xp.zeros_like(p) if ct_p is None else ct_p * p
    r = xp.sum(gp, axis=-1)
    s = xp.sum(gp, axis=-2)
    if ct_u is not None:
        r = r + ct_u
    if ct_v is not None:
        s = s + ct_v
    alpha, beta, a, b = dual_cotangents(xp, p, r, s, log_a, log_b, exact=exact, max_iter=max_iter, guarded=guarded)
    dc = unbroadcast(xp, p * (alpha[..., :, None] + beta[..., None, :]) - gp, cost_shape)
    return dc, unbroadcast(xp, alpha * a, tuple(log_a.shape)), unbroadcast(xp, beta * b, tuple(log_b.shape))
