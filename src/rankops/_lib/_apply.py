"""Shared entry and exit of every operator that works along one axis.

``prepare`` validates the array and moves the operator axis last;
``run`` calls the operator's core (an ``impl(xp, x, **params)`` written for
a trailing axis), block by block with NumPy for Dask; ``finish`` puts the
axis back and restores the caller's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import array_api_compat

from ._compat import check_same_device, is_array, is_lazy_blockwise, namespace, normalize_axis, real_float_dtypes


@dataclass(frozen=True)
class Prepared:
    xp: Any
    x: Any  # operator axis last, compute dtype
    axis: int  # the caller's axis, normalized to >= 0
    ndim: int
    out_dtype: Any
    device: Any

    @property
    def n(self) -> int:
        return self.x.shape[-1]


def prepare(x: Any, *, axis: Any = -1, name: str = "x", params: dict[str, Any] | None = None) -> Prepared:
    """Validate ``x``; array-valued ``params`` (a learnable ``tau``) must share its namespace and device."""
    arrays = {name: x, **{k: v for k, v in (params or {}).items() if is_array(v)}}
    xp = namespace(*arrays.values(), names=tuple(arrays))
    if len(arrays) > 1:
        if is_lazy_blockwise(xp):
            raise TypeError(f"{', '.join(list(arrays)[1:])} must be Python numbers for Dask inputs, not arrays")
        check_same_device(xp, tuple(arrays.values()), tuple(arrays))
    compute_dtype, out_dtype = real_float_dtypes(xp, x, name)
    ndim = x.ndim
    if ndim == 0:
        raise ValueError(f"{name} must have at least one dimension to sort along, got a 0-d array")
    axis = normalize_axis(axis, ndim)
    n = x.shape[axis]
    if n == 0:
        raise ValueError(f"{name} has an empty axis {axis} (length 0): there is nothing to sort or rank")
    if x.dtype != compute_dtype:
        # astype copies; inputs are never written to, so no defensive copy otherwise.
        x = xp.astype(x, compute_dtype)
    if axis != ndim - 1:
        x = xp.moveaxis(x, axis, -1)
    return Prepared(xp, x, axis, ndim, out_dtype, array_api_compat.device(x))


def run(impl: Callable[..., Any], p: Prepared, tail: tuple[int, ...], **params: Any) -> Any:
    """Apply ``impl`` along the last axis; ``tail`` is the output's trailing shape."""
    if is_lazy_blockwise(p.xp):
        from ._adapters import _dask

        return _dask.map_last_axis(impl, p.x, tail, p.x.dtype, **params)
    return impl(p.xp, p.x, **params)


def finish(p: Prepared, out: Any, *, axis_kept: bool = True) -> Any:
    """Move the operator axis back to where the caller had it; restore dtype."""
    xp = p.xp
    if axis_kept and p.axis != p.ndim - 1:
        out = xp.moveaxis(out, -1, p.axis)
    if out.dtype != p.out_dtype:
        out = xp.astype(out, p.out_dtype)
    return out
