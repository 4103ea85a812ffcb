"""Sinkhorn solver and optimal-transport operators against float64 NumPy references."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.stats import rankdata

import rankops
from tests import reference as ref
from tests.reference import FLOAT32_TOL

# Converged settings: values then depend on epsilon only, not on the stopping point.
TIGHT = {"tol": 1e-12, "max_iter": 100_000}


def _x(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape) * 2.0


def _rows(x):
    return x.reshape(-1, x.shape[-1])


# -- the solver ------------------------------------------------------------------------


@pytest.mark.eager_backends
def test_sinkhorn_matches_reference_with_weights_and_batch(backend, device):
    rng = np.random.default_rng(0)
    cost = rng.random((2, 3, 5, 4))
    a = rng.random((2, 3, 5)) + 0.1
    a /= a.sum(-1, keepdims=True)
    b = rng.random(4) + 0.1
    b /= b.sum()
    res = rankops.sinkhorn(
        backend.asarray(cost, device=device), backend.asarray(a, device=device), backend.asarray(b, device=device),
        epsilon=0.05, **TIGHT,
    )
    plan = backend.to_numpy(res.plan)
    for i in range(2):
        for j in range(3):
            assert_allclose(plan[i, j], ref.sinkhorn_plan(cost[i, j], a[i, j], b, 0.05), atol=1e-10)
    assert np.all(backend.to_numpy(res.converged))
    f, g = backend.to_numpy(res.f), backend.to_numpy(res.g)
    assert_allclose(plan, np.exp((f[..., :, None] + g[..., None, :] - cost) / 0.05), rtol=1e-12)


@pytest.mark.parametrize("tol", [1e-2, 1e-4, 1e-6])
def test_marginals_within_tol_and_iterations_reported(backend, tol):
    cost = np.random.default_rng(1).random((4, 6, 7))
    res = rankops.sinkhorn(backend.asarray(cost), epsilon=0.02, tol=tol)
    plan = backend.to_numpy(res.plan)
    assert_allclose(plan.sum(-1), 1 / 6, rtol=1e-12)  # rows exact: f is updated last
    col_err = np.abs(plan.sum(-2) - 1 / 7).sum(-1)
    assert np.all(col_err <= tol)
    assert_allclose(backend.to_numpy(res.error), col_err, rtol=1e-6, atol=1e-15)
    n_iter = int(backend.to_numpy(res.n_iter)) if not isinstance(res.n_iter, int) else res.n_iter
    assert 0 < n_iter < 2000 and n_iter % 10 == 0


def test_not_converged_is_reported():
    cost = np.random.default_rng(2).random((3, 20, 20))
    res = rankops.sinkhorn(cost, epsilon=1e-3, max_iter=5, tol=1e-9)
    assert res.n_iter == 5
    assert not np.any(res.converged)
    assert np.all(res.error > 1e-9)


def test_sinkhorn_float32_small_epsilon_large_cost_is_finite(backend):
    cost = (np.random.default_rng(3).random((2, 30, 30)) * 1e3).astype(np.float32)
    res = rankops.sinkhorn(backend.asarray(cost), epsilon=1e-4, max_iter=50)
    for field in (res.plan, res.f, res.g):
        assert np.all(np.isfinite(backend.to_numpy(field)))


# -- operators at finite epsilon ------------------------------------------------------------


def _ref_rows(x, fn):
    return np.stack([fn(row) for row in _rows(x)]).reshape(*x.shape[:-1], -1)


@pytest.mark.eager_backends
@pytest.mark.parametrize("epsilon", [0.2, 0.05])
def test_rank_cdf_sort_match_reference(backend, device, epsilon):
    x = _x((2, 3, 7))
    n = 7
    b = np.full(n, 1 / n)

    def cdf(row):
        return n * ref.ot_plan_1d(row, ref.grid(n), b, epsilon) @ np.cumsum(b)

    def srt(row):
        return (ref.ot_plan_1d(row, ref.grid(n), b, epsilon).T @ row) / b

    xb = backend.asarray(x, device=device)
    opts = {"epsilon": epsilon, **TIGHT}
    assert_allclose(backend.to_numpy(rankops.soft_cdf(xb, **opts)), _ref_rows(x, cdf), atol=1e-9)
    assert_allclose(backend.to_numpy(rankops.soft_rank(xb, **opts)), n * _ref_rows(x, cdf), atol=1e-8)
    assert_allclose(backend.to_numpy(rankops.soft_sort(xb, **opts)), _ref_rows(x, srt), atol=1e-8)


@pytest.mark.eager_backends
def test_num_targets_and_target_weights(backend):
    x = _x((3, 6), seed=1)
    m = 4
    b = np.array([0.1, 0.4, 0.3, 0.2])
    opts = {"epsilon": 0.1, "num_targets": m, "target_weights": backend.asarray(b), **TIGHT}
    got_sort = backend.to_numpy(rankops.soft_sort(backend.asarray(x), **opts))
    got_cdf = backend.to_numpy(rankops.soft_cdf(backend.asarray(x), **opts))
    assert got_sort.shape == (3, m) and got_cdf.shape == (3, 6)
    plans = [ref.ot_plan_1d(row, ref.grid(m), b, 0.1) for row in x]
    assert_allclose(got_sort, np.stack([(p.T @ row) / b for p, row in zip(plans, x)]), atol=1e-8)
    assert_allclose(got_cdf, np.stack([6 * p @ np.cumsum(b) for p in plans]), atol=1e-9)


def _topk_reference(row, k, epsilon, descending):
    """OTT-JAX's top-k construction in float64: k targets of mass 1/n and one filler of mass (n - k)/n on the grid j/k."""
    n = len(row)
    sign = -1.0 if descending else 1.0
    b = np.array([n - k] + [1] * k if not descending else [1] * k + [n - k]) / n
    plan = ref.ot_plan_1d(sign * row, ref.grid(k + 1), b, epsilon)
    values = sign * (plan.T @ (sign * row)) / b
    return values[:k] if descending else values[1:]


