r"""``rankops.sinkhorn``, the batched log-domain transport solver, and what every Sinkhorn operator shares.

For costs ``C`` of shape ``(..., n, m)`` and marginals ``a`` (..., n) and
``b`` (..., m), :func:`sinkhorn` solves ``min_P <P, C> - epsilon H(P)``
subject to ``P 1 = a``, ``P^T 1 = b`` (Cuturi, Teboul & Vert 2019, Eq. 3);
the solver and its gradients are in :mod:`rankops._solvers.sinkhorn`.

The Sinkhorn operators (``soft_cdf``, ``soft_quantile``, ...,
``soft_rank(method="sinkhorn")``) share from here their option set with its
defaults and checks (:class:`TransportOptions`), the binding of a call, and
convergence that is never silent: every core returns the solver's marginal
error per transport problem next to its value, and the :class:`Reported`
readout warns when some problem stopped above ``tol`` and, with
``return_info=True``, returns ``(value, SinkhornInfo)``.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, NamedTuple

from ._cores import masked
from ._cores.softness import length_slope, sinkhorn_epsilon
from ._cores.squash import SQUASHES
from ._cores.transport import solver_core
from ._lib._calls import LEVELS, REDUCED, VALUE, ValueReadout, Call, Prepared, check_cotangent_shapes, operator, prepare
from ._lib._compat import Array, is_array
from ._lib._docs import fill_doc
from ._lib._options import Options, boolean, choice, option, optional_count, positive_count, positive_scalar, python_number
from ._lib._warnings import caller_stacklevel

__all__ = [
    "sinkhorn", "SinkhornResult", "SinkhornInfo", "ConvergenceWarning", "PerformanceWarning", "LARGE_TRANSPORT", "SolverOptions",
    "TransportOptions", "Reported",
    "SOLVER_OPTIONS", "GRID_OPTIONS", "SOLVER_BUDGET", "return_info", "check_1d", "input_weights", "reported", "bind_grid",
]

DEFAULT_MAX_ITER = 2000
DEFAULT_TOL = 1e-3
DEFAULT_EPSILON = 1e-2  # the operators' epsilon; rankops.sinkhorn has none (it is in the cost's units)
DEFAULT_FILLER = 0.05

# the solver's budget, documented once for rankops.sinkhorn and every Sinkhorn operator
SOLVER_BUDGET = f"""
    max_iter : int, default {DEFAULT_MAX_ITER}
        Sinkhorn iteration budget.
    tol : float, default {DEFAULT_TOL:g}
        The solver stops once every transport problem's L1 marginal error is within ``tol``.
