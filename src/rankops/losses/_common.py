"""Helpers the losses share: row layout, argument checks, hard ranks of targets, Pearson's correlation."""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any, Callable

from .._lib._adapters import get_adapter
from .._lib._calls import prepare
from .._lib._compat import is_array, namespace, device as _device

DEFAULT_METHOD = "permutahedron"


def _last(xp: Any, a: Any, axis: int) -> Any:
    return a if axis == a.ndim - 1 else xp.moveaxis(a, axis, -1)


def _low_precision(a: Any) -> bool:
    # the dtype's name first: the array test only for the rare 16-bit candidate (it runs on every loss call)
    dtype = getattr(a, "dtype", None)
    return dtype is not None and str(dtype).rsplit(".", 1)[-1] in ("float16", "bfloat16") and is_array(a)


def in_float32(loss: Callable[..., Any]) -> Callable[..., Any]:
    """``loss`` with float16 / bfloat16 array arguments computed in float32 and its value cast back, as the operators do.

    In 16 bits a loss's own arithmetic underflows: the centred soft ranks of
    a row at 1e-3 square to below float16's smallest normal, and Pearson's
    correlation turns into 0 / 0 (NaN gradients where float32 gives 0).
    """

    @functools.wraps(loss)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        low = [a for a in args if _low_precision(a)]
        if not low:
            return loss(*args, **kwargs)
        xp = namespace(*low)
        out = xp.result_type(*[a.dtype for a in args if is_array(a) and xp.isdtype(a.dtype, "real floating")])
        return xp.astype(loss(*[xp.astype(a, xp.float32) if _low_precision(a) else a for a in args], **kwargs), out)

    return wrapper


def _same_shape(a: Any, b: Any, names: tuple[str, str]) -> None:
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"{names[0]} {tuple(a.shape)} and {names[1]} {tuple(b.shape)} must have the same shape")


def rows(where: str, axis: Any, arrays: dict[str, Any], *, also: dict[str, Any] | None = None) -> tuple[Any, int, list[Any]]:
    """``(xp, axis, rows)``: a loss's inputs prepared as the operators prepare theirs (:func:`rankops._lib._calls.prepare`).

    ``arrays`` (the first names the loss's main input) share one shape, one
    namespace and device; each comes back as a real floating array
    (integers and bool promoted) with ``axis`` (one int: a tuple raises
    ``TypeError`` naming ``where``) moved last. ``also`` (labels, a mask) are
    only checked for namespace and device.
    """
    (first, a), *rest = arrays.items()
    p = prepare(a, axis=axis, name=first, one_axis_for=where, arrays={**dict(rest), **(also or {})})
    for name, b in rest:
        _same_shape(a, b, (first, name))
    axis = p.axis
    return p.xp, axis, [p.x] + [prepare(b, axis=axis, name=name, one_axis_for=where).x for name, b in rest]


def with_mask(mask: Any) -> dict[str, Any]:
    """A loss's mask among the arrays :func:`rows` checks (namespace and device), when there is one."""
    return {} if mask is None else {"mask": mask}


def row_mask(xp: Any, mask: Any, like: Any, axis: int) -> Any:
    """A loss's ``mask`` (bool, broadcastable to ``like``'s shape; None: none) with ``axis`` last, like the rows."""
    if mask is None:
        return None
    if mask.dtype != xp.bool:
        raise TypeError(f"mask must be a bool array (True for the valid entries), got dtype {mask.dtype}")
    try:
        mask = xp.broadcast_to(mask, tuple(like.shape))
    except (ValueError, RuntimeError) as exc:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to {tuple(like.shape)}") from exc
    return _last(xp, mask, axis)


def _one_hot(xp: Any, index: Any, n: int) -> Any:
    """``index[..., None] == arange(n)``: a gather as a mask, which every backend (Dask included) has."""
    return index[..., None] == xp.arange(n, device=_device(index))


def class_labels(xp: Any, scores: Any, labels: Any, axis: int) -> None:
    """``labels``: integer class indices, one per row of ``scores`` (its shape without ``axis``)."""
    if not xp.isdtype(labels.dtype, "integral"):
        raise TypeError(f"labels must be an integer array of class indices, got dtype {labels.dtype}")
    expected = tuple(scores.shape[:axis]) + tuple(scores.shape[axis + 1 :])
    if tuple(labels.shape) != expected:
        raise ValueError(f"labels must have scores' shape without axis {axis}: {expected}, got {tuple(labels.shape)}")


