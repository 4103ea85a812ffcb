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

Iterations run in rounds of ``check_every``; a problem whose error is
within ``tol`` after a round is frozen there, and the solver stops once all
are (or at ``max_iter``). Each problem's result therefore depends on that
problem alone: batched, one by one, in Dask blocks or under ``jax.vmap``.

Gradients are those of the unrolled iterations by default. torch
checkpoints each round; JAX runs the loop as a ``lax.while_loop`` under a
``custom_vjp`` that stores the potentials at round starts and replays only
the rounds that ran, so ``jit``, ``vmap`` and ``grad`` all apply and memory
holds one round's kernels at a time, not one per iteration. Under
``torch.compile`` the loop is torch's ``while_loop``, and its backward
replays the iterations eagerly (:func:`unrolled_vjp`, one opaque node of the
graph), since autograd cannot follow a ``while_loop``. ``implicit=True``
differentiates the fixed point instead (:mod:`.implicit`): the
backward keeps the final plan only.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple, Protocol

import numpy as np

from .._lib._adapters import PortableAdapter, custom_backward, get_adapter
from .._lib._compat import concrete_number, is_array, device as _device
from .._lib._loops import freeze_rows, in_blocks
from .._lib._numerics import checked_weights, finite_max, matvec, vecmat
from .implicit import fixed_point_vjp, solve_dual

__all__ = ["Settings", "Solution", "solve_vjp", "fixed_point", "unrolled_vjp", "scaled_start", "log_weights", "DEFAULT_CHECK_EVERY"]

DEFAULT_CHECK_EVERY = 10


class Settings(Protocol):
    """What the solver reads of an option set (the public ``SolverOptions``, validated there)."""

    epsilon: Any  # a number, or a 0-d array (learnable, traced)
    max_iter: int
    tol: float
    implicit: bool


class Solution(NamedTuple):
    """Potentials and plan of a batch of problems (``rankops.SinkhornResult`` is built from it)."""

    plan: Any  # (..., n, m)
    f: Any  # (..., n)
    g: Any  # (..., m)
    n_iter: Any  # a Python int, or a 0-d int array under JAX
    error: Any  # (...,) L1 error of both marginals at exit (the rows' part is rounding)