"""


def _filler(value: Any, name: str) -> float:
    filler = positive_scalar(value, name)
    if is_array(filler) or not filler < 1:
        raise ValueError(f"{name} must be a number in (0, 1), got {filler!r}")
    return filler


@dataclasses.dataclass(frozen=True)
class SolverOptions(Options):
    """Options of :func:`sinkhorn` (docs/api.md has each one's meaning); the Sinkhorn operators extend them."""

    epsilon: Any = option(None, positive_scalar)  # a number, or a 0-d array (learnable, traced)
    max_iter: int = option(DEFAULT_MAX_ITER, positive_count)
    tol: float = option(DEFAULT_TOL, python_number(positive_scalar))
    implicit: bool = option(False, boolean)


@dataclasses.dataclass(frozen=True)
class TransportOptions(SolverOptions):
    """Options of the Sinkhorn operators (docs/api.md has each one's meaning and default)."""

    @classmethod
    def temperature(cls) -> str:
        return "epsilon"

    epsilon: Any = option(DEFAULT_EPSILON, positive_scalar)
    softness: Any = option(None, positive_scalar)  # sets epsilon from n (rankops._cores.softness)
    # Implicit differentiation by default: its backward's memory does not grow with the
    # iteration count, and it is faster than the checkpointed unrolled one
    # (benchmarks/memory.py; docs/api.md "Gradients: implicit or unrolled").
    implicit: bool = option(True, boolean)
    squash: str | None = option("sigmoid", choice(*SQUASHES))
    power: float = option(2.0, python_number(positive_scalar, " for the Sinkhorn operators"))
    num_targets: int | None = option(None, optional_count)
    filler: float = option(DEFAULT_FILLER, _filler)
    centered: bool = option(True, boolean)


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


class PerformanceWarning(UserWarning):
    """A call far slower than an equivalent that rankops offers (the message names it)."""


LARGE_TRANSPORT = 2**22
"""``n * m`` of one transport problem (about 2048 x 2048) from which the Sinkhorn rank, sort and CDF warn.

Each iteration costs O(n m) time and memory per row, against O(n log n)
for ``method="permutahedron"`` or ``"lapsum"``: from this size a row takes
hundreds of times theirs (docs/benchmarks.md).
"""


def warn_if_large(n: int, m: int, where: str, *, fast_methods: bool) -> None:
    """Warn (:class:`PerformanceWarning`) once per call site when one problem has ``n * m >= LARGE_TRANSPORT``.

    ``fast_methods``: the operator has O(n log n) methods to name (soft
    ranks and sorts). Shapes only: no value is read, so it holds under
    ``jax.jit`` and on Dask. Python's default filter shows it once per
    calling line.
    """
    if n * m < LARGE_TRANSPORT:
        return
    faster = "method='permutahedron' or 'lapsum' (O(n log n) per row), or " if fast_methods else ""
    warnings.warn(
        f"{where}: each row is a {n} x {m} Sinkhorn transport, O(n m) time and memory per iteration; "
        f"for rows this long use {faster}fewer targets (num_targets=)",
        PerformanceWarning,
        stacklevel=caller_stacklevel(),
    )


def warn_if_unconverged(adapter: Any, xp: Any, error: Any, opts: Any, where: str) -> None:
    """Warn (:class:`ConvergenceWarning`) when some problem stopped above ``tol``.

    Reads values, so only where they exist now: not on tracers (``jax.jit``,
    ``grad``, ``vmap``, ``torch.func``) nor on Dask's lazy arrays. The eager
    solver loop has read its error after every round already, so the read costs
    no extra device sync there. A NaN error (a NaN or infinite input row) is
    a data problem, not a convergence one, and does not warn.
    """
    if not adapter.is_concrete(error):
        return
    bad = error > opts.tol
    if not bool(xp.any(bad)):
        return
    count = int(xp.sum(xp.astype(bad, xp.int32)))
    worst = float(xp.max(xp.where(bad, error, xp.zeros_like(error))))
    warnings.warn(
        f"{where}: Sinkhorn stopped at max_iter={opts.max_iter} with a marginal error above tol={opts.tol:g} in "
        f"{count} of {math.prod(error.shape)} transport problem(s) (largest {worst:.3g}); raise max_iter or epsilon, or pass "
        "return_info=True to see which ones",
        ConvergenceWarning,
        stacklevel=caller_stacklevel(),
    )


class Reported(ValueReadout):
    """Readout of a Sinkhorn operator: the value, warned about and, if asked, with its :class:`SinkhornInfo`.

    With ``role=LEVELS`` the error has the value's trailing axis of quantile
    levels too, placed alike. Lazy backends never warn, so without
    ``return_info`` the error is left out of their graph (one task per block
    of rows).
    """

    def __init__(self, opts: Any, where: str, return_info: bool, *, lazy: bool, role: str = VALUE) -> None:
        super().__init__(role)
        self.opts, self.where, self.return_info = opts, where, return_info
        self.outputs = ("value",) if lazy and not return_info else ("value", "error")

    def finish(self, p: Prepared, outs: tuple[Any, ...]) -> Any:
        value = super().finish(p, outs)
        if len(outs) == 1:
            return value
        xp, adapter = p.xp, p.adapter
        err = adapter.stop_gradient(xp, outs[1])
        if self.role == LEVELS:
            err = p.layout.to_caller(err, LEVELS, cast=False)  # the error stays in the dtype the operator computed in
        warn_if_unconverged(adapter, xp, err, self.opts, self.where)
        return (value, SinkhornInfo(converged=err <= self.opts.tol, error=err)) if self.return_info else value


# -- binding a Sinkhorn operator's call ------------------------------------------------------------

SOLVER_OPTIONS = ("epsilon", "softness", "max_iter", "tol", "squash", "power", "implicit")
# the options of the operators whose targets lie on a grid in [0, 1] (bind_grid)
GRID_OPTIONS = SOLVER_OPTIONS + ("num_targets",)


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


def reported(
    core: Any, p: Prepared, opts: TransportOptions, params: dict[str, Any], where: str, info: bool, role: str = VALUE,
    input_shaped: tuple[str, ...] = (),
) -> Call:
    """A Sinkhorn operator's call, read out by :class:`Reported`; input-shaped ``weights`` are laid out as ``x``.

    A ``softness`` becomes the ``epsilon`` of that rank blur on a row of n
    entries (:func:`.softness.sinkhorn_epsilon`; with a mask, n is the
    padded length: the solver takes one epsilon).
    """
    opts, chain = with_epsilon(opts, p.xp, p.n, p.x.dtype)
    if params.get("weights") is not None and params["weights"].ndim > 1:
        input_shaped += ("weights",)
    return Call(core, p, opts, params, Reported(opts, where, info, lazy=p.adapter.lazy, role=role), input_shaped=input_shaped, chain=chain)


def with_epsilon(opts: TransportOptions, xp: Any, n: int, dtype: Any) -> tuple[TransportOptions, dict[str, Any]]:
    """``(opts, chain)``: ``opts`` with a ``softness`` turned into the ``epsilon`` of that rank blur on a row of n
    entries, and for a learnable softness, ``{"softness": ("epsilon", d epsilon / d softness)}`` (:class:`Call`'s chain:
    the pullback on backends without autodiff)."""
    if opts.softness is None:
        return opts, {}
    s = xp.astype(opts.softness, dtype) if is_array(opts.softness) else opts.softness
    epsilon = sinkhorn_epsilon(xp, s, n)
    chain = {"softness": ("epsilon", epsilon * length_slope(xp, "sinkhorn", s, n) / s)} if is_array(s) else {}
    return dataclasses.replace(opts, epsilon=epsilon, softness=None), chain


def input_weights(p: Prepared, arrays: dict[str, Any]) -> dict[str, Any]:
    """``arrays`` with ``weights`` (shaped like x, or 1-D of length n) in the prepared layout and compute dtype, and a
    ``mask`` laid out like x."""
    weights, mask = arrays.get("weights"), arrays.get("mask")
    if weights is not None:
        arrays = {**arrays, "weights": p.lay_out(weights)}
    return arrays if mask is None else {**arrays, "mask": masked.in_core_layout(p, mask)}


def bind_grid(core: Any, where: str, x: Any, axis: Any, options: dict[str, Any], descending: Any = None) -> Call:
    """``soft_cdf``, and ``soft_rank`` / ``soft_sort`` with ``method="sinkhorn"``: targets on a grid in [0, 1]."""
    info = return_info(options)
    opts, arrays = TransportOptions.parse(
        options, where, names=GRID_OPTIONS, arrays=("target_weights", "weights", "mask")
    )
    p = prepare(x, axis=axis, opts=opts, arrays=arrays)
    if "target_weights" in arrays:
        check_1d(arrays["target_weights"], "target_weights", opts.num_targets)
    # soft_rank / soft_sort pass descending and have the O(n log n) methods; soft_cdf has neither
    warn_if_large(p.n, opts.num_targets or p.n, where, fast_methods=descending is not None)
    arrays = input_weights(p, arrays)
    params = dict(arrays) if descending is None else {**arrays, "descending": boolean(descending, "descending")}
    return reported(core, p, opts, params, where, info)


# -- rankops.sinkhorn ------------------------------------------------------------------------------


class _Result:
    """Readout: the core's outputs as a :class:`SinkhornResult` in the cost's dtype."""

    outputs = ("plan", "f", "g", "error", "n_iter")

    def __init__(self, tol: float) -> None:
        self.tol = tol

    def finish(self, p: Prepared, outs: tuple[Any, ...]) -> SinkhornResult:
        plan, f, g, error, n_iter = outs
        plan, f, g = (p.layout.to_caller(a, REDUCED) for a in (plan, f, g))
        return SinkhornResult(plan, f, g, n_iter, error, error <= self.tol)

    def pull(self, p: Prepared, cts: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(None if c is None else p.layout.to_core(c, REDUCED) for c in cts) + (None, None)


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


@operator(value=_ResultValue, methods=("sinkhorn",))
@fill_doc(budget=SOLVER_BUDGET)
def sinkhorn(
    cost: Array,
    a: Array | None = None,
    b: Array | None = None,
    /,
    *,
    epsilon: Any,
    max_iter: int = SolverOptions.max_iter,  # the defaults are the options' own
    tol: float = SolverOptions.tol,
    implicit: bool = SolverOptions.implicit,
) -> Call[SinkhornResult]:
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
    %(budget)s
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
