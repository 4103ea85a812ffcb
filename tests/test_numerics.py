"""The portable logsumexp / softmax and the framework adapters agree with SciPy."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import logsumexp as sp_logsumexp, softmax as sp_softmax

from rankops._lib import _numerics
from rankops._lib._adapters import get_adapter

CASES = {
    "normal": np.random.default_rng(0).normal(size=(3, 5)) * 10,
    "huge": np.array([[1e300, 1e300, -1e300], [700.0, 800.0, 900.0]]),
    "tiny_spread": np.array([[-1e-30, 0.0, 1e-30]]),
    "neg_inf_entries": np.array([[-np.inf, 0.0, 1.0], [-np.inf, -np.inf, 2.0]]),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("portable", [True, False], ids=["portable", "adapter"])
def test_softmax_and_logsumexp_match_scipy(backend, case, portable):
    z = CASES[case]
    xp = backend.namespace()
    zb = backend.asarray(z)
    if portable:
        sm = _numerics.softmax(xp, zb, -1)
        lse = _numerics.logsumexp(xp, zb, -1)
    else:
        adapter = get_adapter(xp)
        sm, lse = adapter.softmax(xp, zb, -1), adapter.logsumexp(xp, zb, -1)
    assert_allclose(backend.to_numpy(sm), sp_softmax(z, axis=-1), rtol=1e-13, atol=1e-300)
    assert_allclose(backend.to_numpy(lse), sp_logsumexp(z, axis=-1), rtol=1e-13)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
def test_all_negative_infinity_row_stays_negative_infinity():
    xp = pytest.importorskip("array_api_strict")
    z = xp.asarray([[-np.inf, -np.inf], [0.0, 1.0]])
    lse = np.from_dlpack(_numerics.logsumexp(xp, z, -1))
    assert lse[0] == -np.inf and np.isfinite(lse[1])


def test_softmax_other_axis():
    xp = pytest.importorskip("array_api_strict")
    z = np.random.default_rng(1).normal(size=(4, 3))
    got = np.from_dlpack(_numerics.softmax(xp, xp.asarray(z), 0))
    assert_allclose(got, sp_softmax(z, axis=0), rtol=1e-13)


def test_generic_stop_gradient_is_identity():
    import array_api_compat.numpy as xp

    a = np.arange(3.0)
    assert_array_equal(get_adapter(xp).stop_gradient(xp, a), a)