@pytest.mark.eager_backends
@pytest.mark.parametrize("descending", [False, True])
def test_topk_sort_matches_reference(backend, descending):
    x = _x((2, 7), seed=12)
    got = backend.to_numpy(rankops.soft_sort(backend.asarray(x), topk=3, descending=descending, epsilon=0.05, **TIGHT))
    assert got.shape == (2, 3)
    assert_allclose(got, [_topk_reference(row, 3, 0.05, descending) for row in x], atol=1e-8)
    # along another axis, and k = n: the full soft sort
    along = rankops.soft_sort(x.T, topk=3, axis=0, descending=descending, epsilon=0.05, **TIGHT)
    assert_allclose(along.T, got, atol=1e-8)
    assert_allclose(rankops.soft_sort(x, topk=7, descending=descending, epsilon=0.05),
                    rankops.soft_sort(x, descending=descending, epsilon=0.05), atol=1e-12)


def test_topk_sort_gradient():
    """d/dx by the NumPy rule (rankops.vjp) against central differences, and torch autograd against it."""
    x = _x((2, 6), seed=13)
    opts = {"topk": 2, "epsilon": 0.05, "tol": 1e-12, "max_iter": 100_000}
    ct = np.random.default_rng(14).normal(size=(2, 2))
    for descending in (False, True):
        _, back = rankops.vjp(rankops.soft_sort, x, descending=descending, **opts)
        (d_x,) = back(ct)
        h = 1e-6
        fd = np.array([[(ct * (rankops.soft_sort(x + h * e, descending=descending, **opts)
                               - rankops.soft_sort(x - h * e, descending=descending, **opts))).sum() / (2 * h)
                        for e in np.eye(12)[6 * r: 6 * r + 6].reshape(6, 2, 6)] for r in range(2)])
        assert_allclose(d_x, fd, atol=1e-6)
        torch = pytest.importorskip("torch")
        xt = torch.asarray(x).requires_grad_(True)
        (rankops.soft_sort(xt, descending=descending, **opts) * torch.asarray(ct)).sum().backward()
        assert_allclose(xt.grad.numpy(), d_x, atol=1e-9)


def _quantize_reference(row, m, plan):
    """n P diag(1/b) P^T x for a plan between a = 1/n and b = 1/m (rows in the order of ``row``)."""
    levels = plan.T @ row * m
    return len(row) * plan @ levels


@pytest.mark.eager_backends
@pytest.mark.parametrize("m", [1, 3, 7])
def test_quantize_matches_reference(backend, m):
    x = _x((2, 7), seed=15)
    got = backend.to_numpy(rankops.soft_quantize(backend.asarray(x), m, epsilon=0.05, **TIGHT))
    plans = [ref.ot_plan_1d(row, ref.grid(m), np.full(m, 1.0 / m), 0.05) for row in x]
    assert_allclose(got, [_quantize_reference(row, m, p) for row, p in zip(x, plans)], atol=1e-8)
    assert_allclose(got.mean(-1), x.mean(-1), atol=1e-8)  # mass is moved, not created: the row mean is kept


