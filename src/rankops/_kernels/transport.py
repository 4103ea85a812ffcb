r"""Optimal-transport cores: soft ranks, sorts, CDFs, top-k, quantization, and the solver itself.

Each operator is one entropic transport (:mod:`rankops._solvers.sinkhorn`)
between the n inputs, squashed into [0, 1] (:mod:`.squash`), and an ordered
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
transport problem, for :mod:`.convergence`) and a pullback mapping the
value's cotangent to a dict of cotangents (``x`` and any array parameter),
which is how ``rankops.vjp`` differentiates on backends without autodiff;
torch and JAX differentiate the value itself.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from array_api_compat import device as _device

from .._lib._calls import Call, Prepared, core, prepare
from .._lib._compat import is_array
from .._lib._numerics import matvec, safe_divide, unbroadcast, vecmat
from .._lib._options import option
from .._lib._validation import boolean, choice, optional_count, positive_count, positive_scalar, python_number
from .._solvers.line import line_plan_vjp
from .._solvers.sinkhorn import SolverOptions, log_weights, solve_vjp
from .convergence import Reported
from .squash import SQUASHES, squash_parts

__all__ = [
    "TransportOptions", "DEFAULT_EPSILON", "grid", "target_measure", "topk_weights", "cdf_core", "rank_core", "sort_core", "quantile_normalize_core", "topk_core",
    "quantize_core", "plan_vjp", "grads", "REPORTED", "solver_core", "bind_targets", "bind_sort_or_rank", "reported", "check_1d", "return_info", "SOLVER_OPTIONS",
]

DEFAULT_EPSILON = 1e-2
DEFAULT_FILLER = 0.05


def _filler(value: Any, name: str) -> float:
    filler = positive_scalar(value, name)
    if is_array(filler) or not filler < 1:
        raise ValueError(f"{name} must be a number in (0, 1), got {filler!r}")
    return filler


@dataclasses.dataclass(frozen=True)
class TransportOptions(SolverOptions):
    """Options of the Sinkhorn operators (docs/api.md has each one's meaning and default)."""

    epsilon: Any = option(DEFAULT_EPSILON, positive_scalar)
    # Implicit differentiation by default: a quarter of the checkpointed unrolled
    # backward's memory, independent of the iteration count, and about 3x faster
    # (benchmarks/memory.py; docs/api.md "Gradients: implicit or unrolled").
    implicit: bool = option(True, boolean)
    squash: str | None = option("sigmoid", choice(*SQUASHES))
    power: float = option(2.0, python_number(positive_scalar, " for the Sinkhorn operators"))
    num_targets: int | None = option(None, optional_count)
    filler: float = option(DEFAULT_FILLER, _filler)
    centered: bool = option(True, boolean)


def grid(xp: Any, m: int, like: Any) -> Any:
    return xp.arange(m, dtype=like.dtype, device=_device(like)) / max(m - 1, 1)


def input_measure(xp: Any, x: Any, weights: Any) -> tuple[Any, Any]:
    """``(1 / a, log a)`` of the entries: ``a = 1/n`` (``1 / a`` the Python number n), or ``weights`` normalized per row."""
    n = x.shape[-1]
    if weights is None:
        return float(n), xp.full((n,), -math.log(n), dtype=x.dtype, device=_device(x))
    w = xp.astype(weights, x.dtype)
    total = xp.sum(w, axis=-1, keepdims=True)
    return total / w, xp.log(w) - xp.log(total)


def plan_vjp(
    xp: Any, x: Any, y: Any, log_b: Any, opts: TransportOptions, exact: str = "rows", weights: Any = None,
    per_target: bool = False,
) -> tuple[Any, Any, Any]:
    """Entropic plan (..., n, m) between the squashed rows of ``x`` (weights ``a``: :func:`input_measure`) and targets ``y``.

    Returns the plan, the solver's marginal error per problem (...,) and the
    pullback ``(dplan, dlog_a=None) -> (dx, dlog_b, depsilon, dweights)``
    (``depsilon`` None unless epsilon is an array, ``dweights`` None
    without weights; ``dlog_a`` is what the readout adds on ``log a``).
    ``per_target=True``: the plan with each column divided by its weight
    (:func:`rankops._solvers.line.line_plan_vjp`).
    """
    _, log_a = input_measure(xp, x, weights)
    lift = functools.partial(squash_parts, method=opts.squash)
    plan, err, line_back = line_plan_vjp(xp, x, y, log_a, log_b, opts, power=opts.power, exact=exact, lift=lift,
                                         per_target=per_target)

    def pullback(dp: Any, d_log_a: Any = None) -> tuple[Any, Any, Any, Any]:
        dx, d_log_a_plan, d_log_b, d_eps = line_back(dp)
        d_w = None
        if weights is not None:
            g = d_log_a_plan if d_log_a is None else d_log_a_plan + d_log_a
            # log a = log w - log sum(w): d w = (g / a - sum g) / sum(w); an empty entry (w = 0) moves nothing
            w = xp.astype(weights, x.dtype)
            total = xp.sum(w, axis=-1, keepdims=True)
            d_w = unbroadcast(xp, (safe_divide(xp, g, w) * total - xp.sum(g, axis=-1, keepdims=True)) / total,
                              tuple(weights.shape))
        return dx, d_log_b, d_eps, d_w

    return plan, err, pullback


def targets_count(n: int, opts: TransportOptions, target_weights: Any) -> int:
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


def _along(shape: tuple[int, ...], opts: Any, params: dict[str, Any]) -> dict[str, Any]:
    return {"value": tuple(shape), "error": ()}


REPORTED = ("value", "error")
WEIGHTS = {"weights": (0,)}  # the entries' weights share x's batch axes and span its axis (Dask blocks them alike)


@core(tails=_along, outputs=REPORTED, batched=WEIGHTS)
def cdf_core(
    xp: Any, x: Any, opts: TransportOptions, *, descending: bool = False, target_weights: Any = None, weights: Any = None
) -> Any:
    sign = -1.0 if descending else 1.0
    n = x.shape[-1]
    m = targets_count(n, opts, target_weights)
    b, log_b = target_measure(xp, x, m, target_weights)
    b_bar = xp.cumulative_sum(b, axis=-1)
    inv_a, _ = input_measure(xp, x, weights)
    p, err, plan_back = plan_vjp(xp, sign * x, grid(xp, m, x), log_b, opts, weights=weights)
    out = inv_a * matvec(xp, p, b_bar)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0]
        ct_a = inv_a * ct
        # out_i = (P b_bar)_i / a_i: log a enters the readout too, d out_i / d log a_i = -out_i
        dx, d_log_b, d_eps, d_a = plan_back(ct_a[..., :, None] * b_bar, None if weights is None else -ct * out)
        d_w = None
        if target_weights is not None:
            d_bbar = unbroadcast(xp, matvec(xp, xp.matrix_transpose(p), ct_a), tuple(b.shape))
            d_w = xp.flip(xp.cumulative_sum(xp.flip(d_bbar, axis=-1), axis=-1), axis=-1) + d_log_b / b
        return grads(sign * dx, d_eps, target_weights=d_w, weights=d_a)

    return (out, err), pullback


