"""Gradients under torch.autograd and jax.grad, checked against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops
from tests import reference as ref

torch = pytest.importorskip("torch")

METHODS = ("softsort", "neuralsort")
X = np.random.default_rng(0).normal(size=(3, 6)) * 2.0


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("fn", ["soft_sort", "soft_rank"])
@pytest.mark.parametrize(("descending", "axis"), [(False, -1), (True, -1), (False, 0)])
def test_torch_gradcheck(method, fn, descending, axis):
    x = torch.asarray(X.copy(), dtype=torch.float64).requires_grad_(True)
    op = getattr(rankops, fn)
    assert torch.autograd.gradcheck(lambda v: op(v, axis=axis, method=method, tau=0.7, descending=descending), (x,))
    assert torch.autograd.gradgradcheck(lambda v: op(v, axis=axis, method=method, tau=0.7, descending=descending), (x,))


@pytest.mark.parametrize("fn", [rankops.softsort, rankops.neuralsort])
def test_torch_gradcheck_matrices(fn):
    s = torch.asarray(X[:, :4].copy(), dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: fn(v, tau=0.5), (s,))


@pytest.mark.parametrize("method", METHODS)
def test_learnable_tau_gradient(method):
    x = torch.asarray(X.copy())
    tau = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: rankops.soft_rank(x, method=method, tau=t), (tau,))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("fn", ["soft_sort", "soft_rank"])
def test_jax_jit_grad_equals_torch(method, fn):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    w = np.random.default_rng(1).normal(size=X.shape)
    op = getattr(rankops, fn)

    x_t = torch.asarray(X.copy()).requires_grad_(True)
    (op(x_t, method=method, tau=0.5) * torch.asarray(w)).sum().backward()

    g = jax.jit(jax.grad(lambda v: jnp.sum(op(v, method=method, tau=0.5) * w)))(jnp.asarray(X))
    assert g.dtype == jnp.float64
    assert_allclose(np.asarray(g), x_t.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_torch_gradient_matches_central_differences_of_the_formula(method):
    """d <w, soft_sort(x)> / dx along a direction, against the float64 NumPy formula."""
    formula = ref.softsort if method == "softsort" else ref.neuralsort
    rng = np.random.default_rng(2)
    w, v = rng.normal(size=X.shape), rng.normal(size=X.shape)

    def loss_np(x):
        return float(np.sum(w * ref.sort_from(formula(x, 0.6, descending=False), x)))

    x_t = torch.asarray(X.copy()).requires_grad_(True)
    (rankops.soft_sort(x_t, method=method, tau=0.6) * torch.asarray(w)).sum().backward()
    assert_allclose(float(np.sum(x_t.grad.numpy() * v)), ref.central_difference(loss_np, X, v), rtol=1e-6)


@pytest.mark.parametrize("fn", [rankops.softsort, rankops.neuralsort])
def test_straight_through_gradient_is_the_soft_gradient(fn):
    w = torch.asarray(np.random.default_rng(3).normal(size=(3, 6, 6)))
    grads = []
    for hard in (False, True):
        s = torch.asarray(X.copy()).requires_grad_(True)
        (fn(s, tau=0.5, hard=hard) * w).sum().backward()
        grads.append(s.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)


def test_straight_through_under_jax():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    w = np.random.default_rng(4).normal(size=(3, 6, 6))
    g_soft = jax.grad(lambda s: jnp.sum(rankops.neuralsort(s, tau=0.5) * w))(jnp.asarray(X))
    g_hard = jax.grad(lambda s: jnp.sum(rankops.neuralsort(s, tau=0.5, hard=True) * w))(jnp.asarray(X))
    assert_allclose(np.asarray(g_hard), np.asarray(g_soft), rtol=0, atol=0)


def test_stochastic_gradient_flows_through_scores():
    """With a fixed key, the sample is a smooth function of the scores."""
    s = torch.asarray(X[0].copy()).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: rankops.softsort(v, tau=0.5, stochastic=True, key=5), (s,))


def test_unrolled_sinkhorn_gradient_is_the_same_checkpointed_or_kept_whole(monkeypatch):
    """Small problems skip the per-round checkpoint (its hooks cost more than the round): the gradient is bit for bit
    the checkpointed one, which recomputes the same operations (whose gradient the conformance suite checks against
    central differences)."""
    from rankops._lib._adapters import _torch

    x0 = torch.tensor([[0.3, -1.2, 2.5, 0.7, 1.9], [3.0, 2.0, 1.0, 0.0, -1.0]], dtype=torch.float64)
    w = torch.tensor([[1.0, -2.0, 0.5, 3.0, -1.0], [0.2, 0.4, -0.6, 0.8, -1.0]], dtype=torch.float64)

    def grad(bound):
        monkeypatch.setattr(_torch, "_KEPT_WHOLE", bound)
        x = x0.clone().requires_grad_()
        (rankops.soft_rank(x, epsilon=0.05) * w).sum().backward()
        return x.grad

    checkpointed, whole = grad(0), grad(2**40)
    assert torch.equal(checkpointed, whole)
    assert torch.count_nonzero(whole) == whole.numel()
