r"""``rankops.sinkhorn``: the batched log-domain transport solver, as an operator with two core axes.

For costs ``C`` of shape ``(..., n, m)`` and marginals ``a`` (..., n) and
``b`` (..., m), solves ``min_P <P, C> - epsilon H(P)`` subject to ``P 1 = a``,
``P^T 1 = b`` (Cuturi, Teboul & Vert 2019, Eq. 3); the solver and its
gradients are in :mod:`rankops._solvers.sinkhorn`.
"""

from __future__ import annotations

from typing import Any

from ._kernels.transport import solver_core
from ._lib._calls import Call, Prepared, prepare
from ._lib._compat import is_array
from ._lib._operator import check_cotangent_shapes, operator
from ._solvers.sinkhorn import DEFAULT_MAX_ITER, DEFAULT_TOL, SinkhornResult, SolverOptions

__all__ = ["sinkhorn", "SinkhornResult"]


class _Result:
    """Readout: the core's outputs as a :class:`SinkhornResult` in the cost's dtype."""

    outputs = ("plan", "f", "g", "error", "n_iter")

    def __init__(self, tol: float) -> None:
        self.tol = tol

    def finish(self, p: Prepared, outs: tuple[Any, ...]) -> SinkhornResult:
        plan, f, g, error, n_iter = outs
        plan, f, g = (p.finish(a, axis_kept=False) for a in (plan, f, g))
        return SinkhornResult(plan, f, g, n_iter, error, error <= self.tol)

    def pull(self, p: Prepared, cts: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(None if c is None else p.unfinish(c, axis_kept=False) for c in cts) + (None, None)


class _ResultValue:
    """Differentiable outputs ``(plan, f, g)``; a cotangent is an array (the plan's) or a tuple of them."""

    @staticmethod
    def differentiable(value: SinkhornResult) -> tuple[Any, ...]:
        return (value.plan, value.f, value.g)

    @staticmethod
    def cotangents(ct: Any, outs: tuple[Any, ...]) -> tuple[Any, ...]:
        if is_array(ct):
            cts: tuple[Any, ...] = (ct, None, None)
        elif isinstance(ct, (tuple, list)) and 1 <= len(ct) <= 6 and all(c is None or is_array(c) for c in tuple(ct)[:3]):
            cts = (tuple(ct) + (None,) * (3 - len(ct)))[:3]
        else:
            raise TypeError(
                "the cotangent of sinkhorn must be an array (for the plan) or a SinkhornResult / tuple (plan, f, g) of arrays or None"
            )
        return check_cotangent_shapes(cts, outs)


@operator(value=_ResultValue)
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
) -> Call:
    """Solve a batch of entropic optimal transport problems.

    Alternates the dual updates ``g_j <- epsilon log b_j - epsilon
    logsumexp_i((f_i - C_ij) / epsilon)`` and likewise for ``f`` from ``f = g
    = 0``, in the log domain (Cuturi, Teboul & Vert 2019, Eq. 3; Cuturi et al.
    2019, Alg. 2); ``plan = exp((f_i + g_j - C_ij) / epsilon)``. Each problem
    stops (is frozen) once its marginal error is within ``tol``, so a batch,
    its rows one by one, Dask blocks and ``jax.vmap`` give the same numbers.

    Parameters
    ----------
    cost : array, shape (..., n, m)
        Cost matrices; leading axes are batch axes.
    a, b : array, shape (..., n) and (..., m), optional
        Marginals (non-negative, summing to one); uniform when omitted. Their
        leading axes broadcast against those of ``cost``; differentiable.
    epsilon : float or 0-d array
        Entropic regularisation, in the units of ``cost``.
    max_iter : int, default 2000
        Iteration budget.
    tol : float, default 1e-3
        Stop once every problem's L1 marginal error is within ``tol``.
    implicit : bool, default False
        False: gradients through the iterations. True: gradients by implicit
        differentiation of the fixed point (memory independent of the
        iteration count); ``f`` and ``g`` share a free constant, so only the
        plan, ``f_i + g_j`` and ``<a, f> + <b, g>`` get exact gradients that
        way, and ``error`` gets none.

    Returns
    -------
    SinkhornResult
        ``plan`` (..., n, m), ``f`` (..., n), ``g`` (..., m), ``n_iter``,
        ``error`` (...,) and ``converged`` (...,): arrays in the namespace and
        device of ``cost``, ``plan``, ``f``, ``g`` in its dtype.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> cost = np.array([[0.0, 1.0], [1.0, 0.0]])
    >>> res = rankops.sinkhorn(cost, epsilon=0.1)
    >>> np.round(res.plan, 3)
    array([[0.5, 0. ],
           [0. , 0.5]])
    >>> bool(res.converged)
    True
    """
    opts, _ = SolverOptions.parse({"epsilon": epsilon, "max_iter": max_iter, "tol": tol, "implicit": implicit}, "sinkhorn")
    marginals = {k: v for k, v in (("a", a), ("b", b)) if v is not None}
    p = prepare(cost, name="cost", opts=opts, arrays=marginals, core_ndim=2)
    if cost.ndim < 2:
        raise ValueError(f"cost must have shape (..., n, m), got {tuple(cost.shape)}")
    n, m = cost.shape[-2], cost.shape[-1]
    if n == 0 or m == 0:
        raise ValueError(f"cost has an empty axis: shape {tuple(cost.shape)}")
    for name, size in (("a", n), ("b", m)):
        w = marginals.get(name)
        if w is not None and (w.ndim < 1 or w.shape[-1] != size):
            raise ValueError(f"{name} must have shape (..., {size}) to match cost {tuple(cost.shape)}, got {tuple(w.shape)}")
        if w is not None and p.xp.isdtype(w.dtype, "complex floating"):
            raise TypeError(f"{name} must be real-valued")
    return Call(solver_core, p, opts, marginals, _Result(opts.tol))
