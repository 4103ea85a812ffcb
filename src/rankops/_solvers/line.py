r"""Entropic transport between points of a line: the plan behind every Sinkhorn operator.

Points ``s_i`` (weights ``a``) and targets ``y_j`` (weights ``b``) with the
cost ``C_ij = h(y_j - s_i)``, ``h(d) = |d| ** power``; the plan solves the
problem of :mod:`.sinkhorn`, warm-started at the exact unregularised
potentials (:func:`grid_potentials`, below) when ``h`` is convex.

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
import math
from typing import Any, Callable

import numpy as np

from .._lib._adapters import PortableAdapter, custom_backward, get_adapter
from .._lib._compat import is_array, device as _device
from .._lib._loops import in_blocks
from .._lib._numerics import abs_power, abs_power_slope, matvec, unbroadcast
from .implicit import dual_cotangents
from .sinkhorn import DEFAULT_CHECK_EVERY, Settings, fixed_point, scaled_start, solve_vjp

__all__ = ["line_plan_vjp", "cost_fns", "Squash", "grid_potentials", "both_marginals_held"]

# the map of the rows onto the line: ``squash(xp, x, support) -> (s, unit_pullback, scale)``, ``dx = unit_pullback(ds) /
# scale``; ``support`` (bool, or None: every entry) the entries with mass, the only ones the squash sees
Squash = Callable[[Any, Any, Any], tuple[Any, Callable[[Any], Any], Any]]


def _gaps(y: Any, s: Any) -> Any:
    """``y_j - s_i`` (..., n, m), for targets ``y`` shared (m,) or per row (..., m)."""
    return y[..., None, :] - s[..., :, None]


def _support(log_a: Any, supported: bool) -> Any:
    """The entries with mass (``a > 0``), when some may have none (``supported``); None: all of them."""
    return log_a > -math.inf if supported else None


def cost_fns(xp: Any, power: float) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """``h(d) = |d| ** power`` and its derivative ``h'(d)``, elementwise (``power`` a Python number)."""
    if power == 2.0:
        return (lambda d: d * d), (lambda d: 2.0 * d)
    sign = get_adapter(xp).sign
    return (lambda d: abs_power(xp, xp.abs(d), power)), (lambda d: abs_power_slope(xp, xp.abs(d), power) * sign(xp, d))


def both_marginals_held(opts: Settings) -> bool:
    """Whether :func:`line_plan_vjp` differentiates the plan as the exact solution (implicitly), whose rows and columns
    hold their weights whatever the input: a cotangent ``alpha_i + beta_j`` then moves nothing. Unrolled (or with a
    learnable epsilon) only the marginal its last step fits (``exact``) holds."""
    return bool(opts.implicit) and not is_array(opts.epsilon)


