"""rankops.vjp: rankops' own backward rules (NumPy, array-api-strict, Dask) against torch.autograd.

torch differentiates the forward code itself (``implicit=False``: unrolled
Sinkhorn iterations; autodiff of softmax / sort / abs); the rules are
hand-written closed forms and the implicit Sinkhorn rule. Equal to 1e-8 on
the same float64 input, with Sinkhorn solved to 1e-12.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops
from tests import reference as ref

torch = pytest.importorskip("torch")

from tests.torch_autograd import torch_gradients  # noqa: E402  (needs torch)

TIGHT = {"tol": 1e-12, "max_iter": 100_000}
X = np.random.default_rng(21).normal(size=(2, 3, 6))
WEIGHTS = np.array([0.1, 0.2, 0.3, 0.4])

# id -> (operator, positional args, options)
CASES = {
    "soft_rank": (rankops.soft_rank, (), {"epsilon": 0.1, **TIGHT}),
    "soft_rank-axis1-desc": (rankops.soft_rank, (), {"epsilon": 0.1, "axis": 1, "descending": True, **TIGHT}),
    "soft_rank-epsilon-array": (rankops.soft_rank, (), {"epsilon": np.array(0.1), **TIGHT}),
    "soft_sort-weights": (rankops.soft_sort, (), {"epsilon": 0.1, "target_weights": WEIGHTS, **TIGHT}),
    "soft_sort-minmax-m3": (rankops.soft_sort, (), {"epsilon": 0.1, "squash": "minmax", "num_targets": 3, **TIGHT}),
    "soft_cdf-arctan-power1.5": (rankops.soft_cdf, (), {"epsilon": 0.1, "squash": "arctan", "power": 1.5, **TIGHT}),
    "soft_cdf-no-squash": (rankops.soft_cdf, (), {"epsilon": 0.5, "squash": None, **TIGHT}),
    "soft_quantile-0.3": (rankops.soft_quantile, (0.3,), {"epsilon": 0.1, **TIGHT}),
    "soft_quantile-levels-axis0": (rankops.soft_quantile, (np.array([0.2, 0.7]),), {"epsilon": 0.1, "axis": 0, **TIGHT}),
    "soft_quantile_normalize": (
        rankops.soft_quantile_normalize, (np.array([0.0, 1.0, 3.0, 4.0]),), {"epsilon": 0.1, "target_weights": WEIGHTS, **TIGHT}
    ),
    "soft_topk_mask": (rankops.soft_topk_mask, (2,), {"epsilon": 0.1, **TIGHT}),
    "softsort-power2-tau-array": (rankops.softsort, (), {"tau": np.array(0.7), "power": 2}),
    "neuralsort-ascending": (rankops.neuralsort, (), {"tau": np.array(0.7), "descending": False}),
    "soft_rank-softsort": (rankops.soft_rank, (), {"method": "softsort", "tau": 0.5}),
    "soft_sort-neuralsort-axis0-desc": (rankops.soft_sort, (), {"method": "neuralsort", "tau": 0.5, "axis": 0, "descending": True}),
    "soft_sort-softsort-hard": (rankops.soft_sort, (), {"method": "softsort", "tau": 0.5, "hard": True}),
    "sinkhorn": (rankops.sinkhorn, (np.full(6, 1 / 6), np.array([0.25, 0.25, 0.5])), {"epsilon": 0.3, **TIGHT}),
}


def _input(fn):
    return np.random.default_rng(2).random((2, 6, 3)) if fn is rankops.sinkhorn else X


def _convert(value, asarray):
    return asarray(value) if isinstance(value, np.ndarray) else value


def _vjp(fn, args, options, asarray, to_numpy, x=None):
    x = _input(fn) if x is None else x
    value, vjp_fn = rankops.vjp(fn, asarray(x), *(_convert(a, asarray) for a in args), **{k: _convert(v, asarray) for k, v in options.items()})
    out = value.plan if fn is rankops.sinkhorn else value
    ct = np.random.default_rng(5).normal(size=tuple(out.shape))
    return to_numpy(out), [to_numpy(g) for g in vjp_fn(asarray(ct))]


def _torch_autograd(fn, args, options):
    """The same gradients, by torch.autograd directly (not through rankops.vjp)."""
    if "tol" in options:  # Sinkhorn: unrolled, so the reference does not share the implicit rule
        options = {**options, "implicit": False}
    return torch_gradients(fn, _input(fn), args, options, seed=5)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("backend_name", ["numpy", "array_api_strict"])
def test_rules_equal_torch_autograd(case, backend_name):
    fn, args, options = CASES[case]
    if backend_name == "numpy":
        asarray, to_numpy = np.asarray, np.asarray
    else:
        xps = pytest.importorskip("array_api_strict")
        asarray, to_numpy = xps.asarray, np.asarray
    value, grads = _vjp(fn, args, options, asarray, to_numpy)
    t_value, t_grads = _torch_autograd(fn, args, options)
    # the implicit forward's Newton polish solves approximately (4 CG steps): backends' rounding differs there at 1e-11
    assert_allclose(value, t_value, rtol=1e-10, atol=1e-12)
    assert len(grads) == len(t_grads) == 1 + sum(isinstance(a, np.ndarray) for a in (*args, *options.values()))
    for g, t in zip(grads, t_grads):
        assert g.shape == t.shape
        assert_allclose(g, t, rtol=1e-8, atol=1e-8 * max(1.0, np.abs(t).max()))


@pytest.mark.parametrize("case", ["soft_rank", "soft_quantile_normalize", "soft_quantile-levels-axis0", "soft_sort-neuralsort-axis0-desc", "sinkhorn"])
def test_dask_equals_numpy(case):
    da = pytest.importorskip("dask.array")
    fn, args, options = CASES[case]
    value, grads = _vjp(fn, args, options, np.asarray, np.asarray)

    def chunked(a):
        return da.from_array(a, chunks=1) if a.ndim > 1 else da.from_array(a)

    d_value, d_grads = _vjp(fn, args, options, chunked, lambda a: np.asarray(a.compute()))
    assert_allclose(d_value, value, rtol=1e-12, atol=1e-12)
    for g, d in zip(grads, d_grads):
        assert_allclose(d, g, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", ["soft_rank", "soft_sort-weights", "soft_quantile-0.3", "neuralsort-ascending", "soft_topk_mask"])
def test_numpy_rules_match_central_differences(case):
    """An independent check of the rules: directional derivatives of the float64 forward."""
    fn, args, options = CASES[case]
    x = _input(fn)
    _, (g, *_) = _vjp(fn, args, options, np.asarray, np.asarray)
    ct = np.random.default_rng(5).normal(size=np.shape(fn(x, *args, **options)))
    v = np.random.default_rng(6).normal(size=x.shape)

    def loss(z):
        return float(np.sum(ct * fn(z, *args, **options)))

    assert_allclose(np.sum(g * v), ref.central_difference(loss, x, v, h=1e-5), rtol=1e-6)


def test_stochastic_gradient_sums_over_samples():
    """Same seed, same noise: the gradient is the sum of the per-sample relaxed gradients."""
    s = X[0]
    options = {"tau": 0.5, "stochastic": True, "key": 3, "n_samples": 2}
    value, vjp_fn = rankops.vjp(rankops.softsort, s, **options)
    ct = np.random.default_rng(0).normal(size=value.shape)
    (g,) = vjp_fn(ct)
    noisy = s + np.random.default_rng(3).gumbel(size=(2, *s.shape))
    expected = sum(rankops.vjp(rankops.softsort, noisy[i], tau=0.5)[1](ct[i])[0] for i in range(2))
    assert_allclose(value, rankops.softsort(s, **options), rtol=0, atol=0)
    assert_allclose(g, expected, rtol=1e-12, atol=1e-12)


def test_dtypes_and_repeated_calls():
    x32 = X.astype(np.float32)
    value, vjp_fn = rankops.vjp(rankops.soft_rank, x32)
    (g,) = vjp_fn(np.ones_like(value))
    assert value.dtype == g.dtype == np.float32
    (g_again,) = vjp_fn(np.ones_like(value))
    assert_allclose(g_again, g, rtol=0, atol=0)
    ints = np.array([[3, 1, 2], [0, 5, 4]])
    value, vjp_fn = rankops.vjp(rankops.soft_rank, ints, method="softsort")
    (g,) = vjp_fn(np.ones_like(value))
    assert g.dtype == np.float64 and g.shape == ints.shape


def test_sinkhorn_cotangents_on_potentials():
    """A (plan, f, g) cotangent; the dual objective <a, f> + <b, g> has gradient plan w.r.t. cost."""
    cost = np.random.default_rng(7).random((4, 3))
    a, b = np.full(4, 0.25), np.array([0.2, 0.3, 0.5])
    res, vjp_fn = rankops.vjp(rankops.sinkhorn, cost, a, b, epsilon=0.2, **TIGHT)
    d_cost, _, _ = vjp_fn((None, a, b))
    assert_allclose(d_cost, res.plan, rtol=1e-8, atol=1e-12)  # envelope theorem: d OT_eps / dC = P
    assert_allclose(vjp_fn(res._replace(plan=np.zeros((4, 3)), f=a, g=b))[0], d_cost, rtol=1e-12)


def test_torch_and_jax_use_their_autodiff():
    jax = pytest.importorskip("jax")
    x = X[0]
    ct = np.random.default_rng(0).normal(size=x.shape)
    grads = []
    for asarray in (torch.asarray, jax.numpy.asarray, np.asarray):
        value, vjp_fn = rankops.vjp(rankops.soft_rank, asarray(x), epsilon=0.1, **TIGHT)
        (g,) = vjp_fn(asarray(ct))
        assert type(g) is type(asarray(x))
        grads.append(np.asarray(g))
    assert_allclose(grads[0], grads[2], rtol=1e-8)
    assert_allclose(grads[1], grads[2], rtol=1e-8)
