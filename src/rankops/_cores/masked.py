r"""Ragged rows: the valid entries of a row (``mask``), and what the masked ones read and receive.

A core given a ``mask`` computes the operator on each row's valid entries
alone (how is its own: zero weights, a shorter grid, ...). What is common
is written here once: masked entries enter the core as 0 (padding may hold
anything, NaN included, and must not reach a valid entry), they hold 0 in an
output shaped like the input, a row with no valid entry is NaN, and their
gradients are exactly 0: the hosts' autodiff sees the selections, and a
core's own pullback (``rankops.vjp``) drops the masked outputs' cotangents
(:func:`cotangents`) and zeroes the masked inputs' gradients (:func:`pulled`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from .._lib._calls import ALONG, Prepared

__all__ = ["laid_out", "entered", "along", "cotangents", "pulled"]


def laid_out(p: Prepared, mask: Any) -> Any:
    """The caller's ``mask`` (bool, broadcastable to the input's shape) in the core's layout, shaped like the input there."""
    xp = p.xp
    if mask.dtype != xp.bool:
        raise TypeError(f"mask must be a bool array (True for the valid entries), got dtype {mask.dtype}")
    try:
        mask = xp.broadcast_to(mask, p.shape)
    except (ValueError, RuntimeError) as exc:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to {p.name}'s shape {p.shape}") from exc
    return p.layout.to_core(mask, ALONG)


def entered(xp: Any, x: Any, mask: Any) -> Any:
    """``x`` with its masked entries set to 0."""
    return xp.where(mask, x, xp.zeros_like(x))


def along(xp: Any, value: Any, mask: Any) -> Any:
    """An output shaped like the input: 0 at masked entries, NaN on a row without a valid entry."""
    out = xp.where(mask, value, xp.zeros_like(value))
    return xp.where(xp.any(mask, axis=-1, keepdims=True), out, math.nan)


def cotangents(xp: Any, cts: tuple[Any, ...], mask: Any) -> tuple[Any, ...]:
    """The cotangent of an output made by :func:`along`, for the core's output before it: none at masked entries."""
    ct = cts[0]
    return cts if ct is None else (xp.where(mask, ct, xp.zeros_like(ct)), *cts[1:])


def pulled(xp: Any, grads: Mapping[str, Any], mask: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The core's gradients with those of ``names`` (laid out like the input) set to 0 at masked entries."""
    return {k: (xp.where(mask, g, xp.zeros_like(g)) if k in names and g is not None else g) for k, g in grads.items()}
