"""The registry of public operators the conformance suite checks.

An operator joins the suite by one ``register(...)`` call here: every
property in this package then runs on it, on every backend and device.
Hard references are independent NumPy / SciPy computations along the last
axis, in float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import array_api_compat
import numpy as np
from scipy.stats import rankdata

import rankops


@dataclass(frozen=True, eq=False)  # hashed by identity, so jax.jit can take it
class Operator:
    name: str
    fn: Callable[..., Any]
    kwargs: dict[str, Any]  # a finite regularisation: a smooth operator
    hard_kwargs: dict[str, Any]  # small regularisation: close to the hard operator
    hard_reference: Callable[[np.ndarray], np.ndarray]  # along the last axis
    out_shape: Callable[[tuple[int, ...]], tuple[int, ...]] = lambda shape: shape
    has_axis: bool = True  # takes axis=; otherwise works on the last axis
    fd_gradient: bool = True  # False for straight-through ops: their gradient is not that of their value
    hard_atol: float = 1e-6
    # (x, **kwargs) -> rankops.vjp(...) of the same computation; its first gradient is x's
    vjp: Callable[..., Any] | None = None

    def __call__(self, x: Any, *, limit: bool = False, **kwargs: Any) -> Any:
        """Call with the finite (or, ``limit=True``, the near-zero) regularisation."""
        return self.fn(x, **{**(self.hard_kwargs if limit else self.kwargs), **kwargs})

    def __repr__(self) -> str:
        return self.name


OPERATORS: list[Operator] = []


def register(op: Operator) -> Operator:
    if any(o.name == op.name for o in OPERATORS):
        raise ValueError(f"operator {op.name!r} registered twice")
    OPERATORS.append(op)
    return op


def converged(op: Operator, **extra: Any) -> dict[str, Any]:
    """``op``'s finite-regime options (plus ``extra``), Sinkhorn ones solved to convergence."""
    kw = {**op.kwargs, **extra}
    return {**kw, **CONVERGED} if "tol" in kw else kw


def via_vjp(fun: Callable[..., Any], args: Callable[[Any], tuple] = lambda x: (), **fixed: Any) -> Callable[..., Any]:
    """``rankops.vjp(fun, x, *args(x), **fixed, **kwargs)``: an Operator's ``vjp``."""
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
            Operator(
                f"soft_sort[{_method}{_suffix}]",
                lambda x, m=_method, d=_desc, **kw: rankops.soft_sort(x, method=m, descending=d, **kw),
                {"tau": 0.5},
                {"tau": 1e-3},
                lambda x, d=_desc: _sorted(x, d),
                vjp=via_vjp(rankops.soft_sort, method=_method, descending=_desc),
            )
        )
        register(
            Operator(
                f"soft_rank[{_method}{_suffix}]",
                lambda x, m=_method, d=_desc, **kw: rankops.soft_rank(x, method=m, descending=d, **kw),
                {"tau": 0.5},
                {"tau": 1e-3},
                lambda x, d=_desc: _ranks(x, d),
                vjp=via_vjp(rankops.soft_rank, method=_method, descending=_desc),
            )
        )
    # default blocks hold the small test rows whole: make the streamed path cross blocks
    # (the full-matrix path, block=None, is checked against it in tests/test_streaming.py)
    for _fn, _variant, _opts in ((rankops.soft_rank, "block2", {"block": 2}), (rankops.soft_sort, "block2", {"block": 2})):
        _op = _fn.__name__
        register(
            Operator(
                f"{_op}[{_method}-{_variant}]",
                lambda x, f=_fn, m=_method, **kw: f(x, method=m, **kw),
                {"tau": 0.5, **_opts},
                {"tau": 1e-3, **_opts},
                _ranks if _op == "soft_rank" else _sorted,
                vjp=via_vjp(_fn, method=_method),
            )
        )
    register(
        Operator(
            f"soft_sort[{_method}-hard]",
            lambda x, m=_method, **kw: rankops.soft_sort(x, method=m, **kw),
            {"tau": 0.5, "hard": True},
            {"tau": 0.5, "hard": True},
            _sorted,
            fd_gradient=False,
            hard_atol=0.0,
            vjp=via_vjp(rankops.soft_sort, method=_method),
        )
    )

