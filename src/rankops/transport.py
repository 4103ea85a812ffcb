r"""Optimal-transport operators: soft ranks, sorts, CDFs, quantiles, top-k.

Each operator is one entropic transport (:mod:`rankops.sinkhorn`) between
the n inputs, squashed into [0, 1], and an ordered target measure, read out
differently (Cuturi, Teboul & Vert 2019, Definitions 1-2; Cuturi et al.
2019, Definition 2 and Alg. 2). Per row, with ``a = 1/n``, targets
``y_j = j / (m - 1)``, weights ``b`` (uniform by default), ``b_bar =
cumsum(b)``, cost ``C_ij = |y_j - g(x)_i| ** power`` and ``P`` the
epsilon-entropic plan between ``(a, g(x))`` and ``(b, y)``:

- ``soft_cdf  = a^-1 (P b_bar)``, in [0, 1]; ``soft_rank = n soft_cdf``;
- ``soft_sort = b^-1 (P^T x)``, length m;
- ``soft_quantile_normalize = a^-1 (P targets)``;
- ``soft_topk_mask``: two targets y = (0, 1) weighted ((n - k)/n, k/n); the
  mask is ``a^-1 P[:, 1]``, in [0, 1], summing to k;
- ``soft_quantile`` at level q (Eq. 4 of Cuturi, Teboul & Vert): three
  targets (0, 1/2, 1) weighted (q (1 - t), t, (1 - q)(1 - t)) for a filler
  weight t; the quantile is the middle entry of the soft sort.

``descending=True`` (ranks, sorts) is the ascending operator applied to
``-x`` (sorted values negated back), so the largest entry gets rank 1.

``g`` (option ``squash``) maps each row into [0, 1] so that the targets
cover it whatever the input's scale: ``"sigmoid"`` of the standardized row
(the g~ of Cuturi et al. 2019, Sec. 5), ``"arctan"`` likewise, ``"minmax"``
(affine onto [0, 1]) or ``None`` (inputs used as they are). Standardizing
first divides by the row's largest magnitude, so rows at 1e-30 or 1e30 give
the same result as rows at 1 and nothing overflows in float32.

Defaults: ``epsilon=1e-2`` in the units of the squashed cost (the same
absolute value as OTT-JAX's ``soft_sort``), ``tol=1e-3`` on the L1 marginal
error (OTT's threshold), ``max_iter=2000`` (OTT's bound), ``power=2``,
``squash="sigmoid"``, ``implicit=True`` (gradients by implicit
differentiation of the fixed point, :mod:`rankops._implicit`; ``False``
differentiates through the iterations). With sigmoid squashing the cost is bounded by 1, so
epsilon = 1e-2 blurs an entry over about sqrt(epsilon) = 0.1 of the squashed
range: gradients are non-zero for every entry, not only for near-ties,
while ranks still resolve (see docs/api.md for the numbers), and the solver
converges in tens to hundreds of iterations.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable

from array_api_compat import device as _device

from ._lib._adapters import get_adapter
from ._lib._apply import Prepared, finish, prepare, run, with_value
from ._lib._compat import is_array, is_lazy_blockwise
from ._lib._numerics import abs_power, abs_power_slope, matvec, unbroadcast
from ._lib._validation import boolean, known_options, optional_count, positive_count, positive_scalar
from .sinkhorn import (
    DEFAULT_MAX_ITER, DEFAULT_TOL, SinkhornInfo, check_solver_options, log_weights, solve_vjp, warn_if_unconverged,
)

__all__ = ["soft_cdf", "soft_quantile", "soft_quantile_normalize", "soft_topk_mask", "SQUASHES", "DEFAULT_EPSILON"]

DEFAULT_EPSILON = 1e-2
# Implicit differentiation by default: a quarter of the checkpointed unrolled
# backward's memory, independent of the iteration count, and about 3x faster
# (benchmarks/memory.py; docs/api.md "Gradients: implicit or unrolled").
DEFAULT_IMPLICIT = True
DEFAULT_FILLER = 0.05
SQUASHES = ("sigmoid", "arctan", "minmax", None)
SOLVER_OPTIONS = ("epsilon", "max_iter", "tol", "squash", "power", "implicit")
TARGET_OPTIONS = ("num_targets", "target_weights")
Pullback = Callable[..., Any]


# -- option handling -------------------------------------------------------------


def transport_options(options: dict[str, Any], allowed: tuple[str, ...], where: str) -> dict[str, Any]:
    """Validate Sinkhorn options (Python values only) and fill in defaults."""
    known_options(options, allowed, where)
    opts = check_solver_options(
        options.get("epsilon", DEFAULT_EPSILON),
        options.get("max_iter", DEFAULT_MAX_ITER),
        options.get("tol", DEFAULT_TOL),
        options.get("implicit", DEFAULT_IMPLICIT),
    )
    squash = options.get("squash", "sigmoid")
    if squash not in SQUASHES:
        raise ValueError(f"squash must be one of {', '.join(map(repr, SQUASHES))}, got {squash!r}")
    opts["squash"] = squash
    opts["power"] = positive_scalar(options.get("power", 2), "power")
    if is_array(opts["power"]):
        raise TypeError("power must be a Python number for the Sinkhorn operators, not an array")
    if "num_targets" in allowed:
        opts["num_targets"] = optional_count(options.get("num_targets"), "num_targets")
    if "filler" in allowed:
        filler = positive_scalar(options.get("filler", DEFAULT_FILLER), "filler")
        if is_array(filler) or not filler < 1:
            raise ValueError(f"filler must be a number in (0, 1), got {filler!r}")
        opts["filler"] = filler
    return opts


def _weights_array(options: dict[str, Any]) -> dict[str, Any]:
    w = options.get("target_weights")
    return {} if w is None else {"target_weights": w}


def _check_1d(value: Any, name: str, length: int | None = None) -> None:
    if value.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {tuple(value.shape)}")
    if value.shape[0] == 0:
        raise ValueError(f"{name} must not be empty")
    if length is not None and value.shape[0] != length:
        raise ValueError(f"{name} has length {value.shape[0]} but {length} targets are used")


# -- the shared transport ------------------------------------------------------------


def squash(xp: Any, x: Any, method: str | None) -> Any:
    """Map each row (last axis) into [0, 1]; see the module docstring."""
    return squash_vjp(xp, x, method)[0]


def squash_vjp(xp: Any, x: Any, method: str | None) -> tuple[Any, Pullback]:
    """:func:`squash` and its pullback ``d(squashed) -> dx``."""
    if method is None:
        return x, lambda dy: dy
    # Dividing by the largest magnitude first keeps the squares below in range
    # for rows at 1e30 (and above subnormals for rows at 1e-30). The result does
    # not depend on this scale, so its gradient is exactly 0: it is stopped for
    # autodiff too, whose scale**-2 terms would otherwise underflow to inf - inf
    # on subnormal rows.
    scale = xp.max(xp.abs(x), axis=-1, keepdims=True)
    scale = get_adapter(xp).stop_gradient(xp, xp.where((scale > 0) & xp.isfinite(scale), scale, xp.ones_like(scale)))
    z = x / scale
    if method == "minmax":
        y, minmax_back = _minmax_vjp(xp, z)
        return y, lambda dy: minmax_back(dy) / scale
    z = z - xp.mean(z, axis=-1, keepdims=True)  # exactly 0 on a constant row (all entries are +-1 now)
    var = xp.mean(z * z, axis=-1, keepdims=True)
    spread = var > 0
    # sqrt only of positive values: sqrt'(0) = inf would turn a constant row's gradient into NaN
    sigma = xp.sqrt(xp.where(spread, var, xp.ones_like(var)))
    z = z / sigma
    y = 1.0 / (1.0 + xp.exp(-z)) if method == "sigmoid" else 0.5 + xp.atan(z) / math.pi

    def pullback(dy: Any) -> Any:
        dz = dy * y * (1.0 - y) if method == "sigmoid" else dy / (math.pi * (1.0 + z * z))
        # standardization (a layer norm): remove the components along 1 and along z
        dz = dz - xp.where(spread, z * xp.mean(dz * z, axis=-1, keepdims=True), xp.zeros_like(dz))
        dz = dz / sigma
        return (dz - xp.mean(dz, axis=-1, keepdims=True)) / scale

    return y, pullback


def _minmax_vjp(xp: Any, x: Any) -> tuple[Any, Pullback]:
    lo = xp.min(x, axis=-1, keepdims=True)
    hi = xp.max(x, axis=-1, keepdims=True)
    span = hi - lo
    spread = span > 0
    safe = xp.where(spread, span, xp.ones_like(span))
    y = xp.where(spread, (x - lo) / safe, xp.full_like(x, 0.5))

    def pullback(dy: Any) -> Any:
        dy = xp.where(spread, dy, xp.zeros_like(dy)) / safe
        d_lo = -xp.sum(dy * (1.0 - y), axis=-1, keepdims=True)  # lo moves x - lo and the span
        d_hi = -xp.sum(dy * y, axis=-1, keepdims=True)
        # min / max share their gradient evenly among tied extremes, as torch and JAX do
        at_lo = xp.astype(x == lo, x.dtype)
        at_hi = xp.astype(x == hi, x.dtype)
        return dy + d_lo * at_lo / xp.sum(at_lo, axis=-1, keepdims=True) + d_hi * at_hi / xp.sum(at_hi, axis=-1, keepdims=True)

    return y, pullback


def _grid(xp: Any, m: int, like: Any) -> Any:
    return xp.arange(m, dtype=like.dtype, device=_device(like)) / max(m - 1, 1)


def _plan_vjp(xp: Any, x: Any, y: Any, log_b: Any, opts: dict[str, Any], exact: str = "rows") -> tuple[Any, Any, Pullback]:
    """Entropic plan (..., n, m) between the squashed rows of ``x`` and targets ``y``.

    Returns the plan, the solver's marginal error per problem (...,) and the
    pullback ``dplan -> (dx, dlog_b, depsilon)`` (``depsilon`` None unless
    epsilon is an array).
    """
    n = x.shape[-1]
    s, squash_back = squash_vjp(xp, x, opts["squash"])
    d = y - s[..., :, None]
    power = opts["power"]
    square = power == 2.0  # a Python number: transport_options rejects arrays
    cost = d * d if square else abs_power(xp, xp.abs(d), power)
    log_a = xp.full((n,), -math.log(n), dtype=x.dtype, device=_device(x))
    res, solve_back = solve_vjp(
        xp, cost, log_a, log_b, epsilon=opts["epsilon"], max_iter=opts["max_iter"], tol=opts["tol"], exact=exact,
        implicit=opts["implicit"],
    )

    def pullback(dp: Any) -> tuple[Any, Any, Any]:
        d_cost, _, d_log_b, d_eps = solve_back(dp)
        slope = 2.0 * d if square else abs_power_slope(xp, xp.abs(d), power) * xp.sign(d)
        return squash_back(-xp.sum(d_cost * slope, axis=-1)), d_log_b, d_eps

    return res.plan, res.error, pullback


def _target_weights(xp: Any, x: Any, m: int, target_weights: Any) -> tuple[Any, Any]:
    """``(b, log_b)``: uniform unless the caller gave weights."""
    log_b = log_weights(xp, target_weights, m, x.dtype, _device(x))
    if target_weights is None:
        return xp.full((m,), 1.0 / m, dtype=x.dtype, device=_device(x)), log_b
    return xp.astype(target_weights, x.dtype), log_b


def _targets_count(x: Any, num_targets: int | None, target_weights: Any) -> int:
    return num_targets if num_targets is not None else (target_weights.shape[0] if target_weights is not None else x.shape[-1])


def _grads(x: Any, d_eps: Any, **named: Any) -> dict[str, Any]:
    """The cotangents of a core: ``x``, ``epsilon`` when it is an array, then parameter arrays."""
    out = {"x": x, **{k: v for k, v in named.items() if v is not None}}
    if d_eps is not None:
        out["epsilon"] = d_eps
    return out


# -- cores (operator axis last; also run per Dask block with NumPy) ----------------------
# Each ``*_vjp`` returns ``((value, error), pullback)``: ``error`` is the
# solver's marginal error per transport problem (for ``return_info`` and the
# convergence warning); the pullback maps the value's cotangent to a dict of
# cotangents (``x`` and any array parameter), which is how ``rankops.vjp``
# differentiates on backends without autodiff. torch and JAX differentiate
# the value itself (their autodiff ignores the pullback).


def cdf_vjp(xp: Any, x: Any, *, opts: dict[str, Any], descending: bool = False, target_weights: Any = None) -> tuple[Any, Pullback]:
    sign = -1.0 if descending else 1.0
    n = x.shape[-1]
    m = _targets_count(x, opts.get("num_targets"), target_weights)
    b, log_b = _target_weights(xp, x, m, target_weights)
    b_bar = xp.cumulative_sum(b, axis=-1)
    p, err, plan_back = _plan_vjp(xp, sign * x, _grid(xp, m, x), log_b, opts)
    out = n * matvec(xp, p, b_bar)

    def pullback(ct: Any) -> dict[str, Any]:
        dx, d_log_b, d_eps = plan_back(n * ct[..., :, None] * b_bar)
        d_w = None
        if target_weights is not None:
            d_bbar = n * unbroadcast(xp, matvec(xp, xp.matrix_transpose(p), ct), tuple(b.shape))
            d_w = xp.flip(xp.cumulative_sum(xp.flip(d_bbar, axis=-1), axis=-1), axis=-1) + d_log_b / b
        return _grads(sign * dx, d_eps, target_weights=d_w)

    return (out, err), pullback


def rank_vjp(xp: Any, x: Any, **kwargs: Any) -> tuple[Any, Pullback]:
    n = x.shape[-1]
    (cdf, err), cdf_back = cdf_vjp(xp, x, **kwargs)
    return (n * cdf, err), lambda ct: cdf_back(n * ct)


def sort_vjp(xp: Any, x: Any, *, opts: dict[str, Any], descending: bool = False, target_weights: Any = None) -> tuple[Any, Pullback]:
    sign = -1.0 if descending else 1.0
    x = sign * x
    m = _targets_count(x, opts.get("num_targets"), target_weights)
    b, log_b = _target_weights(xp, x, m, target_weights)
    p, err, plan_back = _plan_vjp(xp, x, _grid(xp, m, x), log_b, opts, exact="columns")
    ascending = xp.matmul(x[..., None, :], p)[..., 0, :] / b

    def pullback(ct: Any) -> dict[str, Any]:
        ct_b = sign * ct / b
        dx, d_log_b, d_eps = plan_back(x[..., :, None] * ct_b[..., None, :])
        dx = dx + matvec(xp, p, ct_b)
        d_w = None if target_weights is None else d_log_b / b - unbroadcast(xp, ct_b * ascending, tuple(b.shape))
        return _grads(sign * dx, d_eps, target_weights=d_w)

    return (sign * ascending, err), pullback


def quantile_normalize_vjp(
    xp: Any, x: Any, *, targets: Any, opts: dict[str, Any], target_weights: Any = None
) -> tuple[Any, Pullback]:
    n, m = x.shape[-1], targets.shape[0]
    t = xp.astype(targets, x.dtype)
    b, log_b = _target_weights(xp, x, m, target_weights)
    p, err, plan_back = _plan_vjp(xp, x, _grid(xp, m, x), log_b, opts)
    out = n * matvec(xp, p, t)

    def pullback(ct: Any) -> dict[str, Any]:
        dx, d_log_b, d_eps = plan_back(n * ct[..., :, None] * t)
        d_t = n * unbroadcast(xp, matvec(xp, xp.matrix_transpose(p), ct), tuple(t.shape))
        return _grads(dx, d_eps, targets=d_t, target_weights=None if target_weights is None else d_log_b / b)

    return (out, err), pullback


def topk_vjp(xp: Any, x: Any, *, k: int, opts: dict[str, Any]) -> tuple[Any, Pullback]:
    n = x.shape[-1]
    # log weights in Python: k = n gives an exact -inf (an empty target), no log(0) warning
    log_b = xp.asarray(
        [math.log(n - k) - math.log(n) if k < n else -math.inf, math.log(k) - math.log(n)], dtype=x.dtype, device=_device(x)
    )
    p, err, plan_back = _plan_vjp(xp, x, _grid(xp, 2, x), log_b, opts)

    def pullback(ct: Any) -> dict[str, Any]:
        dx, _, d_eps = plan_back(xp.stack([xp.zeros_like(ct), n * ct], axis=-1))
        return _grads(dx, d_eps)

    return (n * p[..., 1], err), pullback


def quantile_vjp(xp: Any, x: Any, *, q: Any, opts: dict[str, Any]) -> tuple[Any, Pullback]:
    """Levels ``q``: a Python float (output drops the axis) or a 1-D array (axis -> levels)."""
    t = opts["filler"]
    y = xp.asarray([0.0, 0.5, 1.0], dtype=x.dtype, device=_device(x))
    if not is_array(q):
        logs = [math.log(w) if w > 0 else -math.inf for w in (q * (1 - t), t, (1 - q) * (1 - t))]
        p, err, plan_back = _plan_vjp(xp, x, y, xp.asarray(logs, dtype=x.dtype, device=_device(x)), opts, exact="columns")

        def pullback(ct: Any) -> dict[str, Any]:
            ct_t = ct[..., None] / t
            zero = xp.zeros_like(x)[..., None]  # (..., n, 1)
            dx, _, d_eps = plan_back(xp.concat([zero, x[..., :, None] * ct_t[..., None], zero], axis=-1))
            return _grads(dx + p[..., 1] * ct_t, d_eps)

        return (xp.matmul(x[..., None, :], p)[..., 0, 1] / t, err), pullback

    levels = xp.astype(q, x.dtype)[:, None]
    b = xp.concat([levels * (1 - t), xp.full_like(levels, t), (1 - levels) * (1 - t)], axis=-1)  # (L, 3)
    # Levels 0 and 1 give an empty filler; a tiny weight keeps log finite.
    floor = xp.finfo(x.dtype).smallest_normal
    log_b = xp.log(xp.maximum(b, xp.full_like(b, floor)))
    xl = x[..., None, :]
    p, err, plan_back = _plan_vjp(xp, xl, y, log_b, opts, exact="columns")  # (..., L, n, 3): one solve for all levels
    out = xp.matmul(x[..., None, None, :], p)[..., 0, 1] / t
    valid = (levels[:, 0] >= 0) & (levels[:, 0] <= 1)  # levels are data: out of range -> NaN, no check

    def pullback_levels(ct: Any) -> dict[str, Any]:
        ct_t = xp.where(valid, ct, xp.zeros_like(ct))[..., None, None] / t  # (..., L, 1, 1)
        zero = xp.zeros_like(p[..., :1])
        dp = xp.concat([zero, xl[..., :, None] * ct_t, zero], axis=-1)
        dx, d_log_b, d_eps = plan_back(dp)
        dx = xp.sum(dx, axis=-2) + xp.sum(p[..., 1] * ct_t[..., 0], axis=-2)
        d_b = xp.where(b > floor, d_log_b / xp.where(b > floor, b, xp.ones_like(b)), xp.zeros_like(b))
        d_q = (d_b[:, 0] - d_b[:, 2]) * (1 - t)
        return _grads(dx, d_eps, q=xp.where(valid, d_q, xp.zeros_like(d_q)))

    # an invalid level is a data problem, like a NaN input: NaN value and error, no convergence warning
    nan = xp.full_like(out, math.nan)
    return (xp.where(valid, out, nan), xp.where(valid, err, nan)), pullback_levels



cdf_core = with_value(cdf_vjp)
rank_core = with_value(rank_vjp)
sort_core = with_value(sort_vjp)
quantile_normalize_core = with_value(quantile_normalize_vjp)
topk_core = with_value(topk_vjp)
quantile_core = with_value(quantile_vjp)


# -- public operators ----------------------------------------------------------------------


def _return_info(options: dict[str, Any]) -> bool:
    """Pop the ``return_info`` option (every Sinkhorn operator takes it)."""
    return boolean(options.pop("return_info", False), "return_info")


def _value_only(core: Any) -> Any:
    """A core that drops the solver's error (its pullback is the core's own)."""

    def value(xp: Any, x: Any, **kwargs: Any) -> Any:
        return core(xp, x, **kwargs)[0]

    value.vjp = core.vjp  # type: ignore[attr-defined]
    return value


_VALUE_ONLY = {core: _value_only(core) for core in (cdf_core, rank_core, sort_core, quantile_normalize_core, topk_core, quantile_core)}


def _solve(core: Any, p: Prepared, tail: tuple[int, ...], arrays: dict[str, Any] | None, error_tail: tuple[int, ...],
           return_info: bool, **params: Any) -> tuple[Any, Any]:
    """``run`` a Sinkhorn core: ``(value, error)``, the error None where nobody reads it.

    Dask never warns (its values are lazy), so without ``return_info`` the
    error is left out of the graph, which keeps one task per block of rows.
    """
    if is_lazy_blockwise(p.xp) and not return_info:
        return run(_VALUE_ONLY[core], p, tail, arrays, **params), None
    return run(core, p, tail, arrays, error_tail=error_tail, **params)


def _done(p: Prepared, result: tuple[Any, Any], opts: dict[str, Any], where: str, return_info: bool, *,
          axis_kept: bool = True, levels: bool = False) -> Any:
    """``finish`` the value; warn when some problem did not converge; attach the info if asked.

    ``levels``: the error has a trailing axis of quantile levels that goes
    where the caller's axis was, as in the value.
    """
    out, err = result
    xp = p.xp
    if err is None:
        return finish(p, out, axis_kept=axis_kept)
    err = get_adapter(xp).stop_gradient(xp, err)
    if levels and p.axis != p.ndim - 1:
        err = xp.moveaxis(err, -1, p.axis)
    warn_if_unconverged(xp, err, opts, where)
    value = finish(p, out, axis_kept=axis_kept)
    return (value, SinkhornInfo(converged=err <= opts["tol"], error=err)) if return_info else value


def _run_targets(core: Any, where: str, x: Any, axis: Any, options: dict[str, Any], descending: bool | None = None) -> Any:
    """Shared path of soft_rank / soft_sort / soft_cdf (targets on a grid)."""
    return_info = _return_info(options)
    opts = transport_options(options, SOLVER_OPTIONS + TARGET_OPTIONS, where)
    arrays = _weights_array(options)
    p = prepare(x, axis=axis, arrays=arrays)
    w = arrays.get("target_weights")
    if w is not None:
        _check_1d(w, "target_weights", opts["num_targets"])
    kwargs: dict[str, Any] = {"opts": opts}
    if descending is not None:
        kwargs["descending"] = boolean(descending, "descending")
    m = _targets_count(p.x, opts["num_targets"], w)
    tail = (m,) if core is sort_core else (p.n,)
    return _done(p, _solve(core, p, tail, arrays, (), return_info, **kwargs), opts, where, return_info)


def soft_cdf(x: Any, /, *, axis: int = -1, **options: Any) -> Any:
    """Sinkhorn CDF of each entry within its row: ``a^-1 (P b_bar)``, in [0, 1].

    Hard limit (epsilon -> 0, no ties): ``rankdata(x) / n``. Options: the
    Sinkhorn options of :mod:`rankops.transport` (``epsilon``, ``max_iter``,
    ``tol``, ``num_targets``, ``target_weights``, ``squash``, ``power``,
    ``implicit``) and ``return_info`` (every Sinkhorn operator): when True,
    return ``(value, SinkhornInfo)`` with each row's ``converged`` flag and
    marginal ``error``. A row that stops at ``max_iter`` above ``tol`` raises
    a :class:`~rankops.ConvergenceWarning` wherever values can be read (not
    under ``jax.jit`` / ``grad`` / ``vmap``, not on Dask).
    """
    return _run_targets(cdf_core, "soft_cdf", x, axis, options)


def soft_quantile(x: Any, q: Any, /, *, axis: int = -1, **options: Any) -> Any:
    """Sinkhorn quantile(s) of level ``q`` along ``axis`` (Eq. 4 of Cuturi, Teboul & Vert).

    ``q``: a Python float in [0, 1] (output: ``x.shape`` without ``axis``) or a
    1-D array of levels (output: ``axis`` replaced by ``len(q)``); array levels
    are data, so one outside [0, 1] yields NaN rather than an error. Option
    ``filler`` (t, default 0.05): weight of the middle target. Hard limit: a
    value between the order statistics bracketing level q.
    """
    return_info = _return_info(options)
    opts = transport_options(options, SOLVER_OPTIONS + ("filler",), "soft_quantile")
    if is_array(q):
        p = prepare(x, axis=axis, arrays={"q": q})
        _check_1d(q, "q")
        result = _solve(quantile_core, p, (q.shape[0],), {"q": q}, (q.shape[0],), return_info, opts=opts)
        return _done(p, result, opts, "soft_quantile", return_info, levels=True)
    if isinstance(q, bool) or not isinstance(q, numbers.Real):
        raise TypeError(f"q must be a Python float or a 1-D array of levels, got {type(q).__name__}")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in [0, 1], got {q!r}")
    p = prepare(x, axis=axis)
    result = _solve(quantile_core, p, (), None, (), return_info, q=float(q), opts=opts)
    return _done(p, result, opts, "soft_quantile", return_info, axis_kept=False)


def soft_quantile_normalize(x: Any, targets: Any, /, *, axis: int = -1, **options: Any) -> Any:
    """Replace each entry by a target value, keeping the order of ``x``: ``a^-1 (P targets)``.

    ``targets``: an increasing 1-D array of m values (m may differ from n),
    weighted uniformly or by the option ``target_weights``. Hard limit for
    m == n: ``targets[rank(x) - 1]`` (Proposition 2 of Cuturi, Teboul & Vert).
    """
    return_info = _return_info(options)
    opts = transport_options(options, SOLVER_OPTIONS + ("target_weights",), "soft_quantile_normalize")
    if not is_array(targets):
        raise TypeError(f"targets must be a 1-D array, got {type(targets).__name__}")
    arrays = {"targets": targets, **_weights_array(options)}
    p = prepare(x, axis=axis, arrays=arrays)
    _check_1d(targets, "targets")
    if "target_weights" in arrays:
        _check_1d(arrays["target_weights"], "target_weights", targets.shape[0])
    result = _solve(quantile_normalize_core, p, (p.n,), arrays, (), return_info, opts=opts)
    return _done(p, result, opts, "soft_quantile_normalize", return_info)


def soft_topk_mask(x: Any, k: int, /, *, axis: int = -1, **options: Any) -> Any:
    """Soft indicator of the k largest entries along ``axis``: values in [0, 1] summing to k.

    Two targets (0 and 1) weighted ((n - k)/n, k/n); the mask is the mass an
    entry sends to the top target, times n. Hard limit: 1 on the k largest.
    """
    return_info = _return_info(options)
    opts = transport_options(options, SOLVER_OPTIONS, "soft_topk_mask")
    k = positive_count(k, "k")
    p = prepare(x, axis=axis)
    if k > p.n:
        raise ValueError(f"k must lie in [1, n] = [1, {p.n}], got {k}")
    return _done(p, _solve(topk_core, p, (p.n,), None, (), return_info, k=k, opts=opts), opts, "soft_topk_mask", return_info)


def sinkhorn_sort_or_rank(kind: str, x: Any, axis: Any, descending: Any, options: dict[str, Any]) -> Any:
    """``soft_sort`` / ``soft_rank`` with ``method="sinkhorn"``."""
    return _run_targets(sort_core if kind == "sort" else rank_core, f"soft_{kind}(method='sinkhorn')", x, axis, options, descending)
