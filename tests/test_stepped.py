"""The soft sort's evenly stepped blocks (``rankops._cores.stepped``, ``power_sums.stepped_block_form``): the roots of
their equation at p = 1.25 and 1.2 (q = 5, 6) against a bisection on the block's terms summed exactly, their block form
against the summed one, and a group of such blocks combined to its mean's last places in float32."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from array_api_compat import array_namespace
from rankops._cores import blocks, power_sums, stepped
from rankops._lib._adapters import get_adapter

from .backends import CPU_BACKENDS, on_backend
from .reference import bisection

pytestmark = pytest.mark.eager_backends

EAGER = [h for h in CPU_BACKENDS if h != "jax"]


def _stepped_terms(q: float, tau: float, m: int) -> float:
    """``sum_j sign(u_j) |u_j|^(q-1)``, ``u_j = tau + j - (m - 1) / 2``: each sign's terms summed exactly (fsum)."""
    u = tau + np.arange(m) - (m - 1) / 2.0
    return math.fsum(u[u > 0] ** (q - 1.0)) - math.fsum((-u[u < 0]) ** (q - 1.0))


@functools.lru_cache(maxsize=None)
def _reference_root(q: float, level: float, m: int, near: float) -> float:
    """The root by bisection to the last bit: in a bracket of 1e-9 about ``near`` where the terms change sign across
    it (a few dozen halvings of sums of up to 20,000 terms), else over the whole reach of the root."""
    if level == 0.0:
        return 0.0  # H is odd

    def past(t: float) -> bool:
        return _stepped_terms(q, t, m) >= level

    reach = (m - 1) / 2.0 + (abs(level) / m) ** (1.0 / (q - 1.0)) + 1.0
    lo, hi = near - 1e-9 * reach, near + 1e-9 * reach
    return bisection(past, lo, hi) if not past(lo) and past(hi) else bisection(past, -reach, reach)


LEVELS = (0.0, 1e-3, 1.0, -3.7, 1e3, -1e6, 1e9, 1e12, -1e20, 1e28)
SIZES = (1, 2, 3, 10, 101, 1000, 20_000)


@pytest.mark.parametrize("name", EAGER)
@pytest.mark.parametrize("q", [5.0, 6.0, 2.5, 3.5, 4.75])
def test_unit_roots_solve_the_stepped_block_equation(name, q):
    """``unit_root`` against a bisection of the block's exactly summed terms, over block sizes 1 to 20,000 and levels 0
    to 1e28 of either sign: in float64 to 1e-13 of the block's half-length plus the root (the terms of a block that
    straddles 0 cancel to that precision, however they are summed), in float32 to 4 units in its last place. At q = 5
    the roots lie inside the block (the Bernoulli form), past it (the quadratic in tau^2) and at a one-entry block; at
    q = 2.5, 3.5 and 4.75 (p = 5/3, 1.4, 1.27) Euler-Maclaurin's sums of powers, and at q = 2.5 a block equation that is
    not convex (the bracketed steps)."""
    assert stepped.solves(q)
    to, _ = on_backend(name)
    levels, sizes = np.array(LEVELS * len(SIZES)), np.repeat(np.array(SIZES, dtype=float), len(LEVELS))
    near = np.asarray(stepped.unit_root(np, q, levels, sizes))
    want = np.array([_reference_root(q, lv, int(m), g) for lv, m, g in zip(levels, sizes, near)])
    scale = (sizes - 1) / 2.0 + np.abs(want)
    inside = np.abs(want) < (sizes - 1) / 2.0
    assert 20 < inside.sum() < len(want) - 20  # both regions, many times
    for dtype, rtol in ((np.float64, 1e-13), (np.float32, 4 * np.finfo(np.float32).eps)):
        xp = array_namespace(to(np.zeros(1, dtype=dtype)))
        got = np.asarray(stepped.unit_root(xp, q, to(levels.astype(dtype)), to(sizes.astype(dtype))), dtype=np.float64)
        assert got.dtype == np.float64 and np.asarray(stepped.unit_root(xp, q, to(levels.astype(dtype)),
                                                                       to(sizes.astype(dtype)))).dtype == dtype
        np.testing.assert_array_less(np.abs(got - want), rtol * scale + 1e-300, err_msg=f"{dtype.__name__}")


