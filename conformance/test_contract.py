"""Contract properties of every registered operator, on the chosen backends.

Run on one backend with ``pytest conformance --backend torch``; by default
on every backend installed here (CuPy only with a GPU). The tests share one
input shape (``inputs.SHAPE``), so that a backend which compiles per shape
(JAX) compiles an operator once for all of them.
"""

from __future__ import annotations

import array_api_compat
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from rankops._lib._compat import on_cpu

from .inputs import SHAPE, well_separated as _data
from .operators import CASES

DTYPES = ["float32", "float64"]
TOL = {"float32": {"rtol": 2e-5, "atol": 2e-5}, "float64": {"rtol": 1e-10, "atol": 1e-10}}


@pytest.mark.parametrize("dtype", DTYPES)
def test_namespace_dtype_device_shape(backend, device, op, dtype):
    x = backend.asarray(_data(SHAPE), dtype=dtype, device=device)
    out = op(x)
    assert array_api_compat.array_namespace(out) is array_api_compat.array_namespace(x)
    assert out.dtype == x.dtype
    assert array_api_compat.device(out) == array_api_compat.device(x)
    assert tuple(out.shape) == op.out_shape(SHAPE)


@pytest.mark.every_variant
def test_agrees_with_numpy(backend, device, op):
    x = _data(SHAPE, seed=1)
    expected = np.asarray(op(x))
    got = backend.to_numpy(op(backend.asarray(x, device=device)))
    assert_allclose(got, expected, **TOL["float64"])


def _assert_rows_equal(got, want, in_fixed_order):
    """Bit for bit where the device adds in a fixed order; on a GPU, to 16 ulps of each row's largest magnitude: its
    scatter-adds are atomics, whose order, and so a segmented sum's last bits, vary from call to call
    (docs/reliability.md, "Determinism on a GPU")."""
    if in_fixed_order or not np.issubdtype(want.dtype, np.floating):
        assert_array_equal(got, want)
        return
    scale = np.max(np.abs(np.nan_to_num(want, posinf=0.0, neginf=0.0)), axis=-1, keepdims=True, initial=1.0)
    assert_allclose(got / scale, want / scale, rtol=0, atol=16 * np.finfo(want.dtype).eps)


def test_batch_rows_independent(backend, op):
    """Each row's output is a function of that row alone: rows swapped in from another batch keep their outputs, bit for bit (to a few ulps on a GPU); a NaN stays in its row."""
    x, y = _data(SHAPE, seed=2), _data(SHAPE, seed=3) * 3.0
    in_fixed_order = on_cpu(backend.asarray(x))  # a CPU adds a sum's terms in one order; a GPU's scatter-adds do not
    out_x, out_y = (backend.to_numpy(op(backend.asarray(a))) for a in (x, y))
    mine = (np.arange(int(np.prod(SHAPE[:-1]))) % 2 == 0).reshape(SHAPE[:-1])  # every other row from x, the rest from y
    for rows in (mine, ~mine):
        mixed = backend.to_numpy(op(backend.asarray(np.where(rows[..., None], x, y))))
        _assert_rows_equal(mixed[rows], out_x[rows], in_fixed_order)
        _assert_rows_equal(mixed[~rows], out_y[~rows], in_fixed_order)
    x_nan = x.copy()
    x_nan[1, 0, 3] = np.nan
    with_nan = backend.to_numpy(op(backend.asarray(x_nan)))
    keep = np.ones(SHAPE[:-1], dtype=bool)
    keep[1, 0] = False
    _assert_rows_equal(with_nan[keep], out_x[keep], in_fixed_order)
    assert np.all(np.isnan(with_nan[1, 0]))


def test_input_not_mutated(backend, device, op):
    x = _data(SHAPE, seed=3)
    xb = backend.asarray(x, device=device)
    op(xb)
    assert_array_equal(backend.to_numpy(xb), x)
    if op.has_axis:  # the axis moved last, by the operator, on the caller's array
        moved = backend.asarray(np.moveaxis(x, -1, 1), device=device)
        op(moved, axis=1)
        assert_array_equal(backend.to_numpy(moved), np.moveaxis(x, -1, 1))


# float32 cannot always reach the limit regime's tol: the values are what is checked. On JAX, where each dtype is a
# program of its own, the default run keeps float32 (JAX's default dtype, and the tighter case); float64 is exhaustive
@pytest.mark.filterwarnings("ignore::rankops.ConvergenceWarning")
@pytest.mark.variants_on_jax(dtype=("float32",))
@pytest.mark.parametrize("dtype", DTYPES)
def test_hard_limit(backend, op, dtype):
    x = _data(SHAPE, seed=4)
    got = backend.to_numpy(op(backend.asarray(x, dtype=dtype), limit=True))
    atol = max(op.hard_atol, 1e-4 if dtype == "float32" else 1e-9)
    assert_allclose(got, op.hard_reference(x.astype(dtype).astype(np.float64)), rtol=0, atol=atol * max(1, np.abs(x).max()))


@pytest.mark.parametrize("op", [o for o in CASES if o.has_axis], ids=lambda o: o.name)
def test_axis(backend, op):
    x = _data(SHAPE, seed=5)
    got = backend.to_numpy(op(backend.asarray(np.moveaxis(x, -1, 1)), axis=1))
    expected = backend.to_numpy(op(backend.asarray(x)))
    if expected.ndim == x.ndim + op.features:  # the axis is kept (or replaced in place), not dropped
        expected = np.moveaxis(expected, -1 - op.features, 1)
    assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


# few examples: conformance/test_properties.py draws the hostile shapes and values
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # Few distinct shapes, SHAPE among them: eager JAX compiles once per shape, then hits its cache.
    batch=st.sampled_from([(), SHAPE[:-1]]),
    n=st.sampled_from([1, 2, SHAPE[-1]]),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
    seed=st.integers(0, 2**16),
)
def test_random_shapes_agree_with_numpy(backend, op, batch, n, scale, seed):
    if backend.compiles:
        # a program per shape on JAX, for array code whose shapes are Python numbers, the same on every backend (the
        # others run each drawn shape): its draws keep SHAPE, which test_agrees_with_numpy compiled, and vary the data
        batch, n = SHAPE[:-1], SHAPE[-1]
    x = np.random.default_rng(seed).normal(size=(*batch, n)) * scale
    expected = np.asarray(op(x))
    got = backend.to_numpy(op(backend.asarray(x)))
    assert got.shape == op.out_shape(x.shape)
    assert_allclose(got, expected, rtol=1e-9, atol=1e-9 * max(scale, 1.0))