@pytest.mark.parametrize("m", [2, 3, 4])
def test_quantize_hard_limit_is_the_north_west_corner(m):
    """epsilon -> 0: block means of the sorted row (an entry shared between blocks where 6 is not a multiple of m)."""
    x = SEPARATED
    got = rankops.soft_quantize(x, m, **HARD)
    for row, out in zip(x, got):
        order = np.argsort(row)
        plan = np.empty((6, m))
        plan[order] = ref.north_west_corner(np.full(6, 1 / 6), np.full(m, 1 / m))
        assert_allclose(out, _quantize_reference(row, m, plan), atol=1e-2)


def test_quantize_gradient():
    x = _x((2, 6), seed=16)
    opts = {"epsilon": 0.05, "tol": 1e-12, "max_iter": 100_000}
    ct = np.random.default_rng(17).normal(size=(2, 6))
    _, back = rankops.vjp(rankops.soft_quantize, x, 3, **opts)
    (d_x,) = back(ct)
    h = 1e-6
    fd = np.array([[(ct * (rankops.soft_quantize(x + h * e, 3, **opts) - rankops.soft_quantize(x - h * e, 3, **opts))).sum() / (2 * h)
                    for e in np.eye(12)[6 * r: 6 * r + 6].reshape(6, 2, 6)] for r in range(2)])
    assert_allclose(d_x, fd, atol=1e-6)
    torch = pytest.importorskip("torch")
    xt = torch.asarray(x).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: rankops.soft_quantize(v, 3, **GRAD), (xt,), atol=1e-6)


@pytest.mark.eager_backends
def test_quantile_normalize_matches_reference(backend):
    x = _x((2, 6), seed=2)
    targets = np.array([-1.0, 0.0, 0.5, 2.0, 3.0])
    got = backend.to_numpy(rankops.soft_quantile_normalize(backend.asarray(x), backend.asarray(targets), epsilon=0.1, **TIGHT))
    b = np.full(5, 0.2)
    expected = np.stack([6 * ref.ot_plan_1d(row, ref.grid(5), b, 0.1) @ targets for row in x])
    assert_allclose(got, expected, atol=1e-8)


@pytest.mark.eager_backends
def test_topk_mask_matches_reference_and_sums_to_k(backend):
    x = _x((3, 8), seed=3)
    got = backend.to_numpy(rankops.soft_topk_mask(backend.asarray(x), 3, epsilon=0.05, **TIGHT))
    b = np.array([5 / 8, 3 / 8])
    expected = np.stack([8 * ref.ot_plan_1d(row, np.array([0.0, 1.0]), b, 0.05)[:, 1] for row in x])
    assert_allclose(got, expected, atol=1e-9)
    assert_allclose(got.sum(-1), 3.0, rtol=1e-9)
    assert np.all((got >= 0) & (got <= 1 + 1e-12))


def _filler_weights(q, t, centered, n):
    """The three target weights of level q: centred on NumPy's linear position, CDF level (q (n - 1) + 1/2) / n (API.md), or 001's Eq. 4."""
    if not centered:
        return np.array([q * (1 - t), t, (1 - q) * (1 - t)])
    q = (q * (n - 1) + 0.5) / n
    width = max(min(t, 2 * min(q, 1 - q)), 1e-6 * t)
    lo, hi = max(q - width / 2, 0.0), max(1 - q - width / 2, 0.0)
    return np.array([lo, 1 - lo - hi, hi])


@pytest.mark.eager_backends
@pytest.mark.parametrize("centered", [True, False])
@pytest.mark.parametrize("q", [0.0, 0.02, 0.3, 0.5, 0.97, 1.0])
def test_quantile_matches_filler_construction(backend, q, centered):
    x = _x((2, 9), seed=4)
    t = 0.1
    got = backend.to_numpy(rankops.soft_quantile(backend.asarray(x), q, epsilon=0.05, filler=t, centered=centered, **TIGHT))
    b = _filler_weights(q, t, centered, x.shape[-1])
    plans = [ref.ot_plan_1d(row, np.array([0, 0.5, 1]), b, 0.05) for row in x]
    expected = np.array([(p[:, 1] @ row) / p[:, 1].sum() for p, row in zip(plans, x)])
    assert got.shape == (2,)
    assert_allclose(got, expected, atol=1e-8)
    levels = backend.to_numpy(rankops.soft_quantile(backend.asarray(x), backend.asarray(np.array([q])), epsilon=0.05, filler=t,
                                                    centered=centered, **TIGHT))
    assert_allclose(levels[:, 0], expected, atol=1e-8)


