"""Portable adapter: NumPy, CuPy, Dask, array-api-strict and anything else.

These backends have no autodiff, so ``stop_gradient`` is the identity, and
random numbers come from a NumPy ``Generator`` copied onto the array's
device (a host-to-device copy for CuPy, a constant chunk for Dask).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .._loops import scan_blocks
from .._numerics import logsumexp as _logsumexp, softmax as _softmax

__all__ = ["softmax", "logsumexp", "stop_gradient", "gumbel", "iterate", "scan_blocks", "custom_vjp", "is_concrete"]


def softmax(xp: Any, z: Any, axis: int = -1) -> Any:
    return _softmax(xp, z, axis)


def logsumexp(xp: Any, z: Any, axis: int = -1) -> Any:
    return _logsumexp(xp, z, axis)


def stop_gradient(xp: Any, x: Any) -> Any:
    return x


def is_concrete(x: Any) -> bool:
    """Whether ``x`` holds values that may be read now (always, for eager backends)."""
    return True


def gumbel(xp: Any, key: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
    """Standard Gumbel(0, 1) noise; ``key`` is None, an int seed or a NumPy Generator."""
    if key is None or (isinstance(key, numbers.Integral) and not isinstance(key, bool)):
        rng = np.random.default_rng(None if key is None else int(key))
    elif isinstance(key, np.random.Generator):
        rng = key
    else:
        raise TypeError(
            f"key must be None, an int seed or a numpy.random.Generator for this backend, got {type(key).__name__}"
        )
    noise = rng.gumbel(size=shape)
    return xp.asarray(noise, dtype=dtype, device=device)


def iterate(xp: Any, step: Any, operands: Any, state: Any, **kwargs: Any) -> Any:
    from .._loops import iterate as _iterate

    return _iterate(xp, step, operands, state, **kwargs)


def custom_vjp(xp: Any, fwd: Any, bwd: Any, arrays: tuple[Any, ...], n_diff: int, residuals: Any = None) -> tuple[Any, ...]:
    """No autodiff here: the forward only (``rankops.vjp`` calls ``bwd`` itself)."""
    return fwd(xp, *arrays)[0]