def line_plan_vjp(
    xp: Any, x: Any, y: Any, log_a: Any, log_b: Any, opts: Settings, *, power: float, exact: str, squash: Squash,
    per_target: bool = False, supported: bool = False,
) -> tuple[Any, Any, Callable[[Any], tuple[Any, Any, Any, Any]]]:
    """The plan ``(..., n, m)`` between ``s = squash(x)`` (..., n) and ``y`` (m,) or (..., m), increasing, its marginal
    error, and the pullback ``dplan -> (dx, dlog_a, dlog_b, depsilon)``.

    ``squash(xp, x, support)`` maps the rows onto the line (the squash) and returns
    ``(s, unit_pullback, scale)`` with ``dx = unit_pullback(ds) / scale``;
    ``supported``: entries may have no mass (``log_a = -inf``, a mask), and
    the squash sees the others only.
    ``log_a`` and ``log_b`` broadcast against the plan's batch (``depsilon``
    is None unless epsilon is an array). ``per_target=True`` returns
    ``Q = P diag(1 / b)`` instead, whose columns sum to 1 (with
    ``exact="columns"``): a readout that averages ``x`` over a column of
    small weight ``b_j`` (a quantile at level 0) then passes the plan a
    cotangent of ``x``'s size, where ``P``'s would be ``x / b_j``
    (1e30 / 1e-8 overflows float32).
    """
    h, h_slope = cost_fns(xp, power)
    # Warm start at the exact unregularised potentials; they solve that problem only for a convex cost.
    warm = power >= 1.0 and x.shape[-1] > 1 and y.shape[-1] > 1
    if not both_marginals_held(opts):
        s, unit_back, scale = squash(xp, x, _support(log_a, supported))
        init = _differentiable_start(xp, s, log_a, log_b, y, power=power) if warm else None
        # unrolled, or a learnable epsilon: the cost formed and handed to the solver, whose pullback takes the plan's.
        # The differences are recomputed in the pullback, and the cost is passed without a name:
        # neither stays alive through the solve (each is a whole (..., n, m) array).
        res, solve_back = solve_vjp(xp, h(_gaps(y, s)), log_a, log_b, opts, exact=exact, init=init, polish=True)
        err = res.error
        inv_b = _inverse_weights(xp, log_b) if per_target else None
        out = res.plan * inv_b if per_target else res.plan

        def unrolled_back(dp: Any) -> tuple[Any, Any, Any, Any]:
            if per_target:  # Q = P / b: dP = dQ / b, and dlog b gains -sum_i dQ o Q
                extra = -xp.sum(dp * out, axis=-2)
                dp = dp * inv_b
            d_cost, d_log_a, d_log_b, d_eps = solve_back(dp)
            ds = unbroadcast(xp, -xp.sum(d_cost * h_slope(_gaps(y, s)), axis=-1), tuple(s.shape))
            if per_target:
                d_log_b = d_log_b + unbroadcast(xp, extra, tuple(log_b.shape))
            return unit_back(ds) / scale, d_log_a, d_log_b, d_eps

        return out, err, unrolled_back
    # Python values only in the closures (jax.custom_vjp must not close over traced arrays)
    fwd = functools.partial(_forward, h=h, eps=opts.epsilon, opts=opts, exact=exact, squash=squash, warm=warm,
                            per_target=per_target, supported=supported, power=power)
    bwd = functools.partial(_backward, h_slope=h_slope, eps=opts.epsilon, power=power, exact=exact, max_iter=opts.max_iter,
                            squash=squash, per_target=per_target, supported=supported)
    # the backward scales the cotangent by its own size and solves by CG: its unguarded twin is the one JAX transposes
    (plan, err), back = custom_backward(xp, fwd, bwd, (x, log_a, log_b, y), names=None, linear=functools.partial(bwd, guarded=False))

    def pullback(dp: Any) -> tuple[Any, Any, Any, Any]:
        dx, d_log_a, d_log_b, _ = back((dp,))  # the targets' (zero) last
        return dx, d_log_a, d_log_b, None

    return plan, err, pullback


def _forward(xp: Any, x: Any, log_a: Any, log_b: Any, y: Any, **statics: Any) -> tuple[tuple[Any, Any], tuple[Any, ...]]:
    """``((plan, error), residuals)``. The scaled cost lives only inside this call, built for a block of problems at a time
    (:func:`_block_plan`): on a CPU, blocks whose (n, m) arrays fit a core's cache (``PortableAdapter.cache_block``)."""
    adapter = get_adapter(xp)
    run = functools.partial(_block_plan, xp, adapter, **statics)
    block = adapter.cache_block(xp, x, 1, width=y.shape[-1])
    plan, err = in_blocks(xp, run, (x, log_a, log_b, y), (1, 1, 1, 1), block)
    out = plan * _inverse_weights(xp, log_b) if statics["per_target"] else plan
    return (out, err), (plan, x, y, log_a, log_b)


def _block_plan(xp: Any, adapter: PortableAdapter, x: Any, log_a: Any, log_b: Any, y: Any, *, h: Any, eps: float,
                opts: Settings, exact: str, squash: Squash, warm: bool, per_target: bool, supported: bool,
                power: float) -> tuple[Any, Any]:
    """The plan and its marginal error, from the rows ``x`` to the targets ``y`` (a block of :func:`_forward`'s batch)."""
    s = squash(xp, x, _support(log_a, supported))[0]
    if warm:
        u0, v0 = _warm_start(xp, adapter, s, log_a, log_b, y, power=power, eps=eps)
    else:
        u0, v0 = scaled_start(xp, None, eps, tuple(s.shape[:-1]), log_a, log_b, s)
    (plan, _, _, err, _), _ = fixed_point(
        xp, h(_gaps(y, s)) / eps, log_a, log_b, u0, v0, max_iter=opts.max_iter, tol=opts.tol,
        check_every=DEFAULT_CHECK_EVERY, exact=exact, polish=True,
    )
    return plan, err


