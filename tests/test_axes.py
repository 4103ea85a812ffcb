"""``axis`` as a tuple of axes: each vector operator equals itself on the array flattened by hand.

The reference of every case is built with NumPy: the listed axes moved last
in increasing order, flattened in C order into one axis, the same operator
run on that along ``axis=-1`` (on the same backend), and its output laid
back: reshaped and moved back when it keeps the flattened length, else its
one axis put at the first listed axis' place (quantile levels, ``topk``,
``num_targets``), or nothing to lay back (scalar quantile, Kendall tau).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.stats import rankdata

import rankops

SHAPE = (3, 2, 4)
SINKHORN = {"epsilon": 0.1, "tol": 1e-10, "max_iter": 20_000}  # converged: values do not depend on the stopping point
METHODS = {
    "sinkhorn": SINKHORN,
    "softsort": {"tau": 0.5},
    "neuralsort": {"tau": 0.5},
    "permutahedron": {"strength": 0.5},
    "lapsum": {"alpha": 0.5},
}


def _sort_or_rank(f, method):
    return lambda x, y, kb, axis, arr: f(x, axis=axis, method=method, **METHODS[method])


# name -> run(x, y, kb, axis, arr): y is shaped like x (moved with it in the reference), kb like the batch
# (x without the listed axes), arr makes a backend array from NumPy data
CASES = {
    **{f"soft_rank[{m}]": _sort_or_rank(rankops.soft_rank, m) for m in METHODS},
    **{f"soft_sort[{m}]": _sort_or_rank(rankops.soft_sort, m) for m in METHODS},
    "soft_sort[descending]": lambda x, y, kb, axis, arr: rankops.soft_sort(x, axis=axis, descending=True, **SINKHORN),
    "soft_sort[topk]": lambda x, y, kb, axis, arr: rankops.soft_sort(x, axis=axis, topk=3, **SINKHORN),
    "soft_sort[num_targets]": lambda x, y, kb, axis, arr: rankops.soft_sort(x, axis=axis, num_targets=5, **SINKHORN),
    "soft_cdf": lambda x, y, kb, axis, arr: rankops.soft_cdf(x, axis=axis, **SINKHORN),
    "soft_quantile[scalar]": lambda x, y, kb, axis, arr: rankops.soft_quantile(x, 0.3, axis=axis, **SINKHORN),
    "soft_quantile[levels]": lambda x, y, kb, axis, arr: rankops.soft_quantile(
        x, arr(np.array([0.2, 0.5, 0.9])), axis=axis, **SINKHORN),
    "soft_quantile_normalize": lambda x, y, kb, axis, arr: rankops.soft_quantile_normalize(
        x, arr(np.linspace(-1.0, 2.0, 5)), axis=axis, **SINKHORN),
    "soft_quantize": lambda x, y, kb, axis, arr: rankops.soft_quantize(x, 3, axis=axis, **SINKHORN),
    "soft_topk_mask": lambda x, y, kb, axis, arr: rankops.soft_topk_mask(x, 3, axis=axis, **SINKHORN),
    "soft_topk_mask[lapsum]": lambda x, y, kb, axis, arr: rankops.soft_topk_mask(x, 2.5, axis=axis, method="lapsum", alpha=0.5),
    "soft_topk_mask[lapsum-k-per-row]": lambda x, y, kb, axis, arr: rankops.soft_topk_mask(
        x, kb, axis=axis, method="lapsum", alpha=0.5),
    "soft_kendall_tau": lambda x, y, kb, axis, arr: rankops.soft_kendall_tau(x, y, axis=axis, tau=0.5),
}
AXES = [(0, 2), (2, 1), (-1, 0, -2)]  # two axes apart, two already last (given out of order), all three


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=SHAPE), rng.normal(size=SHAPE)


def _layout(shape, axis):
    axes = sorted(a % len(shape) for a in axis)
    return axes, tuple(range(-len(axes), 0))


def _flat(a, axis):
    """``a`` with the listed axes moved last (increasing order) and flattened in C order, by NumPy."""
    axes, last = _layout(a.shape, axis)
    moved = np.moveaxis(a, axes, last)
    return moved.reshape(moved.shape[: -len(axes)] + (-1,))


def _unflat(out, shape, axis, *, levels=False):
    """The inverse of :func:`_flat` on an output with a trailing operator axis (or none)."""
    axes, last = _layout(shape, axis)
    batch = tuple(s for i, s in enumerate(shape) if i not in axes)
    if out.shape == batch:  # the operator axis was dropped
        return out
    if not levels and out.shape[-1] == np.prod([shape[a] for a in axes]):
        return np.moveaxis(out.reshape(batch + tuple(shape[a] for a in axes)), last, axes)
    return np.moveaxis(out, -1, axes[0])


def _batch(shape, axis):
    axes, _ = _layout(shape, axis)
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _kb(shape, axis):
    return np.linspace(1.5, 2.5, int(np.prod(_batch(shape, axis)))).reshape(_batch(shape, axis))


def _both(backend, name, axis, seed=0):
    """``(value by the tuple axis, value on the array flattened by hand and laid back)``, as NumPy."""
    x, y = _data(seed)
    run, arr = CASES[name], backend.asarray
    kb = arr(_kb(x.shape, axis))
    got = backend.to_numpy(run(arr(x), arr(y), kb, axis, arr))
    flat = backend.to_numpy(run(arr(_flat(x, axis)), arr(_flat(y, axis)), kb, -1, arr))
    return got, _unflat(flat, x.shape, axis, levels="levels" in name)


# The layout is one backend-independent code path (prepare / Prepared): every tuple on NumPy and
# array-api-strict, the general case (all three axes) on the other backends, on JAX under -m exhaustive (two programs
# each, the same layout code: JAX's own check of tuple axes is test_jax_jit_and_grad, on these operators)
_EVERY_TUPLE = ("numpy", "array_api_strict")
_ON_JAX = ("soft_rank[sinkhorn]", "soft_sort[topk]", "soft_quantile[levels]", "soft_rank[lapsum]",
           "soft_topk_mask[lapsum-k-per-row]", "soft_kendall_tau")


@pytest.mark.eager_backends
@pytest.mark.parametrize("name", CASES)
def test_tuple_axis_equals_manual_flatten(backend, name):
    for axis in AXES if backend.name in _EVERY_TUPLE else AXES[-1:]:
        got, expected = _both(backend, name, axis)
        assert got.shape == expected.shape, axis
        assert_allclose(got, expected, rtol=1e-9, atol=1e-9, err_msg=f"axis={axis}")


# -- what the output looks like --------------------------------------------------------------------


def test_output_shapes():
    x = _data()[0]  # (3, 2, 4)
    assert rankops.soft_rank(x, axis=(0, 2)).shape == SHAPE
    assert rankops.soft_quantile(x, 0.5, axis=(0, 2)).shape == (2,)
    assert rankops.soft_quantile(x, 0.5, axis=(0, 1, 2)).shape == ()
    assert rankops.soft_quantile(x, np.array([0.1, 0.9]), axis=(2, 1)).shape == (3, 2)
    assert rankops.soft_quantile(x, np.array([0.1, 0.9]), axis=(0, 2)).shape == (2, 2)
    assert rankops.soft_sort(x, axis=(0, 2), topk=5).shape == (5, 2)
    assert rankops.soft_sort(x, axis=(1, 2), num_targets=3).shape == (3, 3)
    assert rankops.soft_kendall_tau(x, x, axis=(0, 2)).shape == (2,)
    assert rankops.soft_topk_mask(x, 2, axis=(1, 2)).shape == SHAPE


def test_order_of_the_listed_axes_does_not_matter_and_an_int_is_a_one_tuple():
    x = _data()[0]
    for f in (rankops.soft_sort, rankops.soft_rank):
        assert_array_equal(f(x, axis=(2, 0)), f(x, axis=(0, 2)))
        assert_array_equal(f(x, axis=(-1, 0)), f(x, axis=(0, 2)))
        assert_array_equal(f(x, axis=(1,)), f(x, axis=1))
        assert_array_equal(f(x, axis=(-1,)), f(x))


def test_levels_as_many_as_entries_stay_one_axis():
    """len(q) == n must not be mistaken for an output that keeps the flattened axis."""
    x = _data()[0]
    q = np.linspace(0.05, 0.95, 8)  # n = 2 * 4
    got = rankops.soft_quantile(x, q, axis=(1, 2), **SINKHORN)
    assert got.shape == (3, 8)
    assert_allclose(got, rankops.soft_quantile(x.reshape(3, 8), q, **SINKHORN), rtol=1e-12)
    value, info = rankops.soft_quantile(x, np.linspace(0.05, 0.95, 12), axis=(0, 2), return_info=True, **SINKHORN)
    assert value.shape == info.error.shape == (12, 2)


def test_num_targets_equal_to_n_is_laid_back():
    x = _data()[0]
    got = rankops.soft_sort(x, axis=(0, 2), num_targets=12, **SINKHORN)
    assert got.shape == SHAPE
    assert_allclose(got, rankops.soft_sort(x, axis=(0, 2), **SINKHORN), rtol=1e-12)


def test_return_info_one_entry_per_transport_problem():
    x = _data()[0]
    value, info = rankops.soft_rank(x, axis=(0, 2), return_info=True, **SINKHORN)
    assert value.shape == SHAPE and info.error.shape == (2,) and bool(info.converged.all())


def test_hard_limits_over_several_axes():
    x = np.random.default_rng(3).permutation(24).reshape(3, 4, 2).astype(float)
    expected = np.stack([rankdata(x[..., j]).reshape(3, 4) for j in range(2)], axis=-1)
    r = rankops.soft_rank(x, axis=(0, 1), epsilon=1e-3, tol=1e-4, max_iter=50_000)
    assert_allclose(r, expected, atol=0.25)  # the default squash keeps some blur at epsilon = 1e-3
    assert_array_equal(np.round(r), expected)
    sorted_ = rankops.soft_sort(x, axis=(0, 1), method="lapsum", alpha=1e-3)  # the sorted values, laid out in C order
    assert_allclose(sorted_, np.stack([np.sort(x[..., j].ravel()).reshape(3, 4) for j in range(2)], axis=-1), atol=1e-6)
    median = rankops.soft_quantile(x, 0.5, axis=(0, 1), epsilon=1e-3, filler=0.01, tol=1e-4, max_iter=50_000)
    lo, hi = np.sort(x.reshape(12, 2), axis=0)[[5, 6]]
    assert np.all(median >= lo - 1e-2) and np.all(median <= hi + 1e-2)


# -- gradients ------------------------------------------------------------------------------------

GRAD = {"epsilon": 0.3, "tol": 1e-12, "max_iter": 100_000}
GRAD_AXIS = (0, 2)


def _grad_cases():
    x, y = _data(5)
    kb = _kb(SHAPE, GRAD_AXIS)
    return {
        "soft_rank": (rankops.soft_rank, (x,), GRAD),
        "soft_sort[topk]": (rankops.soft_sort, (x,), {"topk": 3, **GRAD}),
        "soft_quantile[levels]": (rankops.soft_quantile, (x, np.array([0.25, 0.7])), GRAD),
        "soft_quantile_normalize": (rankops.soft_quantile_normalize, (x, np.linspace(0.0, 3.0, 4)), GRAD),
        "soft_rank[permutahedron]": (rankops.soft_rank, (x,), {"method": "permutahedron", "strength": 2.0}),
        "soft_topk_mask[lapsum]": (rankops.soft_topk_mask, (x, kb), {"method": "lapsum", "alpha": 0.7}),
        "soft_kendall_tau": (rankops.soft_kendall_tau, (x, y), {"tau": 0.7}),
    }


@pytest.mark.parametrize("name", list(_grad_cases()))
def test_numpy_vjp_against_central_differences(name):
    fun, arrays, options = _grad_cases()[name]
    value, vjp_fn = rankops.vjp(fun, *arrays, axis=GRAD_AXIS, **options)
    rng = np.random.default_rng(1)
    ct = rng.normal(size=value.shape)
    grads = vjp_fn(ct)
    assert [g.shape for g in grads] == [a.shape for a in arrays]
    h = 1e-6
    for i, (a, g) in enumerate(zip(arrays, grads)):
        v = rng.normal(size=a.shape)

        def at(t, i=i, v=v):
            moved = [b + t * v if j == i else b for j, b in enumerate(arrays)]
            return np.sum(ct * fun(*moved, axis=GRAD_AXIS, **options))

        assert_allclose(np.sum(g * v), (at(h) - at(-h)) / (2 * h), rtol=1e-5, atol=1e-7, err_msg=f"{name}: argument {i}")


@pytest.mark.parametrize("name", list(_grad_cases()))
def test_numpy_vjp_equals_manual_flatten(name):
    """The gradient of the input (and of y, laid out like it) comes back in the caller's layout."""
    fun, arrays, options = _grad_cases()[name]
    value, vjp_fn = rankops.vjp(fun, *arrays, axis=GRAD_AXIS, **options)
    ct = np.random.default_rng(2).normal(size=value.shape)
    like_x = (0, 1) if fun is rankops.soft_kendall_tau else (0,)
    flat_args = [_flat(a, GRAD_AXIS) if i in like_x else a for i, a in enumerate(arrays)]
    flat_value, flat_vjp = rankops.vjp(fun, *flat_args, axis=-1, **options)
    levels = "levels" in name
    assert_allclose(value, _unflat(flat_value, SHAPE, GRAD_AXIS, levels=levels), rtol=1e-12, atol=1e-12)
    ct_flat = _flat(ct, GRAD_AXIS) if value.shape == SHAPE else (np.moveaxis(ct, 0, -1) if ct.ndim == 2 else ct)
    for i, (g, gf) in enumerate(zip(vjp_fn(ct), flat_vjp(ct_flat))):
        expected = _unflat(gf, SHAPE, GRAD_AXIS) if i in like_x else gf
        assert_allclose(g, expected, rtol=1e-10, atol=1e-12, err_msg=f"{name}: argument {i}")


