"""Implicit differentiation of the Sinkhorn fixed point, under torch.autograd and jax.grad.

At convergence the implicit gradient must equal the gradient unrolled
through the iterations (an independent computation: autodiff of the
forward loop) and central finite differences, for every Sinkhorn operator,
with respect to every array argument.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops
from tests import reference as ref

torch = pytest.importorskip("torch")

from tests.torch_autograd import torch_gradients  # noqa: E402  (needs torch)
from tests.reference import FLOAT32_TOL

TIGHT = {"tol": 1e-12, "max_iter": 100_000}
RNG = np.random.default_rng(11)
X = RNG.normal(size=(3, 6))
WEIGHTS = np.array([0.1, 0.2, 0.3, 0.4])
TARGETS = np.array([-1.0, 0.0, 0.5, 2.0])
LEVELS = np.array([0.2, 0.5, 0.9])

# id -> (operator, positional args, options); every array among them is differentiated
CASES = {
    "rank-eps0.1": (rankops.soft_rank, (), {"epsilon": 0.1}),
    "rank-eps0.03-desc": (rankops.soft_rank, (), {"epsilon": 0.03, "descending": True}),
    "sort-m4": (rankops.soft_sort, (), {"epsilon": 0.05, "num_targets": 4}),
    "sort-weights": (rankops.soft_sort, (), {"epsilon": 0.05, "target_weights": WEIGHTS}),
    "cdf-weights-arctan": (rankops.soft_cdf, (), {"epsilon": 0.05, "target_weights": WEIGHTS, "squash": "arctan"}),
    "quantile-0.3": (rankops.soft_quantile, (0.3,), {"epsilon": 0.05}),
    "quantile-levels": (rankops.soft_quantile, (LEVELS,), {"epsilon": 0.05}),
    "topk-2": (rankops.soft_topk_mask, (2,), {"epsilon": 0.1}),
    "quantile-normalize": (rankops.soft_quantile_normalize, (TARGETS,), {"epsilon": 0.05, "target_weights": WEIGHTS}),
    "rank-minmax-power1.5": (rankops.soft_rank, (), {"epsilon": 0.05, "squash": "minmax", "power": 1.5}),
    "topk3-unsquashed-power3": (rankops.soft_sort, (), {"epsilon": 0.5, "squash": None, "power": 3.0, "topk": 3}),
    "quantile-levels-power0.5": (rankops.soft_quantile, (LEVELS,), {"epsilon": 0.05, "power": 0.5}),
}


def _torch_grads(fn, args, options, implicit):
    """Gradients of <w, fn(...)> (w normal from seed 0) with respect to X and every array argument."""
    return torch_gradients(fn, X, args, {**options, "implicit": implicit, **TIGHT}, seed=0)[1]


@pytest.mark.parametrize("case", CASES)
def test_torch_implicit_equals_unrolled(case):
    fn, args, options = CASES[case]
    unrolled = _torch_grads(fn, args, options, implicit=False)
    implicit = _torch_grads(fn, args, options, implicit=True)
    assert len(implicit) == 1 + sum(isinstance(a, np.ndarray) for a in (*args, *options.values()))
    for g_imp, g_unr in zip(implicit, unrolled):
        assert_allclose(g_imp, g_unr, rtol=1e-7, atol=1e-9 * max(1.0, np.abs(g_unr).max()))


# each case compiles JAX's unrolled gradient (the solver's loop differentiated): the default run keeps the rank and
# the quantile normalisation (custom targets and their weights), the other readouts run under -m exhaustive
@pytest.mark.parametrize("case", ["rank-eps0.1", "quantile-normalize", *(pytest.param(c, marks=pytest.mark.exhaustive)
                                                                           for c in ("sort-weights", "quantile-levels", "topk-2"))])
def test_jax_implicit_equals_unrolled(case):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    fn, args, options = CASES[case]
    arrays = {f"arg{i}": a for i, a in enumerate(args) if isinstance(a, np.ndarray)}
    arrays.update({k: v for k, v in options.items() if isinstance(v, np.ndarray)})
    w = np.random.default_rng(0).normal(size=np.shape(fn(X, *args, **options)))

    def loss(x, params, implicit):
        call_args = tuple(params.get(f"arg{i}", a) for i, a in enumerate(args))
        opts = {k: params.get(k, v) for k, v in options.items()}
        return jnp.sum(w * fn(x, *call_args, implicit=implicit, **TIGHT, **opts))

    params = {k: jnp.asarray(v) for k, v in arrays.items()}
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)
    g_unr = jax.tree_util.tree_leaves(grad(jnp.asarray(X), params, False))
    g_imp = jax.tree_util.tree_leaves(grad(jnp.asarray(X), params, True))
    torch_imp = _torch_grads(fn, args, options, implicit=True)
    for a, b in zip(g_imp, g_unr):
        assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-7, atol=1e-9 * max(1.0, float(np.abs(b).max())))
    assert_allclose(np.asarray(g_imp[0]), torch_imp[0], rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("case", ["rank-eps0.1", "sort-m4", "quantile-0.3", "quantile-normalize"])
def test_implicit_gradient_matches_central_differences(case):
    """The directional derivative of the converged operator, from two forward solves in float64 NumPy."""
    fn, args, options = CASES[case]
    w = np.random.default_rng(0).normal(size=np.shape(fn(X, *args, **options)))  # the weights _torch_grads uses
    v = np.random.default_rng(4).normal(size=X.shape)
    (g, *_) = _torch_grads(fn, args, options, implicit=True)

    def loss(x):
        return float(np.sum(w * fn(x, *args, **TIGHT, **options)))

    assert_allclose(np.sum(g * v), ref.central_difference(loss, X, v, h=1e-5), rtol=1e-6)


def test_sinkhorn_implicit_gradients_of_cost_and_marginals():
    """rankops.sinkhorn with implicit=True: the plan's gradient w.r.t. cost, a and b equals the unrolled one."""
    rng = np.random.default_rng(5)
    cost, a, b = rng.random((2, 5, 3)), rng.random(5) + 0.5, rng.random((2, 3)) + 0.5
    w = rng.normal(size=(2, 5, 3))

    def grads(implicit):
        leaves = [torch.asarray(v).requires_grad_(True) for v in (cost, a, b)]
        c, aa, bb = leaves
        res = rankops.sinkhorn(c, aa / aa.sum(), bb / bb.sum(-1, keepdim=True), epsilon=0.2, implicit=implicit, **TIGHT)
        # the plan, and the dual objective <a, f> + <b, g> (invariant to the potentials' free constant)
        loss = (res.plan * torch.asarray(w)).sum() + (res.f * aa / aa.sum()).sum() + (res.g * bb / bb.sum(-1, keepdim=True)).sum()
        return [g.numpy() for g in torch.autograd.grad(loss, leaves)]

    for g_imp, g_unr in zip(grads(True), grads(False)):
        assert_allclose(g_imp, g_unr, rtol=1e-7, atol=1e-10)


