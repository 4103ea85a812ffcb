"""The registry of public operators the conformance suite checks.

Each entry names the (operator, method) of ``rankops._registry.OPERATORS``
it exercises; ``test_registry.py`` fails when a pair has no ``Case``
variant or no property ``Spec``. An operator joins the suite by one
``register(...)`` call and one ``Spec`` here: every check in this package
then runs on it, on every backend and device.
Hard references are independent NumPy / SciPy computations along the last
axis, in float64.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import array_api_compat
import numpy as np
from hypothesis import strategies as st
from scipy.stats import rankdata

import rankops
from rankops._registry import OPERATORS as REGISTRY


@dataclass(frozen=True, eq=False)  # hashed by identity, so jax.jit can take it
class Case:
    name: str
    fn: Callable[..., Any]
    kwargs: dict[str, Any]  # a finite regularisation: a smooth operator
    hard_kwargs: dict[str, Any]  # small regularisation: close to the hard operator
    hard_reference: Callable[[np.ndarray], np.ndarray]  # along the last axis
    out_shape: Callable[[tuple[int, ...]], tuple[int, ...]] = lambda shape: shape
    has_axis: bool = True  # takes axis=; otherwise works on the last axis
    fd_gradient: bool = True  # False for straight-through ops: their gradient is not that of their value
    hard_atol: float = 1e-6
    features: int = 0  # output axes after the operator's (sort_with's feature axis)
    # (x, **kwargs) -> rankops.vjp(...) of the same computation; its first gradient is x's
    vjp: Callable[..., Any] | None = None
    # the public operator and method this entry exercises: a key of rankops._registry.OPERATORS
    public: Callable[..., Any] | None = None
    method: str = "sinkhorn"
    # the first variant registered for its (public, method) pair: the one every check runs on, on every
    # backend; the others (descending, block, top-k, ...) run every check on the backends that do not compile
    # per option set, and their values and gradients there too (conformance/conftest.py)
    primary: bool = False

    def __call__(self, x: Any, *, limit: bool = False, **kwargs: Any) -> Any:
        """Call with the finite (or, ``limit=True``, the near-zero) regularisation."""
        return self.fn(x, **{**(self.hard_kwargs if limit else self.kwargs), **kwargs})

    def __repr__(self) -> str:
        return self.name


CASES: list[Case] = []


def register(op: Case) -> Case:
    if any(o.name == op.name for o in CASES):
        raise ValueError(f"operator {op.name!r} registered twice")
    if op.public not in REGISTRY or op.method not in REGISTRY[op.public]:
        raise ValueError(f"{op.name!r}: ({op.public}, {op.method!r}) is not in rankops._registry.OPERATORS")
    op = dataclasses.replace(op, primary=not any((o.public, o.method) == (op.public, op.method) for o in CASES))
    CASES.append(op)
    return op


def converged(op: Case, **extra: Any) -> dict[str, Any]:
    """``op``'s finite-regime options (plus ``extra``), Sinkhorn ones solved to convergence."""
    kw = {**op.kwargs, **extra}
    return {**kw, **CONVERGED} if "tol" in kw else kw


def via_vjp(fun: Callable[..., Any], args: Callable[[Any], tuple] = lambda x: (), **fixed: Any) -> Callable[..., Any]:
    """``rankops.vjp(fun, x, *args(x), **fixed, **kwargs)``: an Case's ``vjp``."""
    return lambda x, **kw: rankops.vjp(fun, x, *args(x), **fixed, **kw)


def _sorted(x: np.ndarray, descending: bool = False) -> np.ndarray:
    s = np.sort(x, axis=-1)
    return s[..., ::-1] if descending else s


def _ranks(x: np.ndarray, descending: bool = False) -> np.ndarray:
    return rankdata(-x if descending else x, axis=-1)


def _permutation(x: np.ndarray, descending: bool = True) -> np.ndarray:
    order = np.argsort(-x if descending else x, axis=-1, kind="stable")
    return (order[..., :, None] == np.arange(x.shape[-1])).astype(np.float64)


