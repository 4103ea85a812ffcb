"""Second derivatives through the hand-written backward rules: torch ``gradgradcheck`` and ``jax.hessian``.

A rule's residuals are rebuilt from its inputs under the backend's autodiff
(``rankops._lib._adapters.rebuilt``), so the backend differentiates the
backward itself. The l2 permutahedron is piecewise linear: its second
derivative is 0 almost everywhere, which ``gradgradcheck`` confirms against
finite differences like any other. The Hessians are checked against central
differences of the backend's own gradient. Softness is not used here: its
scale is held constant in every derivative (docs/softness.md), so the
derivatives are checked at the native temperatures. The one refusal left,
Sinkhorn, is tested in tests/test_implicit.py and tests/test_forward_mode.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops

X = np.random.default_rng(0).normal(size=(2, 6))
MASK = np.array([[True] * 6, [True, False, True, True, False, True]])

# name -> f(x, mask as an array of the backend), at native temperatures
CASES = {
    "rank[permutahedron, l2]": lambda x, m: rankops.soft_rank(x, method="permutahedron", strength=0.5),
    "sort[permutahedron, l2]": lambda x, m: rankops.soft_sort(x, method="permutahedron", strength=0.5),
    "rank[permutahedron, kl]": lambda x, m: rankops.soft_rank(x, method="permutahedron", strength=0.5, regularization="kl"),
    "sort[permutahedron, kl]": lambda x, m: rankops.soft_sort(x, method="permutahedron", strength=0.5, regularization="kl"),
    "rank[permutahedron, mask]": lambda x, m: rankops.soft_rank(x, method="permutahedron", strength=0.5, mask=m),
    # the p-norm's blocks are placed by pooling rounds, whose Newton's steps (a q without closed forms: 1.35; q = 5)
    # take no derivative; the solve on the blocks does, twice
    "rank[permutahedron, lp, p=1.35]": lambda x, m: rankops.soft_rank(
        x, method="permutahedron", strength=0.5, regularization="lp", p=1.35),
    "rank[permutahedron, lp, p=1.25, mask]": lambda x, m: rankops.soft_rank(
        x, method="permutahedron", strength=0.5, regularization="lp", p=1.25, mask=m),
    "sort[permutahedron, lp, p=1.25]": lambda x, m: rankops.soft_sort(
        x, method="permutahedron", strength=2.0, regularization="lp", p=1.25),
    "topk[permutahedron, lp, p=1.35]": lambda x, m: rankops.soft_topk_mask(
        x, 2, method="permutahedron", strength=2.0, regularization="lp", p=1.35),
    "magnitude[lp]": lambda x, m: rankops.soft_topk_magnitude(x, 2, strength=2.0, regularization="lp", p=4 / 3),
    "rank[lapsum]": lambda x, m: rankops.soft_rank(x, method="lapsum", alpha=0.5),
    "sort[lapsum, descending]": lambda x, m: rankops.soft_sort(x, method="lapsum", alpha=0.5, descending=True),
    "topk[lapsum]": lambda x, m: rankops.soft_topk_mask(x, 2, method="lapsum", alpha=0.5),
    "rank[lapsum, mask]": lambda x, m: rankops.soft_rank(x, method="lapsum", alpha=0.5, mask=m),
    "rank[diffsort]": lambda x, m: rankops.soft_rank(x, method="diffsort", steepness=3.0),
    "sort[diffsort, mask]": lambda x, m: rankops.soft_sort(x, method="diffsort", steepness=3.0, mask=m),
    "diffsort matrix": lambda x, m: rankops.diffsort(x, steepness=3.0),
    "isotonic_regression": lambda x, m: rankops.isotonic_regression(x),
    "isotonic_regression[mask]": lambda x, m: rankops.isotonic_regression(x, mask=m),
}
# JAX compiles each Hessian: a few (the loops' bool state, a mask, a scan)
JAX_CASES = ["rank[permutahedron, l2]", "rank[permutahedron, lp, p=1.35]", "rank[permutahedron, lp, p=1.25, mask]",
             "sort[permutahedron, lp, p=1.25]", "rank[lapsum, mask]", "isotonic_regression[mask]"]


@pytest.mark.parametrize("name", list(CASES))
def test_torch_gradgradcheck(name):
    torch = pytest.importorskip("torch")
    x = torch.asarray(X).requires_grad_(True)
    mask = torch.asarray(MASK)
    assert torch.autograd.gradgradcheck(lambda v: CASES[name](v, mask), (x,))


@pytest.mark.parametrize("name", JAX_CASES)
def test_jax_hessian_equals_central_differences_of_the_gradient(name):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    mask = jnp.asarray(MASK)
    w = jnp.asarray(np.random.default_rng(1).normal(size=X.shape))

    def loss(v):
        out = CASES[name](v, mask)
        return jnp.sum(out * (w if out.shape == w.shape else 1.0)) + jnp.sum(out**2)

    x = jnp.asarray(X)
    hessian = np.asarray(jax.jit(jax.hessian(loss))(x)).reshape(X.size, X.size)
    grad = jax.jit(jax.grad(loss))
    h = 1e-5
    steps = np.eye(X.size).reshape((X.size,) + X.shape)
    numeric = np.stack([(np.asarray(grad(x + h * e)) - np.asarray(grad(x - h * e))).ravel() / (2 * h) for e in steps])
    assert_allclose(hessian, numeric, rtol=1e-6, atol=1e-7)
    assert np.abs(hessian).max() > 0.01  # a quadratic term: not a Hessian that is 0 by accident


def test_torch_func_hessian_and_the_sinkhorn_refusal():
    """``torch.func.hessian`` equals autograd's; a torch.func gradient of the implicit Sinkhorn rule is first order
    (``torch.func.grad`` works), and differentiating it again raises instead of missing the solve's own term."""
    torch = pytest.importorskip("torch")
    from torch.func import grad, hessian

    x = torch.asarray(X[0])

    def loss(v):
        return (rankops.soft_rank(v, method="lapsum", alpha=0.5) ** 2).sum()

    assert_allclose(hessian(loss)(x).numpy(), torch.autograd.functional.hessian(loss, x).numpy(), rtol=1e-10, atol=1e-12)

    def sinkhorn_loss(v):
        return (rankops.soft_rank(v, method="sinkhorn", implicit=True) ** 2).sum()

    xr = x.clone().requires_grad_(True)
    sinkhorn_loss(xr).backward()
    assert_allclose(grad(sinkhorn_loss)(x).numpy(), xr.grad.numpy(), rtol=1e-12, atol=1e-14)
    with pytest.raises(RuntimeError, match=r"implicit Sinkhorn backward .* pass implicit=False"):
        grad(lambda v: grad(sinkhorn_loss)(v).sum())(x)


