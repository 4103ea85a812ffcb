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
gives ``x`` (the vectors) and ``criterion``; ``rankops.sort_with`` maps
values, cotangents and gradients between that layout and the caller's.
"""

from __future__ import annotations

from typing import Any

import math

from .._lib._adapters import core
from .._lib._numerics import safe_divide, unbroadcast
from . import masked
from .finite import finite_rows
from .entries import Entries
from .transport import REPORTED, TransportSettings, grads, grid, plan_vjp, target_measure, targets_count, topk_targets

__all__ = ["sort_with_core"]


def _output_shapes(shape: tuple[int, ...], opts: TransportSettings, params: dict[str, Any]) -> dict[str, Any]:
    n, features = shape
    topk = params.get("topk")
    m = topk if topk is not None else targets_count(n, opts, params.get("target_weights"))
    return {"value": (m, features), "error": ()}


@core(output_shapes=_output_shapes, outputs=REPORTED, core_ndim=2, batched={"criterion": (0,), "mask": (0,)})
@finite_rows(also=("criterion",), vectors=True)
def sort_with_core(
    xp: Any, x: Any, opts: TransportSettings, *, criterion: Any, descending: bool = False, target_weights: Any = None,
    topk: int | None = None, mask: Any = None,
) -> Any:
    """``b^-1 P^T x`` for vectors ``x`` (..., n, F), ``P`` the plan of ``soft_sort(criterion)`` (..., n, m).

    ``mask`` (..., n): the valid vectors alone, as ``soft_sort``'s mask (weights 0, each row's own grid).
    """
    sign = -1.0 if descending else 1.0
    c = sign * xp.astype(criterion, x.dtype)  # descending: the ascending sort of -c
    entries = Entries(xp, c, None, mask)
    own = None
    if mask is not None:
        c = entries.zero_masked(xp, c)
        x = xp.where(mask[..., None], x, xp.zeros_like(x))
    if topk is None:
        m = targets_count(c.shape[-1], opts, target_weights)
        y, (b, log_b) = grid(xp, m, c), target_measure(xp, c, m, target_weights)
        if opts.num_targets is None and target_weights is None:
            own = entries.grid(xp, m, c)
        if own is not None:
            y, b, log_b = own
        kept = slice(None)
    else:  # the filler holds the n - k smallest criteria: first ascending, last descending
        m = topk + 1
        y, b, log_b = topk_targets(xp, c, topk, filler_first=not descending, count=None if mask is None else entries.count)
        kept = slice(0, topk) if descending else slice(1, m)
    p, err, plan_back = plan_vjp(xp, c, y, log_b, opts, exact="columns", weights=entries.weights)
    b = b[..., :, None]
    # a target of no weight (past a row's n_v, an empty filler) reads 0, not 0/0
    per_target = (lambda u: safe_divide(xp, u, b)) if mask is not None else (lambda u: u / b)
    full = per_target(xp.matmul(xp.matrix_transpose(p), x))  # (..., m, F)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0]
        if topk is not None:  # the filler's vector is not an output: zero cotangent
            zero = xp.zeros_like(ct[..., :1, :])
            ct = xp.concat([ct, zero] if descending else [zero, ct], axis=-2)
        ct_b = per_target(ct)
        dc, _, d_log_b, d_eps = plan_back(xp.matmul(x, xp.matrix_transpose(ct_b)))  # d out / d P_ij = x_i . ct_b_j
        d_w = None
        if target_weights is not None:
            d_w = d_log_b / b[..., 0] - unbroadcast(xp, xp.sum(ct_b * full, axis=-1), tuple(target_weights.shape))
        return grads(xp.matmul(p, ct_b), d_eps, criterion=sign * dc, target_weights=d_w)

    value = full[..., kept, :]
    if mask is None:
        return (value, err), pullback
    # the valid vectors' n_v sorted ones first (own grid), or all m / k outputs of a row with entries (and k <= n_v)
    some = xp.any(mask, axis=-1, keepdims=True)
    if topk is not None:
        some = some & (entries.count >= topk)
    out = masked.prefix(xp, mask) if own is not None else xp.broadcast_to(some, tuple(value.shape[:-1]))
    out = out & some

    def masked_pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0]
        grads_ = pullback(cts if ct is None else (xp.where(out[..., None], ct, xp.zeros_like(ct)), *cts[1:]))
        grads_["x"] = xp.where(mask[..., None], grads_["x"], xp.zeros_like(grads_["x"]))
        grads_["criterion"] = xp.where(mask, grads_["criterion"], xp.zeros_like(grads_["criterion"]))
        return grads_

    value = xp.where(out[..., None], value, xp.zeros_like(value))
    return (xp.where(some[..., None], value, math.nan), err), masked_pullback