def _warm_start(xp: Any, adapter: PortableAdapter, s: Any, log_a: Any, log_b: Any, y: Any, *, power: float,
                eps: float) -> tuple[Any, Any]:
    """The scaled starting potentials ``(f / eps, g / eps)`` at :func:`grid_potentials`, over the broadcast batch.

    Under ``torch.compile`` they are computed eagerly, one node of the graph
    (:meth:`eagerly`): O(n log n) work of a sort, binary searches and
    cumulative sums, whose compiled kernels (a dozen, several of them gathers
    that generate long C++) would add to every compile and save nothing next
    to the (n, m) iterations. The implicit path's gradient does not depend
    on the start; the unrolled one's flows through it by a backward node of
    its own (:func:`_differentiable_start`).
    """
    batch = np.broadcast_shapes(tuple(s.shape[:-1]), tuple(log_a.shape[:-1]), tuple(log_b.shape[:-1]))  # shapes only
    n, m = s.shape[-1], log_b.shape[-1]
    # shaped as the outputs: the eager node's outputs take their shapes from its inputs
    arrays = (xp.broadcast_to(s, batch + (n,)), log_a, xp.broadcast_to(log_b, batch + (m,)))
    if y is not None:
        arrays += (y,)
    return adapter.eagerly(xp, scaled_grid_start, arrays, like=(0, 2), power=power, eps=eps)  # type: ignore[return-value]


def _differentiable_start(xp: Any, s: Any, log_a: Any, log_b: Any, y: Any, *, power: float) -> tuple[Any, Any]:
    """:func:`grid_potentials` of ``|d| ** power``, through which the unrolled gradient flows (the iterations start
    there). Under ``torch.compile`` it is one eager node (:func:`_warm_start`), as on the implicit path, and its
    backward another, which runs it again under autograd (:func:`grid_start_vjp`): the graph then holds none of its
    sorts, searches and gathers, whose kernels took as long to compile as the rest of the unrolled sort's forward."""
    arrays = (s, log_a, log_b) + (() if y is None else (y,))
    adapter = get_adapter(xp)
    if not adapter.replays_loops(arrays):
        return _grid_potentials(xp, adapter, s, log_a, log_b, cost_fns(xp, power)[0], y)

    def forward(xp_: Any, *a: Any) -> tuple[tuple[Any, Any], tuple[Any, ...]]:
        return _warm_start(xp_, adapter, a[0], a[1], a[2], a[3] if len(a) > 3 else None, power=power, eps=1.0), a

    def backward(xp_: Any, res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        batch = np.broadcast_shapes(*(tuple(a.shape[:-1]) for a in res[:3]))
        sizes = (res[0].shape[-1], res[2].shape[-1])
        cts = tuple(xp_.zeros(batch + (size,), dtype=res[0].dtype, device=_device(res[0])) if ct is None else ct
                    for ct, size in zip(cts, sizes))
        return adapter.eagerly(xp_, grid_start_vjp, (*res, *cts), like=tuple(range(len(res))), power=power)

    init, _ = custom_backward(xp, forward, backward, arrays, names=None, n_diff=2, linear=False)
    return init[0], init[1]


def grid_start_vjp(xp: Any, *arrays: Any, power: float) -> tuple[Any, ...]:
    """The gradients of ``(s, log_a, log_b[, y])`` (``arrays``, then the cotangents of ``(f, g)``) through
    :func:`grid_potentials`, by running it again under the backend's autodiff: :func:`_differentiable_start`'s
    backward node."""
    *inputs, ct_f, ct_g = arrays

    def run(s: Any, log_a: Any, log_b: Any, y: Any = None) -> tuple[Any, Any]:
        return scaled_grid_start(xp, s, log_a, log_b, y, power=power, eps=1.0)

    _, _, pull = get_adapter(xp).autodiff_vjp(run, list(inputs), lambda outs: outs)
    return tuple(pull((ct_f, ct_g)))


def scaled_grid_start(xp: Any, s: Any, log_a: Any, log_b: Any, y: Any = None, *, power: float, eps: float) -> tuple[Any, Any]:
    """:func:`grid_potentials` of ``|d| ** power`` divided by ``eps``, each broadcast to its input's shape (``s``'s and
    ``log_b``'s): :func:`_warm_start`'s eager node."""
    init = grid_potentials(xp, s, log_a, log_b, cost_fns(xp, power)[0], y)
    return scaled_start(xp, init, eps, tuple(s.shape[:-1]), log_a, log_b, s)  # type: ignore[return-value]


def _backward(xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...], *, guarded: bool = True, **statics: Any) -> tuple[Any, ...]:
    """Cotangents of ``(x, log_a, log_b, y)`` from the plan's (``Q``'s, ``per_target``); the targets are constants here.

    Each pass over the plan runs in blocks of problems that fit a core's
    cache, as the forward's iterations (:func:`_block_backward`); each
    block's cotangents are its problems' own, summed over broadcasting last.
    A block's problems are broadcast, so its guard ``k`` is each problem's,
    not each row's: the same linear map, up to rounding.
    """
    p, x, y, log_a, log_b = res
    ct = cts[0]
    if ct is None:  # torch: the plan was not used
        return (xp.zeros_like(x), None, None, None)
    run = functools.partial(_block_backward, xp, guarded=guarded, **statics)
    # unguarded: JAX's transpose, never in blocks (its adapter runs none)
    block = get_adapter(xp).cache_block(xp, p, 2, few_passes=True) if guarded else None
    dx, d_log_a, d_log_b = in_blocks(xp, run, (ct, p, x, log_a, log_b, y), (2, 2, 1, 1, 1, 1), block)
    return (
        unbroadcast(xp, dx, tuple(x.shape)), unbroadcast(xp, d_log_a, tuple(log_a.shape)),
        unbroadcast(xp, d_log_b, tuple(log_b.shape)), xp.zeros_like(y),
    )


