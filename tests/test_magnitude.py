"""``soft_topk_magnitude``: the top-k in magnitude of Sander, Puigcerver, Djolonga, Peyre & Blondel (2023).

Against float64 references computed here: the paper's code formulation
(sequential pool-adjacent-violators on the sorted magnitudes with the
weights of the top-k polytope, each block's value by bisection), the limit
of its Dykstra iterations (p = 2), and a generic constrained solve of the
conjugate problem over the top-k polytope;
gradients against central differences; the limits and the homogeneity the
formula implies.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

import rankops

from .backends import CPU_BACKENDS, assert_autodiff_equals_vjp, on_backend
from .reference import bisection, central_vjp, dykstra_decreasing

PS = [2.0, 1.5, 4.0 / 3.0, 1.25]


def _lp(p: float) -> dict:
    return {"regularization": "l2"} if p == 2.0 else {"regularization": "lp", "p": p}


def _block_value(s: np.ndarray, weight: float, eps: float, q: float) -> float:
    """The v minimizing ``sum (1/q)|s_i - v|^q + eps^(q-1) weight v^2 / 2`` (its derivative by bisection)."""
    return bisection(lambda v: -np.sum(np.sign(s - v) * np.abs(s - v) ** (q - 1)) + eps ** (q - 1) * weight * v > 0,
                     -1.0 - s.max(), s.max() + 1.0)


def _pav_reference(x: np.ndarray, k: float, eps: float, p: float) -> np.ndarray:
    """The paper's code: the decreasing fit v of the sorted magnitudes s (weights w of the top-k polytope's vertex)
    by sequential PAV, ``mu = ((s - v) / eps)^(q-1)``, output ``sign(x) (mu + eps mu^(p-1))``."""
    q = p / (p - 1)
    n = x.size
    order = np.argsort(-np.abs(x), kind="stable")
    s, w = np.abs(x)[order], np.clip(k - np.arange(n), 0.0, 1.0)
    blocks: list[list] = []
    for i in range(n):
        blocks.append([i, i + 1, _block_value(s[i:i + 1], w[i], eps, q)])
        while len(blocks) > 1 and blocks[-2][2] <= blocks[-1][2]:
            b, a = blocks.pop(), blocks.pop()
            blocks.append([a[0], b[1], _block_value(s[a[0]:b[1]], w[a[0]:b[1]].sum(), eps, q)])
    v = np.empty(n)
    for a, b, value in blocks:
        v[a:b] = value
    mu = np.clip((s - v) / eps, 0.0, None) ** (q - 1)
    out = np.empty(n)
    out[order] = mu + eps * mu ** (p - 1)
    return np.sign(x) * out


def _reference(x: np.ndarray, k: np.ndarray, eps: float, p: float) -> np.ndarray:
    return np.stack([_pav_reference(row, kk, eps, p) for row, kk in zip(x, k)])


def _rows(seed: int, shape: tuple[int, int]) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape) * 10.0 ** rng.uniform(-1, 1, size=(shape[0], 1))
    x[0, 1] = -x[0, 3]  # a tie in magnitude
    x[1, 2] = 0.0
    return x


@pytest.mark.eager_backends
@pytest.mark.parametrize(("name", "p"), [(h, p) for h in CPU_BACKENDS for p in PS if h != "jax" or p in (4.0 / 3.0, 1.25)])
def test_values_equal_the_papers_pav(name, p):
    to, run = on_backend(name)
    x = _rows(0, (4, 11))
    k = np.array([3.0, 2.5, 1.0, 10.6])
    got = run(lambda a, b: rankops.soft_topk_magnitude(a, b, strength=0.3, **_lp(p)), to(x), to(k))
    np.testing.assert_allclose(np.asarray(got), _reference(x, k, 0.3, p), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("strength", [0.1, 0.5, 2.0])
def test_l2_values_are_the_limit_of_the_papers_dykstra_iterations(strength):
    """The paper's GPU route for p = 2: the fit of ``s / u`` with weights ``u = 1 + strength w`` (``s`` the sorted
    magnitudes, ``w`` the top-k polytope's vertex; the PAV formulation's loss at q = 2, completed to a square) by
    Dykstra's alternating projections, run here to their limit; the output ``sign(x) (1 + strength) (s - v) /
    strength`` in the row's order."""
    x = _rows(6, (5, 12))
    k = np.array([1.0, 3.0, 4.5, 11.0, 2.2])
    n = x.shape[-1]
    order = np.argsort(-np.abs(x), axis=-1, kind="stable")
    s = np.take_along_axis(np.abs(x), order, axis=-1)
    u = 1.0 + strength * np.clip(k[:, None] - np.arange(n), 0.0, 1.0)
    v = dykstra_decreasing(s / u, u)
    assert np.all(np.diff(v, axis=-1) <= 1e-12)  # the iterations reached the order constraints
    ref = np.empty_like(x)
    np.put_along_axis(ref, order, (1.0 + strength) * (s - v) / strength, axis=-1)
    out = rankops.soft_topk_magnitude(x, k, strength=strength)
    np.testing.assert_allclose(out, np.sign(x) * ref, rtol=0, atol=1e-12 * np.abs(x).max())


