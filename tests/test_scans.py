"""The adapters' row primitives (scans, segmented sums, searches, gathers, permutation inverses) against sequential NumPy.

Each host's own kernel (torch scatter-add and ``cummax``, ``lax.associative_scan``,
...) and the portable array-API versions (NumPy, array-api-strict) must give
the same numbers as a plain loop in float64.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from rankops._lib._adapters import get_adapter

HOSTS = ["numpy", "array_api_strict", "torch", "jax"]


def _host(name):
    mod = pytest.importorskip(name if name != "jax" else "jax.numpy")
    from array_api_compat import array_namespace

    if name == "numpy":
        xp = array_namespace(np.zeros(1))
    else:
        xp = array_namespace(mod.asarray([0.0]))
    return xp, get_adapter(xp), lambda a: xp.asarray(a), lambda a: np.asarray(a)


def _linear_scan_reference(a: np.ndarray, b: np.ndarray, reverse: bool) -> np.ndarray:
    out = np.empty_like(b)
    for row in range(a.shape[0]):
        h = 0.0
        cols = range(a.shape[1] - 1, -1, -1) if reverse else range(a.shape[1])
        for i in cols:
            h = a[row, i] * h + b[row, i]
            out[row, i] = h
    return out


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("n", [1, 7, 2048 + 37])  # the last one runs in chunks
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_scan_equals_the_recurrence(host, n, reverse):
    xp, adapter, to, back = _host(host)
    rng = np.random.default_rng(n)
    a = rng.uniform(0.0, 1.0, size=(3, n))
    a[:, rng.integers(0, n, size=min(n, 5))] = 0.0  # segment starts
    b = rng.normal(size=(3, n))
    got = back(adapter.linear_scan(xp, to(a), to(b), reverse=reverse))
    assert_allclose(got, _linear_scan_reference(a, b, reverse), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("host", HOSTS)
def test_segment_sums_and_firsts(host):
    xp, adapter, to, back = _host(host)
    rng = np.random.default_rng(3)
    g = rng.normal(size=(2, 3000)) * 10.0 ** rng.integers(-3, 4, size=(2, 3000))
    starts = rng.uniform(size=g.shape) < 0.05
    starts[:, 0] = True
    sums = back(adapter.segment_sum(xp, to(starts), to(g)))
    firsts = back(adapter.segment_first(xp, to(starts), to(g)))
    for row in range(2):
        edges = [*np.flatnonzero(starts[row]), g.shape[1]]
        for lo, hi in zip(edges[:-1], edges[1:]):
            assert len(set(sums[row, lo:hi].tolist())) == 1  # bit-identical across the segment
            assert_allclose(sums[row, lo], np.sum(g[row, lo:hi]), rtol=1e-12, atol=1e-12)
            assert_array_equal(firsts[row, lo:hi], g[row, lo])
    # stacked operands share the starts (broadcast): each slice equals its own segmented sum
    stacked = back(adapter.segment_sum(xp, to(starts), to(np.stack([g, -3.0 * g]))))
    assert_array_equal(stacked[0], sums)
    assert_allclose(stacked[1], -3.0 * sums, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("host", HOSTS)
def test_searchsorted_take_and_inverse_permutation(host):
    xp, adapter, to, back = _host(host)
    rng = np.random.default_rng(4)
    seq = np.sort(rng.integers(0, 20, size=(3, 50)).astype(float), axis=-1)  # with ties
    values = rng.integers(-2, 23, size=(3, 40)).astype(float)
    for side in ("left", "right"):
        got = back(adapter.searchsorted(xp, to(seq), to(values), side=side))
        assert_array_equal(got, np.stack([np.searchsorted(s, v, side=side) for s, v in zip(seq, values)]))
    order = np.stack([rng.permutation(50) for _ in range(3)])
    assert_array_equal(back(adapter.invert_permutation(xp, to(order))), np.argsort(order, axis=-1))
    assert_array_equal(back(adapter.take(xp, to(seq), to(order))), np.take_along_axis(seq, order, axis=-1))
