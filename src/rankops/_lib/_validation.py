"""Checks of hyper-parameters. They read Python values only, never array data."""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Iterable

from ._compat import is_array


def positive_scalar(value: Any, name: str) -> Any:
    """A strictly positive finite real (``tau``, ``epsilon``, ``power``).

    A 0-d array (a learnable temperature, say) is accepted unchecked: reading
    its value would sync the device and break ``jax.jit``.
    """
    if is_array(value):
        if getattr(value, "ndim", None) != 0:
            raise ValueError(f"{name} must be a scalar or a 0-d array, got shape {tuple(value.shape)}")
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive real number, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def python_number(check: Callable[[Any, str], Any], context: str = "") -> Callable[[Any, str], Any]:
    """``check``, and the value must be a Python number: it shapes the computation, not only the data."""

    def checked(value: Any, name: str) -> Any:
        value = check(value, name)
        if is_array(value):
            raise TypeError(f"{name} must be a Python number{context}, not an array")
        return value

    return checked


def choice(*allowed: Any) -> Callable[[Any, str], Any]:
    """One of ``allowed`` (compared with ``==``; ``None`` allowed where listed)."""

    def checked(value: Any, name: str) -> Any:
        if not any(value is a or (a is not None and isinstance(value, type(a)) and value == a) for a in allowed):
            raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
        return value

    return checked


def boolean(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}")
    return value


def positive_count(value: Any, name: str) -> int:
    """An int >= 1 (``max_iter``, ``k``-like sizes)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= 1, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def optional_count(value: Any, name: str) -> int | None:
    """None or an int >= 1 (``n_samples``)."""
    return None if value is None else positive_count(value, name)


def known_options(options: dict[str, Any], allowed: Iterable[str], where: str) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TypeError(
            f"{where} got unexpected option(s) {', '.join(map(repr, unknown))}; "
            f"it accepts {', '.join(map(repr, sorted(allowed))) or 'none'}"
        )