@pytest.mark.parametrize("p", [2.0, 1.5, 4.0 / 3.0, 1.25])
def test_values_are_the_generic_convex_solution(p):
    """The conjugate problem solved as it stands: ``max over y in C of G(y)``, ``G(y) = sum_i max_u (u a_i - u^2 /
    (2 y_i) - (eps/p) u^p)`` (concave; its gradient ``u_i^2 / (2 y_i^2)``), by SLSQP; the output ``u + eps u^(p-1)``."""
    rng = np.random.default_rng(1)
    eps = 0.4
    for trial in range(3):
        n, k = 6, [2.0, 2.5, 1.3][trial]
        x = rng.normal(size=n) * 2.0
        a = np.abs(x)

        def inner(y: np.ndarray) -> np.ndarray:
            """u_i solving ``a_i = u / y_i + eps u^(p-1)`` (bisection: the right side increases in u)."""
            lo, hi = np.zeros(n), a * y
            for _ in range(200):
                mid = 0.5 * (lo + hi)
                big = mid / y + eps * mid ** (p - 1) > a
                lo, hi = np.where(big, lo, mid), np.where(big, mid, hi)
            return 0.5 * (lo + hi)

        def negated(y: np.ndarray) -> tuple[float, np.ndarray]:
            u = inner(y)
            return -np.sum(u * a - u * u / (2 * y) - eps / p * u ** p), -(u * u) / (2 * y * y)

        res = minimize(negated, np.full(n, k / n), jac=True, method="SLSQP", bounds=[(1e-12, 1.0)] * n,
                       constraints=[{"type": "eq", "fun": lambda y: y.sum() - k, "jac": lambda y: np.ones(n)}],
                       options={"ftol": 1e-16, "maxiter": 1000})
        # compared as the maximizer u (the output is u + eps u^(p-1): its fractional power would magnify the
        # solver's tolerance on the entries at 0)
        out = np.abs(rankops.soft_topk_magnitude(x, k, strength=eps, **_lp(p)))
        lo, hi = np.zeros(n), out.copy()
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            big = mid + eps * mid ** (p - 1) > out
            lo, hi = np.where(big, lo, mid), np.where(big, mid, hi)
        np.testing.assert_allclose(0.5 * (lo + hi), inner(res.x), atol=1e-7)


@pytest.mark.parametrize("p", [2.0, 4.0 / 3.0])
def test_sparse_exactly_zero_or_exactly_x(p):
    x = _rows(2, (20, 40))
    out = rankops.soft_topk_magnitude(x, 5.0, strength=0.2, **_lp(p))
    zeros, kept = out == 0.0, out == x
    assert zeros.mean() > 0.8 and kept.mean() > 0.05, (zeros.mean(), kept.mean())
    blend = ~zeros & ~kept
    assert np.all(np.sign(out[blend]) == np.sign(x[blend])) and np.all(np.abs(out[blend]) <= np.abs(x[blend]) * (1 + 1e-12))
    ref = _reference(x, np.full(20, 5.0), 0.2, p)
    assert np.array_equal(zeros, np.abs(ref) < 1e-12)


