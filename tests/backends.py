"""Array backends for tests that compare one computation across backends."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from rankops._lib._backends import BACKENDS

# the backends whose arrays are eager and in memory on a CPU: Dask (lazy) has tests of its own, CuPy needs a GPU
CPU_BACKENDS = [b.name for b in BACKENDS if b.name not in ("dask", "cupy")]


def on_backend(name: str) -> tuple[Callable[[Any], Any], Callable[..., Any]]:
    """``(to, run)``: arrays of the backend, and ``run(f, *arrays)`` (under ``jax.jit`` on JAX: eager JAX compiles op by op)."""
    mod = pytest.importorskip(name if name != "jax" else "jax.numpy")
    if name == "numpy":
        return (lambda a: a), (lambda f, *a: f(*a))
    if name == "jax":
        import jax

        return (lambda a: mod.asarray(a)), (lambda f, *a: jax.jit(f)(*a))
    return (lambda a: mod.asarray(a)), (lambda f, *a: f(*a))


def assert_autodiff_equals_vjp(name: str, fn: Callable[..., Any], x: Any, k: Any, ct: Any, **opts: Any) -> None:
    """``fn(x, k, **opts)``'s gradients in x and k by torch.autograd or jax.grad (and x's by jax.jacfwd) equal
    ``rankops.vjp`` on NumPy: the backend's autodiff through the operator's own backward rule."""
    import numpy as np

    import rankops

    want = rankops.vjp(fn, x, k, **opts)[1](ct)
    if name == "torch":
        torch = pytest.importorskip("torch")
        xt, kt = torch.tensor(x, requires_grad=True), torch.tensor(k, requires_grad=True)
        got = [g.numpy() for g in torch.autograd.grad(fn(xt, kt, **opts), (xt, kt), torch.tensor(ct))]
    else:
        jax = pytest.importorskip("jax")
        jnp = jax.numpy
        got = jax.jit(jax.grad(lambda a, b: jnp.sum(jnp.asarray(ct) * fn(a, b, **opts)), argnums=(0, 1)))(jnp.asarray(x), jnp.asarray(k))
        # forward mode: the Jacobian's rows against the reverse-mode gradient
        jac = jax.jit(jax.jacfwd(lambda a: fn(a, jnp.asarray(k), **opts)))(jnp.asarray(x))
        np.testing.assert_allclose(np.einsum("bi,bibj->bj", ct, np.asarray(jac)), np.asarray(got[0]), atol=1e-12)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, atol=1e-12)