@pytest.mark.parametrize("name", CASES)
def test_torch_autograd_equals_manual_flatten(name):
    torch = pytest.importorskip("torch")
    x, y = _data(7)
    axis = (2, 0)
    axes, last = _layout(SHAPE, axis)
    run, arr = CASES[name], torch.asarray
    kb = arr(_kb(SHAPE, axis))
    ct = None
    grads = []
    for manual in (False, True):
        xt, yt = (arr(a).requires_grad_(True) for a in (x, y))
        if manual:  # moved and flattened by torch, so autograd goes through the layout too
            flat = [torch.movedim(a, axes, last).reshape(_batch(SHAPE, axis) + (-1,)) for a in (xt, yt)]
            out = run(flat[0], flat[1], kb, -1, arr)
            out = _unflat_torch(torch, out, axis, levels="levels" in name)
        else:
            out = run(xt, yt, kb, axis, arr)
        ct = torch.asarray(np.random.default_rng(3).normal(size=tuple(out.shape))) if ct is None else ct
        grads.append(torch.autograd.grad((out * ct).sum(), (xt, yt), allow_unused=True))
    for g, gm in zip(*grads):
        if g is None or gm is None:
            assert g is None and gm is None
            continue
        assert tuple(g.shape) == SHAPE
        assert_allclose(g.numpy(), gm.numpy(), rtol=1e-9, atol=1e-9)


