r"""Optimal-transport cores: soft ranks, sorts, CDFs, top-k, quantization, and the solver itself.

Each operator is one entropic transport (:mod:`rankops._solvers.sinkhorn`)
between the n inputs, squashed into [0, 1] (the squash ``g``, :mod:`.squash`), and an ordered
target measure, read out differently (Cuturi, Teboul & Vert 2019,
Definitions 1-2; Cuturi et al. 2019, Definition 2 and Alg. 2). Per row, with
``a = 1/n``, targets ``y_j = j / (m - 1)``, weights ``b`` (uniform by
default), ``b_bar = cumsum(b)``, cost ``C_ij = |y_j - g(x)_i| ** power`` and
``P`` the epsilon-entropic plan between ``(a, g(x))`` and ``(b, y)``:

- ``cdf  = a^-1 (P b_bar)``, in [0, 1]; ``rank = n cdf``;
- ``sort = b^-1 (P^T x)``, length m;
- ``quantile_normalize = a^-1 (P targets)``;
- ``topk``: two targets y = (0, 1) weighted ((n - k)/n, k/n); the mask is
  ``a^-1 P[:, 1]``, in [0, 1], summing to k;
- ``quantile``: three targets per level, in :mod:`.quantile`.

``descending=True`` (ranks, sorts) is the ascending operator applied to
``-x`` (sorted values negated back), so the largest entry gets rank 1.

Each core returns ``(value, error)`` (the solver's marginal error per
transport problem, which the public layer reports) and a pullback mapping the
value's cotangent to a dict of cotangents (``x`` and any array parameter),
which is how ``rankops.vjp`` differentiates on backends without autodiff;
torch and JAX differentiate the value itself.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Protocol

from .._lib._adapters import core, get_adapter
from .._lib._compat import device as _device
from .._lib._numerics import checked_weights, matvec, safe_divide, unbroadcast, vecmat
from .._solvers.line import both_marginals_held, line_plan_vjp
from .._solvers.sinkhorn import Settings, log_weights, solve_vjp
from . import masked
from .entries import Entries
from .finite import finite_rows
from .squash import row_centre, row_centre_pullback, squash_parts

__all__ = [
    "TransportSettings", "grid", "topk_targets", "target_measure", "topk_weights", "plan_vjp", "weights_cotangent", "grads",
    "REPORTED", "WEIGHTS", "cdf_core", "rank_core", "sort_core", "quantile_normalize_core", "topk_core", "quantize_core", "solver_core",
]



class TransportSettings(Settings, Protocol):
    """What the cores read of a Sinkhorn operator's options (the public ``TransportOptions``)."""

    squash: str | None
    power: float
    num_targets: int | None
    filler: float
    centered: bool


def grid(xp: Any, m: int, like: Any) -> Any:
    return xp.arange(m, dtype=like.dtype, device=_device(like)) / max(m - 1, 1)


def input_measure(xp: Any, x: Any, weights: Any) -> tuple[Any, Any]:
    """``(1 / a, log a)`` of the entries: ``a = 1/n`` (``1 / a`` the Python number n), or ``weights`` normalized per row.

    A zero weight is an entry out of the problem (a mask's): ``log a = -inf``
    and ``1 / a`` read as 0, so that its readouts are 0, never 0/0.
    """
    n = x.shape[-1]
    if weights is None:
        return float(n), xp.full((n,), -math.log(n), dtype=x.dtype, device=_device(x))
    w, valid = checked_weights(xp, xp.astype(weights, x.dtype))
    total = xp.sum(w, axis=-1, keepdims=True)
    some = w > 0
    log_a = xp.where(some, xp.log(xp.where(some, w, xp.ones_like(w))) - xp.log(total), -math.inf)
    return safe_divide(xp, total, w), xp.where(valid, log_a, math.nan)


