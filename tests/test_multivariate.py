"""Multivariate CDF and quantile maps (issue 33, item 4), checked as OTT-JAX checks its own and against 1-D exact transport."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.stats import rankdata

import rankops
from rankops.multivariate import reference_points

TIGHT = {"tol": 1e-9, "max_iter": 20_000}


def _symmetric(d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    z = np.random.default_rng(seed).normal(size=(40, d)) * np.arange(1, d + 1)
    centre = np.linspace(-2.0, 3.0, d)
    return np.concatenate([z, -z]) + centre, centre


@pytest.mark.eager_backends
@pytest.mark.parametrize("d", [1, 2, 3])
def test_centre_of_a_symmetric_sample_maps_to_one_half_and_back(backend, d):
    x, centre = _symmetric(d)
    # Dask takes hyper-parameters as numbers only: there the default, 0.05 mean(C), is passed as one
    cost = ((x[:, None, :] - np.asarray(reference_points(np, 80, d, dtype=np.float64, device="cpu"))) ** 2).sum(-1)
    epsilon = 0.05 * cost.mean() if backend.name == "dask" else None
    # the default tol: the iterations keep a symmetric problem symmetric, so the centre is exact anyway
    cdf, quantile = rankops.multivariate_cdf_quantile_maps(backend.asarray(x), epsilon=epsilon)
    assert_allclose(backend.to_numpy(cdf(backend.asarray(centre))), np.full(d, 0.5), atol=2e-6)  # float32 on JAX
    assert_allclose(backend.to_numpy(quantile(backend.asarray(np.full(d, 0.5)))), centre, atol=1e-5)
    # a batch of points maps point by point, into the unit cube
    u = backend.to_numpy(cdf(backend.asarray(x[:5])))
    assert u.shape == (5, d) and np.all((u > 0) & (u < 1))
    assert_allclose(u[2], backend.to_numpy(cdf(backend.asarray(x[2]))), rtol=1e-12)


def test_one_dimension_tends_to_the_exact_monotone_transport():
    """In 1-D the unregularised map sends the k-th smallest point to the k-th smallest reference point."""
    x = np.random.default_rng(3).normal(size=30)
    y = np.sort(np.asarray(reference_points(np, 30, 1, dtype=np.float64, device="cpu"))[:, 0])
    cdf, quantile = rankops.multivariate_cdf_quantile_maps(x, epsilon=1e-4, **TIGHT)
    u = cdf(x[:, None])[:, 0]
    expected = y[rankdata(x).astype(int) - 1]
    assert_allclose(u, expected, atol=1e-2)  # neighbours 1/30 apart; entries closer than 0.01 share their targets a little
    assert_allclose(quantile(u[:, None])[:, 0], x, atol=2e-2)
    assert np.all(np.diff(u[np.argsort(x)]) > 0)  # increasing, as a CDF


def test_reference_points_are_uniform_and_symmetric():
    y = np.asarray(reference_points(np, 2000, 3, dtype=np.float64, device="cpu"))
    assert y.shape == (2000, 3) and np.all((y > 0) & (y < 1))
    assert_allclose(y.mean(axis=0), 0.5, atol=1e-12)  # the reflections make the mean exact
    # low discrepancy: each axis' empirical CDF within 1% of the uniform one
    for j in range(3):
        s = np.sort(y[:, j])
        assert np.max(np.abs(s - (np.arange(2000) + 0.5) / 2000)) < 0.01
    with pytest.raises(ValueError, match="num_targets must be an even number >= 2"):
        reference_points(np, 3, 2, dtype=np.float64, device="cpu")


def test_caller_targets_and_weights():
    x, centre = _symmetric(2, seed=1)
    rng = np.random.default_rng(4)
    t = rng.uniform(size=(50, 2))
    targets = np.concatenate([t, 1 - t])
    cdf, _ = rankops.multivariate_cdf_quantile_maps(x, targets=targets, target_weights=np.full(100, 0.01),
                                                   weights=np.full(80, 1 / 80), **TIGHT)
    assert_allclose(cdf(centre), [0.5, 0.5], atol=1e-7)


def test_gradients_through_both_maps_equal_central_differences():
    torch = pytest.importorskip("torch")
    x, _ = _symmetric(2, seed=2)
    xt = torch.tensor(x[:20], requires_grad=True)
    z = torch.tensor([[0.3, -0.1]], dtype=torch.float64, requires_grad=True)

    def f(xs, zs):
        cdf, quantile = rankops.multivariate_cdf_quantile_maps(xs, epsilon=0.5, **TIGHT)
        return (cdf(zs) * torch.tensor([1.0, -2.0], dtype=xs.dtype)).sum() + quantile(torch.full((1, 2), 0.4, dtype=xs.dtype)).sum()

    assert torch.autograd.gradcheck(f, (xt, z), eps=1e-6, atol=1e-5, rtol=1e-4)


def test_bad_arguments():
    x = np.ones((4, 2))
    with pytest.raises(ValueError, match=r"x must be a non-empty sample of shape \(n, d\)"):
        rankops.multivariate_cdf_quantile_maps(np.ones((2, 2, 2)))
    with pytest.raises(ValueError, match=r"targets must have shape \(m, 2\)"):
        rankops.multivariate_cdf_quantile_maps(x, targets=np.ones((3, 3)))
    with pytest.raises(ValueError, match="pass targets or num_targets, not both"):
        rankops.multivariate_cdf_quantile_maps(x, targets=np.ones((4, 2)), num_targets=4)
    with pytest.raises(TypeError, match="x must be an array"):
        rankops.multivariate_cdf_quantile_maps([[1.0, 2.0]])
    cdf, _ = rankops.multivariate_cdf_quantile_maps(np.random.default_rng(0).normal(size=(6, 2)))
    with pytest.raises(ValueError, match=r"the map takes points of shape \(\.\.\., 2\), got \(3,\)"):
        cdf(np.ones(3))
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="arrays from different namespaces cannot be mixed"):
        cdf(torch.ones(2, dtype=torch.float64))


def test_a_sample_holding_a_nan_gives_nan_maps_quietly():
    """Its default epsilon (0.05 times the mean squared distance) is NaN: every map value is NaN, without a NumPy
    warning (an error in this suite) and without a ValueError about an epsilon the caller did not pass."""
    x = np.random.default_rng(2).normal(size=(20, 2))
    cdf, quantile = rankops.multivariate_cdf_quantile_maps(x)
    assert np.isfinite(cdf(x[:3])).all()
    x[3, 1] = np.nan
    cdf, quantile = rankops.multivariate_cdf_quantile_maps(x)
    assert np.isnan(cdf(x[:3])).all() and np.isnan(quantile(np.full((2, 2), 0.5))).all()