@core(tails=_along, outputs=REPORTED, batched=WEIGHTS)
def rank_core(xp: Any, x: Any, opts: TransportOptions, **params: Any) -> Any:
    n = x.shape[-1]
    (cdf, err), cdf_back = cdf_core.vjp(xp, x, opts, **params)
    return (n * cdf, err), lambda cts: cdf_back((n * cts[0], None))


def _sorted_tails(shape: tuple[int, ...], opts: TransportOptions, params: dict[str, Any]) -> dict[str, Any]:
    topk = params.get("topk")
    return {"value": (topk if topk is not None else targets_count(shape[-1], opts, params.get("target_weights")),), "error": ()}


def topk_weights(xp: Any, x: Any, k: int, filler_first: bool) -> tuple[Any, Any]:
    """``(b, log_b)`` of k targets of mass 1/n each and one filler of mass (n - k)/n, below them or above."""
    n = x.shape[-1]
    # log weights in Python, exact; k < n (k = n is the full sort, bound as such)
    counts = [n - k] + [1] * k if filler_first else [1] * k + [n - k]
    logs = [math.log(c) - math.log(n) for c in counts]
    log_b = xp.asarray(logs, dtype=x.dtype, device=_device(x))
    return xp.exp(log_b), log_b


@core(tails=_sorted_tails, outputs=REPORTED, batched=WEIGHTS)
def sort_core(
    xp: Any, x: Any, opts: TransportOptions, *, descending: bool = False, target_weights: Any = None, topk: int | None = None,
    weights: Any = None,
) -> Any:
    """``b^-1 P^T x``; ``topk``: only the k largest, from k + 1 targets (OTT-JAX's construction, Cuturi et al. 2019).

    The filler target takes the n - k smallest entries' mass in one column,
    so the plan is n x (k + 1) instead of n x n. Ascending, it is the first
    column (dropped); descending (the ascending sort of ``-x``), the last.
    """
    sign = -1.0 if descending else 1.0
    x = sign * x
    if topk is None:
        m = targets_count(x.shape[-1], opts, target_weights)
        b, log_b = target_measure(xp, x, m, target_weights)
        kept = slice(None)
    else:
        m = topk + 1
        b, log_b = topk_weights(xp, x, topk, filler_first=not descending)
        kept = slice(0, topk) if descending else slice(1, m)
    p, err, plan_back = plan_vjp(xp, x, grid(xp, m, x), log_b, opts, exact="columns", weights=weights)
    ascending = vecmat(xp, x, p) / b

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0]
        if topk is not None:  # the filler's value is not an output: zero cotangent
            zero = xp.zeros_like(ct[..., :1])
            ct = xp.concat([ct, zero] if descending else [zero, ct], axis=-1)
        ct_b = sign * ct / b
        dx, d_log_b, d_eps, d_a = plan_back(x[..., :, None] * ct_b[..., None, :])
        dx = dx + matvec(xp, p, ct_b)
        d_w = None if target_weights is None else d_log_b / b - unbroadcast(xp, ct_b * ascending, tuple(b.shape))
        return grads(sign * dx, d_eps, target_weights=d_w, weights=d_a)

    return (sign * ascending[..., kept], err), pullback