def plan_vjp(
    xp: Any, x: Any, y: Any, log_b: Any, opts: TransportSettings, exact: str = "rows", weights: Any = None,
    per_target: bool = False,
) -> tuple[Any, Any, Any]:
    """Entropic plan (..., n, m) between the squashed rows of ``x`` (weights ``a``: :func:`input_measure`) and targets ``y``.

    Returns the plan, the solver's marginal error per problem (...,) and the
    solver's pullback ``dplan -> (dx, dlog_a, dlog_b, depsilon)``
    (:func:`rankops._solvers.line.line_plan_vjp`; ``depsilon`` None unless
    epsilon is an array); :func:`weights_cotangent` turns ``dlog_a``, with
    what the readout adds on ``log a``, into the weights' gradient.
    ``per_target=True``: the plan with each column divided by its weight
    (:func:`rankops._solvers.line.line_plan_vjp`).
    """
    _, log_a = input_measure(xp, x, weights)
    squash = functools.partial(squash_parts, method=opts.squash)
    return line_plan_vjp(xp, x, y, log_a, log_b, opts, power=opts.power, exact=exact, squash=squash,
                         per_target=per_target, supported=weights is not None)


def weights_cotangent(xp: Any, weights: Any, dtype: Any, d_log_a: Any) -> Any:
    """The gradient of the entries' ``weights`` from ``log a``'s (None without weights).

    ``log a = log w - log sum(w)``: ``dw = (dlog_a / w - sum dlog_a) / sum(w)``;
    an empty entry (``w = 0``) moves nothing.
    """
    if weights is None:
        return None
    w, _ = checked_weights(xp, xp.astype(weights, dtype))
    total = xp.sum(w, axis=-1, keepdims=True)
    return unbroadcast(xp, (safe_divide(xp, d_log_a, w) * total - xp.sum(d_log_a, axis=-1, keepdims=True)) / total,
                       tuple(weights.shape))


def targets_count(n: int, opts: TransportSettings, target_weights: Any) -> int:
    """m: ``num_targets``, else the length of ``target_weights``, else n."""
    return opts.num_targets if opts.num_targets is not None else (target_weights.shape[0] if target_weights is not None else n)


def target_measure(xp: Any, x: Any, m: int, target_weights: Any) -> tuple[Any, Any]:
    """``(b, log_b)``: uniform unless the caller gave weights."""
    log_b = log_weights(xp, target_weights, m, x.dtype, _device(x))
    if target_weights is None:
        return xp.full((m,), 1.0 / m, dtype=x.dtype, device=_device(x)), log_b
    return xp.astype(target_weights, x.dtype), log_b


def grads(x: Any, d_eps: Any, **named: Any) -> dict[str, Any]:
    """The cotangents of a core: ``x``, ``epsilon`` when it is an array, then parameter arrays."""
    out = {"x": x, **{k: v for k, v in named.items() if v is not None}}
    if d_eps is not None:
        out["epsilon"] = d_eps
    return out


