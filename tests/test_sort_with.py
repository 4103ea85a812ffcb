"""rankops.sort_with: vectors soft-sorted by a criterion, against float64 NumPy references, OTT-JAX and autodiff."""

from __future__ import annotations

import array_api_compat
import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops
from tests import reference as ref

# Converged settings: values then depend on epsilon only, not on the stopping point.
TIGHT = {"tol": 1e-12, "max_iter": 100_000}
GRAD = {"epsilon": 0.1, **TIGHT}


def _data(batch, n, features, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(*batch, n, *features)), rng.normal(size=(*batch, n)) * 2.0


def _reference(x, c, epsilon, descending=False, m=None, b=None, topk=None):
    """``b^-1 P^T X`` per row (criterion along the last axis of c; x: c's shape then features), plan by tests.reference."""
    n, feats = c.shape[-1], x.shape[c.ndim:]
    sign = -1.0 if descending else 1.0
    if topk is not None:  # OTT-JAX's construction: k targets of mass 1/n and one filler of mass (n - k)/n
        b = np.array([1] * topk + [n - topk] if descending else [n - topk] + [1] * topk) / n
    elif b is None:
        b = np.full(m or n, 1.0 / (m or n))
    rows = []
    for xr, cr in zip(x.reshape(-1, n, int(np.prod(feats))), c.reshape(-1, n)):
        plan = ref.ot_plan_1d(sign * cr, ref.grid(len(b)), b, epsilon)
        out = plan.T @ xr / b[:, None]
        rows.append(out if topk is None else (out[:topk] if descending else out[1:]))
    return np.stack(rows).reshape(*c.shape[:-1], -1, *feats)


@pytest.mark.eager_backends
@pytest.mark.parametrize("descending", [False, True])
def test_matches_reference(backend, device, descending):
    x, c = _data((2, 3), 6, (2, 3))
    xb = backend.asarray(x, device=device)
    got = rankops.sort_with(xb, backend.asarray(c, device=device), descending=descending, epsilon=0.05, **TIGHT)
    assert array_api_compat.array_namespace(got) is array_api_compat.array_namespace(xb)
    assert array_api_compat.device(got) == array_api_compat.device(xb)
    assert tuple(got.shape) == (2, 3, 6, 2, 3)
    assert_allclose(backend.to_numpy(got), _reference(x, c, 0.05, descending), atol=1e-8)


@pytest.mark.eager_backends
def test_num_targets_and_target_weights(backend):
    x, c = _data((3,), 6, (2,), seed=1)
    b = np.array([0.1, 0.4, 0.3, 0.2])
    xb, cb = backend.asarray(x), backend.asarray(c)
    got = backend.to_numpy(rankops.sort_with(xb, cb, target_weights=backend.asarray(b), epsilon=0.1, **TIGHT))
    assert got.shape == (3, 4, 2)
    assert_allclose(got, _reference(x, c, 0.1, b=b), atol=1e-8)
    got = backend.to_numpy(rankops.sort_with(xb, cb, num_targets=3, epsilon=0.1, **TIGHT))
    assert_allclose(got, _reference(x, c, 0.1, m=3), atol=1e-8)


@pytest.mark.eager_backends
@pytest.mark.parametrize("descending", [False, True])
def test_topk_matches_reference(backend, descending):
    x, c = _data((2,), 7, (3,), seed=2)
    got = backend.to_numpy(rankops.sort_with(backend.asarray(x), backend.asarray(c), topk=3, descending=descending,
                                             epsilon=0.05, **TIGHT))
    assert got.shape == (2, 3, 3)
    assert_allclose(got, _reference(x, c, 0.05, descending, topk=3), atol=1e-8)
    full = rankops.sort_with(x, c, descending=descending, epsilon=0.05)
    assert_allclose(rankops.sort_with(x, c, topk=7, descending=descending, epsilon=0.05), full, atol=1e-12)  # k = n


@pytest.mark.parametrize("options", [{}, {"descending": True}, {"topk": 2}, {"topk": 2, "descending": True}, {"num_targets": 4},
                                     {"axis": 0}])
def test_vectors_equal_to_the_criterion_give_soft_sort(options):
    _, c = _data((3, 4), 5, (), seed=3)
    got = rankops.sort_with(c[..., None], c, epsilon=0.05, **options)
    assert_allclose(got, rankops.soft_sort(c, epsilon=0.05, **options)[..., None], rtol=1e-12, atol=1e-12)


LIMIT = {"epsilon": 1e-3, "squash": "minmax", "tol": 1e-6, "max_iter": 10_000}


@pytest.mark.parametrize("descending", [False, True])
def test_hard_limit_orders_the_vectors_by_the_criterion(descending):
    rng = np.random.default_rng(4)
    n = 7
    c = np.stack([rng.permutation(n) * 0.7 + rng.uniform(-0.1, 0.1, n) for _ in range(3)])  # well separated
    x = rng.normal(size=(3, n, 2))
    order = np.argsort(-c if descending else c, axis=-1)
    expected = np.take_along_axis(x, order[..., None], axis=1)
    assert_allclose(rankops.sort_with(x, c, descending=descending, **LIMIT), expected, atol=1e-6)
    top = rankops.sort_with(x, c, topk=3, descending=descending, **LIMIT)
    assert_allclose(top, expected[:, :3] if descending else expected[:, -3:], atol=1e-6)


