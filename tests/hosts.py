"""Array hosts for tests that compare one computation across backends."""

from __future__ import annotations

from typing import Any, Callable

import pytest

HOSTS = ["numpy", "array_api_strict", "torch", "jax"]


def host(name: str) -> tuple[Callable[[Any], Any], Callable[..., Any]]:
    """``(to, run)``: arrays of the host, and ``run(f, *arrays)`` (under ``jax.jit`` on JAX: eager JAX compiles op by op)."""
    mod = pytest.importorskip(name if name != "jax" else "jax.numpy")
    if name == "numpy":
        return (lambda a: a), (lambda f, *a: f(*a))
    if name == "jax":
        import jax

        return (lambda a: mod.asarray(a)), (lambda f, *a: jax.jit(f)(*a))
    return (lambda a: mod.asarray(a)), (lambda f, *a: f(*a))