@core(tails=_along, outputs=REPORTED, batched=WEIGHTS)
def quantile_normalize_core(
    xp: Any, x: Any, opts: TransportOptions, *, targets: Any, target_weights: Any = None, weights: Any = None
) -> Any:
    m = targets.shape[0]
    t = xp.astype(targets, x.dtype)
    b, log_b = target_measure(xp, x, m, target_weights)
    inv_a, _ = input_measure(xp, x, weights)
    p, err, plan_back = plan_vjp(xp, x, grid(xp, m, x), log_b, opts, weights=weights)
    out = inv_a * matvec(xp, p, t)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0]
        ct_a = inv_a * ct
        dx, d_log_b, d_eps, d_a = plan_back(ct_a[..., :, None] * t, None if weights is None else -ct * out)
        d_t = unbroadcast(xp, matvec(xp, xp.matrix_transpose(p), ct_a), tuple(t.shape))
        return grads(dx, d_eps, targets=d_t, target_weights=None if target_weights is None else d_log_b / b, weights=d_a)

    return (out, err), pullback


@core(tails=_along, outputs=REPORTED)
def quantize_core(xp: Any, x: Any, opts: TransportOptions, *, num_levels: int) -> Any:
    """``n P diag(1/b) P^T x``: each entry moved to its plan's mix of the m soft-sorted values (OTT-JAX's ``quantize``)."""
    n, m = x.shape[-1], num_levels
    b = xp.full((m,), 1.0 / m, dtype=x.dtype, device=_device(x))
    p, err, plan_back = plan_vjp(xp, x, grid(xp, m, x), xp.log(b), opts, exact="columns")
    levels = vecmat(xp, x, p) / b  # the m soft-sorted values
    out = n * matvec(xp, p, levels)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0]
        ct_levels = n * vecmat(xp, ct, p) / b  # d out / d levels, pulled back
        # out_i = n sum_j P_ij levels_j with levels_j = sum_k P_kj x_k / b_j: P enters twice
        dp = n * ct[..., :, None] * levels[..., None, :] + x[..., :, None] * ct_levels[..., None, :]
        dx, _, d_eps, _ = plan_back(dp)
        return grads(dx + matvec(xp, p, ct_levels), d_eps)

    return (out, err), pullback


@core(tails=_along, outputs=REPORTED)
def topk_core(xp: Any, x: Any, opts: TransportOptions, *, k: int) -> Any:
    n = x.shape[-1]
    # log weights in Python: k = n gives an exact -inf (an empty target), no log(0) warning
    log_b = xp.asarray(
        [math.log(n - k) - math.log(n) if k < n else -math.inf, math.log(k) - math.log(n)], dtype=x.dtype, device=_device(x)
    )
    p, err, plan_back = plan_vjp(xp, x, grid(xp, 2, x), log_b, opts)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0]
        dx, _, d_eps, _ = plan_back(xp.stack([xp.zeros_like(ct), n * ct], axis=-1))
        return grads(dx, d_eps)

    return (n * p[..., 1], err), pullback


def _solver_tails(shape: tuple[int, ...], opts: SolverOptions, params: dict[str, Any]) -> dict[str, Any]:
    n, m = shape
    return {"plan": (n, m), "f": (n,), "g": (m,), "error": (), "n_iter": None}


