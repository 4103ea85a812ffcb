"""JAX adapter: fused kernels, ``lax.stop_gradient`` and explicit PRNG keys."""

from __future__ import annotations

import numbers
from typing import Any

import jax


def softmax(xp: Any, z: Any, axis: int = -1) -> Any:
    return jax.nn.softmax(z, axis=axis)


def logsumexp(xp: Any, z: Any, axis: int = -1) -> Any:
    return jax.nn.logsumexp(z, axis=axis)


def stop_gradient(xp: Any, x: Any) -> Any:
    return jax.lax.stop_gradient(x)


def gumbel(xp: Any, key: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
    """Gumbel(0, 1) noise from ``key``: a ``jax.random`` key or an int seed.

    JAX has no global generator, so a key is required (as in ``jax.random``).
    """
    if key is None:
        raise ValueError("key is required for JAX arrays: pass jax.random.key(seed) or an int seed")
    if isinstance(key, numbers.Integral) and not isinstance(key, bool):
        key = jax.random.key(int(key))
    elif not isinstance(key, jax.Array):
        raise TypeError(f"key must be a jax.random key or an int seed for JAX arrays, got {type(key).__name__}")
    return jax.random.gumbel(key, shape, dtype=dtype)
