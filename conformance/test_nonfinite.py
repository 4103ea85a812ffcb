"""Rows holding inf or NaN, on every backend: NaN out, a zero gradient, no NumPy ``RuntimeWarning``, nothing leaked.

The rule (docs/reliability.md, "Non-finite rows"): a row with a non-finite
entry (NaN, +inf or -inf) has no soft rank, sort, CDF, quantile or mask; the
operator returns NaN throughout that row and its gradient there is exactly
0, so a loss that drops the row trains on the others. The other rows get
what they get without it, bit for bit, values and gradients. A masked entry
is padding: inf or NaN there changes nothing. ``rankops.sinkhorn`` is the
one operator outside the rule: its input is a cost matrix, where ``inf``
forbids a transport.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from .inputs import SHAPE, well_separated
from .operators import CASES

# one row of each kind, in three of the six rows of SHAPE
BAD = {(0, 0): np.inf, (1, 1): -np.inf, (2, 0): np.nan}
RULED = [pytest.param(o, marks=() if o.primary else pytest.mark.exhaustive) for o in CASES if o.name != "sinkhorn.plan"]


def _quietly(fn):
    """``fn()``, failing on any plain ``RuntimeWarning`` (NumPy's invalid-value and overflow warnings)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn()
    numpy_warnings = [str(w.message) for w in seen if w.category is RuntimeWarning]
    assert not numpy_warnings, numpy_warnings
    return out


@pytest.mark.parametrize("op", RULED, ids=lambda o: o.name)
def test_nonfinite_rows_are_nan_with_zero_gradient(eager_backend, device, op):
    backend = eager_backend
    x = well_separated(SHAPE, seed=5)
    bad_x = x.copy()
    for row, value in BAD.items():
        bad_x[row + (3,)] = value
    ct = np.random.default_rng(0).normal(size=op.out_shape(SHAPE))
    results = {}
    for name, data in (("finite", x), ("bad", bad_x)):
        xb = backend.asarray(data, device=device)
        value, vjp_fn = _quietly(lambda: op.vjp(xb, **op.kwargs))
        grad = _quietly(lambda: vjp_fn(backend.asarray(ct, device=device))[0])
        results[name] = backend.to_numpy(value), backend.to_numpy(grad)
    (value, grad), (bad_value, bad_grad) = results["finite"], results["bad"]
    bad = np.zeros(SHAPE[:-1], dtype=bool)
    for row in BAD:
        bad[row] = True
    assert np.isnan(bad_value[bad]).all()
    assert (bad_grad[bad] == 0).all()
    np.testing.assert_array_equal(bad_value[~bad], value[~bad])
    np.testing.assert_array_equal(bad_grad[~bad], grad[~bad])


@pytest.mark.parametrize("method", ["sinkhorn", "softsort", "neuralsort", "permutahedron", "lapsum", "diffsort"])
def test_masked_padding_may_be_nonfinite(method):
    """Padding holding inf or NaN changes nothing; a valid entry holding one makes its row NaN."""
    import rankops

    x = well_separated((3, 7), seed=2)
    mask = np.ones(x.shape, dtype=bool)
    mask[:, 5:] = False
    padded = x.copy()
    padded[0, 5], padded[1, 6], padded[2, 5] = np.inf, np.nan, -np.inf
    expected = rankops.soft_rank(x, mask=mask, method=method)
    np.testing.assert_array_equal(_quietly(lambda: rankops.soft_rank(padded, mask=mask, method=method)), expected)
    padded[1, 2] = np.inf
    got = _quietly(lambda: rankops.soft_rank(padded, mask=mask, method=method))
    assert np.isnan(got[1]).all()
    np.testing.assert_array_equal(got[[0, 2]], expected[[0, 2]])


@pytest.mark.parametrize("method", ["sinkhorn", "permutahedron"])
def test_nonfinite_rows_under_jit_and_grad(jax_backend, method):
    import jax
    import jax.numpy as jnp

    import rankops

    x = np.array(well_separated((3, 7), seed=4))
    x[1, 3] = np.inf

    def loss(v):
        r = rankops.soft_rank(v, method=method)
        return jnp.sum(jnp.where(jnp.isnan(r), 0.0, r) * jnp.arange(7.0))  # the NaN row dropped from the loss

    value, grad = jax.jit(jax.value_and_grad(loss))(jnp.asarray(x))
    ranks = np.asarray(jax.jit(lambda v: rankops.soft_rank(v, method=method))(jnp.asarray(x)))
    assert np.isnan(ranks[1]).all() and np.isfinite(ranks[[0, 2]]).all()
    assert np.isfinite(float(value))
    assert (np.asarray(grad[1]) == 0).all() and np.isfinite(np.asarray(grad)).all()
