"""JAX adapter: fused kernels, ``lax.stop_gradient`` and explicit PRNG keys."""

from __future__ import annotations

import functools
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


def iterate(xp: Any, step: Any, state: Any, *, error: Any, freeze: Any, max_iter: int, tol: float, check_every: int) -> Any:
    """``lax`` version of :func:`rankops._lib._loops.iterate`: jit, vmap and grad safe.

    A ``lax.scan`` over blocks (a fixed trip count, so reverse-mode autodiff
    works) whose body is skipped by ``lax.cond`` once every problem is within
    ``tol``; problems that converged earlier are frozen as in the eager loop.
    Each iteration is rematerialised (``jax.checkpoint``), so the backward
    pass stores potentials per iteration, not n x m kernels. Under ``vmap``
    the batched predicate turns ``cond`` into ``select``: every block runs,
    and freezing keeps the results identical to the unbatched ones.
    """
    from jax import lax
    import jax.numpy as jnp

    from .._loops import settled

    step = jax.checkpoint(step)

    def run(k: int) -> Any:
        def body(carry: Any) -> Any:
            s, n, err = carry
            new = lax.fori_loop(0, k, lambda i, t: step(t), s)
            new = freeze(settled(xp, err, tol), s, new)
            return new, n + k, error(new)

        return body

    def blocks(carry: Any, count: int, k: int) -> Any:
        if count == 0 or k == 0:
            return carry

        def scan_body(c: Any, _: Any) -> Any:
            return lax.cond(jnp.all(settled(xp, c[2], tol)), lambda c_: c_, run(k), c), None

        return lax.scan(scan_body, carry, None, length=count)[0]

    spec = jax.eval_shape(error, state)  # shape and dtype only: no kernel pass
    err0 = jnp.full(spec.shape, jnp.inf, dtype=spec.dtype)  # nothing frozen at the start
    carry = (state, jnp.asarray(0, dtype=jnp.int32), err0)
    carry = blocks(carry, max_iter // check_every, check_every)
    return blocks(carry, 1, max_iter % check_every)


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return ("__dict__", tuple(sorted((k, _freeze(v)) for k, v in value.items())))
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "__dict__":
        return {k: _thaw(v) for k, v in value[1]}
    return value


@functools.lru_cache(maxsize=512)
def _compiled(impl: Any, frozen: tuple[tuple[str, Any], ...]) -> Any:
    import jax.numpy as jnp

    static = {k: _thaw(v) for k, v in frozen}
    return jax.jit(lambda x, arrays: impl(jnp, x, **arrays, **static))


def call(impl: Any, x: Any, arrays: dict[str, Any], params: dict[str, Any]) -> Any:
    """``impl(jnp, x, **arrays, **params)`` through a cached ``jax.jit``.

    Eager JAX would otherwise re-trace and re-compile the solver's ``lax``
    loops at every call. Python-valued parameters are static (part of the
    cache key); array-valued ones (a learnable tau) are traced arguments.
    Inside a caller's own ``jit`` / ``vmap`` / ``grad`` the inner ``jit`` is
    simply inlined.
    """
    import jax.numpy as jnp

    dynamic = dict(arrays)
    static = {}
    for k, v in params.items():
        if isinstance(v, jax.Array):
            dynamic[k] = v
        else:
            static[k] = v
    key = tuple(sorted((k, _freeze(v)) for k, v in static.items()))
    try:
        hash(key)
    except TypeError:  # an array nested in the options (a traced epsilon): no cache, trace inline
        return impl(jnp, x, **arrays, **params)
    return _compiled(impl, key)(x, dynamic)