@pytest.mark.parametrize("q", [0.0, 1.0])
def test_float32_end_levels_read_the_extreme(q):
    """At levels 0 and 1 the centred middle weight is 1e-6 t: in float32 it must not cancel to 0 (1 - (1 - 5e-9) = 0).

    Value and gradient in float32 against the same call in float64, including a one-entry row.
    """
    opts = {"epsilon": 0.05, "filler": 0.01, "tol": 1e-7, "max_iter": 100_000}  # t = 0.01: 1 - 5e-9 rounds to 1
    opts32 = {**opts, "tol": FLOAT32_TOL}
    for x in (_x((2, 9), seed=6), np.array([[2806.0]])):
        ct = np.ones(x.shape[0])
        want, back64 = rankops.vjp(rankops.soft_quantile, x, q, **opts)
        got, back32 = rankops.vjp(rankops.soft_quantile, x.astype(np.float32), q, **opts32)
        assert got.dtype == np.float32
        assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        (g32,), (g64,) = back32(ct.astype(np.float32)), back64(ct)
        assert np.all(np.isfinite(g32))
        assert_allclose(g32, g64, atol=1e-3)
        torch = pytest.importorskip("torch")
        xt = torch.tensor(x, dtype=torch.float32, requires_grad=True)
        rankops.soft_quantile(xt, q, **opts32).sum().backward()
        assert_allclose(xt.grad.numpy(), g64, atol=1e-3)


@pytest.mark.eager_backends
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unrolled_gradient_at_level_zero_is_finite(autodiff_backend, dtype):
    """Unrolled autodiff through the solver where the filler's empty side column has weight ~0.

    The scaling iterations divide by column sums; autodiff of that division squares them, which must not
    overflow (0 * inf = NaN). Against NumPy's implicit rule at convergence, where both agree.
    """
    backend = autodiff_backend
    opts = {"epsilon": 0.05, "filler": 0.01, "tol": 1e-7, "max_iter": 100_000}
    opts_u = {**opts, "tol": FLOAT32_TOL} if dtype == "float32" else opts
    for x in (np.array([[0.3, -1.2, 2.5, 0.7]]), np.array([[287229.0]])):
        _, back = rankops.vjp(rankops.soft_quantile, x, 0.0, **opts)
        (want,) = back(np.ones(1))
        _, back_u = rankops.vjp(rankops.soft_quantile, backend.asarray(x.astype(dtype)), 0.0, implicit=False, **opts_u)
        (got,) = back_u(backend.asarray(np.ones(1, dtype=dtype)))
        got = backend.to_numpy(got)
        assert np.all(np.isfinite(got))
        assert_allclose(got, want, atol=1e-3 if dtype == "float32" else 1e-5)


def test_centred_quantile_is_unbiased():
    """The issue's case: Eq. 4 puts the middle block at q + t (1/2 - q); centred, it is the mean of Q over [c -+ t/2],
    c = (q (n - 1) + 1/2) / n, NumPy's linear position: on evenly spaced data, q's own value (numpy.quantile's)."""
    x = np.linspace(0.0, 1.0, 100)
    q, t = 0.2, 0.05
    c = (q * 99 + 0.5) / 100
    srt = np.sort(x)
    # the empirical quantile function averaged over [c - t/2, c + t/2]: each order statistic weighted by its overlap
    cells = np.arange(100) / 100
    overlap = np.clip(np.minimum(cells + 0.01, c + t / 2) - np.maximum(cells, c - t / 2), 0, None)
    hard = overlap @ srt / t
    opts = {"filler": t, "epsilon": 1e-3, "squash": "minmax", "tol": 1e-5, "max_iter": 100_000}
    got = rankops.soft_quantile(x, q, **opts)
    assert_allclose(got, hard, atol=1e-4)
    assert_allclose(got, np.quantile(x, q), atol=1e-3)  # OTT-JAX's own test asks for 0.2 within 3e-3
    biased = rankops.soft_quantile(x, q, centered=False, **opts)
    assert biased - q > 0.01  # 001 Eq. 4: the block is centred at q + t (1/2 - q) = 0.215


@pytest.mark.parametrize("q", [0.0, 0.1, 0.37, 0.5, 0.83, 1.0])
def test_centred_quantile_limit_is_numpy_quantile(q):
    """With filler 1/n the block of mass covers the two order statistics around q (n - 1): numpy.quantile's linear method."""
    rng = np.random.default_rng(8)
    # uneven gaps of at least 1/24 of the row's range: epsilon 1e-4 is the limit for them
    x = np.cumsum(rng.uniform(0.5, 1.5, size=(5, 9)), axis=-1) * np.array([[1.0], [3.0], [0.1], [10.0], [-1.0]])
    x = np.take_along_axis(x, np.argsort(rng.uniform(size=(5, 9)), axis=-1), axis=-1)
    got = rankops.soft_quantile(x, q, filler=1 / 9, epsilon=1e-4, squash="minmax", tol=1e-10, max_iter=200_000)
    assert_allclose(got, np.quantile(x, q, axis=-1), rtol=1e-7, atol=1e-7)


