"""Gradients under the backend framework's autodiff: finite differences, jit, vmap.

Parametrised over the backends with autodiff (torch, JAX) and each of their
devices; the backends without autodiff are not collected here. Every test
uses ``inputs.SHAPE`` and the gradient tests the converged options, so that
JAX compiles an operator's gradient once for all of them. On JAX, the
transformations: ``jit(vmap(grad))`` with the values under ``vmap`` as the
gradient's auxiliary output (one program for both), and, in the
``exhaustive`` tier, ``vmap`` of ``vmap`` eagerly (``jit`` of the plain call
is the inner case of both).
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

from .operators import CASES, converged
from .inputs import SHAPE, well_separated as _data


def _loss_and_grad(backend, device, fn, x, w):
    """Value and gradient of <w, fn(x)> by the backend's autodiff, as NumPy."""
    if backend.name == "torch":
        xt = backend.asarray(x, device=device).requires_grad_(True)
        loss = (fn(xt) * backend.asarray(w, device=device)).sum()
        loss.backward()
        return float(loss.detach()), backend.to_numpy(xt.grad)
    if backend.name == "jax":
        import jax
        import jax.numpy as jnp

        wj = backend.asarray(w, device=device)
        val, g = jax.value_and_grad(lambda v: jnp.sum(fn(v) * wj))(backend.asarray(x, device=device))
        return float(val), backend.to_numpy(g)
    raise AssertionError(backend.name)


SMOOTH = [o for o in CASES if o.fd_gradient]
STRAIGHT_THROUGH = [o for o in CASES if not o.fd_gradient]


# on JAX, test_jit_vmap_grad_matches_eager_grad checks its eager gradient against the same central differences: this
# check's own program per operator there is exhaustive
@pytest.mark.variants_on_jax(op=())
@pytest.mark.parametrize("op", SMOOTH, ids=lambda o: o.name)
def test_gradient_matches_central_differences(autodiff_backend, device, op):
    """The backend's gradient of <w, op(x)> along a random direction against central differences of the float64 NumPy operator."""
    backend = autodiff_backend
    rng = np.random.default_rng(0)
    x = _data(SHAPE, seed=6) * 0.5
    w = rng.normal(size=op.out_shape(x.shape))
    v = rng.normal(size=x.shape)
    kw = converged(op)
    _, g = _loss_and_grad(backend, device, lambda v: op(v, **kw), x, w)
    _assert_matches_central_differences(g, op, kw, x, w, v)


def _assert_matches_central_differences(g, op, kw, x, w, v, h=1e-5):
    """``<g, v>``, a gradient of ``<w, op(x)>`` along ``v``, against central differences of the same operator on
    float64 NumPy (values agree across backends: test_contract)."""

    def loss(z):
        return float(np.sum(np.asarray(op(z, **kw)) * w))

    fd = (loss(x + h * v) - loss(x - h * v)) / (2 * h)
    assert_allclose(np.sum(g * v), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.every_variant
@pytest.mark.parametrize("op", STRAIGHT_THROUGH, ids=lambda o: o.name)
def test_straight_through_gradient_equals_relaxed(autodiff_backend, device, op):
    """Straight-through operators: the value is exact, the gradient the relaxed one's."""
    backend = autodiff_backend
    x = _data(SHAPE, seed=7)
    w = np.random.default_rng(1).normal(size=op.out_shape(x.shape))
    _, g_hard = _loss_and_grad(backend, device, op, x, w)
    _, g_soft = _loss_and_grad(backend, device, lambda v: op(v, hard=False), x, w)
    assert_allclose(g_hard, g_soft, rtol=1e-12, atol=1e-14)


# the values under vmap are also those of jit(vmap(grad)) below, which compiles them in the same program
@pytest.mark.exhaustive
def test_vmap_matches_batch(jax_backend, op):
    """``vmap`` of ``vmap``, eagerly: the batch's values."""
    import jax

    x = jax_backend.asarray(_data(SHAPE, seed=9))
    assert_allclose(np.asarray(jax.vmap(jax.vmap(op))(x)), np.asarray(op(x)), rtol=1e-12, atol=1e-12)


def test_jit_vmap_grad_matches_eager_grad(jax_backend, op):
    """``jit(vmap(grad))``, a training step's transformations at once, over the leading batch axis: the eager batch's values and
    gradient, and that gradient against central differences (test_gradient_matches_central_differences' check on JAX)."""
    import jax
    import jax.numpy as jnp

    x = jax_backend.asarray(_data(SHAPE, seed=10) * 0.5)
    w = jnp.asarray(np.random.default_rng(2).normal(size=op.out_shape(SHAPE)))
    kw = converged(op)  # the eager gradient is then the one test_gradient_matches_central_differences compiled

    def loss(v, wv):
        y = op(v, **kw)
        return jnp.sum(y * wv), y

    got, values = jax.jit(jax.vmap(jax.grad(loss, has_aux=True)))(x, w)
    expected, expected_values = jax.grad(loss, has_aux=True)(x, w)
    assert_allclose(np.asarray(values), np.asarray(expected_values), rtol=1e-12, atol=1e-12)
    assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-10, atol=1e-12)
    if op.fd_gradient:  # the eager gradient along a random direction
        _assert_matches_central_differences(np.asarray(expected), op, kw, np.asarray(x), np.asarray(w),
                                            np.random.default_rng(3).normal(size=SHAPE))


# the option variants (descending, block sizes, ...) take the same transforms' code paths: theirs are exhaustive
@pytest.mark.parametrize("op", [pytest.param(o, marks=() if o.primary else pytest.mark.exhaustive) for o in CASES],
                         ids=lambda o: o.name)
def test_torch_func_transforms_match_eager_autograd(torch_backend, op):
    """``torch.func``'s ``grad``, ``vmap``, ``jacrev`` and ``jacfwd`` (and ``vmap`` of ``jacrev``) against eager autograd.

    Every operator and method: hand-written backwards run as ``autograd.Function`` s
    with ``setup_context`` and a ``vmap`` rule (the forward per mapped slice), and
    under ``vmap`` the solvers' loops read their stopping test under the map: they stop once every mapped problem
    settled, settled ones frozen (the same numbers as a batch). ``jacfwd`` differentiates the forward's own
    operations: for Sinkhorn, the converged iterations (equal to the implicit Jacobian at tight ``tol``).
    """
    import torch
    from torch.func import grad, jacfwd, jacrev, vmap

    kw = converged(op)
    f = lambda v: op(v, **kw)  # noqa: E731
    x = torch.asarray(_data(SHAPE, seed=13) * 0.5)
    w = torch.asarray(np.random.default_rng(5).normal(size=op.out_shape(SHAPE)))
    xr = x.clone().requires_grad_(True)
    (f(xr) * w).sum().backward()
    assert_allclose(grad(lambda v: (f(v) * w).sum())(x).numpy(), xr.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert_allclose(vmap(f)(x).numpy(), f(x).numpy(), rtol=1e-12, atol=1e-12)
    row = x[0]  # (2, 7): two rows, so that a Jacobian shows they are independent
    eager = torch.autograd.functional.jacobian(f, row).numpy()
    assert_allclose(jacrev(f)(row).numpy(), eager, rtol=1e-10, atol=1e-12)
    assert_allclose(jacfwd(f)(row).numpy(), eager, rtol=1e-7, atol=1e-9)
    assert_allclose(vmap(jacrev(f))(x).numpy(), np.stack([jacrev(f)(r).numpy() for r in x]), rtol=1e-10, atol=1e-12)
