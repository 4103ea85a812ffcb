"""Ragged rows (issue 33, item 1): ``mask=`` gives each row's valid entries the operator on those entries alone.

So far ``isotonic_regression``; the reference is SciPy's fit of the valid
entries alone, row by row, and the gradients are those of the operator on
the compacted row (``rankops.vjp``), with exactly 0 at masked entries.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.optimize import isotonic_regression as scipy_isotonic

import rankops

RNG = np.random.default_rng(7)
Y = RNG.normal(size=(6, 9))
W = RNG.uniform(0.5, 2.0, size=(6, 9))
# random masks, all but one masked, none masked, all masked
MASK = RNG.uniform(size=(6, 9)) < 0.6
MASK[1] = False
MASK[1, 4] = True
MASK[2] = True
MASK[3] = False
PADDED = np.where(MASK, Y, np.nan)  # whatever padding holds must not reach a valid entry
PADDED[0, ~MASK[0]] = np.inf


def _reference(y, mask, weights=None, increasing=True):
    out = np.zeros_like(y)
    for i in range(y.shape[0]):
        if not mask[i].any():
            out[i] = np.nan
            continue
        w = None if weights is None else np.broadcast_to(weights, y.shape)[i][mask[i]]
        out[i, mask[i]] = scipy_isotonic(y[i, mask[i]], weights=w, increasing=increasing).x
    return out


@pytest.mark.parametrize("increasing", [True, False])
@pytest.mark.parametrize("weighted", [None, "rows", "shared"])
def test_isotonic_mask_is_the_fit_of_the_valid_entries_alone(backend, increasing, weighted):
    weights = {None: None, "rows": W, "shared": W[0]}[weighted]
    kw = {} if weights is None else {"weights": backend.asarray(weights)}
    got = backend.to_numpy(rankops.isotonic_regression(backend.asarray(PADDED), mask=backend.asarray(MASK), increasing=increasing, **kw))
    assert_allclose(got, _reference(Y, MASK, weights, increasing), rtol=1e-6, atol=1e-6, equal_nan=True)
    assert_array_equal(got[~MASK & MASK.any(axis=1, keepdims=True)], 0.0)


def test_isotonic_mask_along_another_axis_and_broadcast():
    got = rankops.isotonic_regression(PADDED.T, mask=MASK.T, axis=0)
    assert_allclose(got, _reference(Y, MASK).T, equal_nan=True)
    shared = MASK[0]  # one mask for every row, broadcast
    assert_allclose(rankops.isotonic_regression(PADDED[:1].repeat(3, 0), mask=shared), _reference(Y[:1].repeat(3, 0), np.broadcast_to(shared, (3, 9))))


def _compacted_gradients(ct):
    """The gradients of the fit of each row's valid entries alone, scattered back (0 elsewhere)."""
    gy, gw = np.zeros_like(Y), np.zeros_like(W)
    for i in range(Y.shape[0]):
        m = MASK[i]
        if not m.any():
            continue
        _, f = rankops.vjp(rankops.isotonic_regression, Y[i, m], weights=W[i, m])
        gy[i, m], gw[i, m] = f(ct[i, m])
    return gy, gw


def test_isotonic_mask_gradients_are_those_of_the_valid_entries_alone():
    ct = RNG.normal(size=Y.shape)
    expected = _compacted_gradients(ct)
    _, f = rankops.vjp(rankops.isotonic_regression, PADDED, weights=W, mask=MASK)
    grads = f(ct)
    assert len(grads) == 2  # the mask gets none: it selects, it is not differentiated
    for g, e in zip(grads, expected):
        assert_allclose(np.nan_to_num(g), e, rtol=1e-12, atol=1e-12)
        assert np.all(g[~MASK] == 0.0)
    torch = pytest.importorskip("torch")
    y, w = torch.tensor(PADDED, requires_grad=True), torch.tensor(W, requires_grad=True)
    out = rankops.isotonic_regression(y, weights=w, mask=torch.tensor(MASK))
    (torch.nan_to_num(out) * torch.tensor(ct)).sum().backward()
    for g, e in zip((y.grad, w.grad), expected):
        assert_allclose(g.numpy(), e, rtol=1e-12, atol=1e-12)


def test_isotonic_mask_under_jit_and_vmap():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    y, m = jnp.asarray(PADDED, dtype=jnp.float32), jnp.asarray(MASK)
    f = lambda v, mk: rankops.isotonic_regression(v, mask=mk)  # noqa: E731
    eager = np.asarray(f(y, m))
    assert_allclose(np.asarray(jax.jit(f)(y, m)), eager, rtol=1e-6, equal_nan=True)
    assert_allclose(np.asarray(jax.vmap(f)(y, m)), eager, rtol=1e-6, equal_nan=True)
    assert_allclose(eager, _reference(Y, MASK), rtol=1e-5, atol=1e-6, equal_nan=True)
    g = jax.grad(lambda v: jnp.nansum(jax.jit(f)(v, m) * jnp.arange(9.0)))(y)
    assert np.all(np.asarray(g)[~MASK] == 0.0)


def test_mask_errors():
    with pytest.raises(TypeError, match=r"mask must be a bool array \(True for the valid entries\), got dtype float64"):
        rankops.isotonic_regression(Y, mask=MASK.astype(float))
    with pytest.raises(ValueError, match=r"mask of shape \(4,\) does not broadcast to y's shape \(6, 9\)"):
        rankops.isotonic_regression(Y, mask=np.ones(4, bool))
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="arrays from different namespaces cannot be mixed"):
        rankops.isotonic_regression(Y, mask=torch.tensor(MASK))
    with pytest.raises(TypeError, match=r"unexpected option\(s\) 'mask'"):  # not yet on the other operators
        rankops.soft_rank(Y, mask=MASK)