@pytest.mark.eager_backends
def test_axis_batches_and_feature_axes(backend):
    x, c = _data((2, 3), 5, (2, 2), seed=5)
    last = backend.to_numpy(rankops.sort_with(backend.asarray(x), backend.asarray(c), num_targets=4, epsilon=0.1))
    assert last.shape == (2, 3, 4, 2, 2)
    # the criterion's axis 1: x has c's layout, then the features
    xs, cs = np.moveaxis(x, 2, 1), np.moveaxis(c, 2, 1)
    along = backend.to_numpy(rankops.sort_with(backend.asarray(xs), backend.asarray(cs), axis=1, num_targets=4, epsilon=0.1))
    assert along.shape == (2, 4, 3, 2, 2)
    assert_allclose(along, np.moveaxis(last, 2, 1), rtol=1e-12, atol=1e-12)
    along = backend.to_numpy(rankops.sort_with(backend.asarray(xs), backend.asarray(cs), axis=-2, num_targets=4, epsilon=0.1))
    assert_allclose(along, np.moveaxis(last, 2, 1), rtol=1e-12, atol=1e-12)
    # rows are independent: a NaN criterion changes its own row only
    c_nan = c.copy()
    c_nan[1, 2, 0] = np.nan
    poisoned = backend.to_numpy(rankops.sort_with(backend.asarray(x), backend.asarray(c_nan), num_targets=4, epsilon=0.1))
    keep = np.ones((2, 3), bool)
    keep[1, 2] = False
    np.testing.assert_array_equal(poisoned[keep], last[keep])
    assert np.all(np.isnan(poisoned[1, 2]))
    # one row, one feature axis
    assert_allclose(rankops.sort_with(x[1, 2], c[1, 2], num_targets=4, epsilon=0.1), last[1, 2], rtol=1e-12, atol=1e-12)


def test_dtypes():
    x, c = _data((2,), 5, (3,), seed=6)
    assert rankops.sort_with(x.astype(np.float32), c, epsilon=0.1).dtype == np.float32  # x's floating dtype
    assert rankops.sort_with(x, c.astype(np.float32), epsilon=0.1).dtype == np.float64
    assert rankops.sort_with(x.astype(np.float16), c, epsilon=0.1).dtype == np.float16  # computed in float32
    ints = rankops.sort_with(np.arange(10).reshape(2, 5, 1), c.astype(np.int64), epsilon=0.1)
    assert ints.dtype == np.float64
    assert_allclose(rankops.sort_with(x.astype(np.float32), c, epsilon=0.1), rankops.sort_with(x, c, epsilon=0.1), rtol=1e-4, atol=1e-5)


def test_return_info_and_warning():
    x, c = _data((3,), 6, (2,), seed=7)
    value, info = rankops.sort_with(x, c, epsilon=0.1, return_info=True)
    assert value.shape == (3, 6, 2) and info.converged.shape == (3,) and bool(np.all(info.converged))
    with pytest.warns(rankops.ConvergenceWarning, match="sort_with"):
        rankops.sort_with(x, c, epsilon=1e-3, max_iter=2, tol=1e-9)


# -- gradients --------------------------------------------------------------------------------


def _central_differences(f, args, index, ct, h=1e-6):
    """d <ct, f(*args)> / d args[index], entry by entry, in float64."""
    a = args[index]
    out = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[i] = h
        plus = list(args)
        minus = list(args)
        plus[index], minus[index] = a + e, a - e
        out[i] = np.sum(ct * (f(*plus) - f(*minus))) / (2 * h)
    return out


@pytest.mark.parametrize("options", [{}, {"descending": True, "axis": 0}, {"topk": 2}, {"topk": 2, "descending": True},
                                     {"num_targets": 3, "implicit": False}])
def test_vjp_matches_central_differences(options):
    x, c = _data((2,), 5, (2,), seed=8)
    if options.get("axis") == 0:
        x, c = np.moveaxis(x, 1, 0), c.T
    value, back = rankops.vjp(rankops.sort_with, x, c, **GRAD, **options)
    ct = np.random.default_rng(9).normal(size=value.shape)
    d_x, d_c = back(ct)
    assert d_x.shape == x.shape and d_c.shape == c.shape

    def f(x, c):
        return rankops.sort_with(x, c, **GRAD, **options)

    assert_allclose(d_x, _central_differences(f, (x, c), 0, ct), atol=1e-7)
    assert_allclose(d_c, _central_differences(f, (x, c), 1, ct), atol=1e-6)