@pytest.mark.eager_backends
def test_vector_quantile_levels_and_axis(backend):
    x = _x((5, 3), seed=5)
    q = np.array([0.1, 0.5, 0.9])
    got = backend.to_numpy(rankops.soft_quantile(backend.asarray(x), backend.asarray(q), axis=0, epsilon=0.05, **TIGHT))
    assert got.shape == (3, 3)  # axis 0 replaced by the levels
    for i, level in enumerate(q):
        scalar = backend.to_numpy(rankops.soft_quantile(backend.asarray(x), float(level), axis=0, epsilon=0.05, **TIGHT))
        assert_allclose(got[i], scalar, atol=1e-10)


@pytest.mark.parametrize("centered", [True, False])
def test_level_gradient_is_central_difference_in_every_region(centered):
    """d value / d q by the NumPy rule (rankops.vjp) and by torch autograd, against central differences.

    Levels 0.01 and 0.985 lie where the centred filler shrinks (t' = 2 min(q, 1 - q)), 0.3 and 0.6 where it does not.
    """
    x = _x((2, 8), seed=21)
    levels = np.array([0.01, 0.3, 0.6, 0.985])
    opts = {"epsilon": 0.05, "filler": 0.1, "centered": centered, "tol": 1e-12, "max_iter": 100_000}
    ct = np.random.default_rng(22).normal(size=(2, 4))
    _, vjp_fn = rankops.vjp(rankops.soft_quantile, x, levels, **opts)
    d_x, d_q = vjp_fn(ct)
    for i in range(4):
        e = np.eye(4)[i]
        h = 1e-6
        fd = (ct * (rankops.soft_quantile(x, levels + h * e, **opts) - rankops.soft_quantile(x, levels - h * e, **opts))).sum() / (2 * h)
        assert_allclose(d_q[i], fd, rtol=1e-5, atol=1e-8, err_msg=str(levels[i]))
    torch = pytest.importorskip("torch")
    xt, qt = torch.tensor(x, requires_grad=True), torch.tensor(levels, requires_grad=True)
    (torch.tensor(ct) * rankops.soft_quantile(xt, qt, **opts)).sum().backward()
    assert_allclose(qt.grad.numpy(), d_q, rtol=1e-6, atol=1e-9)
    assert_allclose(xt.grad.numpy(), d_x, rtol=1e-6, atol=1e-9)


def test_out_of_range_array_level_gives_nan():
    x = _x((2, 6))
    got = rankops.soft_quantile(x, np.array([0.5, 1.5]), epsilon=0.1)
    assert np.all(np.isfinite(got[:, 0])) and np.all(np.isnan(got[:, 1]))


@pytest.mark.parametrize("squash", ["arctan", "minmax", None])
def test_other_squashes(squash):
    x = _x((6,), seed=6)
    if squash == "arctan":
        z = x - x.mean()
        z = 0.5 + np.arctan(z / np.sqrt((z**2).mean())) / np.pi
    elif squash == "minmax":
        z = (x - x.min()) / (x.max() - x.min())
    else:
        x = np.random.default_rng(6).random(6)
        z = x
    cost = (ref.grid(6)[None, :] - z[:, None]) ** 2
    plan = ref.sinkhorn_plan(cost, np.full(6, 1 / 6), np.full(6, 1 / 6), 0.05)
    got = rankops.soft_rank(x, epsilon=0.05, squash=squash, **TIGHT)
    assert_allclose(got, 36 * plan @ np.cumsum(np.full(6, 1 / 6)), atol=1e-9)


@pytest.mark.parametrize("power", [1.0, 1.5, 3.0])
def test_power_option(power):
    x = _x((6,), seed=7)
    cost = np.abs(ref.grid(6)[None, :] - ref.squash_sigmoid(x)[:, None]) ** power
    plan = ref.sinkhorn_plan(cost, np.full(6, 1 / 6), np.full(6, 1 / 6), 0.05)
    got = rankops.soft_sort(x, epsilon=0.05, power=power, **TIGHT)
    assert_allclose(got, 6 * plan.T @ x, atol=1e-9)


@pytest.mark.eager_backends
def test_descending_is_ascending_of_negated(backend):
    x = _x((3, 7), seed=8)
    xb, nb = backend.asarray(x), backend.asarray(-x)
    opts = {"epsilon": 0.1, **TIGHT}
    assert_allclose(backend.to_numpy(rankops.soft_rank(xb, descending=True, **opts)), backend.to_numpy(rankops.soft_rank(nb, **opts)), atol=1e-12)
    assert_allclose(backend.to_numpy(rankops.soft_sort(xb, descending=True, **opts)), -backend.to_numpy(rankops.soft_sort(nb, **opts)), atol=1e-12)