def test_fewer_than_k_nonzero_entries_keep_everything():
    x = np.array([[1.5, 0.0, 0.0, -2.0], [1.5, 0.0, 0.3, -2.0]])
    np.testing.assert_array_equal(rankops.soft_topk_magnitude(x[:1], 3.0), x[:1])
    np.testing.assert_array_equal(rankops.soft_topk_magnitude(x, 4.0), x)  # k = n


@pytest.mark.parametrize("p", PS)
def test_hard_limit_and_scale(p):
    x = np.random.default_rng(4).normal(size=(3, 9))  # no ties in magnitude
    hard = np.where(np.argsort(np.argsort(-np.abs(x), axis=-1), axis=-1) < 3, x, 0.0)
    np.testing.assert_allclose(rankops.soft_topk_magnitude(x, 3, strength=1e-7, **_lp(p)), hard, atol=1e-5)
    # f(c x; eps) = c f(x; c^(p-2) eps): scale-free for l2
    c = 7.0
    np.testing.assert_allclose(rankops.soft_topk_magnitude(c * x, 3.5, strength=0.3, **_lp(p)),
                               c * rankops.soft_topk_magnitude(x, 3.5, strength=0.3 * c ** (p - 2.0), **_lp(p)), rtol=1e-12)


def test_p_near_two_is_close_to_l2():
    x = _rows(3, (5, 17))
    l2 = rankops.soft_topk_magnitude(x, 4.5, strength=0.3)
    gaps = [np.abs(rankops.soft_topk_magnitude(x, 4.5, strength=0.3, regularization="lp", p=p) - l2).max()
            for p in (1.9, 1.99, 1.999)]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 0.01 * np.abs(x).max(), gaps
    np.testing.assert_allclose(rankops.soft_topk_magnitude(x, 4.5, strength=0.3, regularization="lp", p=2.0), l2, rtol=1e-13)


@pytest.mark.parametrize("p", PS)
def test_gradients_equal_central_differences(p):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 7))
    k = np.array([2.5, 3.4, 1.3])  # not an integer at which an entry is exactly kept: k's kinks
    ct = rng.normal(size=x.shape)
    opts = {"strength": 0.5, **_lp(p)}
    _, vjp = rankops.vjp(rankops.soft_topk_magnitude, x, k, **opts)
    dx, dk = vjp(ct)
    np.testing.assert_allclose(dx, central_vjp(lambda a: rankops.soft_topk_magnitude(a, k, **opts), x, ct), atol=1e-6)
    np.testing.assert_allclose(dk, central_vjp(lambda b: rankops.soft_topk_magnitude(x, b, **opts), k, ct), atol=1e-6)
    assert np.abs(dk).min() > 0  # every row blends somewhere: k moves it


@pytest.mark.parametrize("name", ["torch", "jax"])
def test_autodiff_hosts_agree_with_the_rule(name):
    """torch.autograd and jax.grad (and jax.jacfwd) through the rule equal rankops.vjp on NumPy."""
    x = _rows(6, (3, 8))
    k = np.array([2.0, 3.5, 5.0])
    ct = np.random.default_rng(6).normal(size=x.shape)
    opts = {"regularization": "lp", "p": 4.0 / 3.0, "strength": 0.5}
    assert_autodiff_equals_vjp(name, rankops.soft_topk_magnitude, x, k, ct, **opts)