def test_target_weights_gradient():
    """Along weights that keep summing to 1 (the solve needs equal masses), and against torch autograd."""
    x, c = _data((2,), 5, (2,), seed=10)
    w = np.array([0.2, 0.5, 0.3])
    value, back = rankops.vjp(rankops.sort_with, x, c, target_weights=w, **GRAD)
    ct = np.random.default_rng(11).normal(size=value.shape)
    _, _, d_w = back(ct)
    v = np.array([1.0, -0.4, -0.6])
    fd = ref.central_difference(lambda w: np.sum(ct * rankops.sort_with(x, c, target_weights=w, **GRAD)), w, v)
    assert_allclose(np.sum(d_w * v), fd, rtol=1e-6)
    torch = pytest.importorskip("torch")
    wt = torch.asarray(w).requires_grad_(True)
    (rankops.sort_with(torch.asarray(x), torch.asarray(c), target_weights=wt, **GRAD) * torch.asarray(ct)).sum().backward()
    assert_allclose(wt.grad.numpy(), d_w, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("options", [{}, {"topk": 2, "descending": True}])
def test_torch_autograd(options):
    torch = pytest.importorskip("torch")
    x, c = _data((2,), 5, (2,), seed=12)
    xt, ct_ = torch.asarray(x).requires_grad_(True), torch.asarray(c).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: rankops.sort_with(a, b, **GRAD, **options), (xt, ct_), atol=1e-6)
    value, back = rankops.vjp(rankops.sort_with, x, c, **GRAD, **options)
    w = np.random.default_rng(13).normal(size=value.shape)
    (rankops.sort_with(xt, ct_, **GRAD, **options) * torch.asarray(w)).sum().backward()
    d_x, d_c = back(w)
    assert_allclose(xt.grad.numpy(), d_x, atol=1e-9)
    assert_allclose(ct_.grad.numpy(), d_c, atol=1e-8)


def test_jax_jit_grad_vmap():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x, c = _data((3,), 5, (2,), seed=14)
    xj, cj = jnp.asarray(x), jnp.asarray(c)
    f = lambda a, b: rankops.sort_with(a, b, topk=3, **GRAD)  # noqa: E731
    eager = f(xj, cj)
    assert_allclose(np.asarray(jax.jit(f)(xj, cj)), np.asarray(eager), rtol=1e-12, atol=1e-12)
    assert_allclose(np.asarray(jax.vmap(f)(xj, cj)), np.asarray(eager), rtol=1e-12, atol=1e-12)
    w = np.random.default_rng(15).normal(size=eager.shape)
    d_x, d_c = jax.jit(jax.grad(lambda a, b: jnp.sum(f(a, b) * w), argnums=(0, 1)))(xj, cj)
    _, back = rankops.vjp(rankops.sort_with, x, c, topk=3, **GRAD)
    rule_x, rule_c = back(w)
    assert_allclose(np.asarray(d_x), rule_x, atol=1e-9)
    assert_allclose(np.asarray(d_c), rule_c, atol=1e-8)


@pytest.mark.eager_backends
def test_vjp_on_every_backend(backend, device):
    """rankops.vjp: the backend's autodiff (torch, JAX) or rankops' rule (NumPy, array-api-strict, Dask), same numbers."""
    x, c = _data((2,), 5, (2, 2), seed=16)
    _, back = rankops.vjp(rankops.sort_with, x, c, topk=3, **GRAD)
    ct = np.random.default_rng(17).normal(size=(2, 3, 2, 2))
    expected = back(ct)
    xb, cb = backend.asarray(x, device=device), backend.asarray(c, device=device)
    value, back_b = rankops.vjp(rankops.sort_with, xb, cb, topk=3, **GRAD)
    assert tuple(value.shape) == (2, 3, 2, 2)
    got = back_b(backend.asarray(ct, device=device))
    for g, arg, e in zip(got, (xb, cb), expected):
        assert tuple(g.shape) == tuple(arg.shape) and g.dtype == arg.dtype
        assert array_api_compat.device(g) == array_api_compat.device(arg)
        assert_allclose(backend.to_numpy(g), e, atol=1e-9)


def test_optional_ott_agreement():
    """At matched settings rankops.sort_with equals OTT-JAX's soft_sort.sort_with (one row: [n, dim] and [n, 1])."""
    soft_sort = pytest.importorskip("ott.tools.soft_sort")
    jnp = pytest.importorskip("jax.numpy")
    x, c = _data((), 8, (3,), seed=18)
    settings = {"epsilon": 0.05}
    for topk in (-1, 3):
        theirs = soft_sort.sort_with(jnp.asarray(x), jnp.asarray(c)[:, None], topk=topk, threshold=1e-9, max_iterations=20_000,
                                     **settings)
        ours = rankops.sort_with(jnp.asarray(x), jnp.asarray(c), topk=None if topk < 0 else topk, tol=1e-9, max_iter=20_000,
                                 **settings)
        assert ours.shape == theirs.shape
        assert_allclose(np.asarray(ours), np.asarray(theirs), atol=1e-7)