def _jax_hessian_vector_product(loss, x: np.ndarray, v: np.ndarray, h: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """``loss``'s Hessian at ``x`` times ``v`` (JAX's ``jvp`` of ``grad`` under ``jit``), and central differences of
    its gradient along ``v``. One program: the ``jvp``'s primal output is the gradient itself (the same operations),
    so the differences take it at ``x +- h v`` instead of compiling ``grad`` alone as well."""
    import jax
    import jax.numpy as jnp

    gradient_and_product = jax.jit(lambda a, t: jax.jvp(jax.grad(loss), (a,), (t,)))
    step = jnp.asarray(v)
    ahead, behind = (np.asarray(gradient_and_product(jnp.asarray(x + s * h * v), step)[0]) for s in (1, -1))
    return np.asarray(gradient_and_product(jnp.asarray(x), step)[1]), (ahead - behind) / (2 * h)


@pytest.mark.parametrize("p", [1.35, 1.25])
def test_p_norm_hessian_vector_products_on_rows_that_take_the_guess_and_the_extensions(p):
    """Rows of 200 entries (the one-block guess from 128, the rounds' extensions from 64): a Hessian-vector product,
    JAX's ``jvp`` of ``grad`` under ``jit`` and torch's double backward, equals central differences of the gradient.
    At p = 1.35 (no closed form) and 1.25 (q = 5) the pooling rounds solve blocks by Newton's steps, whose loop JAX
    cannot transpose: the blocks' placement takes no derivative."""
    pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    import jax.numpy as jnp

    rng = np.random.default_rng(2)
    x, v, w = (rng.normal(size=(2, 200)) for _ in range(3))

    def loss(a, xp):
        out = rankops.soft_rank(a, method="permutahedron", strength=1.0, regularization="lp", p=p)
        return xp.sum(out * xp.asarray(w)) + xp.sum(out**2)

    product, numeric = _jax_hessian_vector_product(lambda a: loss(a, jnp), x, v)
    assert_allclose(product, numeric, rtol=1e-6, atol=1e-5 * np.abs(numeric).max())
    assert np.abs(numeric).max() > 1.0  # the rows hold blocks of several entries: curvature, not 2 I alone

    xt = torch.asarray(x).requires_grad_(True)
    (g,) = torch.autograd.grad(loss(xt, torch), xt, create_graph=True)
    (hv,) = torch.autograd.grad((g * torch.asarray(v)).sum(), xt)
    assert_allclose(hv.numpy(), numeric, rtol=1e-6, atol=1e-5 * np.abs(numeric).max())


def _long_row_cases() -> list:
    from conformance.operators import CASES

    # straight-through operators' gradients are not their values' (fd_gradient False); Sinkhorn refuses a Hessian
    return [case for case in CASES if case.fd_gradient and case.method != "sinkhorn"]


@pytest.mark.parametrize("case", _long_row_cases(), ids=str)
def test_hessian_vector_products_of_every_operator_on_long_rows(case):
    """Every operator and variant of the conformance suite but Sinkhorn's on rows of 200 entries, where the permutahedron
    takes its one-block guess and its rounds' extensions, the blocked scans their blocks: JAX's ``jvp`` of ``grad``
    under ``jit`` against central differences of that gradient."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    rng = np.random.default_rng(3)
    x, v = (rng.normal(size=(2, 200)) for _ in range(2))

    def loss(a):
        leaves = [b for b in jax.tree_util.tree_leaves(case(a)) if jnp.issubdtype(b.dtype, jnp.floating)]
        return sum(jnp.sum(b**2) + jnp.sum(jnp.sin(b)) for b in leaves)

    product, numeric = _jax_hessian_vector_product(loss, x, v)
    assert_allclose(product, numeric, rtol=1e-5, atol=1e-5 * np.abs(numeric).max())
