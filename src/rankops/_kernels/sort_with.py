r"""Sorting vectors by a criterion: ``b^-1 P^T X`` (OTT-JAX's ``soft_sort.sort_with``; Cuturi, Teboul & Vert 2019).

Per row, ``P`` is the entropic plan :func:`.transport.sort_core` uses for the
criterion ``c`` (n values, weights 1/n, squashed into [0, 1]) onto m grid
targets weighted ``b``; the n vectors ``X`` (n x F) are carried by it:
``out = diag(b)^-1 P^T X`` (m x F), each output row a convex combination of
the rows of X. ``topk=k``: k targets of mass 1/n and one filler of mass
(n - k)/n, whose row is dropped (OTT-JAX's construction, as ``soft_sort(topk=k)``).

Layout. The core takes the vectors as its input, with two core axes
``(n, F)`` (the feature axes flattened into F, the criterion's axis just
before them), and the criterion as a parameter ``(..., n)`` sharing the
batch axes (``Core.batched``: Dask blocks it like the input). Its pullback
gives ``x`` (the vectors) and ``criterion``; :class:`Layout` maps values,
cotangents and gradients between that layout and the caller's.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._lib._calls import Call, core, prepare
from .._lib._compat import normalize_axis, real_float_dtypes
from .._lib._numerics import unbroadcast
from .._lib._validation import boolean, positive_count
from .transport import (
    REPORTED, SOLVER_OPTIONS, TransportOptions, check_1d, grads, grid, plan_vjp, reported, return_info, target_measure,
    targets_count, topk_weights,
)

__all__ = ["sort_with_core", "bind_sort_with", "Layout"]


def _tails(shape: tuple[int, ...], opts: TransportOptions, params: dict[str, Any]) -> dict[str, Any]:
    n, features = shape
    topk = params.get("topk")
    m = topk if topk is not None else targets_count(n, opts, params.get("target_weights"))
    return {"value": (m, features), "error": ()}


@core(tails=_tails, outputs=REPORTED, core_ndim=2, batched={"criterion": (0,)})
def sort_with_core(
    xp: Any, x: Any, opts: TransportOptions, *, criterion: Any, descending: bool = False, target_weights: Any = None,
    topk: int | None = None,
) -> Any:
    """``b^-1 P^T x`` for vectors ``x`` (..., n, F), ``P`` the plan of ``soft_sort(criterion)`` (..., n, m)."""
    sign = -1.0 if descending else 1.0
    c = sign * xp.astype(criterion, x.dtype)  # descending: the ascending sort of -c
    if topk is None:
        m = targets_count(c.shape[-1], opts, target_weights)
        b, log_b = target_measure(xp, c, m, target_weights)
        kept = slice(None)
    else:  # the filler holds the n - k smallest criteria: first ascending, last descending
        m = topk + 1
        b, log_b = topk_weights(xp, c, topk, filler_first=not descending)
        kept = slice(0, topk) if descending else slice(1, m)
    p, err, plan_back = plan_vjp(xp, c, grid(xp, m, c), log_b, opts, exact="columns")
    full = xp.matmul(xp.matrix_transpose(p), x) / b[:, None]  # (..., m, F)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0]
        if topk is not None:  # the filler's vector is not an output: zero cotangent
            zero = xp.zeros_like(ct[..., :1, :])
            ct = xp.concat([ct, zero] if descending else [zero, ct], axis=-2)
        ct_b = ct / b[:, None]
        dc, d_log_b, d_eps, _ = plan_back(xp.matmul(x, xp.matrix_transpose(ct_b)))  # d out / d P_ij = x_i . ct_b_j
        d_w = None
        if target_weights is not None:
            d_w = d_log_b / b - unbroadcast(xp, xp.sum(ct_b * full, axis=-1), tuple(b.shape))
        return grads(xp.matmul(p, ct_b), d_eps, criterion=sign * dc, target_weights=d_w)

    return (full[..., kept, :], err), pullback


@dataclasses.dataclass(frozen=True)
class Layout:
    """The caller's layout (criterion ``(..., n, ...)`` along ``axis``, then ``features``) and the core's ``(..., n, F)``."""

    axis: int  # the criterion's axis, normalized
    batch: int  # the criterion's other axes: the core's batch axes
    features: tuple[int, ...]

    def public(self, xp: Any, a: Any) -> Any:
        """A core array ``(..., k, F)`` (value or vectors' gradient) as the caller lays it out."""
        a = xp.reshape(a, tuple(a.shape[:-1]) + self.features)
        return xp.moveaxis(a, self.batch, self.axis) if self.axis != self.batch else a

    def internal(self, xp: Any, a: Any) -> Any:
        """The inverse of :meth:`public` (vectors, cotangents of the value)."""
        if self.axis != self.batch:
            a = xp.moveaxis(a, self.axis, self.batch)
        return xp.reshape(a, tuple(a.shape[: self.batch + 1]) + (math.prod(self.features),))

    def criterion(self, xp: Any, a: Any, inverse: bool = False) -> Any:
        """The criterion's axis last (``inverse``: back in place)."""
        if self.axis == self.batch:
            return a
        return xp.moveaxis(a, -1, self.axis) if inverse else xp.moveaxis(a, self.axis, -1)


class _Readout:
    """:class:`~.convergence.Reported` on the value in the caller's layout."""

    def __init__(self, inner: Any, layout: Layout) -> None:
        self.inner, self.layout = inner, layout
        self.outputs = inner.outputs

    def finish(self, p: Any, outs: tuple[Any, ...]) -> Any:
        return self.inner.finish(p, (self.layout.public(p.xp, outs[0]), *outs[1:]))

    def pull(self, p: Any, cts: tuple[Any, ...]) -> tuple[Any, ...]:
        first, *rest = self.inner.pull(p, cts)
        return (self.layout.internal(p.xp, first), *rest)


@dataclasses.dataclass(frozen=True)
class _SortWithCall(Call):
    layout: Layout | None = None

    def gradients(self, grads: Any) -> dict[str, Any]:
        out = dict(grads)
        xp = self.xp
        out["x"] = self.layout.public(xp, out["x"])
        if out.get("criterion") is not None:
            out["criterion"] = self.layout.criterion(xp, out["criterion"], inverse=True)
        return out


def bind_sort_with(x: Any, criterion: Any, axis: Any, topk: Any, descending: Any, options: dict[str, Any]) -> Call:
    """Validate ``sort_with``'s arguments (shapes, dtypes, namespaces; never values) and lay them out for the core."""
    where = "sort_with"
    descending = boolean(descending, "descending")
    if topk is not None:
        topk = positive_count(topk, "topk")
        for name in ("num_targets", "target_weights"):
            if options.get(name) is not None:
                raise ValueError(f"{where}: topk fixes the targets (k values and one filler); do not pass {name} with it")
    info = return_info(options)
    opts, weights = TransportOptions.parse(options, where, names=SOLVER_OPTIONS + ("num_targets",), arrays=("target_weights",))
    p = prepare(x, opts=opts, arrays={"criterion": criterion, **weights}, core_ndim=2)
    xp = p.xp
    real_float_dtypes(xp, criterion, "criterion")
    if criterion.ndim == 0:
        raise ValueError("criterion must have at least one dimension to sort along, got a 0-d array")
    axis = normalize_axis(axis, criterion.ndim, where="sort_with")
    shape, n = tuple(criterion.shape), criterion.shape[axis]
    if n == 0:
        raise ValueError(f"criterion has an empty axis {axis} (length 0): there is nothing to sort")
    if tuple(x.shape[: len(shape)]) != shape or x.ndim == len(shape):
        raise ValueError(
            f"x must have criterion's shape {shape} followed by one or more feature axes, got shape {tuple(x.shape)}"
        )
    if "target_weights" in weights:
        check_1d(weights["target_weights"], "target_weights", opts.num_targets)
    if topk is not None and topk > n:
        raise ValueError(f"topk must lie in [1, n] = [1, {n}], got {topk}")
    layout = Layout(axis, len(shape) - 1, tuple(x.shape[len(shape):]))
    p = dataclasses.replace(p, x=layout.internal(xp, p.x))
    params = {"criterion": layout.criterion(xp, criterion), "descending": descending, **weights}
    if topk is not None and topk < n:  # k = n leaves the filler empty: that is the full sort
        params["topk"] = topk
    call = reported(sort_with_core, p, opts, params, where, info)
    return _SortWithCall(call.core, call.prepared, call.opts, call.params, _Readout(call.readout, layout), layout=layout)
