"""The array arguments of a call to differentiate: which they are, and the floating dtype of each one's gradient."""

from __future__ import annotations

import inspect
from typing import Any, Callable

from ._compat import is_array, namespace, real_float_dtypes, device as _device
from ._numerics import unbroadcast


def positional_names(fun: Callable[..., Any]) -> tuple[str, ...]:
    """The names of ``fun``'s parameters that may come by position, in order (an array's ``q`` or ``k`` may also come
    by keyword)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in inspect.signature(fun).parameters.values() if p.kind in kinds)


def call_with(fun: Callable[..., Any], positional: tuple[str, ...], args: tuple[Any, ...], options: dict[str, Any],
              leaves: dict[str, Any]) -> Any:
    """``fun(*args, **options)`` with the arguments named in ``leaves`` replaced by them (``positional``: ``args``' names)."""
    return fun(*(leaves.get(name, a) for name, a in zip(positional, args)), **{k: leaves.get(k, v) for k, v in options.items()})


def differentiable_arguments(name: str, positional: tuple[str, ...], args: tuple[Any, ...], options: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(name, value)`` of every array argument of a call, in call order, but the mask (it selects entries: it has no
    gradient to give; a bool ``x`` still gets its promoted one)."""
    if len(args) > len(positional):
        raise TypeError(f"{name} takes at most {len(positional)} positional arguments, got {len(args)}")
    named = list(zip(positional, args)) + list(options.items())
    return [(key, value) for key, value in named if is_array(value) and key != "mask"]


def float_dtype(xp: Any, value: Any, name: str) -> Any:
    """The floating dtype of ``value``, or the one the operators promote it to (integers, bool)."""
    return value.dtype if xp.isdtype(value.dtype, "real floating") else real_float_dtypes(xp, value, name)[0]


def float_leaf(value: Any, name: str) -> Any:
    """The value as the floating array the operator computes with (integers are promoted)."""
    xp = namespace(value)
    dtype = float_dtype(xp, value, name)
    return value if value.dtype == dtype else xp.astype(value, dtype)


def as_argument(xp: Any, g: Any, arg: Any, name: str) -> Any:
    """A gradient in the shape and floating dtype of its argument (zeros if nothing flowed)."""
    dtype = float_dtype(xp, arg, name)
    if g is None:
        return xp.zeros(arg.shape, dtype=dtype, device=_device(arg))
    g = unbroadcast(xp, g, tuple(arg.shape))  # sample axes of a stochastic operator
    return xp.astype(g, dtype) if g.dtype != dtype else g