def test_jax_implicit_under_vmap_equals_batch():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = jnp.asarray(RNG.normal(size=(4, 3, 6)))
    w = jnp.asarray(RNG.normal(size=(4, 3, 6)))

    def loss(v, wv):
        return jnp.sum(wv * rankops.soft_rank(v, epsilon=0.05, implicit=True, **TIGHT))

    batched = jax.grad(loss)(x, w)
    mapped = jax.jit(jax.vmap(jax.grad(loss)))(x, w)
    assert_allclose(np.asarray(mapped), np.asarray(batched), rtol=1e-9, atol=1e-11)


def test_torch_implicit_refuses_second_derivatives():
    x = torch.asarray(X).requires_grad_(True)
    loss = (rankops.soft_rank(x, implicit=True) ** 2).sum()
    with pytest.raises(RuntimeError, match="second derivatives .* implicit=False"):
        torch.autograd.grad(loss, x, create_graph=True)
    torch.autograd.grad(loss, x)  # first order is fine


def _saved_bytes(fn):
    """Bytes that autograd keeps for the backward pass of ``fn()``."""
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total[0]


@pytest.mark.filterwarnings("ignore::rankops.ConvergenceWarning")  # tol=1e-30: runs to max_iter on purpose
def test_implicit_backward_memory_does_not_grow_with_iterations():
    """What autograd keeps for the backward: independent of max_iter with implicit=True."""
    x = torch.asarray(RNG.normal(size=(4, 50))).requires_grad_(True)

    def run(max_iter):
        return _saved_bytes(lambda: rankops.soft_rank(x, epsilon=1e-2, tol=1e-30, max_iter=max_iter, implicit=True))

    small, large = run(20), run(200)
    assert small == large
    # the plan (the solver's residual and the readout's operand) and O(n) vectors; before the
    # backward in s was written on products with the plan, the differences and the cost were kept too
    assert small < 2 * 4 * 50 * 50 * 8


def test_implicit_float32_close_to_float64():
    fn, args, options = CASES["rank-eps0.1"]
    g64 = _torch_grads(fn, args, options, implicit=True)[0]
    x32 = torch.asarray(X, dtype=torch.float32).requires_grad_(True)
    out = rankops.soft_rank(x32, implicit=True, epsilon=0.1, tol=FLOAT32_TOL, max_iter=10_000)
    w = torch.asarray(np.random.default_rng(0).normal(size=X.shape), dtype=torch.float32)
    (g32,) = torch.autograd.grad((out * w).sum(), x32)
    assert g32.dtype == torch.float32
    assert_allclose(g32.numpy(), g64, rtol=1e-3, atol=1e-3 * np.abs(g64).max())


def test_implicit_nan_row_stays_in_its_row():
    x = X.copy()
    x[1, 2] = np.nan
    xt = torch.asarray(x).requires_grad_(True)
    rankops.soft_rank(xt, implicit=True, epsilon=0.1).sum().backward()
    g = xt.grad.numpy()
    assert (g[1] == 0).all()  # a non-finite row's gradient is 0 (docs/reliability.md): its loss can be dropped
    assert np.isfinite(g[[0, 2]]).all()
