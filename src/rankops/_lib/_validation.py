"""Checks of hyper-parameters. They read Python values only, never array data."""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

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