register(
    Operator("softsort", rankops.softsort, {"tau": 0.5}, {"tau": 1e-3}, _permutation, _square, has_axis=False, vjp=via_vjp(rankops.softsort))
)
register(
    Operator(
        "neuralsort", rankops.neuralsort, {"tau": 0.5}, {"tau": 1e-3}, _permutation, _square, has_axis=False,
        vjp=via_vjp(rankops.neuralsort),
    )
)
register(
    Operator(
        "softsort[power=2]", rankops.softsort, {"tau": 0.5, "power": 2}, {"tau": 1e-4, "power": 2}, _permutation, _square,
        has_axis=False, vjp=via_vjp(rankops.softsort),
    )
)
register(
    Operator("neuralsort[hard]", rankops.neuralsort, {"tau": 0.5, "hard": True}, {"tau": 0.5, "hard": True}, _permutation, _square,
             has_axis=False, fd_gradient=False, hard_atol=0.0, vjp=via_vjp(rankops.neuralsort))
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


for _desc in (False, True):
    _suffix = "-desc" if _desc else ""
    register(
        Operator(
            f"soft_rank[sinkhorn{_suffix}]",
            lambda x, d=_desc, **kw: rankops.soft_rank(x, descending=d, **kw),
            OT, OT_LIMIT, lambda x, d=_desc: _ranks(x, d), hard_atol=1e-2, vjp=via_vjp(rankops.soft_rank, descending=_desc),
        )
    )
    register(
        Operator(
            f"soft_sort[sinkhorn{_suffix}]",
            lambda x, d=_desc, **kw: rankops.soft_sort(x, descending=d, **kw),
            OT, OT_LIMIT, lambda x, d=_desc: _sorted(x, d), hard_atol=1e-2, vjp=via_vjp(rankops.soft_sort, descending=_desc),
        )
    )
register(
    Operator("soft_cdf", rankops.soft_cdf, OT, OT_LIMIT, lambda x: _ranks(x) / x.shape[-1], hard_atol=1e-2, vjp=via_vjp(rankops.soft_cdf))
)
register(
    Operator(
        "soft_topk_mask[k=1]", lambda x, **kw: rankops.soft_topk_mask(x, 1, **kw), OT, OT_LIMIT,
        lambda x: (_ranks(x, True) <= 1).astype(np.float64), hard_atol=1e-2,
        vjp=via_vjp(rankops.soft_topk_mask, lambda x: (1,)),
    )
)
register(
    Operator(
        "soft_quantile[0.5]", lambda x, **kw: rankops.soft_quantile(x, 0.5, **kw), OT, OT_LIMIT,
        lambda x: np.median(x, axis=-1), _drop_last, hard_atol=1e-2, vjp=via_vjp(rankops.soft_quantile, lambda x: (0.5,)),
    )
)
register(
    Operator(
        "soft_quantile[levels]", lambda x, **kw: rankops.soft_quantile(x, _like(x, LEVELS), **kw), OT, OT_LIMIT,
        lambda x: np.sort(x, axis=-1)[..., [round(q * (x.shape[-1] - 1)) for q in LEVELS]],
        lambda shape: (*shape[:-1], len(LEVELS)), hard_atol=1e-2,
        vjp=via_vjp(rankops.soft_quantile, lambda x: (_like(x, LEVELS),)),
    )
)
register(
    Operator(
        "soft_quantile_normalize",
        lambda x, axis=-1, **kw: rankops.soft_quantile_normalize(
            x, _like(x, _linspace_targets(x.shape[axis])), axis=axis, **kw
        ),
        OT, OT_LIMIT,
        lambda x: _linspace_targets(x.shape[-1])[rankdata(x, axis=-1).astype(int) - 1], hard_atol=1e-2,
        vjp=via_vjp(rankops.soft_quantile_normalize, lambda x: (_like(x, _linspace_targets(x.shape[-1])),)),
    )
)
register(
    Operator(
        "sinkhorn.plan",
        lambda x, **kw: rankops.sinkhorn((x[..., :, None] - x[..., None, :]) ** 2, **kw).plan,
        {**OT, "epsilon": 0.5}, PLAN_LIMIT,
        lambda x: np.broadcast_to(np.eye(x.shape[-1]) / x.shape[-1], (*x.shape, x.shape[-1])),
        _square, has_axis=False, hard_atol=1e-2, vjp=lambda x, **kw: _sinkhorn_plan_vjp(x, **kw),
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