def _block_backward(xp: Any, ct: Any, p: Any, x: Any, log_a: Any, log_b: Any, y: Any, *, h_slope: Any, eps: float,
                    power: float, exact: str, max_iter: int, squash: Squash, per_target: bool, supported: bool,
                    guarded: bool) -> tuple[Any, Any, Any]:
    """``(dx, dlog_a, dlog_b)`` of :func:`_backward` for the plans ``p`` and their cotangent ``ct`` (a block of its batch).

    The backward is linear in the plan's cotangent, so it runs on that
    cotangent divided by its largest magnitude per row, ``k``, and ``dx``
    takes the factor ``k / scale`` last. A row at 1e30 brings a cotangent
    of 1e30 (the readout multiplies by the entries) and a squashed
    position's slope can be ``1e15 / epsilon``: their product is beyond
    float32's range although ``dx``, divided by the row's scale, is not.
    The division is applied to the sums of ``G o P`` (vectors), not to
    the ``(n, m)`` cotangent, except where slopes multiply it.
    ``guarded=False``: ``k = 1``, and the solve declared as one
    (:func:`.implicit.solve_dual`): operations JAX can transpose, whose
    transpose is the forward mode.
    """
    s, unit_back, scale = squash(xp, x, _support(log_a, supported))
    # unguarded: 1 in the guard's shape (the magnitude of a zero cotangent)
    k = _row_magnitude(xp, ct if guarded else xp.zeros_like(p), tuple(s.shape[:-1]))
    k_rows = k[..., 0]  # (..., 1): divides the sums below
    # G o P with G the plan's cotangent: for Q = P / b, G = ct / b and G o P = ct o Q, bounded by ct
    inv_b = _inverse_weights(xp, log_b) if per_target else None
    gp = ct * (p * inv_b if per_target else p)
    r, c_sum = xp.sum(gp, axis=-1) / k_rows, xp.sum(gp, axis=-2) / k_rows
    alpha, beta, a, b = dual_cotangents(xp, p, r, c_sum, log_a, log_b, exact=exact, max_iter=max_iter, guarded=guarded)
    sb = xp.broadcast_to(s, r.shape)
    if power == 2.0:
        # sum_j W_ij (y_j - s_i), from products with P and G o P (module docstring)
        w_y = alpha * matvec(xp, p, y) + matvec(xp, p, beta * y) - matvec(xp, gp, y) / k_rows
        w_1 = alpha * xp.sum(p, axis=-1) + matvec(xp, p, beta) - r
        ds = -(2.0 / eps) * (w_y - sb * w_1)
    else:
        del gp
        ph = p * h_slope(_gaps(y, sb))
        # sum_j (G o P)_ij h'_ij / k; the slopes (1e15 near a target at power 0.5) need the division first
        g_slope = xp.sum((ct / k) * (ph * inv_b if per_target else ph), axis=-1)
        ds = -(1.0 / eps) * (alpha * xp.sum(ph, axis=-1) + matvec(xp, ph, beta) - g_slope)
    k = xp.reshape(k_rows, tuple(s.shape[:-1]) + (1,))  # per row of x
    # k / scale alone can pass the range (a row of subnormals has scale 1e-44): a k below 1
    # multiplies before the division by the scale, a larger one after it
    one = xp.ones_like(k)
    dx = unit_back(unbroadcast(xp, ds, tuple(s.shape))) * xp.where(k < 1, k, one) / scale * xp.where(k < 1, one, k)
    d_log_b = beta * b - c_sum if per_target else beta * b  # Q = P exp(-log b): dlog b gains -sum_i ct o Q
    return dx, unbroadcast(xp, alpha * a * k, tuple(log_a.shape)), unbroadcast(xp, d_log_b * k, tuple(log_b.shape))


