"""soft_sort / soft_rank with method="softsort" and "neuralsort", on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.stats import rankdata

import rankops
from tests import reference as ref

METHODS = {"softsort": ref.softsort, "neuralsort": ref.neuralsort}


def _x(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape) * 3.0


@pytest.mark.eager_backends
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("descending", [False, True])
def test_values_match_formula(backend, device, method, descending):
    x = _x((3, 8))
    p = METHODS[method](x, 0.6, descending=descending)
    xb = backend.asarray(x, device=device)
    got_sort = backend.to_numpy(rankops.soft_sort(xb, method=method, tau=0.6, descending=descending))
    got_rank = backend.to_numpy(rankops.soft_rank(xb, method=method, tau=0.6, descending=descending))
    assert_allclose(got_sort, ref.sort_from(p, x), rtol=1e-10, atol=1e-12)
    assert_allclose(got_rank, ref.rank_from(p), rtol=1e-10, atol=1e-12)


@pytest.mark.eager_backends
def test_softsort_power_option(backend):
    x = _x((2, 6), seed=9)
    got = backend.to_numpy(rankops.soft_rank(backend.asarray(x), method="softsort", tau=0.5, power=2))
    assert_allclose(got, ref.rank_from(ref.softsort(x, 0.5, power=2, descending=False)), rtol=1e-10)


@pytest.mark.eager_backends
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("descending", [False, True])
def test_hard_limit_matches_numpy_and_scipy(backend, method, descending):
    x = np.array([[0.3, -1.2, 2.5, 0.7, 1.9, -0.4], [4.0, 4.5, -2.0, 0.0, 1.0, 3.0]])
    xb = backend.asarray(x)
    s = backend.to_numpy(rankops.soft_sort(xb, method=method, tau=1e-3, descending=descending))
    r = backend.to_numpy(rankops.soft_rank(xb, method=method, tau=1e-3, descending=descending))
    expected_sort = np.sort(x, axis=-1)
    expected_rank = rankdata(x, axis=-1)
    if descending:
        expected_sort = expected_sort[:, ::-1]
        expected_rank = x.shape[-1] + 1 - expected_rank
    assert_allclose(s, expected_sort, atol=1e-9)
    assert_allclose(r, expected_rank, atol=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_converges_as_tau_shrinks(method):
    """Error to the hard rank shrinks monotonically with tau (numpy, float64)."""
    x = _x((4, 10), seed=5)
    errors = [
        np.abs(rankops.soft_rank(x, method=method, tau=tau) - rankdata(x, axis=-1)).max() for tau in (3.0, 1.0, 0.3, 0.1, 0.01, 0.001)
    ]
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 1e-6


@pytest.mark.eager_backends
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("shape", "axis"), [((7, 3), 0), ((2, 7, 3), 1), ((2, 3, 7), -1), ((7,), 0), ((2, 7, 3), -2)])
def test_axis(backend, method, shape, axis):
    x = _x(shape, seed=3)
    xb = backend.asarray(x)
    got = backend.to_numpy(rankops.soft_rank(xb, axis=axis, method=method, tau=0.4))
    expected = np.moveaxis(ref.rank_from(METHODS[method](np.moveaxis(x, axis, -1), 0.4, descending=False)), -1, axis)
    assert got.shape == x.shape
    assert_allclose(got, expected, rtol=1e-10)
    got_sort = backend.to_numpy(rankops.soft_sort(xb, axis=axis, method=method, tau=0.4))
    expected_sort = np.moveaxis(ref.sort_from(METHODS[method](np.moveaxis(x, axis, -1), 0.4, descending=False), np.moveaxis(x, axis, -1)), -1, axis)
    assert_allclose(got_sort, expected_sort, rtol=1e-10, atol=1e-12)


@pytest.mark.eager_backends
@pytest.mark.parametrize("method", METHODS)
def test_rank_total(backend, method):
    """Ranks sum to n(n+1)/2: each row of P sums to one. (Columns need not, so a
    single rank may leave [1, n] at large tau; documented in soft_rank.)"""
    x = _x((5, 9), seed=4)
    r = backend.to_numpy(rankops.soft_rank(backend.asarray(x), method=method, tau=2.0))
    assert np.all(r > 0)
    assert_allclose(r.sum(axis=-1), 9 * 10 / 2, rtol=1e-12)


@pytest.mark.eager_backends
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dtype_preserved(backend, method, dtype):
    x = backend.asarray(_x((2, 5)), dtype=dtype)
    for op in (rankops.soft_sort, rankops.soft_rank):
        out = op(x, method=method, tau=0.5)
        assert backend.to_numpy(out).dtype == np.dtype(dtype)


@pytest.mark.parametrize("method", METHODS)
def test_integer_and_bool_promote_to_default_float(backend, method):
    xp = backend.namespace()
    default = xp.__array_namespace_info__().default_dtypes()["real floating"]
    for data in (np.array([[3, 1, 2]], dtype=np.int64), np.array([[True, False, True]])):
        out = rankops.soft_rank(backend.asarray(data), method=method, tau=0.1)
        assert out.dtype == default
        assert_allclose(backend.to_numpy(out), ref.rank_from(METHODS[method](data.astype(float), 0.1, descending=False)), rtol=1e-6)


def test_float16_computed_in_float32_and_cast_back():
    x = _x((3, 6)).astype(np.float16)
    out = rankops.soft_rank(x, method="softsort", tau=0.5)
    assert out.dtype == np.float16
    expected = rankops.soft_rank(x.astype(np.float32), method="softsort", tau=0.5).astype(np.float16)
    assert_array_equal(out, expected)


@pytest.mark.eager_backends
@pytest.mark.parametrize("method", METHODS)
def test_input_not_mutated(backend, method):
    x_np = _x((3, 6))
    xb = backend.asarray(x_np)
    rankops.soft_sort(xb, method=method, tau=0.3, hard=True)
    rankops.soft_rank(xb, axis=0, method=method, tau=0.3)
    assert_array_equal(backend.to_numpy(xb), x_np)


@pytest.mark.eager_backends
@pytest.mark.parametrize("method", METHODS)
def test_nan_row_leaves_other_rows_untouched(backend, method):
    x = _x((3, 6), seed=8)
    clean = backend.to_numpy(rankops.soft_rank(backend.asarray(x), method=method, tau=0.5))
    x[1, 2] = np.nan
    dirty = backend.to_numpy(rankops.soft_rank(backend.asarray(x), method=method, tau=0.5))
    assert_array_equal(dirty[[0, 2]], clean[[0, 2]])
    assert np.all(np.isnan(dirty[1]))


@pytest.mark.eager_backends
@pytest.mark.parametrize("method", METHODS)
def test_rows_independent(backend, method):
    x = _x((4, 7), seed=10)
    batch = backend.to_numpy(rankops.soft_sort(backend.asarray(x), method=method, tau=0.5))
    for i in range(4):
        row = backend.to_numpy(rankops.soft_sort(backend.asarray(x[i]), method=method, tau=0.5))
        assert_allclose(batch[i], row, rtol=1e-13)


@pytest.mark.eager_backends
@pytest.mark.parametrize("method", METHODS)
def test_hard_option_gives_exact_sort_and_rank(backend, method):
    x = _x((3, 7), seed=12)
    xb = backend.asarray(x)
    assert_allclose(backend.to_numpy(rankops.soft_sort(xb, method=method, tau=10.0, hard=True)), np.sort(x, -1), rtol=1e-15)
    assert_allclose(backend.to_numpy(rankops.soft_rank(xb, method=method, tau=10.0, hard=True)), rankdata(x, axis=-1), rtol=1e-15)


@pytest.mark.eager_backends
def test_single_element_axis(backend):
    x = backend.asarray(np.array([[2.0], [-1.0]]))
    for method in METHODS:
        assert_array_equal(backend.to_numpy(rankops.soft_rank(x, method=method)), [[1.0], [1.0]])
        assert_array_equal(backend.to_numpy(rankops.soft_sort(x, method=method)), [[2.0], [-1.0]])


@pytest.mark.parametrize("fn", [rankops.soft_rank, rankops.soft_sort])
def test_learnable_power_gets_its_gradient(fn):
    """An array power (default block too) is differentiated: torch autograd == rankops' rule on NumPy."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).normal(size=(2, 5))
    ct = np.random.default_rng(2).normal(size=(2, 5))
    power = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    xt = torch.asarray(x, requires_grad=True)
    out = fn(xt, method="softsort", power=power, tau=0.4)
    gx, gp = torch.autograd.grad((out * torch.asarray(ct)).sum(), (xt, power))
    # the same derivative by central differences in power, float64
    h = 1e-6
    up, down = (fn(x, method="softsort", power=0.7 + s, tau=0.4, block=None) for s in (h, -h))
    assert_allclose(float(gp), np.sum((up - down) * ct) / (2 * h), rtol=1e-6)
    _, vjp_fn = rankops.vjp(fn, x, method="softsort", power=np.asarray(0.7), tau=0.4)
    gxn, gpn = vjp_fn(ct)
    assert_allclose(gxn, gx.numpy(), rtol=1e-10, atol=1e-12)
    assert_allclose(float(gpn), float(gp), rtol=1e-10)
    with pytest.raises(TypeError, match="power must be a Python number for the Sinkhorn operators"):
        rankops.soft_rank(x, power=np.asarray(2.0))