@core(tails=_solver_tails, outputs=("plan", "f", "g", "error", "n_iter"), core_ndim=2, batched={"a": (0,), "b": (1,)})
def solver_core(xp: Any, cost: Any, opts: SolverOptions, *, a: Any = None, b: Any = None) -> Any:
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


# -- binding the public calls ---------------------------------------------------------------------------

SOLVER_OPTIONS = ("epsilon", "max_iter", "tol", "squash", "power", "implicit")


def return_info(options: dict[str, Any]) -> bool:
    """Pop the ``return_info`` option (every Sinkhorn operator takes it)."""
    return boolean(options.pop("return_info", False), "return_info")


def check_1d(value: Any, name: str, length: int | None = None) -> None:
    if value.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {tuple(value.shape)}")
    if value.shape[0] == 0:
        raise ValueError(f"{name} must not be empty")
    if length is not None and value.shape[0] != length:
        raise ValueError(f"{name} has length {value.shape[0]} but {length} targets are used")


def reported(kernel: Any, p: Prepared, opts: TransportOptions, params: dict[str, Any], where: str, info: bool, **readout: Any) -> Call:
    """A Sinkhorn operator's call, read out by :class:`~.convergence.Reported`; input-shaped ``weights`` are laid out as ``x``."""
    along = ("weights",) if params.get("weights") is not None and params["weights"].ndim > 1 else ()
    return Call(kernel, p, opts, params, Reported(opts, where, info, lazy=p.adapter.lazy, **readout), along=along)


def input_weights(p: Prepared, arrays: dict[str, Any]) -> dict[str, Any]:
    """``arrays`` with ``weights`` (shaped like x, or 1-D of length n) in the prepared layout and compute dtype."""
    weights = arrays.get("weights")
    if weights is None:
        return arrays
    xp = p.xp
    if not xp.isdtype(weights.dtype, ("real floating", "integral")):
        raise TypeError(f"weights must be a real array, got dtype {weights.dtype}")
    if tuple(weights.shape) == p.shape and weights.ndim > 1:
        weights = p.arrange(weights)
    elif tuple(weights.shape) != (p.n,):
        raise ValueError(f"weights must have the shape of x {p.shape} or ({p.n},), got {tuple(weights.shape)}")
    return {**arrays, "weights": xp.astype(weights, p.x.dtype)}


def bind_targets(kernel: Any, where: str, x: Any, axis: Any, options: dict[str, Any], descending: Any = None) -> Call:
    """``soft_cdf``, and ``soft_rank`` / ``soft_sort`` with ``method="sinkhorn"``: targets on a grid."""
    info = return_info(options)
    opts, arrays = TransportOptions.parse(
        options, where, names=SOLVER_OPTIONS + ("num_targets",), arrays=("target_weights", "weights")
    )
    p = prepare(x, axis=axis, opts=opts, arrays=arrays)
    if "target_weights" in arrays:
        check_1d(arrays["target_weights"], "target_weights", opts.num_targets)
    arrays = input_weights(p, arrays)
    params = dict(arrays) if descending is None else {**arrays, "descending": boolean(descending, "descending")}
    return reported(kernel, p, opts, params, where, info)


def bind_sort_or_rank(output: str, x: Any, axis: Any, descending: Any, options: dict[str, Any]) -> Call:
    """``soft_sort`` / ``soft_rank`` (``output``) with ``method="sinkhorn"``; ``soft_sort`` also takes ``topk``."""
    where = f"soft_{output}(method='sinkhorn')"
    if output == "sort":
        topk = options.pop("topk", None)  # None: the full sort
        if topk is not None:
            return _bind_topk(where, x, axis, descending, topk, options)
    return bind_targets(sort_core if output == "sort" else rank_core, where, x, axis, options, descending)


def _bind_topk(where: str, x: Any, axis: Any, descending: Any, topk: Any, options: dict[str, Any]) -> Call:
    k = positive_count(topk, "topk")
    for name in ("num_targets", "target_weights", "weights"):
        if options.get(name) is not None:
            raise ValueError(f"{where}: topk fixes the targets (k values and one filler); do not pass {name} with it")
    info = return_info(options)
    opts, _ = TransportOptions.parse(options, where, names=SOLVER_OPTIONS)
    p = prepare(x, axis=axis, opts=opts)
    if k > p.n:
        raise ValueError(f"topk must lie in [1, n] = [1, {p.n}], got {k}")
    params = {"descending": boolean(descending, "descending")}
    # k = n leaves the filler empty: that is the full sort
    return reported(sort_core, p, opts, params if k == p.n else {**params, "topk": k}, where, info)