# -- hard limits ------------------------------------------------------------------------------

HARD = {"epsilon": 1e-3, "tol": 1e-4, "max_iter": 50_000}  # values within 1e-3 of the limit
SEPARATED = np.array([[0.3, -1.2, 2.5, 0.7, 1.9, -0.4], [4.0, 4.5, -2.0, 0.0, 1.0, 3.0]])


@pytest.mark.parametrize("descending", [False, True])
def test_hard_limit_rank_and_sort(descending):
    x = SEPARATED
    r = rankops.soft_rank(x, descending=descending, **HARD)
    s = rankops.soft_sort(x, descending=descending, **HARD)
    expected_rank = rankdata(-x if descending else x, axis=-1)
    expected_sort = np.sort(x, axis=-1)[:, ::-1] if descending else np.sort(x, axis=-1)
    assert_allclose(r, expected_rank, atol=1e-3)
    assert_allclose(s, expected_sort, atol=1e-3)
    top = rankops.soft_sort(x, topk=2, descending=descending, **HARD)
    assert_allclose(top, expected_sort[:, :2] if descending else expected_sort[:, -2:], atol=1e-3)
    assert_allclose(rankops.soft_cdf(x, **HARD), rankdata(x, axis=-1) / 6, atol=1e-3)


def test_hard_limit_topk_qnorm_quantile():
    x = SEPARATED
    mask = rankops.soft_topk_mask(x, 2, **HARD)
    expected = (rankdata(-x, axis=-1) <= 2).astype(float)
    assert_allclose(mask, expected, atol=1e-3)
    targets = np.array([-5.0, -1.0, 0.0, 2.0, 7.0, 9.0])
    assert_allclose(rankops.soft_quantile_normalize(x, targets, **HARD), targets[rankdata(x, axis=-1).astype(int) - 1], atol=1e-2)
    for q in (0.0, 0.25, 0.5, 0.8, 1.0):
        got = rankops.soft_quantile(x, q, filler=0.01, **HARD)
        srt = np.sort(x, axis=-1)
        lo = srt[np.arange(2), np.floor(q * 5).astype(int)]
        hi = srt[np.arange(2), np.ceil(q * 5).astype(int)]
        assert np.all(got >= lo - 1e-3) and np.all(got <= hi + 1e-3), (q, got, lo, hi)
        assert_allclose(got, np.quantile(x, q, axis=-1), atol=np.max(hi - lo) + 1e-3)


def test_kantorovich_limit_north_west_corner():
    """m != n and non-uniform weights: Sinkhorn CDF / sort -> the exact K-operators (Prop. 1)."""
    x = np.array([0.9, -0.3, 2.2, 0.1, -1.5, 1.4, 0.5])
    b = np.array([0.15, 0.35, 0.2, 0.3])
    k_cdf, k_sort = ref.kantorovich_operators(x, b)
    errors = []
    for eps in (1e-1, 1e-2, 1e-3):
        opts = {"epsilon": eps, "num_targets": 4, "target_weights": b, "tol": 1e-10, "max_iter": 200_000}
        errors.append(max(np.abs(rankops.soft_cdf(x, **opts) - k_cdf).max(), np.abs(rankops.soft_sort(x, **opts) - k_sort).max()))
    assert errors[0] > errors[1] > errors[2]
    assert errors[-1] < 1e-3, errors


# -- stability --------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::rankops.ConvergenceWarning")  # budgets below convergence on purpose: values are checked
@pytest.mark.parametrize("scale", [1e-30, 1e-10, 1.0, 1e10, 1e30])
@pytest.mark.parametrize("epsilon", [1e-1, 1e-2, 1e-3, 1e-4])
def test_float32_any_scale_finite_and_scale_invariant(scale, epsilon):
    torch = pytest.importorskip("torch")
    base = np.array([[0.3, -1.2, 2.5, 0.7, 1.9], [1.0, 1.0, 1.0, 1.0, 1.0], [2.0, -1.0, 2.0, 0.5, -1.0]])
    x = torch.asarray((base * scale).astype(np.float32)).requires_grad_(True)
    ranks = rankops.soft_rank(x, epsilon=epsilon, max_iter=300)
    (ranks * torch.arange(5.0)).sum().backward()
    assert torch.all(torch.isfinite(ranks)) and torch.all(torch.isfinite(x.grad))
    unit = rankops.soft_rank(torch.asarray(base.astype(np.float32)), epsilon=epsilon, max_iter=300)
    torch.testing.assert_close(ranks.detach(), unit, rtol=1e-4, atol=1e-4)
    assert torch.allclose(ranks[1], torch.full((5,), 3.0), atol=5e-3)  # a constant row: all tied at the mean rank (within tol)
    assert torch.allclose(ranks[2, 0], ranks[2, 2]) and torch.allclose(ranks[2, 1], ranks[2, 4])  # ties


