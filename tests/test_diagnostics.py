"""Convergence is never silent: ``return_info=True`` and :class:`rankops.ConvergenceWarning`.

The reported error is checked against a plain float64 NumPy Sinkhorn run for
the same number of iterations (``tests.reference``), not against rankops'
own solver.
"""

from __future__ import annotations

import warnings

from array_api_compat import array_namespace
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import rankops
from rankops.sinkhorn import LARGE_TRANSPORT
from tests import reference as ref

X = np.random.default_rng(5).normal(size=(3, 12))
LEVELS = np.array([0.1, 0.5, 0.9])
TARGETS = np.linspace(-1.0, 1.0, 12)

# name -> (call(x, backend, device, **options), error shape for X (3, 12) along axis -1)
OPERATORS = {
    "soft_rank": (lambda x, b, d, **kw: rankops.soft_rank(x, **kw), (3,)),
    "soft_sort": (lambda x, b, d, **kw: rankops.soft_sort(x, descending=True, **kw), (3,)),
    "soft_cdf": (lambda x, b, d, **kw: rankops.soft_cdf(x, num_targets=5, **kw), (3,)),
    "soft_quantile": (lambda x, b, d, **kw: rankops.soft_quantile(x, 0.3, **kw), (3,)),
    "soft_quantile[levels]": (lambda x, b, d, **kw: rankops.soft_quantile(x, b.asarray(LEVELS, device=d), **kw), (3, 3)),
    "soft_quantile_normalize": (
        lambda x, b, d, **kw: rankops.soft_quantile_normalize(x, b.asarray(TARGETS, device=d), **kw), (3,)
    ),
    "soft_topk_mask": (lambda x, b, d, **kw: rankops.soft_topk_mask(x, 4, **kw), (3,)),
    "sort_with": (lambda x, b, d, **kw: rankops.sort_with(x[..., None], x, topk=4, **kw), (3,)),
}


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rankops.ConvergenceWarning)
        return fn(*args, **kwargs)


@pytest.mark.eager_backends
@pytest.mark.parametrize("op", OPERATORS)
def test_return_info_fields_and_value(backend, device, op):
    call, shape = OPERATORS[op]
    x = backend.asarray(X, device=device)
    plain = call(x, backend, device, epsilon=0.05)
    value, info = call(x, backend, device, epsilon=0.05, return_info=True)
    assert isinstance(info, rankops.SinkhornInfo)
    assert_array_equal(backend.to_numpy(value), backend.to_numpy(plain))
    xp = backend.namespace()
    for field in info:
        assert type(field) is type(value) and tuple(field.shape) == shape
    assert info.converged.dtype == xp.bool
    assert info.error.dtype == xp.float64
    assert np.all(backend.to_numpy(info.converged))
    err = backend.to_numpy(info.error)
    assert np.all(err <= 1e-3) and np.all(err >= 0)


@pytest.mark.eager_backends
def test_info_follows_the_axis_of_levels(backend):
    x = backend.asarray(X.T)  # operator axis 0
    value, info = _quiet(rankops.soft_quantile, x, backend.asarray(LEVELS), axis=0, epsilon=1e-2, max_iter=4, return_info=True)
    _, info_last = _quiet(rankops.soft_quantile, backend.asarray(X), backend.asarray(LEVELS), epsilon=1e-2, max_iter=4, return_info=True)
    assert tuple(value.shape) == tuple(info.error.shape) == (3, 3)
    assert_allclose(backend.to_numpy(info.error), backend.to_numpy(info_last.error).T, rtol=1e-12)


