"""SoftSort / NeuralSort soft sorts and ranks computed in row blocks (rankops._cores.permutation).

References: the papers' matrices in float64 NumPy (tests/reference.py) for
values, and torch.autograd through the same formulas written densely in
torch inside this file for gradients; neither shares code with the blocks.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose

import rankops
from tests import reference as ref

OPS = {"soft_sort": rankops.soft_sort, "soft_rank": rankops.soft_rank}
MATRICES = {"softsort": ref.softsort, "neuralsort": ref.neuralsort}


def _x(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape) * 1.5


def _expected(op, method, x, tau, descending, **options):
    p = MATRICES[method](x, tau, descending=descending, **options)
    if op == "soft_sort":
        return ref.sort_from(p, x)
    return np.einsum("i,...ij->...j", np.arange(1.0, x.shape[-1] + 1), p)


@pytest.mark.eager_backends
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("method", MATRICES)
@pytest.mark.parametrize("block", [1, 4, None])
@pytest.mark.parametrize("descending", [False, True])
def test_values_match_formula(backend, device, op, method, block, descending):
    x = _x((2, 3, 11))
    got = OPS[op](backend.asarray(x, device=device), method=method, tau=0.4, block=block, descending=descending)
    assert_allclose(backend.to_numpy(got), _expected(op, method, x, 0.4, descending), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("op", OPS)
def test_softsort_power_and_axis(op):
    x = _x((9, 4), seed=1)
    got = OPS[op](x, method="softsort", tau=0.8, power=1.5, block=2, axis=0)
    want = _expected(op, "softsort", x.T, 0.8, False, power=1.5).T
    assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape", [(1,), (4, 1), (0, 5), (2, 0, 3)])
@pytest.mark.parametrize("method", MATRICES)
def test_degenerate_shapes(shape, method):
    x = _x(shape)
    for op, fn in OPS.items():
        got = fn(x, method=method, block=2)
        assert got.shape == x.shape
        assert_allclose(got, fn(x, method=method, block=None), rtol=1e-12, atol=1e-12)


# --- gradients -----------------------------------------------------------


def _torch_dense(op, method, x, tau, descending, power=1.0):
    """The papers' matrices in torch, differentiated by torch.autograd (no rankops code)."""
    n = x.shape[-1]
    if method == "softsort":
        s_sorted = torch.sort(x, dim=-1, descending=descending).values
        p = torch.softmax(-torch.abs(s_sorted[..., :, None] - x[..., None, :]) ** power / tau, dim=-1)
    else:
        a = torch.abs(x[..., :, None] - x[..., None, :]).sum(-1)
        scaling = n + 1 - 2 * torch.arange(1, n + 1, dtype=x.dtype)
        p = torch.softmax((scaling[:, None] * x[..., None, :] - a[..., None, :]) / tau, dim=-1)
        p = p if descending else p.flip(-2)
    if op == "soft_sort":
        return (p @ x[..., None])[..., 0]
    return torch.arange(1, n + 1, dtype=x.dtype) @ p


CASES = [
    ("soft_sort", "softsort", False, {}),
    ("soft_sort", "softsort", True, {"power": 1.5}),
    ("soft_rank", "softsort", False, {}),
    ("soft_rank", "softsort", True, {"power": 2.0}),
    ("soft_sort", "neuralsort", False, {}),
    ("soft_sort", "neuralsort", True, {}),
    ("soft_rank", "neuralsort", False, {}),
    ("soft_rank", "neuralsort", True, {}),
]


# one case per operator and method, for the slower (compiling / every-backend) tests
FEW = [CASES[i] for i in (0, 3, 5, 6)]


def _reference_grads(op, method, descending, options, x, w, tau=0.6):
    xt = torch.asarray(x).requires_grad_(True)
    tt = torch.tensor(tau, dtype=torch.float64, requires_grad=True)
    out = _torch_dense(op, method, xt, tt, descending, **options)
    gx, gt = torch.autograd.grad((out * torch.asarray(w)).sum(), (xt, tt))
    return out.detach().numpy(), gx.numpy(), gt.numpy()