def at_label(xp: Any, hit: Any, v: Any) -> Any:
    """Each row's entry of ``v`` where ``hit`` (a one-hot of the labels) is True."""
    return xp.sum(xp.where(hit, v, xp.zeros_like(v)), axis=-1)


def _row_count(n: int, k: Any, name: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= n:
        raise ValueError(f"{name} must be an int in [1, n = {n}], got {k!r}")
    return int(k)


def _level(q: Any) -> float:
    if isinstance(q, bool) or not isinstance(q, numbers.Real) or not 0 <= q <= 1:
        raise ValueError(f"q must be a number in [0, 1], got {q!r}")
    return float(q)


def _rankdata(xp: Any, t: Any) -> Any:
    adapter = get_adapter(xp)
    s = adapter.sort(xp, t)
    below = adapter.searchsorted(xp, s, t, side="left")
    upto = adapter.searchsorted(xp, s, t, side="right")
    return xp.where(xp.any(xp.isnan(t), axis=-1, keepdims=True), math.nan, xp.astype(below + upto + 1, t.dtype) / 2)


def rankdata(xp: Any, t: Any) -> Any:
    """``scipy.stats.rankdata`` (ties averaged, 1-based) along the last axis: ``(#{< t} + #{<= t} + 1) / 2``; no gradient.
    A row holding a NaN has no ranks: NaN, as SciPy's (``nan_policy="propagate"``); +-inf ranks first or last."""
    return get_adapter(xp).rows(xp, _rankdata, t, dtype=t.dtype)


def without_nan(xp: Any, a: Any, valid: Any, finite: bool = False) -> tuple[Any, Any]:
    """``(a, bad)``: ``a`` (targets, or soft ranks) with every NaN (``finite``: every non-finite value) set to 0, so that
    no arithmetic on it warns or carries a NaN into a gradient, and per row whether a valid entry held one (``valid``: a
    mask, or None): the caller makes such a row's loss NaN, as a row with a non-finite score is."""
    wrong = ~xp.isfinite(a) if finite else xp.isnan(a)
    bad = xp.any(wrong if valid is None else wrong & valid, axis=-1)
    return xp.where(wrong, xp.zeros_like(a), a), bad


def _pearson(xp: Any, a: Any, b: Any, valid: Any = None) -> Any:
    """Pearson's correlation of matching rows (last axis); NaN, quietly (no NumPy warning, gradient 0), for a constant
    row, as in SciPy.

    ``valid``: over each row's valid entries only (a mask; NaN for a row of fewer than two).
    """
    if valid is None:
        ac = a - xp.mean(a, axis=-1, keepdims=True)
        bc = b - xp.mean(b, axis=-1, keepdims=True)
    else:
        w = xp.astype(valid, a.dtype)
        count = xp.sum(w, axis=-1, keepdims=True)
        count = xp.where(count > 0, count, xp.ones_like(count))
        a, b = xp.where(valid, a, xp.zeros_like(a)), xp.where(valid, b, xp.zeros_like(b))
        ac = w * (a - xp.sum(a, axis=-1, keepdims=True) / count)
        bc = w * (b - xp.sum(b, axis=-1, keepdims=True) / count)
    den = xp.sum(ac * ac, axis=-1) * xp.sum(bc * bc, axis=-1)
    spread = den > 0
    return xp.where(spread, xp.sum(ac * bc, axis=-1) / xp.sqrt(xp.where(spread, den, xp.ones_like(den))), math.nan)


# docstring sections of the losses (filled by ``_lib._docs.fill_doc``)
MASK = """
mask : bool array, optional
    True for the valid entries (shaped like the input, or broadcastable to
    it): each row's loss is that of its valid entries alone, the others get
    no gradient; a row without a valid entry is NaN (docs/api.md, "Ragged rows").
"""
RANK_METHOD = """
method : str, default "permutahedron"
    Any method of :func:`rankops.soft_rank`; ``**options`` are its options.
"""


def per_row_returns(owner: str, values: str = "") -> str:
    """A loss's Returns section (one value per row of ``owner``) and the first line of its Examples."""
    return f"""
Returns
-------
array
    {owner} shape without ``axis``{values}.

Examples
--------
>>> import numpy as np, rankops.losses
"""