def _square(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (*shape, shape[-1])


for _method in ("softsort", "neuralsort"):
    for _desc in (False, True):
        _suffix = "-desc" if _desc else ""
        register(
            Case(
                f"soft_sort[{_method}{_suffix}]",
                lambda x, m=_method, d=_desc, **kw: rankops.soft_sort(x, method=m, descending=d, **kw),
                {"tau": 0.5},
                {"tau": 1e-3},
                lambda x, d=_desc: _sorted(x, d),
                vjp=via_vjp(rankops.soft_sort, method=_method, descending=_desc),
                public=rankops.soft_sort, method=_method,
            )
        )
        register(
            Case(
                f"soft_rank[{_method}{_suffix}]",
                lambda x, m=_method, d=_desc, **kw: rankops.soft_rank(x, method=m, descending=d, **kw),
                {"tau": 0.5},
                {"tau": 1e-3},
                lambda x, d=_desc: _ranks(x, d),
                vjp=via_vjp(rankops.soft_rank, method=_method, descending=_desc),
                public=rankops.soft_rank, method=_method,
            )
        )
    # default blocks hold the small test rows whole: make the streamed path cross blocks
    # (the full-matrix path, block=None, is checked against it in tests/test_streaming.py)
    for _fn, _variant, _opts in ((rankops.soft_rank, "block2", {"block": 2}), (rankops.soft_sort, "block2", {"block": 2})):
        _op = _fn.__name__
        register(
            Case(
                f"{_op}[{_method}-{_variant}]",
                lambda x, f=_fn, m=_method, **kw: f(x, method=m, **kw),
                {"tau": 0.5, **_opts},
                {"tau": 1e-3, **_opts},
                _ranks if _op == "soft_rank" else _sorted,
                vjp=via_vjp(_fn, method=_method),
                public=_fn, method=_method,
            )
        )
    register(
        Case(
            f"soft_sort[{_method}-hard]",
            lambda x, m=_method, **kw: rankops.soft_sort(x, method=m, **kw),
            {"tau": 0.5, "hard": True},
            {"tau": 0.5, "hard": True},
            _sorted,
            fd_gradient=False,
            hard_atol=0.0,
            vjp=via_vjp(rankops.soft_sort, method=_method),
            public=rankops.soft_sort, method=_method,
        )
    )

register(
    Case("softsort", rankops.softsort, {"tau": 0.5}, {"tau": 1e-3}, _permutation, _square, has_axis=False, vjp=via_vjp(rankops.softsort),
             public=rankops.softsort, method="softsort")
)
register(
    Case(
        "neuralsort", rankops.neuralsort, {"tau": 0.5}, {"tau": 1e-3}, _permutation, _square, has_axis=False,
        vjp=via_vjp(rankops.neuralsort), public=rankops.neuralsort, method="neuralsort",
    )
)
register(
    Case(
        "softsort[power=2]", rankops.softsort, {"tau": 0.5, "power": 2}, {"tau": 1e-4, "power": 2}, _permutation, _square,
        has_axis=False, vjp=via_vjp(rankops.softsort), public=rankops.softsort, method="softsort",
    )
)
register(
    Case("neuralsort[hard]", rankops.neuralsort, {"tau": 0.5, "hard": True}, {"tau": 0.5, "hard": True}, _permutation, _square,
             has_axis=False, fd_gradient=False, hard_atol=0.0, vjp=via_vjp(rankops.neuralsort),
             public=rankops.neuralsort, method="neuralsort")
)


# -- O(n log n) methods: permutahedron projections, LapSum, isotonic regression ---------------
# Limit regime: strength / alpha 1e-3 against gaps >= 0.5 (conformance.inputs.well_separated):
# no block pools, exp(-500) of the Laplace tails: the hard values up to rounding.
for _method, _soft, _limit in (
    ("permutahedron", {"strength": 0.5}, {"strength": 1e-3}),
    ("permutahedron", {"strength": 0.5, "regularization": "kl"}, {"strength": 1e-3, "regularization": "kl"}),
    ("lapsum", {"alpha": 0.5}, {"alpha": 1e-3}),
):
    _tag = _method + ("-kl" if _soft.get("regularization") == "kl" else "")
    # descending is the same code for both regularizations: checked once, with l2 (JAX compiles each variant)
    for _desc in ((False,) if _tag.endswith("-kl") else (False, True)):
        _suffix = "-desc" if _desc else ""
        for _fn, _ref in ((rankops.soft_rank, _ranks), (rankops.soft_sort, _sorted)):
            register(
                Case(
                    f"{_fn.__name__}[{_tag}{_suffix}]",
                    lambda x, f=_fn, m=_method, d=_desc, **kw: f(x, method=m, descending=d, **kw),
                    _soft, _limit, lambda x, r=_ref, d=_desc: r(x, d),
                    vjp=via_vjp(_fn, method=_method, descending=_desc),
                    public=_fn, method=_method,
                )
            )


# -- differentiable sorting networks: finite steepness with the default (Cauchy) comparators; limit
# regime: logistic comparators of steepness 1e3 against gaps >= 0.5, every swap decided (exp(-500))
_NET_LIMIT = {"distribution": "logistic", "steepness": 1e3}
for _net, _desc in (("odd_even", False), ("bitonic", False), ("bitonic", True)):
    _suffix = ("" if _net == "odd_even" else "-bitonic") + ("-desc" if _desc else "")
    for _fn, _ref in ((rankops.soft_rank, _ranks), (rankops.soft_sort, _sorted)):
        register(
            Case(
                f"{_fn.__name__}[diffsort{_suffix}]",
                lambda x, f=_fn, d=_desc, **kw: f(x, method="diffsort", descending=d, **kw),
                {"network": _net, "steepness": 2.0}, {"network": _net, **_NET_LIMIT}, lambda x, r=_ref, d=_desc: r(x, d),
                vjp=via_vjp(_fn, method="diffsort", descending=_desc), public=_fn, method="diffsort",
            )
        )
register(
    Case("diffsort", rankops.diffsort, {"network": "bitonic", "steepness": 2.0}, {"network": "bitonic", **_NET_LIMIT},
         lambda x: _permutation(x, False), _square, has_axis=False, vjp=via_vjp(rankops.diffsort), public=rankops.diffsort,
         method="diffsort")
)


def _half_k(x: Any) -> float:
    """k = 1.5 (0.5 for a single entry): a real k, inside (0, n) for every n."""
    return 1.5 if x.shape[-1] > 1 else 0.5


register(
    Case(
        "soft_topk_mask[lapsum]", lambda x, axis=-1, **kw: rankops.soft_topk_mask(x, 1.5 if x.shape[axis] > 1 else 0.5, axis=axis, method="lapsum", **kw),
        {"alpha": 0.5}, {"alpha": 1e-3},
        lambda x: np.clip(_half_k(x) + 1 - _ranks(x, True), 0.0, 1.0),
        vjp=via_vjp(rankops.soft_topk_mask, lambda x: (_half_k(x),), method="lapsum"), public=rankops.soft_topk_mask, method="lapsum",
    )
)


# the top-k polytope's projection (l2, and p-norm at the paper's p = 4/3); the p-norm soft rank at p = 3/2
for _tag, _soft, _limit in (
    ("permutahedron", {"strength": 0.5}, {"strength": 1e-3}),
    ("permutahedron-lp", {"strength": 0.5, "regularization": "lp"}, {"strength": 1e-3, "regularization": "lp"}),
):
    register(
        Case(
            f"soft_topk_mask[{_tag}]",
            lambda x, axis=-1, **kw: rankops.soft_topk_mask(x, 1.5 if x.shape[axis] > 1 else 0.5, axis=axis, method="permutahedron", **kw),
            _soft, _limit, lambda x: np.clip(_half_k(x) + 1 - _ranks(x, True), 0.0, 1.0),
            vjp=via_vjp(rankops.soft_topk_mask, lambda x: (_half_k(x),), method="permutahedron"), public=rankops.soft_topk_mask,
            method="permutahedron",
        )
    )
# the top-k in magnitude (l2, and p-norm at the paper's p = 4/3): x on the largest |x|, k's fraction on the next
for _tag, _soft, _limit in (
    ("permutahedron", {"strength": 0.5}, {"strength": 1e-9}),
    ("permutahedron-lp", {"strength": 0.5, "regularization": "lp"}, {"strength": 1e-9, "regularization": "lp"}),
):
    register(
        Case(
            f"soft_topk_magnitude[{_tag}]",
            lambda x, axis=-1, **kw: rankops.soft_topk_magnitude(x, 1.5 if x.shape[axis] > 1 else 0.5, axis=axis, **kw),
            _soft, _limit, lambda x: x * np.clip(_half_k(x) + 1 - _ranks(np.abs(x), True), 0.0, 1.0),
            vjp=via_vjp(rankops.soft_topk_magnitude, lambda x: (_half_k(x),)), public=rankops.soft_topk_magnitude,
            method="permutahedron",
        )
    )
# the p-norm rank at p = 3/2 (a closed form) and sort at p = 1.25 (the signed Newton iteration)
for _fn, _p, _ref in ((rankops.soft_rank, 1.5, _ranks), (rankops.soft_sort, 1.25, _sorted)):
    register(
        Case(
            f"{_fn.__name__}[permutahedron-lp]",
            lambda x, f=_fn, p=_p, **kw: f(x, method="permutahedron", regularization="lp", p=p, **kw),
            {"strength": 0.5}, {"strength": 1e-3}, lambda x, r=_ref: r(x, False),
            vjp=via_vjp(_fn, method="permutahedron", regularization="lp", p=_p), public=_fn, method="permutahedron",
        )
    )


def _isotonic_reference(x: np.ndarray) -> np.ndarray:
    from scipy.optimize import isotonic_regression

    return np.apply_along_axis(lambda row: isotonic_regression(row).x, -1, x)


register(
    Case("isotonic_regression", rankops.isotonic_regression, {}, {}, _isotonic_reference, hard_atol=1e-12,
             vjp=via_vjp(rankops.isotonic_regression), public=rankops.isotonic_regression, method="isotonic")
)


# -- The smooth Kendall tau, against a fixed partner with ties --------------------------
def _partner(x: Any, axis: int = -1) -> Any:
    """0, 1, 2, 0, 1, 2, ... along ``axis``, broadcast like x: a partner with ties, in x's namespace and device."""
    xp = array_api_compat.array_namespace(x)
    n = x.shape[axis]
    dtype = x.dtype if xp.isdtype(x.dtype, "real floating") else None
    shape = [1] * x.ndim
    shape[axis] = n
    pattern = xp.asarray([float(i % 3) for i in range(n)], dtype=dtype, device=array_api_compat.device(x))
    return xp.broadcast_to(xp.reshape(pattern, tuple(shape)), tuple(x.shape))


def _tau_a(x: np.ndarray) -> np.ndarray:
    """Kendall's tau-a of each row against the partner, by explicit pair signs (ties count as neither)."""
    n = x.shape[-1]
    y = np.arange(n) % 3.0
    sx = np.sign(x[..., :, None] - x[..., None, :])
    sy = np.sign(y[:, None] - y[None, :])
    return np.sum(sx * sy, axis=(-2, -1)) / max(n * (n - 1), 1)


register(
    Case("soft_kendall_tau", lambda x, axis=-1, **kw: rankops.soft_kendall_tau(x, _partner(x, axis), axis=axis, **kw),
             {"tau": 0.5}, {"tau": 1e-4}, _tau_a, out_shape=lambda shape: shape[:-1],
             vjp=lambda x, axis=-1, **kw: rankops.vjp(rankops.soft_kendall_tau, x, _partner(x, axis), axis=axis, **kw),
             public=rankops.soft_kendall_tau, method="soft_kendall_tau")
)


# -- Sinkhorn operators ---------------------------------------------------------------
# Finite regime: epsilon = 0.1 to a tolerance float32 reaches too (every
# backend stops at the same iteration: the same arithmetic, problem by
# problem). Limit regime: epsilon = 1e-3 with min-max squashing, which puts
# the nearly evenly spaced test data next to their targets: the plan is
# within exp(-20) of a permutation and Sinkhorn converges in tens of
# iterations. (With sigmoid squashing the same limit needs thousands of
# iterations; tests/test_transport.py checks it on NumPy.)
OT = {"epsilon": 0.1, "tol": 1e-5, "max_iter": 5_000}
# Gradient checks solve to convergence: implicit gradients (the default) are
# those of the fixed point, while finite differences see the computed value.
CONVERGED = {"tol": 1e-11, "max_iter": 100_000}
OT_LIMIT = {"epsilon": 1e-3, "tol": 1e-5, "max_iter": 5_000, "squash": "minmax"}
PLAN_LIMIT = {"epsilon": 3e-3, "tol": 1e-5, "max_iter": 5_000}
LEVELS = (0.2, 0.5, 0.8)  # for n = 7 each filler interval lies inside one order statistic


def _like(x: Any, values: Any) -> Any:
    """A parameter array in x's namespace, dtype and device."""
    xp = array_api_compat.array_namespace(x)
    return xp.asarray(values, dtype=x.dtype, device=array_api_compat.device(x))


def _linspace_targets(n: int) -> np.ndarray:
    return np.linspace(-1.0, 2.0, n)


def _drop_last(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:-1]


def _quantized(x: np.ndarray, m: int) -> np.ndarray:
    """The hard soft_quantize: each entry gets the mean of its block of the sorted row under the north-west-corner plan."""
    n = x.shape[-1]
    # the exact plan between a = 1/n and b = 1/m on sorted rows: overlap of [i/n, (i+1)/n] and [j/m, (j+1)/m]
    edges_a, edges_b = np.arange(n + 1) / n, np.arange(m + 1) / m
    plan = np.clip(np.minimum(edges_a[1:, None], edges_b[None, 1:]) - np.maximum(edges_a[:-1, None], edges_b[None, :-1]), 0, None)
    order = np.argsort(x, axis=-1, kind="stable")
    srt = np.take_along_axis(x, order, -1)
    out_sorted = n * (srt @ plan * m) @ plan.T
    out = np.empty_like(out_sorted)
    np.put_along_axis(out, order, out_sorted, -1)
    return out


for _desc in (False, True):
    _suffix = "-desc" if _desc else ""
    register(
        Case(
            f"soft_rank[sinkhorn{_suffix}]",
            lambda x, d=_desc, **kw: rankops.soft_rank(x, descending=d, **kw),
            OT, OT_LIMIT, lambda x, d=_desc: _ranks(x, d), hard_atol=1e-2, vjp=via_vjp(rankops.soft_rank, descending=_desc),
            public=rankops.soft_rank,
        )
    )
    register(
        Case(
            f"soft_sort[sinkhorn{_suffix}]",
            lambda x, d=_desc, **kw: rankops.soft_sort(x, descending=d, **kw),
            OT, OT_LIMIT, lambda x, d=_desc: _sorted(x, d), hard_atol=1e-2, vjp=via_vjp(rankops.soft_sort, descending=_desc),
            public=rankops.soft_sort,
        )
    )
register(
    Case(
        # k = 1: valid at every test shape (n = 1 makes it the full sort); n x 2 transports otherwise
        "soft_sort[sinkhorn-topk1]", lambda x, **kw: rankops.soft_sort(x, topk=1, **kw), OT, OT_LIMIT,
        lambda x: np.sort(x, axis=-1)[..., -1:], lambda shape: (*shape[:-1], 1), hard_atol=1e-2,
        vjp=via_vjp(rankops.soft_sort, topk=1), public=rankops.soft_sort,
    )
)
register(
    Case("soft_cdf", rankops.soft_cdf, OT, OT_LIMIT, lambda x: _ranks(x) / x.shape[-1], hard_atol=1e-2, vjp=via_vjp(rankops.soft_cdf),
             public=rankops.soft_cdf)
)
register(
    Case(
        "soft_topk_mask[k=1]", lambda x, **kw: rankops.soft_topk_mask(x, 1, **kw), OT, OT_LIMIT,
        lambda x: (_ranks(x, True) <= 1).astype(np.float64), hard_atol=1e-2,
        vjp=via_vjp(rankops.soft_topk_mask, lambda x: (1,)), public=rankops.soft_topk_mask,
    )
)
register(
    Case(
        "soft_quantile[0.5]", lambda x, **kw: rankops.soft_quantile(x, 0.5, **kw), OT, OT_LIMIT,
        lambda x: np.median(x, axis=-1), _drop_last, hard_atol=1e-2, vjp=via_vjp(rankops.soft_quantile, lambda x: (0.5,)),
        public=rankops.soft_quantile,
    )
)
register(
    Case(
        "soft_quantile[levels]", lambda x, **kw: rankops.soft_quantile(x, _like(x, LEVELS), **kw), OT, OT_LIMIT,
        lambda x: np.sort(x, axis=-1)[..., [round(q * (x.shape[-1] - 1)) for q in LEVELS]],
        lambda shape: (*shape[:-1], len(LEVELS)), hard_atol=1e-2,
        vjp=via_vjp(rankops.soft_quantile, lambda x: (_like(x, LEVELS),)), public=rankops.soft_quantile,
    )
)
register(
    Case(
        "soft_quantile_normalize",
        lambda x, axis=-1, **kw: rankops.soft_quantile_normalize(
            x, _like(x, _linspace_targets(x.shape[axis])), axis=axis, **kw
        ),
        OT, OT_LIMIT,
        lambda x: _linspace_targets(x.shape[-1])[rankdata(x, axis=-1).astype(int) - 1], hard_atol=1e-2,
        vjp=via_vjp(rankops.soft_quantile_normalize, lambda x: (_like(x, _linspace_targets(x.shape[-1])),)),
        public=rankops.soft_quantile_normalize,
    )
)
register(
    Case(
        "soft_quantize[3]", lambda x, **kw: rankops.soft_quantize(x, 3, **kw), OT, OT_LIMIT, lambda x: _quantized(x, 3), hard_atol=1e-2,
        vjp=via_vjp(rankops.soft_quantize, lambda x: (3,)), public=rankops.soft_quantize,
    )
)
def _vectors(x: Any, axis: int = -1) -> Any:
    """sort_with's vectors built from x: the row and the row reversed (a feature axis of 2), in x's namespace."""
    xp = array_api_compat.array_namespace(x)
    return xp.stack([x, xp.flip(x, axis=axis)], axis=-1)


def _sorted_with(x: np.ndarray) -> np.ndarray:
    """The hard sort_with of ``_vectors(x)`` by x: both features ordered by argsort(x)."""
    return np.take_along_axis(np.stack([x, x[..., ::-1]], axis=-1), np.argsort(x, axis=-1)[..., None], axis=-2)


def _sort_with_vjp(x: Any, axis: int = -1, **kwargs: Any) -> Any:
    """rankops.vjp of sort_with(_vectors(x), x), chained to x by hand in the array's namespace."""
    xp = array_api_compat.array_namespace(x)
    value, vjp_fn = rankops.vjp(rankops.sort_with, _vectors(x, axis), x, axis=axis, **kwargs)

    def chained(ct: Any) -> tuple[Any]:
        d_v, d_c = vjp_fn(ct)[:2]
        return (d_c + d_v[..., 0] + xp.flip(d_v[..., 1], axis=axis),)

    return value, chained


register(
    Case(
        "sort_with[reversed]", lambda x, axis=-1, **kw: rankops.sort_with(_vectors(x, axis), x, axis=axis, **kw), OT, OT_LIMIT,
        _sorted_with, lambda shape: (*shape, 2), hard_atol=1e-2, features=1, vjp=_sort_with_vjp, public=rankops.sort_with,
    )
)
register(
    Case(
        "sinkhorn.plan",
        lambda x, **kw: rankops.sinkhorn((x[..., :, None] - x[..., None, :]) ** 2, **kw).plan,
        {**OT, "epsilon": 0.5}, PLAN_LIMIT,
        lambda x: np.broadcast_to(np.eye(x.shape[-1]) / x.shape[-1], (*x.shape, x.shape[-1])),
        _square, has_axis=False, hard_atol=1e-2, vjp=lambda x, **kw: _sinkhorn_plan_vjp(x, **kw),
        public=rankops.sinkhorn,
    )
)


def _sinkhorn_plan_vjp(x: Any, **kwargs: Any) -> Any:
    """rankops.vjp of sinkhorn on the cost (x_i - x_j)^2, chained to x by hand in the array's namespace."""
    xp = array_api_compat.array_namespace(x)
    diff = x[..., :, None] - x[..., None, :]
    res, vjp_fn = rankops.vjp(rankops.sinkhorn, diff**2, **kwargs)

    def chained(ct: Any) -> tuple[Any]:
        (d_cost,) = vjp_fn(ct)
        d = 2 * diff * (d_cost + xp.matrix_transpose(d_cost))  # both entries (i, j) and (j, i) move with x_i
        return (xp.sum(d, axis=-1),)

    return res.plan, chained


# -- property specs (conformance/test_properties.py): one per (operator, method) -----------


@dataclass(frozen=True)
class Choices:
    """The options a property example draws: a value for each name, and one of ``variants`` merged in.

    ``variants`` are option fragments that do not combine freely (a number of
    targets, or top-k, or neither). Hypothesis draws from the whole product
    (:meth:`strategy`); a backend that compiles per option set (JAX) draws from
    a fixed :meth:`menu` of a few, so that its compiled programs are reused.
    """

    values: dict[str, list]
    variants: tuple[dict, ...] = ({},)

    def strategy(self) -> st.SearchStrategy:
        fixed = st.fixed_dictionaries({k: st.sampled_from(v) for k, v in self.values.items()})
        return st.tuples(fixed, st.sampled_from(self.variants)).map(lambda t: {**t[0], **t[1]})

    def menu(self, size: int, seed: int) -> list[dict]:
        """``size`` option sets, seeded: each value of each option in ``size / len(values)`` of them (every value when ``size`` allows)."""
        rng = np.random.default_rng(seed)

        def column(values: Any) -> list:
            return [values[i] for i in rng.permutation(np.resize(np.arange(len(values)), size))]

        columns = {k: column(v) for k, v in self.values.items()}
        fragments = column(self.variants)
        return [{**{k: c[i] for k, c in columns.items()}, **fragments[i]} for i in range(size)]


@dataclass(frozen=True)
class Spec:
    name: str
    kind: str  # what the output is: which range applies
    params: Callable[[int], Choices]  # n -> the option sets drawn
    # (x, params, make_array) -> (fun, args, kwargs): value = fun(x, *args, **kwargs)
    call: Callable[..., tuple[Any, tuple, dict]]
    sinkhorn: bool = False
    public: Callable[..., Any] | None = None  # the key of rankops._registry.OPERATORS it covers
    method: str = "sinkhorn"


def _opts(**choices: list) -> Choices:
    return Choices(choices)


SINKHORN = dict(epsilon=[1e-3, 1e-2, 0.1, 1.0], squash=["sigmoid", "arctan", "minmax", None], power=[0.5, 1, 2, 3],
                implicit=[True, False], max_iter=[2000] * 5 + [3], tol=[1e-3, 1e-6])
TAU = [1e-3, 0.1, 1.0, 100.0]
NETWORK = dict(network=["odd_even", "bitonic"], distribution=["cauchy", "reciprocal", "optimal", "logistic", "logistic_phi", "gaussian"],
               steepness=[1e-3, 0.1, 10.0, 1e4], art_lambda=[0.0, 0.25, 1.0])
BLOCKS = [None, "auto", 1, 2]


def _with_targets(n: int, **extra: list) -> Choices:
    """Sinkhorn options and a number of targets m (1, 3 or n; left out: the default n)."""
    return Choices({**SINKHORN, **extra}, ({}, {"num_targets": 1}, {"num_targets": 3}, {"num_targets": n}))


def _method_spec(fn: Any, kind: str, method: str) -> Spec:
    if method == "sinkhorn":
        return Spec(f"{fn.__name__}[sinkhorn]", kind, lambda n: _with_targets(n, descending=[False, True]),
                    lambda x, p, arr: (fn, (), p), sinkhorn=True, public=fn)
    extra = {"power": [0.5, 1, 2]} if method == "softsort" else {}
    return Spec(
        f"{fn.__name__}[{method}]", f"{kind}-{method}",
        lambda n: _opts(descending=[False, True], tau=TAU, hard=[False, True], block=BLOCKS, **extra),
        lambda x, p, arr: (fn, (), {"method": method, **p}),
        public=fn, method=method,
    )


def _fast_spec(fn: Any, kind: str, method: str) -> Spec:
    extra = {"strength": [1e-4, 1e-2, 1.0, 1e4], "regularization": ["l2", "kl", "lp"]} if method == "permutahedron" else {"alpha": [1e-4, 1e-2, 1.0, 1e4]}
    return Spec(f"{fn.__name__}[{method}]", f"{kind}-{method}", lambda n: _opts(descending=[False, True], **extra),
                lambda x, p, arr: (fn, (), {"method": method, **p}), public=fn, method=method)


def _lapsum_topk(x: Any, p: dict, arr: Callable, method: str = "lapsum") -> tuple:
    p = dict(p)
    n = x.shape[-1]
    return rankops.soft_topk_mask, (p.pop("k") * n,), {"method": method, **p}


def _quantile_levels(x: Any, p: dict, arr: Callable) -> tuple:
    p = dict(p)
    levels = p.pop("levels")
    q = arr(np.asarray(levels)) if isinstance(levels, tuple) else levels
    return rankops.soft_quantile, (q,), p


def _qnorm(x: Any, p: dict, arr: Callable) -> tuple:
    p = dict(p)
    m = p.pop("m")
    return rankops.soft_quantile_normalize, (arr(np.linspace(-2.0, 3.0, m) ** 3),), p


def _topk(x: Any, p: dict, arr: Callable) -> tuple:
    p = dict(p)
    return rankops.soft_topk_mask, (min(p.pop("k"), x.shape[-1]),), p


def _sinkhorn(x: Any, p: dict, arr: Callable) -> tuple:
    return rankops.sinkhorn, (), p


SPECS = [
    *[_method_spec(fn, kind, m) for m in ("sinkhorn", "softsort", "neuralsort")
      for fn, kind in ((rankops.soft_rank, "rank"), (rankops.soft_sort, "sort"))],
    Spec("soft_cdf", "cdf", _with_targets, lambda x, p, arr: (rankops.soft_cdf, (), p), True,
         rankops.soft_cdf),
    Spec("soft_quantile", "quantile", lambda n: _opts(levels=[0.0, 0.3, 0.5, 1.0, (0.0, 0.25, 1.0)], filler=[0.01, 0.05, 0.5],
                                                      **SINKHORN), _quantile_levels, True, rankops.soft_quantile),
    Spec("soft_quantile_normalize", "qnorm", lambda n: _opts(m=[1, 2, n, 7], **SINKHORN), _qnorm, True, rankops.soft_quantile_normalize),
    Spec("soft_quantize", "quantize", lambda n: _opts(m=[1, 2, n, 7], **SINKHORN),
         lambda x, p, arr: (rankops.soft_quantize, ({**p}.pop("m"),), {k: v for k, v in p.items() if k != "m"}), True,
         rankops.soft_quantize),
    Spec("sort_with", "sort_with", lambda n: Choices({**SINKHORN, "descending": [False, True]}, (
        {}, {"num_targets": 1}, {"num_targets": 3}, {"topk": 1}, {"topk": n})),
         lambda x, p, arr: (rankops.sort_with, (x,), p), True, rankops.sort_with),
    Spec("soft_topk_mask", "mask", lambda n: _opts(k=[1, 2, n], **SINKHORN), _topk, True, rankops.soft_topk_mask),
    Spec("sinkhorn", "plan", lambda n: _opts(**{k: v for k, v in SINKHORN.items() if k not in ("squash", "power")}),
         _sinkhorn, True, rankops.sinkhorn),
    Spec("softsort", "matrix", lambda n: _opts(descending=[False, True], tau=TAU, hard=[False, True], power=[0.5, 1, 2]),
         lambda x, p, arr: (rankops.softsort, (), p), public=rankops.softsort, method="softsort"),
    Spec("neuralsort", "matrix", lambda n: _opts(descending=[False, True], tau=TAU, hard=[False, True]),
         lambda x, p, arr: (rankops.neuralsort, (), p), public=rankops.neuralsort, method="neuralsort"),
    *[_fast_spec(fn, kind, m) for m in ("permutahedron", "lapsum") for fn, kind in ((rankops.soft_rank, "rank"), (rankops.soft_sort, "sort"))],
    *[Spec(f"{fn.__name__}[diffsort]", f"{kind}-diffsort", lambda n: _opts(descending=[False, True], **NETWORK),
           lambda x, p, arr, fn=fn: (fn, (), {"method": "diffsort", **p}), public=fn, method="diffsort")
      for fn, kind in ((rankops.soft_rank, "rank"), (rankops.soft_sort, "sort"))],
    Spec("diffsort", "matrix", lambda n: _opts(descending=[False, True], **NETWORK), lambda x, p, arr: (rankops.diffsort, (), p),
         public=rankops.diffsort, method="diffsort"),
    # k as a fraction of n: real, inside (0, n) for every n
    Spec("soft_topk_mask[lapsum]", "mask-lapsum", lambda n: _opts(k=[0.01, 0.3, 0.5, 0.99], alpha=[1e-4, 1e-2, 1.0, 1e4]), _lapsum_topk,
         public=rankops.soft_topk_mask, method="lapsum"),
    Spec("soft_topk_mask[permutahedron]", "mask-permutahedron",
         lambda n: _opts(k=[0.01, 0.3, 0.5, 1.0], strength=[1e-4, 1e-2, 1.0, 1e4], regularization=["l2", "lp"]),
         lambda x, p, arr: _lapsum_topk(x, p, arr, "permutahedron"), public=rankops.soft_topk_mask, method="permutahedron"),
    Spec("soft_topk_magnitude", "magnitude",
         lambda n: _opts(k=[0.01, 0.3, 0.5, 1.0], strength=[1e-4, 1e-2, 1.0, 1e4], regularization=["l2", "lp"]),
         lambda x, p, arr: (rankops.soft_topk_magnitude, (p["k"] * x.shape[-1],), {k: v for k, v in p.items() if k != "k"}),
         public=rankops.soft_topk_magnitude, method="permutahedron"),
    Spec("soft_kendall_tau", "tau", lambda n: _opts(tau=[1e-4, 1e-2, 1.0, 1e4]),
         lambda x, p, arr: (rankops.soft_kendall_tau, (_partner(x),), p), public=rankops.soft_kendall_tau, method="soft_kendall_tau"),
    Spec("isotonic_regression", "isotonic", lambda n: _opts(increasing=[True, False]),
         lambda x, p, arr: (rankops.isotonic_regression, (), p), public=rankops.isotonic_regression, method="isotonic"),
]