@pytest.mark.parametrize("op, method, descending, options", CASES)
@pytest.mark.parametrize("block", [1, 3, "auto"])
def test_torch_gradient_matches_dense_autograd(op, method, descending, options, block):
    x, w = _x((2, 9)), _x((2, 9), seed=5)
    want_out, want_gx, want_gt = _reference_grads(op, method, descending, options, x, w)
    xt = torch.asarray(x).requires_grad_(True)
    tt = torch.tensor(0.6, dtype=torch.float64, requires_grad=True)
    out = OPS[op](xt, method=method, tau=tt, block=block, descending=descending, **options)
    gx, gt = torch.autograd.grad((out * torch.asarray(w)).sum(), (xt, tt))
    assert_allclose(out.detach().numpy(), want_out, rtol=1e-10, atol=1e-12)
    assert_allclose(gx.numpy(), want_gx, rtol=1e-9, atol=1e-11)
    assert_allclose(gt.numpy(), want_gt, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("op, method, descending, options", FEW)
def test_jax_jit_grad_and_vmap(op, method, descending, options):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x, w = _x((3, 10)), _x((3, 10), seed=5)
    _, want_gx, want_gt = _reference_grads(op, method, descending, options, x, w)

    def loss(v, tau, wv):
        return jnp.sum(wv * OPS[op](v, method=method, tau=tau, block=4, descending=descending, **options))

    gx, gt = jax.jit(jax.grad(loss, argnums=(0, 1)))(jnp.asarray(x), jnp.asarray(0.6), jnp.asarray(w))
    assert_allclose(np.asarray(gx), want_gx, rtol=1e-9, atol=1e-11)
    assert_allclose(np.asarray(gt), want_gt, rtol=1e-9, atol=1e-11)
    mapped = jax.jit(jax.vmap(jax.grad(loss), in_axes=(0, None, 0)))(jnp.asarray(x), jnp.asarray(0.6), jnp.asarray(w))
    assert_allclose(np.asarray(mapped), want_gx, rtol=1e-9, atol=1e-11)


@pytest.mark.eager_backends
@pytest.mark.parametrize("op, method, descending, options", FEW)
def test_rule_without_autodiff_matches_torch(backend, op, method, descending, options):
    """rankops.vjp on every backend (its own block-recomputing rule on NumPy, Dask, strict)."""
    x, w = _x((2, 9)), _x((2, 9), seed=5)
    _, want_gx, want_gt = _reference_grads(op, method, descending, options, x, w)
    xb = backend.asarray(x)
    tau = backend.asarray(np.asarray(0.6)) if not backend.name == "dask" else 0.6
    _, vjp_fn = rankops.vjp(OPS[op], xb, method=method, tau=tau, block=2, descending=descending, **options)
    grads = vjp_fn(backend.asarray(w))
    assert_allclose(backend.to_numpy(grads[0]), want_gx, rtol=1e-9, atol=1e-11)
    if backend.name != "dask":  # Dask takes tau as a Python number only
        assert_allclose(backend.to_numpy(grads[1]), want_gt, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("method", MATRICES)
def test_hard_value_is_exact_and_gradient_is_relaxed(op, method):
    x, w = _x((2, 8)), _x((2, 8), seed=5)
    xt = torch.asarray(x).requires_grad_(True)
    out = OPS[op](xt, method=method, tau=0.6, hard=True, block=3)
    exact = np.sort(x, axis=-1) if op == "soft_sort" else np.argsort(np.argsort(x, axis=-1), axis=-1) + 1.0
    assert_allclose(out.detach().numpy(), exact, rtol=0, atol=0)
    (g,) = torch.autograd.grad((out * torch.asarray(w)).sum(), xt)
    _, want, _ = _reference_grads(op, method, False, {}, x, w)
    assert_allclose(g.numpy(), want, rtol=1e-9, atol=1e-11)


def test_float32_blocks_match_the_float32_matrix():
    """Blocks change only the summation order: float32 agrees with the dense float32 path to rounding."""
    x, w = _x((4, 300)), _x((4, 300), seed=5)
    for op in OPS:
        for method in MATRICES:
            results = []
            for block in (32, None):
                xt = torch.asarray(x, dtype=torch.float32).requires_grad_(True)
                out = OPS[op](xt, method=method, tau=0.5, block=block)
                (g,) = torch.autograd.grad((out * torch.asarray(w, dtype=torch.float32)).sum(), xt)
                assert out.dtype == g.dtype == torch.float32
                results.append((out.detach().double().numpy(), g.double().numpy()))
            (out, g), (out_dense, g_dense) = results
            assert_allclose(out, out_dense, rtol=1e-5, atol=1e-5 * np.abs(out_dense).max())
            assert_allclose(g, g_dense, rtol=1e-4, atol=1e-4 * np.abs(g_dense).max())


@pytest.mark.parametrize("method", MATRICES)
def test_torch_second_derivatives(method):
    """create_graph=True re-runs the block backward under autograd: Hessian-vector products match the dense ones."""
    x, v = _x((2, 6)), _x((2, 6), seed=3)
    hvps = []
    for block in (2, None):
        xt = torch.asarray(x).requires_grad_(True)
        loss = (rankops.soft_rank(xt, method=method, tau=0.6, block=block) ** 2).sum()
        (g,) = torch.autograd.grad(loss, xt, create_graph=True)
        (h,) = torch.autograd.grad((g * torch.asarray(v)).sum(), xt)
        hvps.append(h.numpy())
    assert np.abs(hvps[1]).max() > 1e-3
    assert_allclose(hvps[0], hvps[1], rtol=1e-9, atol=1e-11)


def test_jax_reverse_over_reverse():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x, v = jnp.asarray(_x((6,))), jnp.asarray(_x((6,), seed=3))

    def hvp(block):
        def loss(u):
            return jnp.sum(rankops.soft_sort(u, method="neuralsort", tau=0.6, block=block) ** 3)

        return np.asarray(jax.jit(jax.grad(lambda u: jnp.vdot(jax.grad(loss)(u), v)))(x))

    streamed, dense = hvp(2), hvp(None)
    assert np.abs(dense).max() > 1e-3
    assert_allclose(streamed, dense, rtol=1e-9, atol=1e-11)


# --- memory --------------------------------------------------------------


@pytest.mark.parametrize("method", MATRICES)
def test_memory_is_linear_in_n(method):
    """NumPy forward and rankops.vjp backward at n = 3000 never hold an n x n array.

    One float64 3000 x 3000 matrix is 72 MB; with 16-row blocks each block
    temporary is 0.4 MB, so the traced peak stays a few MB.
    """
    n = 3000
    x, w = _x((1, n)), _x((1, n), seed=5)
    tracemalloc.start()
    try:
        value, vjp_fn = rankops.vjp(rankops.soft_rank, x, method=method, tau=0.5, block=16)
        (g,) = vjp_fn(w)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8e6, f"peak {peak / 1e6:.1f} MB"
    # the numbers are still those of the dense computation
    small = slice(0, 50)
    assert np.isfinite(g).all() and value.shape == (1, n)
    assert_allclose(value[:, small], rankops.soft_rank(x, method=method, tau=0.5, block=None)[:, small], rtol=1e-10)