def _inverse_weights(xp: Any, log_b: Any) -> Any:
    """``1 / b`` shaped to divide the plan's columns (``per_target``)."""
    return xp.exp(-log_b)[..., None, :]


def _row_magnitude(xp: Any, ct: Any, batch: tuple[int, ...]) -> Any:
    """The largest ``|ct|`` per row of ``x`` (batch ``batch``), shaped to divide ``ct``: 1 where it is 0 or not finite.

    The maximum runs over the (n, m) axes and over those the plan's batch
    adds to the row's by broadcasting, so one factor serves the row.
    """
    # max and -min: no |ct| array to form
    k = xp.maximum(xp.max(ct, axis=(-2, -1), keepdims=True), -xp.min(ct, axis=(-2, -1), keepdims=True))
    lead = k.ndim - 2 - len(batch)
    axes = tuple(range(lead)) + tuple(lead + i for i, size in enumerate(batch) if size == 1 and k.shape[lead + i] != 1)
    if axes:
        k = xp.max(k, axis=axes, keepdims=True)
    # below the normal range a division could flush to zero; such a cotangent needs no normalizing
    return xp.where((k >= xp.finfo(ct.dtype).smallest_normal) & xp.isfinite(k), k, xp.ones_like(k))


# -- the warm start: exact dual potentials of the unregularised problem ----------------------------
#
# Exact dual potentials of one-dimensional transport: the warm start of the Sinkhorn operators.
#
# Between points ``s_i`` (weights ``a``) and ascending targets ``y_j`` (weights
# ``b``) with a cost ``C_ij = h(y_j - s_i)``, ``h`` convex, the optimal plan is
# the north-west corner rule applied after sorting ``s`` (Cuturi, Teboul &
# Vert 2019, Prop. 1): in sorted order its support is a staircase of cells,
# one step right or down at each breakpoint of ``cumsum(a)`` and
# ``cumsum(b)``. Dual potentials with ``f_i + g_j = C_ij`` on that staircase
# follow by telescoping along it:
#
#     f_i - f_{i-1} = C_{i, j(i)} - C_{i-1, j(i)},     j(i): the column that holds cumsum(a)_{i-1},
#     g_j - g_{j-1} = C_{i(j), j} - C_{i(j), j-1},     i(j): the row that holds cumsum(b)_{j-1},
#
# from ``g_0 = 0``; the cost being a Monge array (convex ``h``), they satisfy
# ``f_i + g_j <= C_ij`` everywhere, so they solve the unregularised dual.
# The row steps ``j(i)`` come from one binary search; the column steps
# ``i(j)`` are read off them, so both telescopes walk one staircase. A
# breakpoint shared by both sides (within the sums' rounding) may step right
# or down first: the two choices give the dual's extreme solutions, and the
# start is their mean (see :func:`grid_potentials`).
#
# The entropic potentials differ from these by O(epsilon log n): started
# here, Sinkhorn skips the phase where the potentials travel O(max C)
# from zero. An O(n log n) sort and four binary searches per row.