def test_slope_in_k_at_a_whole_k_where_no_entry_blends():
    """At k = 3 the row keeps 5, -4 and 3 exactly and sets the rest to 0 (nothing blends). Past it, the entry 1 starts
    to blend with a share k - 3 of the mask, and its output ``(a - theta) + ...`` with ``a - theta ~ share^(1/(q-1))``:
    for l2 a kink in k (slope 30/13 below, 1.3 above), for p < 2 an infinite slope from above, the right difference
    quotient growing as ``h^(1/(q-1) - 1)`` (10x per 100x smaller h at p = 3/2, 100^(2/3) at p = 4/3). The value stays
    continuous, and the gradient there is the slope from below."""
    x = np.array([[5.0, -4.0, 3.0, 1.0, 0.5, -0.2]])
    for p, growth in ((2.0, None), (1.5, 10.0), (4.0 / 3.0, 100.0 ** (2.0 / 3.0))):
        opts = {"strength": 0.3, **_lp(p)}

        def total(k: float) -> float:
            return float(rankops.soft_topk_magnitude(x, k, **opts).sum())

        np.testing.assert_allclose(rankops.soft_topk_magnitude(x, 3.0, **opts), [[5.0, -4.0, 3.0, 0.0, 0.0, 0.0]], rtol=1e-15,
                                   atol=0.0)  # the third exactly kept, or at the blend's end (share 1) up to rounding
        _, vjp = rankops.vjp(rankops.soft_topk_magnitude, x, np.array([3.0]), **opts)
        below = (total(3.0) - total(3.0 - 1e-7)) / 1e-7
        np.testing.assert_allclose(vjp(np.ones_like(x))[1], [below], rtol=1e-6)
        above = [(total(3.0 + h) - total(3.0)) / h for h in (1e-4, 1e-6)]
        assert abs(total(3.0 + 1e-8) - total(3.0)) < 1e-3  # continuous
        if growth is None:
            np.testing.assert_allclose([below, above[1]], [30.0 / 13.0, 1.3], rtol=1e-5)
        else:
            np.testing.assert_allclose(above[1] / above[0], growth, rtol=0.05)  # the blend's linear part aside


def test_masked_rows_are_their_valid_entries():
    x = _rows(7, (3, 10))
    mask = np.ones_like(x, dtype=bool)
    mask[:, 6:] = False
    mask[1, 2] = False
    out = rankops.soft_topk_magnitude(x, 3.0, regularization="lp", p=1.5, strength=0.5, mask=mask)
    for row in range(3):
        valid = mask[row]
        alone = rankops.soft_topk_magnitude(x[row][valid], 3.0, regularization="lp", p=1.5, strength=0.5)
        np.testing.assert_allclose(out[row][valid], alone, rtol=1e-12, atol=1e-12)
        assert np.all(out[row][~valid] == 0.0)
    assert np.isnan(rankops.soft_topk_magnitude(x, 7.0, mask=mask)).all()  # k above the 6 valid entries: a NaN row


def test_entering_the_band():
    """One entry's magnitude s passes the threshold (x = (3, 2.9, 1, s), k = 2.5, two entries blending): the output
    is continuous and starts at slope ``(1 + c)(1 - c / D)`` (the module's Jacobian at ``a = theta``): for l2 ``c = 1 /
    eps``, ``D = 2 / eps + 1/2``; for p < 2 ``c = 0``: slope 1, the kink of a soft-thresholding, for every p."""
    s = np.linspace(0.5, 1.5, 2001)
    x = np.stack([np.full_like(s, 3.0), np.full_like(s, 2.9), np.full_like(s, 1.0), s], axis=-1)
    eps = 0.3
    want = {2.0: (1 + 1 / eps) * (1 - (1 / eps) / (2 / eps + 0.5)), 4.0 / 3.0: 1.0}
    for p, slope in want.items():
        curve = rankops.soft_topk_magnitude(x, 2.5, strength=eps, **_lp(p))[:, 3]
        assert np.abs(np.diff(curve)).max() < 0.01
        start = np.argmax(curve > 0)  # the first grid point inside the band
        assert start > 100 and np.all(curve[:start] == 0.0)
        np.testing.assert_allclose(np.diff(curve)[start] / np.diff(s)[start], slope, rtol=1e-3)


def test_non_finite_rows_are_nan_and_inputs_are_kept():
    x = np.array([[1.0, np.inf, 2.0], [1.0, -3.0, 2.0]])
    before = x.copy()
    out = rankops.soft_topk_magnitude(x, 1.5)
    assert np.isnan(out[0]).all() and np.isfinite(out[1]).all()
    np.testing.assert_array_equal(x, before)