def _unflat_torch(torch, out, axis, *, levels=False):
    axes, last = _layout(SHAPE, axis)
    batch = _batch(SHAPE, axis)
    if tuple(out.shape) == batch:
        return out
    if not levels and out.shape[-1] == np.prod([SHAPE[a] for a in axes]):
        return torch.movedim(out.reshape(batch + tuple(SHAPE[a] for a in axes)), last, axes)
    return torch.movedim(out, -1, axes[0])


@pytest.mark.parametrize("name", _ON_JAX)
def test_jax_jit_and_grad(name):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x, y = _data(9)
    axis = (0, 2)
    run = CASES[name]
    kb = jnp.asarray(_kb(SHAPE, axis))

    def f(x, y):
        return run(x, y, kb, axis, jnp.asarray)

    eager = np.asarray(f(jnp.asarray(x), jnp.asarray(y)))
    flat = np.asarray(run(jnp.asarray(_flat(x, axis)), jnp.asarray(_flat(y, axis)), kb, -1, jnp.asarray))
    assert_allclose(eager, _unflat(flat, SHAPE, axis, levels="levels" in name), rtol=1e-9, atol=1e-9)
    ct = jnp.asarray(np.random.default_rng(4).normal(size=eager.shape))

    def loss(x: Any, y: Any) -> Any:
        out = f(x, y)
        return jnp.sum(ct * out), out

    # the jitted value is the gradient's auxiliary output: one program for both
    (gx, gy), jitted = jax.jit(jax.grad(loss, argnums=(0, 1), has_aux=True))(jnp.asarray(x), jnp.asarray(y))
    assert_allclose(np.asarray(jitted), eager, rtol=1e-9, atol=1e-9)
    torch = pytest.importorskip("torch")
    xt, yt = (torch.asarray(a).requires_grad_(True) for a in (x, y))
    out = run(xt, yt, torch.asarray(np.array(kb)), axis, torch.asarray)
    tx, ty = torch.autograd.grad((out * torch.asarray(np.array(ct))).sum(), (xt, yt), allow_unused=True)
    assert_allclose(np.asarray(gx), tx.numpy(), rtol=1e-7, atol=1e-9)
    assert_allclose(np.asarray(gy), np.zeros(SHAPE) if ty is None else ty.numpy(), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name", ["soft_rank", "soft_sort[topk]", "soft_quantile[levels]", "soft_kendall_tau",
                                  "soft_topk_mask[lapsum]"])
def test_dask_vjp_equals_numpy(name):
    da = pytest.importorskip("dask.array")
    fun, arrays, options = _grad_cases()[name]
    value, vjp_fn = rankops.vjp(fun, *arrays, axis=GRAD_AXIS, **options)
    lazy = [da.from_array(a, chunks=1) for a in arrays]
    lazy_value, lazy_vjp = rankops.vjp(fun, *lazy, axis=GRAD_AXIS, **options)
    assert isinstance(lazy_value, da.Array)
    assert_allclose(lazy_value.compute(), value, rtol=1e-10, atol=1e-12)
    ct = np.random.default_rng(6).normal(size=value.shape)
    for g, lg in zip(vjp_fn(ct), lazy_vjp(da.from_array(ct, chunks=1))):
        assert_allclose(lg.compute(), g, rtol=1e-10, atol=1e-12)
