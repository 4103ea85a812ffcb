"""Input weights ``a`` (``weights=``) of the Sinkhorn ranks, sorts, CDFs, quantiles and quantile normalization.

References: the plan between ``a = w / sum(w)`` and the targets by plain
float64 Sinkhorn (tests.reference), read out per the formulas of
docs/api.md; integer weights as multiplicities (an entry of weight 2 is the
same transport as that entry twice); ``numpy.quantile(..., weights=,
method="inverted_cdf")`` in the hard limit; central differences.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops
from tests import reference as ref

TIGHT = {"tol": 1e-12, "max_iter": 100_000}
RNG = np.random.default_rng(3)
X = RNG.normal(size=(3, 7))
W = RNG.uniform(0.2, 2.0, size=(3, 7))
LEVELS = np.array([0.2, 0.5, 0.85])


def _plan(x, w, b, epsilon, y=None):
    """Float64 plan per row: squashed x (as the operators do) with weights w / sum(w) against (b, y)."""
    z = ref.squash_sigmoid(x)
    y = ref.grid(len(b)) if y is None else y
    return ref.sinkhorn_plan(np.abs(y[None, :] - z[:, None]) ** 2, w / w.sum(), b, epsilon)


def _reference(op, x, w, epsilon, m=None, targets=None):
    rows = []
    for xr, wr in zip(x, np.broadcast_to(w, x.shape)):
        n = len(xr)
        a = wr / wr.sum()
        if op == "quantile":
            vals = []
            for q in LEVELS:
                t = min(0.05, 2 * min(q, 1 - q))
                b = np.array([q - t / 2, t, 1 - q - t / 2])
                p = _plan(xr, wr, b, epsilon, y=np.array([0.0, 0.5, 1.0]))
                vals.append(xr @ p[:, 1] / p[:, 1].sum())
            rows.append(vals)
            continue
        m_ = m or n
        b = np.full(m_, 1.0 / m_)
        p = _plan(xr, wr, b, epsilon)
        readout = {"cdf": lambda: p @ np.cumsum(b) / a, "rank": lambda: n * (p @ np.cumsum(b)) / a,
                   "sort": lambda: p.T @ xr / b, "qnorm": lambda: p @ targets / a}
        rows.append(readout[op]())
    return np.array(rows)


OPS = {  # on NumPy inputs
    "cdf": rankops.soft_cdf,
    "rank": rankops.soft_rank,
    "sort": rankops.soft_sort,
    "quantile": lambda x, **kw: rankops.soft_quantile(x, LEVELS, **kw),
}


@pytest.mark.eager_backends
@pytest.mark.parametrize("op", ["cdf", "rank", "sort", "quantile"])
@pytest.mark.parametrize("shared", [False, True], ids=["per-entry", "shared"])
def test_matches_weighted_reference(backend, op, shared):
    w = W[0] if shared else W
    fn = OPS[op]
    xb = backend.asarray(X)
    if op == "quantile":
        got = rankops.soft_quantile(xb, backend.asarray(LEVELS), weights=backend.asarray(w), epsilon=0.05, **TIGHT)
    else:
        got = fn(xb, weights=backend.asarray(w), epsilon=0.05, **TIGHT)
    got = backend.to_numpy(got)
    assert_allclose(got, _reference(op, X, w, 0.05), atol=1e-8)


@pytest.mark.eager_backends
def test_quantile_normalize_matches_reference(backend):
    targets = np.array([-1.0, 0.0, 0.5, 2.0, 3.0])
    got = rankops.soft_quantile_normalize(backend.asarray(X), backend.asarray(targets), weights=backend.asarray(W), epsilon=0.05,
                                          tol=1e-10, max_iter=100_000)
    assert_allclose(backend.to_numpy(got), _reference("qnorm", X, W, 0.05, m=5, targets=targets), atol=1e-8)


@pytest.mark.parametrize("op", ["cdf", "sort", "quantile"])
def test_uniform_weights_are_no_weights(op):
    """Uniform weights of any scale are no weights; the quantile excepted, whose weighted block sits at the level q
    (NumPy's weighted quantile, "inverted_cdf"), the unweighted one at NumPy's linear position: as in NumPy, which
    gives ``quantile(x, q, weights=ones, method="inverted_cdf") != quantile(x, q)``."""
    fn = OPS[op]
    if op == "quantile":
        assert_allclose(fn(X, weights=np.full(7, 3.0), epsilon=0.05), fn(X, weights=np.ones(7), epsilon=0.05), rtol=1e-10, atol=1e-12)
        return
    assert_allclose(fn(X, weights=np.full(7, 3.0), epsilon=0.05), fn(X, epsilon=0.05), rtol=1e-10, atol=1e-12)


def test_integer_weights_are_multiplicities():
    """Weight 2 on an entry is that entry twice: the same transport (minmax squash: duplicates leave it unchanged)."""
    x = X[0]
    counts = np.array([2, 1, 3, 1, 1, 2, 1])
    dup = np.repeat(x, counts)
    opts = {"squash": "minmax", "epsilon": 0.02, **TIGHT}
    # sorts onto m targets and quantiles: the target side does not see how the mass was split
    assert_allclose(rankops.soft_sort(x, weights=counts, num_targets=5, **opts), rankops.soft_sort(dup, num_targets=5, **opts),
                    rtol=1e-9)
    # (the repeated row with unit weights: the weighted quantile's block sits at q, the unweighted one's at NumPy's
    # linear position, which depends on n)
    assert_allclose(rankops.soft_quantile(x, LEVELS, weights=counts, **opts),
                    rankops.soft_quantile(dup, LEVELS, weights=np.ones(len(dup)), **opts), rtol=1e-9)
    # each copy of an entry has the entry's CDF
    assert_allclose(np.repeat(rankops.soft_cdf(x, weights=counts, num_targets=4, **opts), counts),
                    rankops.soft_cdf(dup, num_targets=4, **opts), rtol=1e-9)


def test_weighted_quantile_hard_limit():
    """Small epsilon and filler: numpy's weighted inverted-CDF quantile."""
    x = np.array([0.3, -1.2, 2.5, 0.7, 1.9, -0.4, 0.05])
    w = np.array([0.5, 2.0, 1.0, 0.3, 1.2, 0.7, 1.6])
    levels = np.array([0.1, 0.3, 0.55, 0.8])  # away from the breakpoints of cumsum(w sorted) / sum(w)
    got = rankops.soft_quantile(x, levels, weights=w, epsilon=1e-4, filler=1e-3, squash="minmax", **TIGHT)
    expected = [np.quantile(x, q, weights=w, method="inverted_cdf") for q in levels]
    assert_allclose(got, expected, atol=1e-3)


@pytest.mark.parametrize("op", ["cdf", "sort", "quantile"])
def test_gradients_match_central_differences(op):
    fn = OPS[op]
    rng = np.random.default_rng(1)
    ct = rng.normal(size=np.shape(fn(X, epsilon=0.1)))
    vx, vw = rng.normal(size=X.shape), rng.normal(size=W.shape)
    args = (rankops.soft_quantile, X, LEVELS) if op == "quantile" else (fn, X)
    _, vjp = rankops.vjp(*args, weights=W, epsilon=0.1, **TIGHT)
    grads = vjp(ct)
    gx, gw = grads[0], grads[-1]

    def loss(x, w):
        return float(np.sum(ct * fn(x, weights=w, epsilon=0.1, **TIGHT)))

    assert_allclose(np.sum(gx * vx), ref.central_difference(lambda x: loss(x, W), X, vx, h=1e-5), rtol=1e-6)
    assert_allclose(np.sum(gw * vw), ref.central_difference(lambda w: loss(X, w), W, vw, h=1e-5), rtol=1e-6, atol=1e-10)


@pytest.mark.parametrize("implicit", [True, False])
def test_torch_and_jax_gradients_equal_the_rule(implicit):
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    opts = {"epsilon": 0.1, "implicit": implicit, **TIGHT}
    ct = np.random.default_rng(2).normal(size=X.shape)
    _, vjp = rankops.vjp(rankops.soft_cdf, X, weights=W, **opts)
    gx, gw = vjp(ct)
    xt, wt = (torch.asarray(v).requires_grad_(True) for v in (X, W))
    (rankops.soft_cdf(xt, weights=wt, **opts) * torch.asarray(ct)).sum().backward()
    assert_allclose(xt.grad.numpy(), gx, rtol=1e-7, atol=1e-10)
    assert_allclose(wt.grad.numpy(), gw, rtol=1e-7, atol=1e-10)
    jnp = jax.numpy
    g = jax.jit(jax.grad(lambda x, w: jnp.sum(jnp.asarray(ct) * rankops.soft_cdf(x, weights=w, **opts)), argnums=(0, 1)))(
        jnp.asarray(X), jnp.asarray(W))
    assert_allclose(np.asarray(g[0]), gx, rtol=1e-7, atol=1e-10)
    assert_allclose(np.asarray(g[1]), gw, rtol=1e-7, atol=1e-10)


def test_input_shaped_weights_follow_the_axis():
    """Weights shaped like x go with x's layout, for an axis that is not last and for several axes."""
    x3 = RNG.normal(size=(4, 2, 5))
    w3 = RNG.uniform(0.5, 1.5, size=x3.shape)
    got = rankops.soft_rank(x3, axis=0, weights=w3, epsilon=0.1)
    expected = np.moveaxis(rankops.soft_rank(np.moveaxis(x3, 0, -1), weights=np.moveaxis(w3, 0, -1), epsilon=0.1), -1, 0)
    assert_allclose(got, expected, rtol=1e-12)
    _, vjp = rankops.vjp(rankops.soft_rank, x3, axis=(0, 2), weights=w3, epsilon=0.1)
    gx, gw = vjp(np.ones_like(x3))
    assert gx.shape == gw.shape == x3.shape
    flat = np.moveaxis(x3, 0, 1).reshape(2, 20)
    flat_w = np.moveaxis(w3, 0, 1).reshape(2, 20)
    assert_allclose(np.moveaxis(rankops.soft_rank(x3, axis=(0, 2), weights=w3, epsilon=0.1), 1, 0).reshape(2, 20),
                    rankops.soft_rank(flat, weights=flat_w, epsilon=0.1), rtol=1e-12)


def test_nan_weight_stays_in_its_row():
    w = W.copy()
    w[1, 3] = np.nan
    out = rankops.soft_sort(X, weights=w, epsilon=0.1)
    assert np.isnan(out[1]).all() and np.isfinite(out[[0, 2]]).all()


# -- weights outside their domain (issue 33: a NaN row, never a number that looks valid) --------------

BAD_ROWS = {"negative": [1.0, -0.5, 1.0], "nan": [1.0, np.nan, 1.0], "inf": [1.0, np.inf, 1.0], "all zero": [0.0, 0.0, 0.0]}


def _bad_weights(kind: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(good, bad)``: the same weights, but row 1 of ``bad`` outside the domain."""
    good = RNG.uniform(0.2, 2.0, size=(3, n))
    bad = good.copy()
    bad[1, :3] = BAD_ROWS[kind]
    if kind == "all zero":
        bad[1] = 0.0
    return good, bad


# module-level functions: every kind of bad row runs the same three programs under jax.jit (its cache is per function)
_WEIGHTED_CALLS = {
    "isotonic_regression": lambda a, b: rankops.isotonic_regression(a, weights=b),
    "soft_rank": lambda a, b: rankops.soft_rank(a, weights=b, epsilon=0.1),
    "soft_quantile": lambda a, b: rankops.soft_quantile(a, 0.3, weights=b, epsilon=0.1),
}


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("kind", list(BAD_ROWS))
def test_weights_outside_the_domain_give_a_nan_row_quietly(backend_name, kind):
    """isotonic_regression's weights and Sinkhorn's weights: that row NaN, the others bit for bit as with valid weights there, no warning."""
    from tests.backends import on_backend

    to, run = on_backend(backend_name)
    y = RNG.normal(size=(3, 7))
    good, bad = _bad_weights(kind, 7)
    for name, f in _WEIGHTED_CALLS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = np.asarray(run(f, to(y), to(bad)))
            fine = np.asarray(run(f, to(y), to(good)))
        assert np.isnan(out[1]).all(), (name, out)
        np.testing.assert_array_equal(out[[0, 2]], fine[[0, 2]], err_msg=name)


def test_the_isotonic_fit_of_a_row_the_scipy_example():
    """The issue's example: a negative weight gave the plausible [-1, -1]; zero weights are in the domain."""
    from scipy.optimize import isotonic_regression

    assert np.isnan(rankops.isotonic_regression(np.array([1.0, 0.0]), weights=np.array([-1.0, 2.0]))).all()
    # a zero weight leaves its entry free: the others get SciPy's fit of the weighted entries alone, quietly
    y = RNG.normal(size=12)
    w = RNG.uniform(0.5, 2.0, size=12)
    w[[0, 4, 5, 11]] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit = rankops.isotonic_regression(y, weights=w)
        _, pull = rankops.vjp(rankops.isotonic_regression, y, weights=w)
        dy, dw = pull(np.ones(12))
    kept = w > 0
    assert_allclose(fit[kept], isotonic_regression(y[kept], weights=w[kept]).x, rtol=1e-12, atol=1e-12)
    assert np.all(np.diff(fit) >= 0) and np.all(np.isfinite(dy)) and np.all(np.isfinite(dw))
    assert np.all(dy[~kept] == 0)  # an entry of no weight moves no value


def test_target_weights_and_marginals_outside_the_domain():
    """Shared target weights: every row NaN; the solver's marginals: their row."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(rankops.soft_rank(X, target_weights=np.array([1.0, -1.0, 1.0]), epsilon=0.1)).all()
        assert np.isnan(rankops.soft_cdf(X, target_weights=np.zeros(4), epsilon=0.1)).all()
        cost = RNG.uniform(size=(2, 4, 3))
        a = np.array([[0.25] * 4, [0.5, -0.25, 0.5, 0.25]])
        plan = rankops.sinkhorn(cost, a, None, epsilon=0.1).plan
    assert np.isnan(plan[1]).all() and np.isfinite(plan[0]).all()
