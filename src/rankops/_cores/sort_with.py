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

from .._lib._adapters import core
from .._lib._numerics import unbroadcast
from .transport import REPORTED, TransportSettings, grads, grid, plan_vjp, target_measure, targets_count, topk_weights

__all__ = ["sort_with_core"]


def _output_shapes(shape: tuple[int, ...], opts: TransportSettings, params: dict[str, Any]) -> dict[str, Any]:
    n, features = shape
    topk = params.get("topk")
    m = topk if topk is not None else targets_count(n, opts, params.get("target_weights"))
    return {"value": (m, features), "error": ()}


@core(output_shapes=_output_shapes, outputs=REPORTED, core_ndim=2, batched={"criterion": (0,)})
def sort_with_core(
    xp: Any, x: Any, opts: TransportSettings, *, criterion: Any, descending: bool = False, target_weights: Any = None,
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
