"""``rankops.vjp`` on every backend and device, for every registered operator.

NumPy, array-api-strict, Dask and CuPy use rankops' own backward rules;
torch and JAX their autodiff. Each gradient is checked against central
finite differences of the operator evaluated in float64 NumPy (so the
reference never involves the backend under test), and must come back in the
input's namespace, device, dtype and shape.
"""

from __future__ import annotations

import array_api_compat
import numpy as np
import pytest
from numpy.testing import assert_allclose

from .inputs import SHAPE, well_separated as _data
from .operators import converged


def _same_place(a, like):
    assert array_api_compat.array_namespace(a) is array_api_compat.array_namespace(like)
    assert array_api_compat.device(a) == array_api_compat.device(like)
    assert a.dtype == like.dtype
    assert tuple(a.shape) == tuple(like.shape)


# every variant on the eager backends, whose gradients are rankops' own rules; on JAX, where rankops.vjp is
# jax.vjp and each variant a program to compile, the primary ones (the others under -m exhaustive)
def test_vjp_matches_central_differences(backend, device, op):
    x = _data(SHAPE, seed=11) * 0.5
    rng = np.random.default_rng(3)
    ct = rng.normal(size=op.out_shape(x.shape))
    v = rng.normal(size=x.shape)
    xb = backend.asarray(x, device=device)
    value, vjp_fn = op.vjp(xb, **converged(op))
    assert_allclose(backend.to_numpy(value), np.asarray(op(x, **converged(op))), rtol=1e-10, atol=1e-10)
    g = vjp_fn(backend.asarray(ct, device=device))[0]
    _same_place(g, xb)
    g = backend.to_numpy(g)
    if not op.fd_gradient:  # straight-through: the gradient of the relaxed operator
        _, relaxed = op.vjp(x, **converged(op, hard=False))
        assert_allclose(g, relaxed(ct)[0], rtol=1e-10, atol=1e-12)
        return
    h = 1e-5

    def loss(z):
        return float(np.sum(np.asarray(op(z, **converged(op))) * ct))

    fd = (loss(x + h * v) - loss(x - h * v)) / (2 * h)
    assert_allclose(np.sum(g * v), fd, rtol=1e-6, atol=1e-8)


# on JAX, rankops.vjp is jax.vjp, whose cotangents keep the input's dtype by construction: exhaustive there
@pytest.mark.eager_backends
def test_vjp_float32_keeps_dtype(backend, device, op):
    x = _data(SHAPE, seed=12) * 0.5
    xb = backend.asarray(x, dtype="float32", device=device)
    value, vjp_fn = op.vjp(xb, **op.kwargs)
    ct = np.random.default_rng(4).normal(size=tuple(value.shape))
    g = vjp_fn(backend.asarray(ct, dtype="float32", device=device))[0]
    _same_place(g, xb)
    _, vjp64 = op.vjp(x, **op.kwargs)
    expected = vjp64(ct)[0]
    assert_allclose(backend.to_numpy(g), expected, rtol=2e-3, atol=2e-3 * max(1.0, np.abs(expected).max()))