@pytest.mark.parametrize("e", [1.43, 2.5, 3.75, 4.9])
def test_power_sums_by_euler_maclaurin(e):
    """``stepped._power_sums``: ``sum_(j < k) (b + j)^e`` and the same at ``e - 1``, a head of terms and
    Euler-Maclaurin's tail, against the terms summed exactly, for starts 0 to 10^6 (a tail far from 0: the integral's
    difference without cancellation) and lengths 0 to 10^5, to 2e-12 of the sum in float64."""
    b = np.array([0.0, 0.3, 1.0, 7.5, 1e6])[:, None] * np.ones((1, 8))
    k = np.array([0.0, 1, 3, 4, 5, 9, 1000, 100_000])[None, :] * np.ones((5, 1))
    got = stepped._power_sums(np, b.ravel(), k.ravel(), e)
    for power_of, sums in zip((e, e - 1.0), got):
        want = np.array([math.fsum((bb + np.arange(int(kk))) ** power_of) for bb, kk in zip(b.ravel(), k.ravel())])
        np.testing.assert_allclose(sums, want, rtol=2e-12, atol=0)


@pytest.mark.parametrize("name", EAGER)
def test_the_stepped_block_form_is_the_summed_one(name):
    """``stepped_block_form`` (each block's mean and second moment from its first datum, step and size) equals
    ``block_form``'s segmented sums on rows of ranks times a power of two, in float64; in float32 its means are exact
    (``first + c (m - 1) / 2``), where the sums round blocks of hundreds of ranks near 5 x 10^4."""
    to, _ = on_backend(name)
    rng = np.random.default_rng(4)
    n = 4000
    starts = rng.uniform(size=(2, n)) < 0.004
    starts[:, 0] = True
    y = np.broadcast_to((40_000.0 + np.arange(n)) * 0.5, (2, n))
    w = rng.normal(size=(2, n)) * 1e3
    for dtype in (np.float64, np.float32):
        xp = array_namespace(to(np.zeros(1, dtype=dtype)))
        adapter = get_adapter(xp)
        args = (to(starts), to(np.ascontiguousarray(y, dtype=dtype)), to(w.astype(dtype)))
        got = [np.asarray(a, dtype=np.float64) for a in power_sums.stepped_block_form(xp, adapter, *args)]
        summed = [np.asarray(a, dtype=np.float64) for a in power_sums.block_form(xp, adapter, *args)]
        exact = [np.asarray(a) for a in power_sums.block_form(np, get_adapter(np), starts, y, w)]
        m = exact[2]
        assert m.max() > 400  # blocks of hundreds of ranks
        if dtype == np.float64:
            for g, s in zip(got, summed):
                np.testing.assert_allclose(g, s, rtol=1e-12, atol=1e-9 * np.abs(s).max())
        else:
            np.testing.assert_array_equal(got[0], exact[0])  # the means, exactly
            np.testing.assert_allclose(got[3], exact[3], rtol=4e-7)
            if name == "torch":  # a scatter-add's running sums round the means (NumPy's pairwise sums less)
                assert np.abs(summed[0] - exact[0]).max() > 4 * np.spacing(np.float32(2e4))


@pytest.mark.parametrize("name", EAGER)
def test_combined_blocks_keep_their_mean_in_float32(name):
    """``blocks.combined``: 40 blocks of 800 ranks each (means near 5 x 10^4) combined into one keep the mean of all
    32,000 within one unit in its last place in float32 (their first block's mean and the others' offsets from it; a
    sum of ``m * mean`` rounded it by 0.03 = 8 units, where a p = 1.25 soft sort of 10^5 entries held two blocks'
    values 0.028 apart and pooled an entry too many)."""
    to, _ = on_backend(name)
    xp = array_namespace(to(np.zeros(1, dtype=np.float32)))
    adapter = get_adapter(xp)
    m = np.full(40, 800.0)
    first = 40_000.0 + 800.0 * np.arange(40)
    mean = first + 399.5
    data = (mean, np.zeros(40), m, m * (m * m - 1.0) / 12.0, np.zeros(40))
    starts = np.zeros(40, dtype=bool)
    starts[0] = True
    f32 = tuple(to(a.astype(np.float32)) for a in data)
    index = xp.asarray if name == "numpy" else (lambda a: to(a))
    out = blocks.combined(xp, adapter, power_sums.SteppedSignedSums(5.0), to(starts), index(np.zeros(40, dtype=np.int64)),
                          index(np.zeros(1, dtype=np.int64)), f32)
    got = float(np.asarray(out[0])[0])
    assert abs(got - 55_999.5) <= np.spacing(np.float32(55_999.5)), got
    # the moments about that mean: the whole run's, c = 1
    np.testing.assert_allclose(float(np.asarray(out[3])[0]), 32_000 * (32_000.0 ** 2 - 1) / 12.0, rtol=1e-5)