def test_info_of_float16_levels_stays_in_the_compute_dtype():
    """The error is a report in the dtype the operator computed in (float32 for float16 input), levels or not."""
    x16 = X.astype(np.float16)
    value, info = _quiet(rankops.soft_quantile, x16, LEVELS.astype(np.float16), epsilon=1e-2, max_iter=4, return_info=True)
    _, scalar = _quiet(rankops.soft_quantile, x16, 0.5, epsilon=1e-2, max_iter=4, return_info=True)
    _, as32 = _quiet(rankops.soft_quantile, x16.astype(np.float32), LEVELS.astype(np.float16).astype(np.float32), epsilon=1e-2, max_iter=4, return_info=True)
    assert value.dtype == np.float16
    assert info.error.dtype == scalar.error.dtype == np.float32
    assert_array_equal(info.error, as32.error)


def _reference_error(row, iters, epsilon):
    """Column-marginal L1 error of soft_rank's transport after exactly ``iters`` Sinkhorn iterations.

    They start where the operators start: at the exact unregularised potentials (tests/test_monotone.py checks
    those against linprog); the first g-update discards g, so f alone fixes the start.
    """
    from rankops._solvers.line import grid_potentials

    n = len(row)
    s = ref.squash_sigmoid(row)
    cost = (ref.grid(n)[None, :] - s[:, None]) ** 2
    uniform = np.full(n, 1.0 / n)
    f0, _ = grid_potentials(array_namespace(s), s, np.log(uniform), np.log(uniform), lambda d: d * d)
    plan = ref.sinkhorn_plan(cost, uniform, uniform, epsilon, iters=iters, tol=-1.0, f0=f0)
    return np.abs(plan.sum(axis=0) - uniform).sum()


@pytest.mark.eager_backends
def test_unconverged_rows_are_reported_with_their_error(backend, device):
    x = np.concatenate([X[:2], np.full((1, 12), 0.7)])  # a constant row is solved by the first iteration
    xb = backend.asarray(x, device=device)
    if backend.name == "dask":  # lazy: nothing to read, so no warning (test_dask_info_is_lazy_and_matches_numpy)
        value, info = rankops.soft_rank(xb, epsilon=1e-2, max_iter=3, return_info=True)
    else:
        with pytest.warns(rankops.ConvergenceWarning, match=r"soft_rank.*max_iter=3.*tol=0\.001 in 2 of 3 transport problem") as record:
            value, info = rankops.soft_rank(xb, epsilon=1e-2, max_iter=3, return_info=True)
        assert record[0].filename == __file__  # points at the caller's line
    assert_array_equal(backend.to_numpy(info.converged), [False, False, True])
    expected = [_reference_error(row, 3, 1e-2) for row in x]
    assert_allclose(backend.to_numpy(info.error), expected, rtol=1e-9, atol=1e-12)
    assert np.all(np.isfinite(backend.to_numpy(value)))


@pytest.mark.parametrize("op", OPERATORS)
def test_every_operator_warns_when_stopped_early(op):
    call, _ = OPERATORS[op]
    from rankops._lib._backends import get_backend

    numpy_backend = get_backend("numpy")
    with pytest.warns(rankops.ConvergenceWarning, match=op.split("[")[0]):
        call(X, numpy_backend, None, epsilon=1e-2, max_iter=2)


def test_no_warning_when_converged_or_for_nan_rows():
    x = X.copy()
    x[1, 3] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value, info = rankops.soft_rank(x, epsilon=0.05, return_info=True)
    assert np.all(np.isnan(value[1])) and np.all(np.isfinite(value[[0, 2]]))
    # a NaN row is a data problem: reported as not converged, but not warned about
    assert_array_equal(info.converged, [True, False, True])
    assert np.isnan(info.error[1])


def test_warnings_can_be_silenced_and_escalated():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rankops.ConvergenceWarning)
        rankops.soft_cdf(X, epsilon=1e-2, max_iter=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rankops.ConvergenceWarning)
        with pytest.raises(rankops.ConvergenceWarning):
            rankops.soft_cdf(X, epsilon=1e-2, max_iter=2)
    assert issubclass(rankops.ConvergenceWarning, RuntimeWarning)