def grid_potentials(xp: Any, s: Any, log_a: Any, log_b: Any, cost: Callable[[Any], Any], y: Any = None) -> tuple[Any, Any]:
    """``(f, g)`` for points ``s`` (..., n) and the grid targets ``y_j = j / (m - 1)``, or increasing targets ``y``
    (m,) or (..., m) from ``y_0 = 0`` (a mask's grid of each row's own n_v points).

    ``log_a`` (..., n) and ``log_b`` (..., m) broadcast against ``s``'s
    batch; ``cost(d)`` is ``h(d)`` elementwise. Returns ``f`` of the
    broadcast batch plus (n,) and ``g`` plus (m,), in ``s``'s dtype.

    Where breakpoints are shared (n = m with uniform weights: every one),
    the dual is not unique: stepping right first or down first at each gives
    its two extreme solutions. Their mean, feasible too, lies nearer the
    entropic potentials than either (which sit inside the polytope).
    """
    return _grid_potentials(xp, get_adapter(xp), s, log_a, log_b, cost, y)


def _grid_potentials(xp: Any, adapter: PortableAdapter, s: Any, log_a: Any, log_b: Any, cost: Callable[[Any], Any],
                     y: Any = None) -> tuple[Any, Any]:
    """:func:`grid_potentials` with the caller's adapter."""
    n, m = s.shape[-1], log_b.shape[-1]
    batch = np.broadcast_shapes(tuple(s.shape[:-1]), tuple(log_a.shape[:-1]), tuple(log_b.shape[:-1]))  # shapes only
    s = xp.broadcast_to(s, batch + (n,))
    ss, order = adapter.sort_order(xp, s)
    a_cum = adapter.cumulative_sum(xp, adapter.take(xp, xp.broadcast_to(xp.exp(log_a), batch + (n,)), order))
    b_cum = xp.broadcast_to(adapter.cumulative_sum(xp, xp.exp(log_b)), batch + (m,))
    # Breakpoints closer than the sums' rounding are one shared breakpoint: whether two equal
    # sums compare equal depends on how the backend added them (XLA under jit differs from eager).
    tol = 4 * xp.finfo(s.dtype).eps * math.sqrt(n + m)
    if y is not None:
        y = xp.broadcast_to(y, batch + (m,))
    right = _staircase(xp, adapter, ss, a_cum[..., :-1] + tol, b_cum, cost, side="right", y=y)
    down = _staircase(xp, adapter, ss, a_cum[..., :-1] - tol, b_cum, cost, side="left", y=y)
    f_sorted, g = ((p + q) / 2 for p, q in zip(right, down))
    return adapter.take(xp, f_sorted, adapter.invert_permutation(xp, order)), g


def _staircase(
    xp: Any, adapter: PortableAdapter, ss: Any, a_break: Any, b_cum: Any, cost: Callable[[Any], Any], *, side: str, y: Any = None,
) -> tuple[Any, Any]:
    """Potentials telescoped along one staircase: ``f`` (in sorted order) and ``g``.

    ``col[i]``, the column in which the path steps from sorted row ``i`` to
    ``i + 1``, counts the column breakpoints below ``a_break[i]``
    (``side="right"``: a shared one steps right first; ``"left"``: down
    first). The column steps are read off the same path, ``row[j - 1] =
    #{i: col[i] < j}``, so the two telescopes walk one staircase exactly.
    """
    dev, m = _device(ss), b_cum.shape[-1]
    scale = 1.0 / max(m - 1, 1)
    col = adapter.clip(xp, adapter.searchsorted(xp, b_cum, a_break, side=side), 0, m - 1)  # (..., n - 1)
    y_col = xp.astype(col, ss.dtype) * scale if y is None else adapter.take(xp, y, col)
    df = cost(y_col - ss[..., 1:]) - cost(y_col - ss[..., :-1])
    steps = xp.broadcast_to(xp.arange(1, m, dtype=col.dtype, device=dev), col.shape[:-1] + (m - 1,))
    s_row = adapter.take(xp, ss, adapter.searchsorted(xp, col, steps, side="left"))  # the row of each column step
    if y is None:
        y = xp.arange(m, dtype=ss.dtype, device=dev) * scale
    dg = cost(y[..., 1:] - s_row) - cost(y[..., :-1] - s_row)
    zero = xp.zeros(col.shape[:-1] + (1,), dtype=ss.dtype, device=dev)
    f_sorted = cost(-ss[..., :1]) + xp.concat([zero, adapter.cumulative_sum(xp, df)], axis=-1)
    return f_sorted, xp.concat([zero, adapter.cumulative_sum(xp, dg)], axis=-1)