# -- gradients --------------------------------------------------------------------------------

GRAD = {"epsilon": 0.1, "tol": 1e-12, "max_iter": 20_000}


@pytest.mark.parametrize("fn", ["soft_rank", "soft_sort", "soft_cdf"])
def test_torch_gradcheck(fn):
    torch = pytest.importorskip("torch")
    x = torch.asarray(_x((2, 5), seed=9)).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: getattr(rankops, fn)(v, **GRAD), (x,), atol=1e-6)


def test_torch_gradcheck_quantile_topk_qnorm():
    torch = pytest.importorskip("torch")
    x = torch.asarray(_x((2, 6), seed=10)).requires_grad_(True)
    targets = torch.asarray(np.linspace(-1, 1, 4))
    q = torch.asarray(np.array([0.2, 0.7]))
    for f in (
        lambda v: rankops.soft_quantile(v, q, **GRAD),
        lambda v: rankops.soft_topk_mask(v, 2, **GRAD),
        lambda v: rankops.soft_quantile_normalize(v, targets, **GRAD),
    ):
        assert torch.autograd.gradcheck(f, (x,), atol=1e-6)


# the sort's and the top-k mask's gradients under jit(vmap(grad)) on JAX are conformance/test_autodiff.py's too: theirs
# here under -m exhaustive
@pytest.mark.parametrize("fn", ["soft_rank", *(pytest.param(f, marks=pytest.mark.exhaustive) for f in ("soft_sort", "soft_topk_mask"))])
def test_jax_jit_grad_vmap_equal_torch(fn):
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = _x((3, 6), seed=11)
    w = np.random.default_rng(12).normal(size=x.shape)
    args = (2,) if fn == "soft_topk_mask" else ()
    op = getattr(rankops, fn)

    xt = torch.asarray(x).requires_grad_(True)
    (op(xt, *args, **GRAD) * torch.asarray(w)).sum().backward()

    def loss(v):
        return jnp.sum(op(v, *args, **GRAD) * w)

    g_jit = jax.jit(jax.grad(loss))(jnp.asarray(x))
    assert_allclose(np.asarray(g_jit), xt.grad.numpy(), rtol=1e-7, atol=1e-9)
    vm = jax.vmap(lambda v: op(v, *args, **GRAD))(jnp.asarray(x))
    assert_allclose(np.asarray(vm), np.asarray(op(jnp.asarray(x), *args, **GRAD)), rtol=1e-12, atol=1e-12)


def test_jit_n_iter_and_result_pytree():
    jax = pytest.importorskip("jax")
    cost = jax.numpy.asarray(np.random.default_rng(13).random((2, 5, 6)))
    res = jax.jit(lambda c: rankops.sinkhorn(c, epsilon=0.05))(cost)
    eager = rankops.sinkhorn(np.asarray(cost), epsilon=0.05)
    assert int(res.n_iter) == eager.n_iter
    assert_allclose(np.asarray(res.plan), eager.plan, rtol=1e-12, atol=1e-15)


def test_optional_ott_agreement():
    """At matched settings rankops' ranks equal OTT-JAX's (which are 0-based)."""
    soft_sort = pytest.importorskip("ott.tools.soft_sort")
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.asarray(_x((2, 8), seed=14))
    theirs = soft_sort.ranks(x, axis=-1, epsilon=0.05, threshold=1e-9, max_iterations=20_000)
    ours = rankops.soft_rank(x, epsilon=0.05, tol=1e-9, max_iter=20_000)
    assert_allclose(np.asarray(ours) - 1, np.asarray(theirs), atol=1e-4)
    theirs = soft_sort.sort(x, axis=-1, topk=3, epsilon=0.05, threshold=1e-9, max_iterations=20_000)
    ours = rankops.soft_sort(x, topk=3, epsilon=0.05, tol=1e-9, max_iter=20_000)
    assert_allclose(np.asarray(ours), np.asarray(theirs), atol=1e-4)


