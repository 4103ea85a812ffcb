"""The registry of public operators the conformance suite checks.

An operator joins the suite by one ``register(...)`` call here: every
property in this package then runs on it, on every backend and device.
Hard references are independent NumPy / SciPy computations along the last
axis, in float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

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
            )
        )
        register(
            Operator(
                f"soft_rank[{_method}{_suffix}]",
                lambda x, m=_method, d=_desc, **kw: rankops.soft_rank(x, method=m, descending=d, **kw),
                {"tau": 0.5},
                {"tau": 1e-3},
                lambda x, d=_desc: _ranks(x, d),
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
        )
    )

register(Operator("softsort", rankops.softsort, {"tau": 0.5}, {"tau": 1e-3}, _permutation, _square, has_axis=False))
register(Operator("neuralsort", rankops.neuralsort, {"tau": 0.5}, {"tau": 1e-3}, _permutation, _square, has_axis=False))
register(
    Operator(
        "softsort[power=2]", rankops.softsort, {"tau": 0.5, "power": 2}, {"tau": 1e-4, "power": 2}, _permutation, _square, has_axis=False
    )
)
register(
    Operator("neuralsort[hard]", rankops.neuralsort, {"tau": 0.5, "hard": True}, {"tau": 0.5, "hard": True}, _permutation, _square,
             has_axis=False, fd_gradient=False, hard_atol=0.0)
)