def _value_and_error_shapes(shape: tuple[int, ...], opts: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Output shapes of a reported core: the value as the input, the convergence error with no axis of its own."""
    return {"value": tuple(shape), "error": ()}


REPORTED = ("value", "error")
# the entries' weights and mask share x's batch axes and span its axis (Dask blocks them alike)
WEIGHTS = {"weights": (0,), "mask": (0,)}


@core(output_shapes=_value_and_error_shapes, outputs=REPORTED, batched=WEIGHTS)
@finite_rows
def cdf_core(
    xp: Any, x: Any, opts: TransportSettings, *, descending: bool = False, target_weights: Any = None, weights: Any = None,
    mask: Any = None,
) -> Any:
    """``a^-1 (P b_bar)``; ``mask`` (or weights of 0): the CDF of the valid entries alone, on their own grid of n_v targets."""
    entries = Entries(xp, x, weights, mask)
    (out, err), back = _cdf(xp, entries.zero_masked(xp, x), opts, entries, descending, target_weights)
    return entries.as_masked_operator(xp, (out, err), back)


def _cdf(xp: Any, x: Any, opts: TransportSettings, entries: Entries, descending: bool, target_weights: Any,
         scale: Any = None) -> Any:
    """The CDF, or ``scale`` times it (the rank: ``n_v``), with its pullback."""
    sign = -1.0 if descending else 1.0
    weights = entries.weights
    n = x.shape[-1]
    m = targets_count(n, opts, target_weights)
    own = entries.grid(xp, m, x) if opts.num_targets is None and target_weights is None else None
    if own is None:
        y = grid(xp, m, x)
        b, log_b = target_measure(xp, x, m, target_weights)
    else:
        y, b, log_b = own
    adapter = get_adapter(xp)
    b_bar = adapter.cumulative_sum(xp, b)
    inv_a, _ = input_measure(xp, x, weights)
    p, err, plan_back = plan_vjp(xp, sign * x, y, log_b, opts, weights=weights)
    out = inv_a * matvec(xp, p, b_bar)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0] if scale is None else scale * cts[0]
        ct_a = inv_a * ct
        # out_i = (P b_bar)_i / a_i: log a enters the readout too, d out_i / d log a_i = -out_i
        dx, d_log_a, d_log_b, d_eps = plan_back(ct_a[..., :, None] * b_bar[..., None, :])
        d_a = weights_cotangent(xp, weights, x.dtype, d_log_a - ct * out)
        d_w = None
        if target_weights is not None:
            d_bbar = unbroadcast(xp, matvec(xp, xp.matrix_transpose(p), ct_a), tuple(b.shape))
            d_w = adapter.cumulative_sum(xp, d_bbar, reverse=True) + d_log_b / b
        return grads(sign * dx, d_eps, target_weights=d_w, weights=d_a)

    return (out if scale is None else scale * out, err), pullback


@core(output_shapes=_value_and_error_shapes, outputs=REPORTED, batched=WEIGHTS)
@finite_rows
def rank_core(
    xp: Any, x: Any, opts: TransportSettings, *, descending: bool = False, target_weights: Any = None, weights: Any = None,
    mask: Any = None,
) -> Any:
    """``n cdf`` (``n_v cdf`` with a mask: the ranks of the valid entries among themselves)."""
    entries = Entries(xp, x, weights, mask)
    ranks, back = _cdf(xp, entries.zero_masked(xp, x), opts, entries, descending, target_weights, scale=entries.count)
    return entries.as_masked_operator(xp, ranks, back)


def _sorted_shapes(shape: tuple[int, ...], opts: TransportSettings, params: dict[str, Any]) -> dict[str, Any]:
    topk = params.get("topk")
    return {"value": (topk if topk is not None else targets_count(shape[-1], opts, params.get("target_weights")),), "error": ()}


def topk_targets(xp: Any, x: Any, k: int, filler_first: bool, count: Any = None) -> tuple[Any, Any, Any]:
    """``(y, b, log_b)`` of a top-k sort: k + 1 grid targets, the filler first or last (:func:`topk_weights`).

    ``count``: a mask's n_v per row. A row of exactly k valid entries is the
    full sort of them (as ``topk = n`` is): its k targets sit at ``j / (k - 1)``,
    the empty filler beside them.
    """
    b, log_b = topk_weights(xp, x, k, filler_first, count)
    y = grid(xp, k + 1, x)
    if count is None:
        return y, b, log_b
    full = grid(xp, k, x)
    edge = xp.asarray([0.0 if filler_first else 1.0], dtype=x.dtype, device=_device(x))
    own = xp.concat([edge, full] if filler_first else [full, edge])
    return xp.where(count == k, own, y), b, log_b


def topk_weights(xp: Any, x: Any, k: int, filler_first: bool, count: Any = None) -> tuple[Any, Any]:
    """``(b, log_b)`` of k targets of mass 1/n each and one filler of mass (n - k)/n, below them or above.

    ``count``: each row's n_v valid entries (..., 1) instead of n; a row with
    n_v <= k has an empty filler (NaN past k, below the readout's mask).
    """
    n = x.shape[-1]
    if count is not None:
        count = xp.maximum(count, xp.full_like(count, k))  # n_v < k: a balanced problem all the same, its row NaN
        one = -xp.log(count)
        rest = count - k
        filler = xp.where(rest > 0, xp.log(xp.where(rest > 0, rest, xp.ones_like(rest))) + one, -math.inf)
        log_b = xp.concat([filler] + [one] * k if filler_first else [one] * k + [filler], axis=-1)
        return xp.exp(log_b), log_b
    # log weights in Python, exact; k < n (k = n is the full sort, bound as such)
    counts = [n - k] + [1] * k if filler_first else [1] * k + [n - k]
    logs = [math.log(c) - math.log(n) for c in counts]
    log_b = xp.asarray(logs, dtype=x.dtype, device=_device(x))
    return xp.exp(log_b), log_b


@core(output_shapes=_sorted_shapes, outputs=REPORTED, batched=WEIGHTS)
@finite_rows
def sort_core(
    xp: Any, x: Any, opts: TransportSettings, *, descending: bool = False, target_weights: Any = None, topk: int | None = None,
    weights: Any = None, mask: Any = None,
) -> Any:
    """``b^-1 P^T x``; ``topk``: only the k largest, from k + 1 targets (OTT-JAX's construction, Cuturi et al. 2019).

    The filler target takes the n - k smallest entries' mass in one column,
    so the plan is n x (k + 1) instead of n x n. Ascending, it is the first
    column (dropped); descending (the ascending sort of ``-x``), the last.
    ``mask`` (or weights of 0): the sort of the valid entries alone, their
    n_v values first on their own grid (k <= n_v with ``topk``, else NaN).
    """
    entries = Entries(xp, x, weights, mask)
    sign = -1.0 if descending else 1.0
    x = sign * entries.zero_masked(xp, x)
    weights = entries.weights
    own = None
    if topk is None:
        m = targets_count(x.shape[-1], opts, target_weights)
        own = entries.grid(xp, m, x) if opts.num_targets is None and target_weights is None else None
        y, (b, log_b) = grid(xp, m, x), target_measure(xp, x, m, target_weights)
        if own is not None:
            y, b, log_b = own
        kept = slice(None)
    else:
        m = topk + 1
        y, b, log_b = topk_targets(xp, x, topk, filler_first=not descending, count=None if entries.support is None else entries.count)
        kept = slice(0, topk) if descending else slice(1, m)
    p, err, plan_back = plan_vjp(xp, x, y, log_b, opts, exact="columns", weights=weights)
    # a target of no weight (past a row's n_v, an empty filler) reads 0, not 0/0
    per_target = functools.partial(safe_divide, xp) if entries.support is not None else (lambda u, v: u / v)
    # read out about the row's centre c: the plan's columns hold b exactly, so b^-1 P^T x = c + b^-1 P^T (x - c), and
    # the plan's cotangent (x - c) ct / b no longer carries c, which its backward would cancel to the entries'
    # spread (float32 rows of 1000 + N(0, 1): gradients 1e-2 of their size off)
    centre = row_centre(xp, x, entries.support)
    x_c = x - centre
    read = vecmat(xp, x_c, p)
    ascending_c = per_target(read, b)
    ascending = per_target(read + centre * b, b)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0]
        if topk is not None:  # the filler's value is not an output: zero cotangent
            zero = xp.zeros_like(ct[..., :1])
            ct = xp.concat([ct, zero] if descending else [zero, ct], axis=-1)
        ct_b = sign * per_target(ct, b)
        dx, d_log_a, d_log_b, d_eps = plan_back(x_c[..., :, None] * ct_b[..., None, :])
        dx = dx + matvec(xp, p, ct_b)
        d_a = weights_cotangent(xp, weights, x.dtype, d_log_a)
        d_w = None if target_weights is None else d_log_b / b - unbroadcast(xp, ct_b * ascending_c, tuple(b.shape))
        return grads(sign * dx, d_eps, target_weights=d_w, weights=d_a)

    value = sign * ascending[..., kept]
    if entries.support is None:
        return (value, err), pullback
    if own is not None:  # the valid entries' n_v sorted values first
        out_support = masked.prefix(xp, entries.support)
    else:  # m values from every row with an entry (and k <= n_v)
        some = xp.any(entries.support, axis=-1, keepdims=True)
        if topk is not None:
            some = some & (entries.count >= topk)
        out_support = xp.broadcast_to(some, tuple(value.shape))
    return entries.as_masked_operator(xp, (value, err), pullback, out_support)


@core(output_shapes=_value_and_error_shapes, outputs=REPORTED, batched=WEIGHTS)
@finite_rows
def quantile_normalize_core(
    xp: Any, x: Any, opts: TransportSettings, *, targets: Any, target_weights: Any = None, weights: Any = None,
    mask: Any = None,
) -> Any:
    """``a^-1 (P targets)``; ``mask`` (or weights of 0): the valid entries alone, onto the same m targets."""
    entries = Entries(xp, x, weights, mask)
    x, weights = entries.zero_masked(xp, x), entries.weights
    m = targets.shape[0]
    t = xp.astype(targets, x.dtype)
    b, log_b = target_measure(xp, x, m, target_weights)
    inv_a, _ = input_measure(xp, x, weights)
    p, err, plan_back = plan_vjp(xp, x, grid(xp, m, x), log_b, opts, weights=weights)
    out = inv_a * matvec(xp, p, t)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0]
        ct_a = inv_a * ct
        dx, d_log_a, d_log_b, d_eps = plan_back(ct_a[..., :, None] * t)
        d_a = weights_cotangent(xp, weights, x.dtype, d_log_a - ct * out)
        d_t = unbroadcast(xp, matvec(xp, xp.matrix_transpose(p), ct_a), tuple(t.shape))
        return grads(dx, d_eps, targets=d_t, target_weights=None if target_weights is None else d_log_b / b, weights=d_a)

    return entries.as_masked_operator(xp, (out, err), pullback)


@core(output_shapes=_value_and_error_shapes, outputs=REPORTED, batched={"mask": (0,)})
@finite_rows
def quantize_core(xp: Any, x: Any, opts: TransportSettings, *, num_levels: int, mask: Any = None) -> Any:
    """``n P diag(1/b) P^T x``: each entry moved to its plan's mix of the m soft-sorted values (OTT-JAX's ``quantize``).

    ``mask``: the valid entries alone (weights 0 elsewhere; ``a^-1 = n_v`` for them), onto the same m levels.
    """
    entries = Entries(xp, x, None, mask)
    x = entries.zero_masked(xp, x)
    m = num_levels
    b = xp.full((m,), 1.0 / m, dtype=x.dtype, device=_device(x))
    p, err, plan_back = plan_vjp(xp, x, grid(xp, m, x), xp.log(b), opts, exact="columns", weights=entries.weights)
    # about the row's centre c (as sort_core): out = c + n P levels_c, levels_c = b^-1 P^T (x - c), exact under a
    # shift of the row, whose plan cotangents carry no c (their backward would cancel it to the entries' spread:
    # float32 gradients of rows of 1000 + N(0, 1) were 2e-3 of their size off, unrolled 0.15). The columns hold b
    # exactly; the rows hold a only where the plan is the exact solution, and elsewhere (unrolled) c reaches the output
    # with the weight 1 - n sum_j P_ij, which its pullback carries to the row's smallest and largest entries.
    centre = row_centre(xp, x, entries.support)
    x_c = x - centre
    levels_c = vecmat(xp, x_c, p) / b
    inv_a = input_measure(xp, x, entries.weights)[0]  # n, or n_v on the valid entries (0 elsewhere)
    out = inv_a * matvec(xp, p, levels_c) + centre

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = inv_a * cts[0]
        ct_levels = vecmat(xp, ct, p) / b  # d out / d levels, pulled back
        # out_i = c + n sum_j P_ij levels_j with levels_j = sum_k P_kj x_k / b_j: P enters twice
        dp = ct[..., :, None] * levels_c[..., None, :] + x_c[..., :, None] * ct_levels[..., None, :]
        dx, _, _, d_eps = plan_back(dp)
        dx = dx + matvec(xp, p, ct_levels)
        if not both_marginals_held(opts):
            through_centre = xp.sum(cts[0] * (1.0 - inv_a * xp.sum(p, axis=-1)), axis=-1, keepdims=True)
            dx = dx + row_centre_pullback(xp, x, entries.support, through_centre)
        return grads(dx, d_eps)

    return entries.as_masked_operator(xp, (out, err), pullback)


@core(output_shapes=_value_and_error_shapes, outputs=REPORTED, batched={"mask": (0,)})
@finite_rows
def topk_core(xp: Any, x: Any, opts: TransportSettings, *, k: int, mask: Any = None) -> Any:
    """``n P[:, 1]`` for targets (0, 1) weighted ((n - k)/n, k/n); ``mask``: n_v for n (k <= n_v, else NaN)."""
    entries = Entries(xp, x, None, mask)
    x = entries.zero_masked(xp, x)
    if entries.support is None:
        n = x.shape[-1]
        # log weights in Python: k = n gives an exact -inf (an empty target), no log(0) warning
        log_b = xp.asarray(
            [math.log(n - k) - math.log(n) if k < n else -math.inf, math.log(k) - math.log(n)], dtype=x.dtype, device=_device(x)
        )
        inv_a: Any = n
    else:
        each = topk_weights(xp, x, k, filler_first=True, count=entries.count)[1]  # (filler, then k targets of 1/n_v)
        log_b = xp.concat([each[..., :1], each[..., 1:2] + math.log(k)], axis=-1)
        inv_a = input_measure(xp, x, entries.weights)[0]
    p, err, plan_back = plan_vjp(xp, x, grid(xp, 2, x), log_b, opts, weights=entries.weights)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0]
        dx, _, _, d_eps = plan_back(xp.stack([xp.zeros_like(ct), inv_a * ct], axis=-1))
        return grads(dx, d_eps)

    value = inv_a * p[..., 1]
    if entries.support is None:
        return (value, err), pullback
    return entries.as_masked_operator(xp, (value, err), pullback, entries.support & (entries.count >= k))


def _solver_shapes(shape: tuple[int, ...], opts: Settings, params: dict[str, Any]) -> dict[str, Any]:
    n, m = shape
    return {"plan": (n, m), "f": (n,), "g": (m,), "error": (), "n_iter": None}


@core(output_shapes=_solver_shapes, outputs=("plan", "f", "g", "error", "n_iter"), core_ndim=2, batched={"a": (0,), "b": (1,)})
def solver_core(xp: Any, cost: Any, opts: Settings, *, a: Any = None, b: Any = None) -> Any:
    """:func:`rankops.sinkhorn` on a cost in its compute dtype; the pullback takes cotangents of ``(plan, f, g)``."""
    device = _device(cost)
    log_a = log_weights(xp, a, cost.shape[-2], cost.dtype, device)
    log_b = log_weights(xp, b, cost.shape[-1], cost.dtype, device)
    res, solve_back = solve_vjp(xp, cost, log_a, log_b, opts)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        d_plan, d_f, d_g = cts[:3]
        d_cost, d_log_a, d_log_b, d_eps = solve_back(xp.zeros_like(res.plan) if d_plan is None else d_plan, d_f, d_g)
        # d/dw log(w) = 1/w; an empty entry (w = 0) moves nothing
        weights = {name: safe_divide(xp, d, xp.astype(w, cost.dtype)) for name, w, d in (("a", a, d_log_a), ("b", b, d_log_b))
                   if w is not None}
        return grads(d_cost, d_eps, **weights)

    return (res.plan, res.f, res.g, res.error, res.n_iter), pullback
