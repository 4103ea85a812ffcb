"""Shared entry and exit of every operator that works along one axis.

``prepare`` validates the array and moves the operator axis last;
``run`` calls the operator's core (an ``impl(xp, x, **params)`` written for
a trailing axis), block by block with NumPy for Dask; ``finish`` puts the
axis back and restores the caller's dtype.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import array_api_compat
from array_api_compat import is_jax_namespace

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


def prepare(
    x: Any,
    *,
    axis: Any = -1,
    name: str = "x",
    params: dict[str, Any] | None = None,
    arrays: dict[str, Any] | None = None,
) -> Prepared:
    """Validate ``x`` and move its operator axis last.

    ``params`` are scalar hyper-parameters, possibly 0-d arrays (a learnable
    ``tau``); ``arrays`` are parameter arrays (levels, targets, weights). Any
    array among them must share ``x``'s namespace and device. On Dask the
    scalars must be Python numbers (each block runs NumPy code).
    """
    scalars = {k: v for k, v in (params or {}).items() if is_array(v)}
    given = {name: x, **scalars, **(arrays or {})}
    xp = namespace(*given.values(), names=tuple(given))
    if scalars and is_lazy_blockwise(xp):
        raise TypeError(f"{', '.join(scalars)} must be Python numbers for Dask inputs, not arrays")
    if len(given) > 1:
        check_same_device(xp, tuple(given.values()), tuple(given))
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


def run(
    impl: Callable[..., Any],
    p: Prepared,
    tail: tuple[int, ...],
    arrays: dict[str, Any] | None = None,
    *,
    error_tail: tuple[int, ...] | None = None,
    **params: Any,
) -> Any:
    """Apply ``impl`` along the last axis; ``tail`` is the output's trailing shape.

    ``arrays`` are parameter arrays (levels, targets, weights) handed to
    ``impl`` whole, next to the Python-valued ``params``. Inside
    :func:`recording` (``rankops.vjp``) the core's pullback is kept too.
    A core that also returns the solver's per-problem error (Sinkhorn) is
    run with ``error_tail``, the error's trailing shape; ``run`` then returns
    ``(value, error)``.
    """
    arrays = arrays or {}
    if is_lazy_blockwise(p.xp):
        from ._adapters import _dask

        if is_recording():
            record(Recorded(p, _dask.last_axis_pullback(impl, p.x, arrays, params)))
        return _dask.map_last_axis(impl, p.x, tail, p.x.dtype, arrays, error_tail=error_tail, **params)
    if is_recording():
        out, pullback = impl.vjp(p.xp, p.x, **arrays, **params)
        record(Recorded(p, pullback))
        return out
    return call(p.xp, impl, p.x, arrays, params)


@dataclass(frozen=True)
class Recorded:
    """One operator call seen by :func:`recording`: how its input was prepared, and its pullback."""

    prepared: Prepared | None
    pullback: Callable[..., dict[str, Any]]


_TAPE: contextvars.ContextVar[list[Recorded] | None] = contextvars.ContextVar("rankops_tape", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[Recorded]]:
    """Collect the pullback of each operator called inside (per thread and task)."""
    tape: list[Recorded] = []
    token = _TAPE.set(tape)
    try:
        yield tape
    finally:
        _TAPE.reset(token)


def is_recording() -> bool:
    return _TAPE.get() is not None


def record(entry: Recorded) -> None:
    tape = _TAPE.get()
    if tape is not None:
        tape.append(entry)


def call(xp: Any, impl: Callable[..., Any], x: Any, arrays: dict[str, Any], params: dict[str, Any]) -> Any:
    """``impl(xp, x, **arrays, **params)``; on JAX through a cached ``jax.jit``."""
    if is_jax_namespace(xp):
        from ._adapters import _jax

        return _jax.call(impl, x, arrays, params)
    return impl(xp, x, **arrays, **params)


def with_value(core_vjp: Callable[..., Any]) -> Callable[..., Any]:
    """The forward of a ``(value, pullback)`` core, with the pair kept as ``.vjp``.

    Cores are written once, as ``core_vjp(xp, x, **params) -> (value,
    pullback)``; hosts with autodiff run the value (and differentiate it
    themselves), :func:`rankops.vjp` on the other backends calls the pullback.
    """

    @functools.wraps(core_vjp)
    def core(xp: Any, x: Any, **kwargs: Any) -> Any:
        return core_vjp(xp, x, **kwargs)[0]

    core.vjp = core_vjp  # type: ignore[attr-defined]
    return core


def finish(p: Prepared, out: Any, *, axis_kept: bool = True) -> Any:
    """Move the operator axis back to where the caller had it; restore dtype."""
    xp = p.xp
    if axis_kept and p.axis != p.ndim - 1:
        out = xp.moveaxis(out, -1, p.axis)
    if out.dtype != p.out_dtype:
        out = xp.astype(out, p.out_dtype)
    return out