def solve_vjp(
    xp: Any,
    cost: Any,
    log_a: Any,
    log_b: Any,
    opts: Settings,
    *,
    exact: str = "rows",
    check_every: int = DEFAULT_CHECK_EVERY,
    init: tuple[Any, Any] | None = None,
    polish: bool | None = None,
) -> tuple[Solution, Callable[..., Any]]:
    """Solve on prepared arrays: ``log_a`` (..., n) and ``log_b`` (..., m) broadcast against ``cost``.

    Works on scaled potentials ``u = f / epsilon``, ``v = g / epsilon`` so the
    cost is divided by epsilon once, not at every iteration. The plan's rows
    sum exactly to ``a`` (the last update is f's); ``exact="columns"`` adds a
    final g-update so that its columns sum exactly to ``b`` instead, which
    makes ``b^-1 P^T x`` an exact convex combination (soft sorts, quantiles).

    ``init``: starting potentials ``(f, g)`` (default zero), for example the
    exact unregularised ones of :func:`.line.grid_potentials`. Under ``implicit=True`` the
    result's gradient does not depend on them; unrolled, it flows through
    them as through the iterations.

    ``implicit=True`` hides the iterations from the backend's autodiff: the plan
    and potentials get the gradient of the fixed point
    (:mod:`.implicit`), computed from the final plan alone.

    ``polish``: Newton steps after the iterations (:func:`_polish`); by
    default exactly when ``implicit``. With them the value no longer jumps
    where the stopping check moves by one round, and the plan's sides are
    both within ``tol**2`` instead of one being exact.

    Returns the result and its pullback ``(dplan, df=None, dg=None) ->
    (dcost, dlog_a, dlog_b, depsilon)`` by the implicit rule, which is how
    backends without autodiff differentiate (``depsilon`` is None unless
    epsilon is an array).
    """
    epsilon, max_iter, tol = opts.epsilon, opts.max_iter, opts.tol
    c = cost / epsilon
    del cost  # the scaled cost replaces it: one (..., n, m) array alive through the solve, not two
    u0, v0 = scaled_start(xp, init, epsilon, tuple(c.shape[:-2]), log_a, log_b, c)
    # the value is polished toward the fixed point (_polish): by default where its gradient is the fixed point's
    # (implicit); the soft operators polish unrolled values too, so that they are as smooth in the input
    polish = opts.implicit if polish is None else polish
    fwd = functools.partial(fixed_point, max_iter=max_iter, tol=tol, check_every=check_every, exact=exact, polish=polish,
                            differentiated=not opts.implicit)
    bwd = functools.partial(fixed_point_vjp, exact=exact, max_iter=max_iter, cost_shape=tuple(c.shape))

    def bwd_all(xp_: Any, res: Any, cts: Any, guarded: bool = True) -> tuple[Any, ...]:
        # the fixed point does not depend on where the iterations started
        return (*bwd(xp_, res, cts, guarded=guarded), xp.zeros_like(u0), xp.zeros_like(v0))

    arrays = (c, log_a, log_b, u0, v0)
    adapter = get_adapter(xp)
    if not opts.implicit and adapter.replays_loops(arrays):
        # unrolled, where the backend cannot differentiate the loop it traces (torch.compile):
        # the backward replays the iterations eagerly, under the backend's autodiff
        statics = {"max_iter": max_iter, "tol": tol, "check_every": check_every, "exact": exact, "polish": polish,
                   "differentiated": True}

        def replay(xp_: Any, res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
            given = tuple(ct is not None for ct in cts)
            return adapter.eagerly(
                xp_, unrolled_vjp, (*res, *(ct for ct in cts if ct is not None)), like=tuple(range(5)), given=given, **statics
            )

        (plan, u, v, err, n_iter), back = custom_backward(
            xp, lambda xp_, *a: (fwd(xp_, *a)[0], a), replay, arrays, names=None, n_diff=3, linear=False
        )
    else:
        # unrolled (implicit=False): the backend differentiates the iterations themselves
        # the backward solves by CG with guards: its unguarded twin is the one JAX transposes
        (plan, u, v, err, n_iter), back = custom_backward(xp, fwd, bwd_all, arrays, names=None, n_diff=3, register=opts.implicit,
                                                          linear=functools.partial(bwd_all, guarded=False))

    def pullback(d_plan: Any, d_f: Any = None, d_g: Any = None) -> tuple[Any, Any, Any, Any]:
        d_u = None if d_f is None else d_f * epsilon
        d_v = None if d_g is None else d_g * epsilon
        d_c, d_log_a, d_log_b = back((d_plan, d_u, d_v))[:3]
        d_eps = None
        if is_array(epsilon):
            d_eps = -xp.sum(d_c * c) / epsilon
            for d, w in ((d_f, u), (d_g, v)):
                if d is not None:
                    d_eps = d_eps + xp.sum(d * w)
        return d_c / epsilon, d_log_a, d_log_b, d_eps

    return Solution(plan, u * epsilon, v * epsilon, n_iter, err), pullback


def unrolled_vjp(xp: Any, c: Any, log_a: Any, log_b: Any, u0: Any, v0: Any, *cts: Any, given: tuple[bool, ...], **statics: Any) -> tuple[Any, ...]:
    """Gradients of ``(c, log_a, log_b, u0, v0)`` through the unrolled iterations, by running them again under the backend's autodiff.

    ``cts``: the cotangents of ``(plan, u, v)`` flagged in ``given`` (the others
    are zero). Eager: the loop stops where the forward's did.
    """

    def run(*arrays: Any) -> tuple[Any, ...]:
        return fixed_point(xp, *arrays, **statics)[0]  # (plan, u, v, error, n_iter)

    _, _, pull = get_adapter(xp).autodiff_vjp(run, [c, log_a, log_b, u0, v0], lambda outs: outs[:3])
    it = iter(cts)
    return tuple(pull(tuple(next(it) if g else None for g in given)))


def scaled_start(xp: Any, init: Any, epsilon: Any, batch: tuple[int, ...], log_a: Any, log_b: Any, like: Any) -> tuple[Any, Any]:
    """Scaled starting potentials ``(f / epsilon, g / epsilon)`` over the broadcast batch of ``batch``, ``log_a`` and ``log_b``.

    Zero without ``init``; ``like`` gives the dtype and device.
    """
    batch = np.broadcast_shapes(batch, tuple(log_a.shape[:-1]), tuple(log_b.shape[:-1]))  # shapes only
    sizes = (log_a.shape[-1], log_b.shape[-1])
    if init is None:
        return tuple(xp.zeros(batch + (size,), dtype=like.dtype, device=_device(like)) for size in sizes)
    return tuple(xp.broadcast_to(p / epsilon, batch + (size,)) for p, size in zip(init, sizes))


def fixed_point(
    xp: Any, c: Any, log_a: Any, log_b: Any, u0: Any, v0: Any, *, max_iter: int, tol: float, check_every: int, exact: str,
    polish: bool = False,
    differentiated: bool = False,
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Run the iterations on the scaled cost ``c = C / epsilon`` from the scaled potentials ``(u0, v0)``.

    Returns ``((plan, u, v, error, n_iter), residuals)``, the residuals being
    what the implicit backward needs: the plan and both log-marginals.
    ``polish``: Newton steps after the iterations (:func:`_polish`);
    ``differentiated``: the backend's autodiff records them (unrolled), so
    they are written for it.

    An eager batch on a CPU runs in blocks of problems whose cost matrices
    fit in a core's cache (:meth:`~.._lib._adapters.PortableAdapter.cache_block`):
    each problem's result is its own (the module's docstring), so only the
    time changes (and, by rounding, where a BLAS sums a block's matrix
    products in another order than the batch's), and ``n_iter`` is the
    largest block's.
    """
    adapter = get_adapter(xp)
    run = functools.partial(_fixed_point, xp, adapter, max_iter=max_iter, tol=tol, check_every=check_every, exact=exact,
                            polish=polish, differentiated=differentiated)
    out = in_blocks(xp, run, (c, log_a, log_b, u0, v0), (2, 1, 1, 1, 1), adapter.cache_block(xp, c, 2))
    return out, (out[0], log_a, log_b)


def _fixed_point(
    xp: Any, adapter: PortableAdapter, c: Any, log_a: Any, log_b: Any, u0: Any, v0: Any, *, max_iter: int, tol: float,
    check_every: int, exact: str, polish: bool, differentiated: bool,
) -> tuple[Any, ...]:
    """``(plan, u, v, error, n_iter)`` of :func:`fixed_point` on one block of problems."""
    operands = (c, log_a, log_b)
    one_round = functools.partial(_round, xp, check_every=check_every, adapter=adapter)

    def error(ops: tuple[Any, Any, Any], state: tuple[Any, Any, Any]) -> Any:
        return state[2][..., 0]

    state0 = (u0, v0, xp.zeros_like(u0[..., :1]))
    (u, v, last), n_iter, _ = adapter.iterate(
        xp, one_round, operands, state0, error=error, freeze=freeze_rows, max_iter=max_iter, tol=tol, check_every=check_every,
        whole_rounds=True,
    )
    plan = _plan(xp, c, u, v)
    if polish:
        plan, u, v = _polish(xp, c, (plan, u, v, last[..., 0]), log_a, log_b, tol=tol, max_iter=max_iter,
                             adapter=adapter, differentiated=differentiated)
    if exact == "columns":
        # the column update v <- log b - logsumexp_i(u_i - c_ij), applied to the plan it rescales;
        # the column sum is floored as in _round: unrolled autodiff of b / sum forms 1 / sum**2,
        # which overflowed float32 on columns of mass 1e-20 (then 0 * inf = NaN)
        col = adapter.sum(xp, plan, -2)
        ratio = xp.where(col > 0, xp.exp(log_b) / xp.maximum(col, xp.full_like(col, _tiny(xp, c))), xp.zeros_like(col))
        plan = plan * ratio[..., None, :]
        v = xp.where(ratio > 0, v + xp.log(xp.where(ratio > 0, ratio, xp.ones_like(ratio))), xp.full_like(v, -math.inf))
    # The error of the plan exactly as it is returned. The last update makes one side exact
    # in exact arithmetic, so its part is rounding, except where cost / epsilon outgrows the
    # float's precision (1e16 in float64, with squash=None and large inputs): the plan is
    # then meaningless, and this says so instead of a silent "converged".
    err = _marginal_error(xp, adapter, plan, log_a, log_b)
    return plan, u, v, err, n_iter


POLISH_STEPS = 2
# The error below which polishing stops, by precision (float32, float64): a jump of 1e-9 is
# invisible to a central difference at h = 1e-3; float32's iterations reach about 1e-5.
POLISHED = (1e-5, 1e-9)
POLISH_CG_STEPS = 4


def _polish(
    xp: Any, c: Any, state: tuple[Any, ...], log_a: Any, log_b: Any, *, tol: float, max_iter: int, adapter: PortableAdapter,
    differentiated: bool = False,
) -> tuple[Any, Any, Any]:
    """``(plan, u, v)`` after up to :data:`POLISH_STEPS` Newton steps on the marginal equations ``(P 1 - a, P^T 1 - b) = 0``.

    ``state`` is ``(plan, u, v, error)`` where the iterations stopped. Why:
    they stop at ``tol``, and two nearby inputs may stop one check apart,
    so the value jumps by about ``tol`` where the input moves by far less:
    a central difference at h = 1e-3 then misses the gradient (which is the
    fixed point's) by 10% to 100%. A Newton step takes the error ``e`` to
    about ``e**2`` (jumps and all); two take the defaults' 1e-3 below
    1e-9 in float64. The Jacobian of the marginals in ``(u, v)`` is the
    implicit backward's system (:mod:`.implicit`), solved approximately by
    :data:`POLISH_CG_STEPS` iterations of the same CG, with no convergence
    check (no host sync; in float64 the FD agreement of
    ``benchmarks/smoothness.py`` is the same from 4 steps to a converged
    solve). Only converged problems are polished (one that
    ``max_iter`` stopped keeps its value and is reported), a step is kept
    where it lowers the error, and skipped where the error is within
    ``tol**2`` or :data:`POLISHED` already: a caller's ``tol`` of 1e-9
    (float64) costs nothing more. ``differentiated``: the backend's autodiff
    records the steps (unrolled), whose pullback is then that of the
    Newton map: the CG declared one linear solve, a step judged on
    constants before its plan is formed.
    """
    # a constant: under torch.compile(dynamic=True) a float read from a module is a symbol, which a while_loop's body
    # may not close over
    # the index an int, not a bool: torch 2.11's dynamo refuses a tuple indexed by a bool (an exception in the trace)
    target = concrete_number(max(tol * tol, POLISHED[int(xp.finfo(c.dtype).bits >= 64)]))
    a, b = xp.exp(log_a), xp.exp(log_b)

    def due(err: Any) -> Any:
        """Converged, but not within the target yet (NaN compares False: such a problem is left as it is)."""
        return (err > target) & (err <= tol)

    def step(st: tuple[Any, ...]) -> tuple[Any, ...]:
        plan, u, v, err = st
        # Differentiated (unrolled), the CG is declared one linear solve (guarded=False), whose pullback is the
        # same solve, not CG's own iterations (nonlinear in the right-hand side, and NaN in float32 on extreme rows)
        du, dv = solve_dual(xp, plan, a - xp.sum(plan, axis=-1), b - adapter.sum(xp, plan, -2), max_iter=max_iter,
                            steps=POLISH_CG_STEPS, guarded=not differentiated)
        u2, v2 = u + du, v + dv
        # Differentiated, the step is judged on constants, and taken where it helps and zero elsewhere before its
        # plan is formed (one more exponential): a step not taken may overflow its plan, and selecting after it
        # would carry 0 * inf into the gradient.
        probe = functools.partial(adapter.stop_gradient, xp) if differentiated else (lambda t: t)
        plan2 = _plan(xp, probe(c), probe(u2), probe(v2))
        err2 = _marginal_error(xp, adapter, plan2, probe(log_a), probe(log_b))
        better = due(err) & (err2 < err)
        if differentiated:
            u2 = u + xp.where(better[..., None], du, xp.zeros_like(du))
            v2 = v + xp.where(better[..., None], dv, xp.zeros_like(dv))
            return _plan(xp, c, u2, v2), u2, v2, xp.where(better, err2, err)
        pick = lambda new, old: xp.where(better[..., None], new, old)  # noqa: E731
        return xp.where(better[..., None, None], plan2, plan), pick(u2, u), pick(v2, v), xp.where(better, err2, err)

    # one loop body: JAX traces (and compiles) the step once
    return adapter.repeat_while(xp, lambda st: xp.any(due(st[3])), step, state, POLISH_STEPS)[:3]  # type: ignore[no-any-return]


def _round(
    xp: Any, ops: tuple[Any, Any, Any], state: tuple[Any, Any, Any], count: Any, *, check_every: int, adapter: PortableAdapter
) -> tuple[Any, ...]:
    """``count`` Sinkhorn iterations (at most ``check_every``): one in the log domain, the rest by scaling.

    The log-domain iteration (one ``logsumexp`` per side) brings the
    potentials within reach whatever their start; it also yields the
    stabilized kernel ``K_ij = exp(v_j - c_ij - max_j(v_j - c_ij))``, whose
    entries are at most 1 and whose rows each hold a 1. The remaining
    iterations are the same updates written on scalings of that kernel
    (Schmitzer 2019, "Stabilized sparse scaling algorithms"):
    ``beta = b / (K^T alpha)``, ``alpha = a / (K beta)``: two products with
    K, no exponential. They are absorbed into the potentials at the end of
    the round, which also returns the error of the round's plan, ``L1`` over
    both marginals, from those products. ``count`` is a Python int, or a 0-d
    array under ``jax.jit``; ``adapter``: ``xp``'s (:func:`fixed_point` fetched it).
    """
    c, log_a, log_b = ops
    u, v, _ = state
    v = log_b - adapter.logsumexp(xp, u[..., :, None] - c, -2)
    t = v[..., None, :] - c
    shift = finite_max(xp, t, -1)
    # rebinding frees each (..., n, m) intermediate as the next one is made
    t = t - shift
    kernel = xp.exp(t)
    del t
    a, b = xp.exp(log_a), xp.exp(log_b)
    # A column or row of K that underflowed entirely gets a large, finite scaling, not inf.
    # The floor is the square root of the smallest normal: autodiff of b / z forms 1 / z**2,
    # which must stay finite (else 0 * inf = NaN where an empty filler column meets a zero cotangent).
    tiny = _tiny(xp, c)

    def floor(z: Any) -> Any:
        return xp.maximum(z, xp.full_like(z, tiny))

    def scale(s: tuple[Any, Any, Any, Any]) -> tuple[Any, Any, Any, Any]:
        alpha = s[0]
        col = vecmat(xp, alpha, kernel)
        beta = b / floor(col)
        row = matvec(xp, kernel, beta)
        return a / floor(row), beta, col, row

    row = xp.sum(kernel, axis=-1)
    side = kernel.shape[:-2] + (kernel.shape[-1],)
    # scalings 1 and col = b make the absorption below a no-op when no scaling iteration runs
    start = (a / floor(row), xp.ones(side, dtype=c.dtype, device=_device(c)), xp.broadcast_to(b, side), row)
    alpha, beta, col, row = adapter.repeat(xp, scale, start, count - 1, check_every - 1)
    u = log_a - shift[..., 0] - xp.log(floor(row))
    v = v + (log_b - xp.log(floor(col)))
    err = xp.sum(xp.abs(beta * vecmat(xp, alpha, kernel) - b), axis=-1) + xp.sum(xp.abs(alpha * row - a), axis=-1)
    return u, v, err[..., None]


def _tiny(xp: Any, c: Any) -> float:
    """The floor of a marginal sum that is divided by: autodiff of ``b / z`` forms ``1 / z**2``, which must stay finite."""
    return math.sqrt(xp.finfo(c.dtype).smallest_normal)


def _marginal_error(xp: Any, adapter: PortableAdapter, p: Any, log_a: Any, log_b: Any) -> Any:
    """L1 errors of both marginals of ``p``, per problem (the column sums by ``adapter.sum``, as the updates take them)."""
    column = xp.sum(xp.abs(adapter.sum(xp, p, -2) - xp.exp(log_b)), axis=-1)
    return column + xp.sum(xp.abs(xp.sum(p, axis=-1) - xp.exp(log_a)), axis=-1)


def _plan(xp: Any, c: Any, u: Any, v: Any) -> Any:
    """``exp(u_i + v_j - c_ij)``, rounded as the f-update was, so that its rows are those the update made exact."""
    return xp.exp((v[..., None, :] - c) + u[..., :, None])


def log_weights(xp: Any, w: Any, size: int, dtype: Any, device: Any) -> Any:
    """``log(w)`` in ``dtype`` (NaN on a row outside the domain: :func:`checked_weights`), or the uniform ``-log(size)`` when ``w`` is None."""
    if w is None:
        return xp.full((size,), -math.log(size), dtype=dtype, device=device)
    w, valid = checked_weights(xp, xp.astype(w, dtype))
    some = w > 0  # a zero weight: no mass, log -inf (quietly)
    return xp.where(valid, xp.where(some, xp.log(xp.where(some, w, xp.ones_like(w))), -math.inf), math.nan)
