"""JAX forward mode (issue 33, item 6): ``jax.jacfwd`` / ``jvp`` through every method's hand-written backward.

A backward linear in its cotangent is registered as a ``jax.custom_jvp``
whose tangent map is that backward transposed (``jax.linear_transpose``);
reverse mode transposes it back. Sinkhorn's backward (guarded, and solved
by conjugate gradient) keeps the reverse mode; its forward mode is an
unguarded twin transposed, or the unrolled iterations' own ``jvp``. Every
case's ``jvp`` along a random direction agrees with central differences
of the float64 value (Sinkhorn at ``tol=1e-9``, whose value is then smooth
to 1e-12): one compiled program per case, which also gives the values.
The full ``jacfwd`` equals ``jax.jacrev`` (the backward itself) to
rounding: four cases, one per kind of rule, in the default run; every
case under ``-m exhaustive`` (each compiles three more programs).
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
    "soft_rank[lapsum]": lambda v: rankops.soft_rank(v, method="lapsum", alpha=1.0),
    "soft_sort[lapsum]": lambda v: rankops.soft_sort(v, method="lapsum", alpha=0.5),
    "soft_topk_mask[lapsum, k array]": lambda v: rankops.soft_topk_mask(v, jnp.asarray(2.5), method="lapsum", alpha=1.0),
    "soft_rank[permutahedron]": lambda v: rankops.soft_rank(v, method="permutahedron", strength=1.0),
    "soft_sort[permutahedron, kl, strength array]": lambda v: rankops.soft_sort(
        v, method="permutahedron", regularization="kl", strength=jnp.asarray(3.0)),
    "soft_sort[permutahedron, mask]": lambda v: rankops.soft_sort(v, method="permutahedron", strength=3.0, mask=jnp.asarray(MASK)),
    "soft_rank[softsort, streamed, tau array]": lambda v: rankops.soft_rank(v, method="softsort", block=2, tau=jnp.asarray(0.7)),
    "soft_sort[neuralsort, streamed]": lambda v: rankops.soft_sort(v, method="neuralsort", block=2, tau=1.0),
    "soft_rank[diffsort, bitonic]": lambda v: rankops.soft_rank(v, method="diffsort", network="bitonic", steepness=2.0),
    "diffsort matrix, mask": lambda v: rankops.diffsort(v, steepness=2.0, mask=jnp.asarray(MASK)),
    "isotonic_regression": lambda v: rankops.isotonic_regression(v),
    "soft_kendall_tau": lambda v: rankops.soft_kendall_tau(v, v[::-1] ** 2),
    "soft_rank[sinkhorn]": lambda v: rankops.soft_rank(v, epsilon=0.3, tol=1e-9),
    "soft_sort[sinkhorn, unrolled, topk]": lambda v: rankops.soft_sort(v, implicit=False, topk=3, epsilon=0.3, tol=1e-9),
    "soft_quantile[sinkhorn, mask, epsilon array]": lambda v: rankops.soft_quantile(
        v, jnp.asarray([0.2, 0.7]), mask=jnp.asarray(MASK), epsilon=jnp.asarray(0.05), tol=1e-9),
    "soft_quantile_normalize[power 1.5]": lambda v: rankops.soft_quantile_normalize(v, jnp.linspace(-1.0, 1.0, 4), power=1.5, epsilon=0.3, tol=1e-9),
}


@pytest.mark.parametrize("name", CASES)
def test_jvp_equals_central_differences(name):
    f = CASES[name]
    h, d = 1e-6, jnp.asarray(np.random.default_rng(1).normal(size=X.shape))
    x = jnp.asarray(X)
    # the primal output of the same jvp program gives the values of the difference
    tangent = np.asarray(jax.jvp(f, (x,), (d,))[1])
    fd = (np.asarray(jax.jvp(f, (x + h * d,), (d,))[0]) - np.asarray(jax.jvp(f, (x - h * d,), (d,))[0])) / (2 * h)
    assert_allclose(tangent, fd, rtol=1e-5, atol=1e-7)


# one per kind of forward rule: a transposed backward, Sinkhorn's implicit twin, Sinkhorn's unrolled loop
_JACREV_QUICK = ("soft_rank[lapsum]", "soft_rank[permutahedron]", "soft_rank[sinkhorn]", "soft_sort[sinkhorn, unrolled, topk]")


@pytest.mark.parametrize("name", [n if n in _JACREV_QUICK else pytest.param(n, marks=pytest.mark.exhaustive) for n in CASES])
def test_jacfwd_equals_jacrev(name):
    f = CASES[name]
    x = jnp.asarray(X)
    assert_allclose(np.asarray(jax.jacfwd(f)(x)), np.asarray(jax.jacrev(f)(x)), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("method", ["lapsum", pytest.param("permutahedron", marks=pytest.mark.exhaustive)])
def test_softness_forward_mode(method):
    """With softness (the row sorted once by the scale, no gradient through it): jacfwd equals jacrev in x, and the
    tangent in a learnable softness equals central differences in it."""
    x = jnp.asarray(X)

    def f(v, s):
        return rankops.soft_rank(v, method=method, softness=s)

    s = jnp.asarray(1.5)
    assert_allclose(np.asarray(jax.jacfwd(f)(x, s)), np.asarray(jax.jacrev(f)(x, s)), rtol=1e-10, atol=1e-12)
    h = 1e-6
    tangent = np.asarray(jax.jvp(lambda t: f(x, t), (s,), (jnp.ones(()),))[1])
    assert_allclose(tangent, (np.asarray(f(x, s + h)) - np.asarray(f(x, s - h))) / (2 * h), rtol=1e-5, atol=1e-7)


def test_jvp_under_jit_and_vmap():
    f = CASES["soft_rank[lapsum]"]
    xs = jnp.asarray(np.random.default_rng(2).normal(size=(3, 6)))
    ts = jnp.ones_like(xs)
    batched = jax.jit(jax.vmap(lambda v, t: jax.jvp(f, (v,), (t,))[1]))(xs, ts)
    rows = [np.asarray(jax.jacfwd(f)(v)) @ np.ones(6) for v in xs]
    assert_allclose(np.asarray(batched), np.stack(rows), rtol=1e-10, atol=1e-12)
    hessian = jax.hessian(lambda v: jnp.sum(f(v) ** 2))(xs[0])  # forward over reverse
    assert hessian.shape == (6, 6) and np.isfinite(np.asarray(hessian)).all()


def test_sinkhorn_solver_in_each_argument():
    """``rankops.sinkhorn``: the plan and the potentials' well-defined combinations, in the cost and both marginals.

    Implicit differentiation (the unrolled loop's forward mode is in the ``soft_sort`` case above)."""
    rng = np.random.default_rng(3)
    cost, a, b = rng.random((4, 3)), rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(3))

    def f(c, a, b):
        r = rankops.sinkhorn(c, a, b, epsilon=0.1, implicit=True, tol=1e-10)
        return r.plan, r.f[:, None] + r.g[None, :], jnp.sum(a * r.f) + jnp.sum(b * r.g)

    args = tuple(jnp.asarray(v) for v in (cost, a, b))
    forward = jax.jacfwd(f, argnums=(0, 1, 2))(*args)
    reverse = jax.jacrev(f, argnums=(0, 1, 2))(*args)
    for fw, rv in zip(jax.tree_util.tree_leaves(forward), jax.tree_util.tree_leaves(reverse)):
        assert_allclose(np.asarray(fw), np.asarray(rv), rtol=1e-9, atol=1e-12)
    assert np.abs(np.asarray(forward[0][0])).max() > 0.1  # the plan moves with the cost


def test_sinkhorn_forward_mode_at_float32_range():
    """The forward rule has no range guard and needs none: rows near 1e30 in float32 give finite tangents, as reverse mode does."""
    x = jnp.asarray(X * 1e30, dtype=jnp.float32)
    forward, reverse = np.asarray(jax.jacfwd(rankops.soft_sort)(x)), np.asarray(jax.jacrev(rankops.soft_sort)(x))
    assert np.isfinite(forward).all()
    assert_allclose(forward, reverse, rtol=0, atol=1e-4 * np.abs(reverse).max())


def test_second_derivatives_through_sinkhorn_raise():
    """Differentiating Sinkhorn's backward itself is not implemented: a clear error, never a number that misses a term."""
    with pytest.raises(TypeError, match="second derivatives through a Sinkhorn solve"):
        jax.hessian(lambda c: jnp.sum(rankops.sinkhorn(c, epsilon=0.5, implicit=True).plan ** 2))(jnp.asarray(np.eye(2)))
    with pytest.raises(TypeError, match="second derivatives through a Sinkhorn solve"):
        jax.hessian(lambda c: jnp.sum(rankops.sinkhorn(c, epsilon=0.5).plan ** 2))(jnp.asarray(np.eye(2)))
