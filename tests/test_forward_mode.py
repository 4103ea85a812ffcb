"""JAX forward mode (issue 33, item 6): ``jax.jacfwd`` / ``jvp`` through every method's hand-written backward.

A backward linear in its cotangent is registered as a ``jax.custom_jvp``
whose tangent map is that backward transposed (``jax.linear_transpose``);
reverse mode transposes it back. The references: ``jax.jacrev`` (the
backward itself) and central differences of the float64 value. Sinkhorn's
operators are reverse mode only (docs/api.md, "Forward mode").
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops

jax = pytest.importorskip("jax")
jnp = jax.numpy

X = np.random.default_rng(11).normal(size=6) * 2
MASK = np.array([True, True, False, True, True, False])
CASES = {
    "soft_rank[lapsum]": lambda v: rankops.soft_rank(v, method="lapsum"),
    "soft_sort[lapsum]": lambda v: rankops.soft_sort(v, method="lapsum", alpha=0.5),
    "soft_topk_mask[lapsum, k array]": lambda v: rankops.soft_topk_mask(v, jnp.asarray(2.5), method="lapsum"),
    "soft_rank[permutahedron]": lambda v: rankops.soft_rank(v, method="permutahedron"),
    "soft_sort[permutahedron, kl, strength array]": lambda v: rankops.soft_sort(
        v, method="permutahedron", regularization="kl", strength=jnp.asarray(3.0)),
    "soft_sort[permutahedron, mask]": lambda v: rankops.soft_sort(v, method="permutahedron", strength=3.0, mask=jnp.asarray(MASK)),
    "soft_rank[softsort, streamed, tau array]": lambda v: rankops.soft_rank(v, method="softsort", block=2, tau=jnp.asarray(0.7)),
    "soft_sort[neuralsort, streamed]": lambda v: rankops.soft_sort(v, method="neuralsort", block=2),
    "soft_rank[diffsort, bitonic]": lambda v: rankops.soft_rank(v, method="diffsort", network="bitonic", steepness=2.0),
    "diffsort matrix, mask": lambda v: rankops.diffsort(v, steepness=2.0, mask=jnp.asarray(MASK)),
    "isotonic_regression": lambda v: rankops.isotonic_regression(v),
    "soft_kendall_tau": lambda v: rankops.soft_kendall_tau(v, v[::-1] ** 2),
}


@pytest.mark.parametrize("name", CASES)
def test_jacfwd_equals_jacrev_and_central_differences(name):
    f = CASES[name]
    x = jnp.asarray(X)
    forward = np.asarray(jax.jacfwd(f)(x))
    assert_allclose(forward, np.asarray(jax.jacrev(f)(x)), rtol=1e-10, atol=1e-12)
    h, d = 1e-6, np.random.default_rng(1).normal(size=X.shape)
    fd = (np.asarray(f(jnp.asarray(X + h * d))) - np.asarray(f(jnp.asarray(X - h * d)))) / (2 * h)
    assert_allclose(forward @ d, fd, rtol=1e-5, atol=1e-7)


def test_jvp_under_jit_and_vmap():
    f = CASES["soft_rank[lapsum]"]
    xs = jnp.asarray(np.random.default_rng(2).normal(size=(3, 6)))
    ts = jnp.ones_like(xs)
    batched = jax.jit(jax.vmap(lambda v, t: jax.jvp(f, (v,), (t,))[1]))(xs, ts)
    rows = [np.asarray(jax.jacfwd(f)(v)) @ np.ones(6) for v in xs]
    assert_allclose(np.asarray(batched), np.stack(rows), rtol=1e-10, atol=1e-12)
    hessian = jax.hessian(lambda v: jnp.sum(f(v) ** 2))(xs[0])  # forward over reverse
    assert hessian.shape == (6, 6) and np.isfinite(np.asarray(hessian)).all()


def test_sinkhorn_is_reverse_mode_only():
    """The documented limit: a clear JAX error, not a wrong number."""
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jacfwd(lambda v: rankops.soft_rank(v))(jnp.asarray(X))