def test_jax_jit_returns_info_without_warning():
    jax = pytest.importorskip("jax")
    f = jax.jit(lambda x: rankops.soft_topk_mask(x, 4, epsilon=0.1, max_iter=2, return_info=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # traced values cannot be read: no warning, info instead
        value, info = f(jax.numpy.asarray(X))
    assert not np.any(np.asarray(info.converged))
    batched = jax.vmap(lambda r: rankops.soft_rank(r, epsilon=1e-2, max_iter=2, return_info=True)[1].error)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert batched(jax.numpy.asarray(X)).shape == (3,)
    # eager JAX (grad included) has concrete values and warns like the other backends
    with pytest.warns(rankops.ConvergenceWarning):
        jax.grad(lambda x: rankops.soft_rank(x, epsilon=1e-2, max_iter=2).sum())(jax.numpy.asarray(X))


def test_dask_info_is_lazy_and_matches_numpy():
    da = pytest.importorskip("dask.array")
    x = da.from_array(np.concatenate([X, X[::-1]]), chunks=(2, 12))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is computed, so nothing to warn about
        value, info = rankops.soft_rank(x, epsilon=1e-2, max_iter=3, return_info=True)
    assert isinstance(info.error, da.Array) and info.error.chunks == ((2, 2, 2),)
    expected_value, expected = _quiet(rankops.soft_rank, np.asarray(x), epsilon=1e-2, max_iter=3, return_info=True)
    assert_array_equal(info.error.compute(), expected.error)
    assert_array_equal(info.converged.compute(), expected.converged)
    assert_array_equal(value.compute(), expected_value)


def test_torch_info_is_detached_and_gradients_flow():
    torch = pytest.importorskip("torch")
    x = torch.asarray(X, requires_grad=True)
    for implicit in (True, False):
        value, info = _quiet(rankops.soft_sort, x, epsilon=1e-2, max_iter=3, implicit=implicit, return_info=True)
        assert not info.error.requires_grad and not info.converged.requires_grad
        (g,) = torch.autograd.grad(value.sum(), x)
        assert torch.isfinite(g).all()


# -- the default method on long rows: PerformanceWarning (issue 31) -----------------------------------


def _performance_warnings(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own: once per calling line
        warnings.simplefilter("ignore", rankops.ConvergenceWarning)
        call()
    return [w for w in caught if issubclass(w.category, rankops.PerformanceWarning)]


@pytest.mark.parametrize("where", ["soft_rank", "soft_sort", "soft_cdf"])
def test_long_rows_warn_once_per_call_site_and_name_the_fast_methods(where):
    n = int(np.sqrt(LARGE_TRANSPORT))  # n * n at the threshold
    x = np.random.default_rng(0).normal(size=(1, n))
    fn = getattr(rankops, where)

    def twice():
        for _ in range(2):  # one line, called twice: one warning
            fn(x, max_iter=1)

    caught = _performance_warnings(twice)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"{n} x {n}" in message and "num_targets" in message
    assert ("permutahedron" in message) == (where != "soft_cdf")
    assert caught[0].filename == __file__  # points at the caller's line, not inside rankops
    # just below the threshold, and the same long row with few targets: silent
    assert _performance_warnings(lambda: fn(x[:, 1:], max_iter=1)) == []
    assert _performance_warnings(lambda: fn(x, max_iter=1, num_targets=16)) == []
    assert _performance_warnings(lambda: rankops.soft_rank(x, method="permutahedron")) == []


def test_the_size_warning_reads_shapes_only_under_jit():
    jax = pytest.importorskip("jax")
    n = int(np.sqrt(LARGE_TRANSPORT))
    x = jax.numpy.asarray(np.random.default_rng(1).normal(size=(1, n)))
    caught = _performance_warnings(lambda: jax.jit(lambda v: rankops.soft_rank(v, max_iter=1)).lower(x))
    assert len(caught) == 1