def test_learnable_epsilon_gradient_torch_and_jax():
    """epsilon may be a 0-d array of x's namespace: d ranks / d epsilon flows."""
    torch = pytest.importorskip("torch")
    x = _x((2, 5), seed=15)
    w = np.random.default_rng(16).normal(size=x.shape)
    opts = {"tol": 1e-12, "max_iter": 20_000}
    eps = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda e: rankops.soft_rank(torch.asarray(x), epsilon=e, **opts), (eps,), atol=1e-6)
    (rankops.soft_rank(torch.asarray(x), epsilon=eps, **opts) * torch.asarray(w)).sum().backward()
    jax = pytest.importorskip("jax")
    g = jax.grad(lambda e: jax.numpy.sum(rankops.soft_rank(jax.numpy.asarray(x), epsilon=e, **opts) * w))(jax.numpy.asarray(0.1))
    assert_allclose(float(g), float(eps.grad), rtol=1e-7)


@pytest.mark.parametrize("backend_name", ["numpy", "torch"])
def test_levels_and_k_by_keyword(backend_name):
    """q and k by keyword (as OTT and users pass them) give the positional call's values and gradients."""
    mod = pytest.importorskip(backend_name)
    rng = np.random.default_rng(11)
    x = mod.asarray(rng.normal(size=(3, 9)))
    for fn, name, value in ((rankops.soft_quantile, "q", 0.3), (rankops.soft_topk_mask, "k", 2)):
        np.testing.assert_array_equal(np.asarray(fn(x, **{name: value})), np.asarray(fn(x, value)))
    levels = np.array([0.2, 0.7])
    _, by_position = rankops.vjp(rankops.soft_quantile, np.asarray(x), levels, epsilon=0.1)
    _, by_keyword = rankops.vjp(rankops.soft_quantile, np.asarray(x), q=levels, epsilon=0.1)
    ct = np.linspace(-1.0, 1.0, 6).reshape(3, 2)
    for a, b in zip(by_position(ct), by_keyword(ct)):  # x's gradient, then the levels'
        np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match="multiple values"):
        rankops.soft_quantile(x, 0.5, q=0.3)


def test_float32_rows_far_from_zero_are_centred_before_the_squash():
    """Rows of 10^4 plus normal noise in float32 (and with a mask, whose squash reads the valid entries): the squash
    standardizes ``x - c`` (``c`` the row's midrange, where subtracting it is exact), not ``x / max |x|``, which
    rounded each entry by a unit in the last place of 10^4 against a spread of 6: soft ranks were 0.026 off the
    float64 ones of the same values, the CDF 1.3e-4."""
    x = (1e4 + np.random.default_rng(0).standard_normal((4, 200))).astype(np.float32)
    wide = x.astype(np.float64)
    mask = np.random.default_rng(1).uniform(size=x.shape) < 0.8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rankops.ConvergenceWarning)
        for options in ({}, {"mask": mask}):
            np.testing.assert_allclose(rankops.soft_rank(x, **options), rankops.soft_rank(wide, **options), atol=2e-3)
            np.testing.assert_allclose(rankops.soft_cdf(x, **options), rankops.soft_cdf(wide, **options), atol=1e-5)


def test_float32_ranks_of_long_rows_read_the_cdf_from_accurate_prefix_sums():
    """NumPy float32 soft ranks of rows of 1000 against float64 on the same values: the readout ``P b_bar`` takes the
    prefix sums of the targets' masses, which NumPy's float32 cumulative sum let drift by units in their last place
    (ranks 0.0093 off at n = 1000, 0.49 at 10^4, where torch's were 0.002 and 0.017; every backend's prefix sums:
    ``tests/test_scans.py``)."""
    x = np.random.default_rng(5).standard_normal((2, 1000)).astype(np.float32)
    got = rankops.soft_rank(x)
    assert got.dtype == np.float32
    assert_allclose(got, rankops.soft_rank(x.astype(np.float64)), atol=3e-3)


def test_float32_quantiles_and_topk_masks_read_accurate_column_sums():
    """NumPy float32 against float64 on the same values, rows of 2000: the Sinkhorn iterations, their polish and
    their error take the plan's column sums, which NumPy added one row at a time in float32. Quantiles of normal rows
    were 6.8e-6 (relative) off and top-k masks of rows spread over 10^-2..10^2 0.0017, where torch's were 5.4e-7 and
    7.3e-5 (now NumPy's too)."""
    normal = np.random.default_rng(0).normal(size=(2, 2000))
    rng = np.random.default_rng(4)
    spread = rng.normal(size=(2, 2000)) * 10.0 ** rng.uniform(-2, 2, size=(2, 2000))
    for x, f, tol in ((normal, lambda a: rankops.soft_quantile(a, 0.3), 1.5e-6),
                      (spread, lambda a: rankops.soft_topk_mask(a, 10, method="sinkhorn"), 2.5e-4)):
        x32 = x.astype(np.float32)
        want = f(x32.astype(np.float64))
        got = f(x32)
        assert got.dtype == np.float32
        assert np.abs(got - want).max() <= tol * np.abs(want).max()
