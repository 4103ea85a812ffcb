"""p-norm regularized permutahedron projections (Sander, Puigcerver, Djolonga, Peyre & Blondel 2023).

``soft_rank`` / ``soft_sort(method="permutahedron", regularization="lp", p=...)`` and
``soft_topk_mask(method="permutahedron", ...)`` against float64 references
computed here: the paper's sequential pool-adjacent-violators with each
block's root found by bisection, and, for the top-k polytope, a generic
constrained solve of the primal problem and (l2) the limit of the paper's
Dykstra iterations; gradients against central differences; the limits the
paper states.
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
from typing import Any

import numpy as np
import pytest
from scipy.optimize import minimize

import rankops
from array_api_compat import array_namespace
from rankops._cores import block_roots, windows

from .backends import CPU_BACKENDS, assert_autodiff_equals_vjp, on_backend
from .reference import bisection, central_vjp, dykstra_decreasing

# on JAX (each row length and option set a program of its own) under -m exhaustive: the default run checks these fits
# on the eager backends, and on JAX conformance's p-norm operators (docs/testing.md, "Tiers and time")
pytestmark = pytest.mark.eager_backends

PS = [2.0, 1.5, 4.0 / 3.0, 1.25]


def _root(z: np.ndarray, w: np.ndarray, q: float) -> float:
    """The v with ``sum sign(z - v) |z - v|^(q-1) = sum w`` (bisection to the last bit; w of either sign)."""
    total = w.sum()
    signed, slope = _block_terms(z, q)

    def past(v: float) -> bool:
        return signed(v) <= total

    # Newton's steps from the root of the block's mean (exact for one entry) find the few ulps that the bisection then
    # halves to the last bit (a reference PAV solves thousands of blocks: about 12 evaluations each instead of 95);
    # the whole bracket where they do not
    v = float(np.mean(z) - np.sign(total) * abs(total / z.size) ** (1 / (q - 1)))
    for _ in range(40):
        dv = slope(v)
        if not dv > 0:
            break
        step = (signed(v) - total) / dv
        v += step
        if not abs(step) > 4 * abs(np.spacing(v)):
            break
    lo, hi = v - 8 * abs(np.spacing(v)), v + 8 * abs(np.spacing(v))
    if np.isfinite(v) and not past(lo) and past(hi):
        return bisection(past, lo, hi)
    reach = abs(total / z.size) ** (1 / (q - 1)) + 1.0
    return bisection(past, z.min() - reach, z.max() + reach)


def _block_terms(z: np.ndarray, q: float) -> tuple:
    """``(signed, slope)``: ``v -> sum sign(z - v) |z - v|^(q-1)`` and ``v -> (q - 1) sum |z - v|^(q-2)``. A block of
    at most 8 entries in Python floats: most of a reference PAV's blocks are short, NumPy's calls cost more than their
    arithmetic, and NumPy sums under 8 terms in order, as Python does."""
    e = q - 1.0
    if z.size > 8 or q < 2.0:  # (0.0 ** a negative power raises in Python)
        return (lambda v: np.sum(np.sign(z - v) * np.abs(z - v) ** e)), (lambda v: e * np.sum(np.abs(z - v) ** (q - 2)))
    terms = z.tolist()
    return ((lambda v: sum(math.copysign(abs(a - v) ** e, a - v) for a in terms)),
            (lambda v: e * sum(abs(a - v) ** (q - 2) for a in terms)))


def _pav_projection(z: np.ndarray, w: np.ndarray, p: float) -> np.ndarray:
    """``argmax over mu in P(w) of <mu, z> - (1/p) sum |mu|^p`` for z and w sorted decreasing: the decreasing fit
    ``v`` of ``sum (1/q)|z - v|^q + w v`` by sequential PAV, then ``mu = (z - v)^(q-1)`` (the paper's algorithm).
    Remembered by its inputs' bytes: the checks of each backend ask for the same rows."""
    z, w = np.asarray(z, dtype=np.float64), np.asarray(w, dtype=np.float64)
    return _remembered_pav(z.tobytes(), w.tobytes(), p).copy()


@functools.lru_cache(maxsize=None)
def _remembered_pav(z_bytes: bytes, w_bytes: bytes, p: float) -> np.ndarray:
    z, w = np.frombuffer(z_bytes), np.frombuffer(w_bytes)
    q = p / (p - 1)
    blocks: list[list] = []
    for i in range(z.size):
        blocks.append([i, i + 1, _root(z[i:i + 1], w[i:i + 1], q)])
        while len(blocks) > 1 and blocks[-2][2] <= blocks[-1][2]:
            b, a = blocks.pop(), blocks.pop()
            blocks.append([a[0], b[1], _root(z[a[0]:b[1]], w[a[0]:b[1]], q)])
    v = np.empty(z.size)
    for a, b, value in blocks:
        v[a:b] = value
    d = z - v
    return np.sign(d) * np.abs(d) ** (q - 1)


def _unsorted(x_row: np.ndarray, w: np.ndarray, p: float, scale: float) -> np.ndarray:
    """The projection of ``x_row / scale`` onto P(w), laid out like x (w decreasing)."""
    order = np.argsort(-x_row, kind="stable")
    out = np.empty_like(x_row)
    out[order] = _pav_projection(x_row[order] / scale, w, p)
    return out


def _rank_reference(x: np.ndarray, p: float, strength: float) -> np.ndarray:
    n = x.shape[-1]
    return np.stack([_unsorted(row, np.arange(n, 0, -1.0), p, strength) for row in x])


def _sort_reference(x: np.ndarray, p: float, strength: float, descending: bool = False) -> np.ndarray:
    """Blondel et al.'s soft sort: ``(n, ..., 1) / strength`` projected onto the permutahedron of the row (its
    entries sorted decreasing: weights of either sign), negated for ascending order."""
    n = x.shape[-1]
    rows = x if descending else -x
    out = np.stack([_pav_projection(np.arange(n, 0, -1.0) / strength, np.sort(row)[::-1], p) for row in rows])
    return out if descending else -out


def _topk_reference(x: np.ndarray, k: np.ndarray, p: float, strength: float) -> np.ndarray:
    n = x.shape[-1]
    return np.stack([_unsorted(row, np.clip(kk - np.arange(n), 0.0, 1.0), p, strength) for row, kk in zip(x, k)])


def _lp(p: float) -> dict:
    return {"regularization": "l2"} if p == 2.0 else {"regularization": "lp", "p": p}


def _rows(seed: int, shape: tuple[int, int]) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape) * 10.0 ** rng.uniform(-1, 1, size=(shape[0], 1))
    x[0, 1] = x[0, 3]  # a tie
    return x


# every p on the eager backends; on JAX (a compile per p) the paper's p = 4/3 (the cubic) and one by Newton's method
@pytest.mark.parametrize(("name", "p"), [(h, p) for h in CPU_BACKENDS for p in PS if h != "jax" or p in (4.0 / 3.0, 1.25)])
def test_values_equal_the_papers_pav(name, p):
    to, run = on_backend(name)
    x = _rows(0, (4, 11))
    k = np.array([3.0, 2.5, 1.0, 10.6])
    ranks = run(lambda a: rankops.soft_rank(a, method="permutahedron", strength=0.7, **_lp(p)), to(x))
    masks = run(lambda a, b: rankops.soft_topk_mask(a, b, method="permutahedron", strength=0.7, **_lp(p)), to(x), to(k))
    sort = lambda a: rankops.soft_sort(a, method="permutahedron", strength=0.7, **_lp(p))  # noqa: E731
    sorts = run(sort, to(x))
    # a batch of one-entry blocks: every root in closed form, the rest skipped (a branch under jax.jit; the same
    # function and shape, so the same program)
    small = run(sort, to(x / 10.0))
    down = run(lambda a: rankops.soft_sort(a, method="permutahedron", strength=0.7, descending=True, **_lp(p)), to(x))
    np.testing.assert_allclose(np.asarray(ranks), _rank_reference(x, p, 0.7), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(sorts), _sort_reference(x, p, 0.7), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(small), _sort_reference(x / 10.0, p, 0.7), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(down), _sort_reference(x, p, 0.7, descending=True), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(masks), _topk_reference(x, k, p, 0.7), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("p", [1.5, 4.0 / 3.0, 1.25])
def test_topk_mask_is_the_generic_convex_solution(p):
    """The top-k polytope is the capped simplex: SLSQP on the primal, ``max <mu, z> - (1/p) sum mu^p``, sum k, [0, 1]."""
    rng = np.random.default_rng(1)
    for trial in range(4):
        n, k = 6, [2.0, 2.5, 1.3, 4.0][trial]
        z = rng.normal(size=n) * 2.0

        def negated(mu: np.ndarray) -> tuple[float, np.ndarray]:
            a = np.abs(mu)
            return -(mu @ z - np.sum(a ** p) / p), -(z - np.sign(mu) * a ** (p - 1))

        start = np.full(n, k / n)
        res = minimize(negated, start, jac=True, method="SLSQP", bounds=[(0.0, 1.0)] * n,
                       constraints=[{"type": "eq", "fun": lambda mu: mu.sum() - k, "jac": lambda mu: np.ones(n)}],
                       options={"ftol": 1e-16, "maxiter": 1000})
        mask = rankops.soft_topk_mask(z, k, method="permutahedron", regularization="lp", p=p, strength=1.0)
        np.testing.assert_allclose(mask, res.x, atol=1e-7)


@pytest.mark.parametrize("strength", [0.3, 1.0, 3.0])
def test_l2_topk_mask_is_the_limit_of_the_papers_dykstra_iterations(strength):
    """The paper's GPU route for the l2 mask: the decreasing fit of ``s - strength w`` (``s`` the sorted row, ``w``
    the top-k polytope's vertex) by Dykstra's alternating projections, run here to their limit, then ``(s - v) /
    strength`` in the row's order."""
    x = _rows(5, (6, 13))
    k = np.array([1.0, 2.5, 4.0, 6.2, 12.5, 3.0])
    n = x.shape[-1]
    order = np.argsort(-x, axis=-1, kind="stable")
    s = np.take_along_axis(x, order, axis=-1)
    w = np.clip(k[:, None] - np.arange(n), 0.0, 1.0)
    v = dykstra_decreasing(s - strength * w, np.ones(n))
    assert np.all(np.diff(v, axis=-1) <= 1e-12)  # the iterations reached the order constraints
    ref = np.empty_like(x)
    np.put_along_axis(ref, order, (s - v) / strength, axis=-1)
    mask = rankops.soft_topk_mask(x, k, method="permutahedron", regularization="l2", strength=strength)
    np.testing.assert_allclose(mask, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("p", [1.5, 4.0 / 3.0])
def test_topk_mask_is_sparse_and_sums_to_k(p):
    """Exact zeros and ones away from the k-th entry (one-entry blocks hold their weight exactly)."""
    x = _rows(2, (20, 40))
    k = 5.0
    mask = rankops.soft_topk_mask(x, k, method="permutahedron", regularization="lp", p=p, strength=0.5)
    np.testing.assert_allclose(mask.sum(axis=-1), k, rtol=1e-12)
    assert mask.min() >= 0.0 and mask.max() <= 1.0
    zeros, ones = (mask == 0.0).mean(), (mask == 1.0).mean()
    assert zeros > 0.55 and ones > 0.05, (zeros, ones)
    # the exact zeros and ones are where the reference (bisection: up to rounding) has them
    ref = _topk_reference(x, np.full(20, k), p, 0.5)
    assert np.array_equal(mask == 0.0, ref < 1e-12) and np.array_equal(mask == 1.0, ref > 1.0 - 1e-12)


def test_p_two_is_l2_and_p_near_two_is_close():
    x = _rows(3, (5, 17))
    l2 = rankops.soft_rank(x, method="permutahedron", strength=0.4)
    np.testing.assert_allclose(rankops.soft_rank(x, method="permutahedron", regularization="lp", p=2.0, strength=0.4), l2,
                               rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(rankops.soft_sort(x, method="permutahedron", regularization="lp", p=2.0, strength=0.4),
                               rankops.soft_sort(x, method="permutahedron", strength=0.4), rtol=1e-13, atol=1e-12)
    m2 = rankops.soft_topk_mask(x, 4, method="permutahedron", strength=0.4)
    gaps = []
    for p in (1.9, 1.99, 1.999):
        rank = rankops.soft_rank(x, method="permutahedron", regularization="lp", p=p, strength=0.4)
        mask = rankops.soft_topk_mask(x, 4, method="permutahedron", regularization="lp", p=p, strength=0.4)
        gaps.append(max(np.abs(rank - l2).max(), np.abs(mask - m2).max()))
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 0.05, gaps  # continuous at p = 2


@pytest.mark.parametrize("p", PS)
def test_hard_limit(p):
    x = np.random.default_rng(4).normal(size=(3, 9))  # no ties: the hard operators' order is the reference's
    ranks = rankops.soft_rank(x, method="permutahedron", strength=1e-6, **_lp(p))
    np.testing.assert_allclose(ranks, np.argsort(np.argsort(x, axis=-1), axis=-1) + 1.0, atol=1e-9)
    mask = rankops.soft_topk_mask(x, 3, method="permutahedron", strength=1e-6, **_lp(p))
    hard = (np.argsort(np.argsort(-x, axis=-1), axis=-1) < 3).astype(float)
    np.testing.assert_array_equal(mask, hard)
    np.testing.assert_allclose(rankops.soft_sort(x, method="permutahedron", strength=1e-6, **_lp(p)), np.sort(x, axis=-1),
                               atol=1e-9)


@pytest.mark.parametrize("p", PS)
def test_gradients_equal_central_differences(p):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 7))
    k = np.array([2.5, 3.4])
    ct = rng.normal(size=x.shape)
    opts = {"method": "permutahedron", "strength": 0.6, **_lp(p)}
    _, vjp = rankops.vjp(rankops.soft_rank, x, **opts)
    (dx,) = vjp(ct)
    np.testing.assert_allclose(dx, central_vjp(lambda a: rankops.soft_rank(a, **opts), x, ct), atol=1e-6)
    _, vjp = rankops.vjp(rankops.soft_sort, x, **opts)
    (dx,) = vjp(ct)
    np.testing.assert_allclose(dx, central_vjp(lambda a: rankops.soft_sort(a, **opts), x, ct), atol=1e-6)
    _, vjp = rankops.vjp(rankops.soft_topk_mask, x, k, **opts)
    dx, dk = vjp(ct)
    np.testing.assert_allclose(dx, central_vjp(lambda a: rankops.soft_topk_mask(a, k, **opts), x, ct), atol=1e-6)
    np.testing.assert_allclose(dk, central_vjp(lambda b: rankops.soft_topk_mask(x, b, **opts), k, ct), atol=1e-6)


@pytest.mark.parametrize("name", ["torch", "jax"])
def test_autodiff_hosts_agree_with_the_rule(name):
    """torch.autograd and jax.grad (and jax.jacfwd) through the block-wise backward equal rankops.vjp on NumPy."""
    x = _rows(6, (3, 8))
    k = np.array([2.0, 3.5, 5.0])
    ct = np.random.default_rng(6).normal(size=x.shape)
    opts = {"method": "permutahedron", "regularization": "lp", "p": 4.0 / 3.0, "strength": 0.5}
    assert_autodiff_equals_vjp(name, rankops.soft_topk_mask, x, k, ct, **opts)


def test_masked_rows_are_their_valid_entries():
    x = _rows(7, (3, 10))
    mask = np.ones_like(x, dtype=bool)
    mask[:, 6:] = False
    mask[1, 2] = False
    for fn, args in ((rankops.soft_rank, ()), (rankops.soft_topk_mask, (3.0,)), (rankops.soft_sort, ())):
        out = fn(x, *args, method="permutahedron", regularization="lp", p=1.5, strength=0.5, mask=mask)
        for row in range(3):
            valid = mask[row]
            alone = fn(x[row][valid], *args, method="permutahedron", regularization="lp", p=1.5, strength=0.5)
            # a sort's valid values fill the first n_v positions; ranks and masks are laid out like x
            at = np.arange(x.shape[-1]) < valid.sum() if fn is rankops.soft_sort else valid
            np.testing.assert_allclose(out[row][at], alone, rtol=1e-12, atol=1e-12)
            assert np.all(out[row][~at] == 0.0)
    short = rankops.soft_topk_mask(x, 7.0, method="permutahedron", mask=mask)
    assert np.isnan(short).all()  # k above the 6 valid entries: a NaN row


@pytest.mark.parametrize("regularization", ["l2", "lp"])
@pytest.mark.parametrize("fn", [rankops.soft_topk_mask, rankops.soft_topk_magnitude])
def test_a_per_row_k_outside_its_range_gives_a_nan_row_quietly(fn, regularization):
    """A per-row k that is NaN, 0 or less, or above n makes its row NaN (gradient 0), without a NumPy warning (the
    suite turns rankops' RuntimeWarnings into errors: a NaN k once reached an integer cast), the others as alone."""
    x = _rows(8, (5, 6))
    k = np.array([np.nan, 0.0, -1.0, 7.0, 2.5])
    opts = {"strength": 0.5, "regularization": regularization} | ({"method": "permutahedron"} if fn is rankops.soft_topk_mask else {})
    value, vjp = rankops.vjp(fn, x, k, **opts)
    assert np.isnan(value[:4]).all() and np.isfinite(value[4]).all()
    np.testing.assert_allclose(value[4], fn(x[4:], k[4:], **opts)[0], rtol=1e-14)
    dx, dk = vjp(np.ones_like(x))
    assert np.all(dx[:4] == 0) and np.all(dk[:4] == 0)


def test_the_papers_figure_is_smooth_for_p_below_two():
    """x(s) = (3, 1, -1 + s, s), k = 2 (Sander et al., Fig. 1): the mask of entries 2 and 3 is continuous in s for
    every regularizer; its derivative in s jumps for l2 (piecewise linear) and is continuous for p = 4/3."""
    s = np.linspace(-1.0, 4.0, 2001)
    x = np.stack([np.full_like(s, 3.0), np.ones_like(s), s - 1.0, s], axis=-1)
    jumps = {}
    for p in (2.0, 4.0 / 3.0):
        curve = rankops.soft_topk_mask(x, 2, method="permutahedron", strength=1.0, **_lp(p))[:, 1:3].sum(axis=-1)
        slope = np.diff(curve) / np.diff(s)
        assert np.abs(np.diff(curve)).max() < 0.01  # continuous
        jumps[p] = np.abs(np.diff(slope)).max()
    assert jumps[2.0] > 0.3 and jumps[4.0 / 3.0] < 0.02, jumps


@pytest.mark.parametrize("p", [2.0, 1.5, 4.0 / 3.0])
def test_the_rank_slope_jumps_where_two_entries_pool_for_every_p(p):
    """That smoothness is the top-k mask's, at its exact zeros and ones. Where two entries of a soft rank pool (their
    one-entry values ``y_i - w_i^(1/(q-1))`` meet: ``x = (a, 0, 3, 6)`` at ``a = 1 - 2^(1/(q-1))``, strength 1), the
    rank's derivative jumps from 0 to a finite slope for every p, as for l2: the p-norm rank and sort are
    piecewise smooth, not smoother (docs/fast-methods.md)."""
    q = p / (p - 1.0)
    event = 1.0 - 2.0 ** (1.0 / (q - 1.0))

    def slope(a: float, h: float = 1e-8) -> np.ndarray:
        rank = [rankops.soft_rank(np.array([a + d, 0.0, 3.0, 6.0]), method="permutahedron", strength=1.0, **_lp(p))
                for d in (h, -h)]
        return (rank[0] - rank[1]) / (2 * h)

    for gap in (1e-3, 1e-5):
        np.testing.assert_allclose(slope(event - gap), 0.0, atol=1e-6)
        after = slope(event + gap)
        assert after[0] > 0.5 and after[1] < -0.5, (gap, after)  # the pool's two entries move against each other
        np.testing.assert_allclose(after[2:], 0.0, atol=1e-6)


def _chained_rows(seed: int, n: int) -> np.ndarray:
    """Rows whose blocks form by long chains: clusters far apart, tight within, at spreads from 10^-2 to 10."""
    rng = np.random.default_rng(seed)
    centres = rng.choice([0.0, 3.0, 10.0, 30.0], size=(6, n))
    return centres + rng.normal(size=(6, n)) * np.array([0.01, 0.3, 2.0, 10.0, 0.1, 1.0])[:, None]


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_merge_rounds_alone_equal_the_papers_pav(name):
    """The merge rounds for this loss (sums of powers of the data, :class:`power_sums.PowerSums`), from one-entry
    values to the whole row with no pooling round: the rank's problem at q = 2 to 6 (at q = 5 and 6 each pool's root by
    Newton's method on its moments; on JAX, a compile per q, q = 5 of the two) and the sort's (weights of either sign)
    at q = 2, 4, against the sequential PAV. JAX runs them as one loop over positions, the others by halves."""
    from array_api_compat import array_namespace

    from rankops._cores import power_sums, powers

    def fit(a: Any, b: Any, q: float) -> Any:
        xp = array_namespace(a)
        y, w = xp.flip(a, axis=-1), xp.flip(b, axis=-1)
        return xp.flip(power_sums.merge_fit(xp, y - powers.odd_power(xp, w, 1.0 / (q - 1.0)), y, w, q=q)[0], axis=-1)

    to, run = on_backend(name)
    x = _chained_rows(8, 21)
    for q in (2.0, 3.0, 4.0, 5.0) + (() if name == "jax" else (6.0,)):
        for signed in (False, True) if q in (2.0, 4.0) else (False,):
            if signed:  # the sort: scores (n, ..., 1) / strength, the row's sorted entries as weights
                z = np.broadcast_to(np.arange(21, 0, -1.0) / 0.7, x.shape)
                w = -np.sort(-x, axis=-1) - 5.0
            else:
                z, w = -np.sort(-x, axis=-1), np.broadcast_to(np.arange(21, 0, -1.0) * 3.0, x.shape)
            v = np.asarray(run(lambda a, b: fit(a, b, q), to(np.ascontiguousarray(z)), to(np.ascontiguousarray(w))))
            d = z - v
            want = np.stack([_pav_projection(a, b, q / (q - 1.0)) for a, b in zip(z, w)])
            np.testing.assert_allclose(np.sign(d) * np.abs(d) ** (q - 1.0), want, rtol=1e-10, atol=1e-9 * np.abs(want).max())


@pytest.mark.parametrize(("name", "counts"), [(h, (1, 2, 3)) for h in CPU_BACKENDS])
def test_merge_rounds_over_pooled_blocks_equal_the_papers_pav(name, counts):
    """At q = 2 and 4 the merge rounds start from the pooling rounds' blocks, one entry each (their weight, size, mean
    and centred moments): after 1, 2 or 3 pooling rounds, the fit still equals the sequential PAV. JAX keeps the row's
    length (the blocks first, then entries that weigh nothing); the eager backends shorten it to the most blocks a row has."""
    from array_api_compat import array_namespace

    from rankops._cores import isotonic, pnorm, power_sums, powers
    from rankops._lib._adapters import get_adapter

    def fit(a: Any, b: Any, q: float, signed: bool, rounds: int) -> Any:
        xp = array_namespace(a)
        adapter = get_adapter(xp)
        y, w = xp.flip(a, axis=-1), xp.flip(b, axis=-1)
        rules = (pnorm._SignedRules if signed else pnorm._Rules)(q)
        u, unsettled, _ = isotonic.pool_runs(xp, adapter, rules, y - powers.odd_power(xp, w, 1.0 / (q - 1.0)), xp.stack([y, w]), rounds)
        return xp.flip(power_sums.merge_fit(xp, u, y, w, q=q)[0], axis=-1), xp.any(unsettled)

    to, run = on_backend(name)
    x = _chained_rows(11, 23)
    for q in (2.0, 4.0):
        for signed in (False, True):
            if signed:
                z = np.broadcast_to(np.arange(23, 0, -1.0) / 0.7, x.shape)
                w = -np.sort(-x, axis=-1) - 5.0
            else:
                z, w = -np.sort(-x, axis=-1), np.broadcast_to(np.arange(23, 0, -1.0) * 3.0, x.shape)
            want = np.stack([_pav_projection(a, b, q / (q - 1.0)) for a, b in zip(z, w)])
            for rounds in counts:
                v, unsettled = run(lambda a, b: fit(a, b, q, signed, rounds), to(np.ascontiguousarray(z)), to(np.ascontiguousarray(w)))
                d = z - np.asarray(v)
                np.testing.assert_allclose(np.sign(d) * np.abs(d) ** (q - 1.0), want, rtol=1e-10, atol=1e-9 * np.abs(want).max())
                # the merge rounds had blocks left: q = 2 after 1-3 rounds, q = 4 (the rank's problem) after 1
                if q == 2.0 or (rounds == 1 and not signed):
                    assert bool(np.asarray(unsettled)), (q, signed, rounds)


def test_rows_past_the_pooling_cap_finish_in_the_merge_rounds(monkeypatch):
    """Rows that need more than 4 log2 n pooling rounds go on to the merge rounds (counted here; on a CPU, rows of 128
    entries or more to the windows), and the soft rank and sort still equal the sequential PAV.

    The rank's row is evenly spaced at the slope of ``w^(1/(q-1))`` halfway along it: the one-entry values fall, then
    rise slowly, and the pooled first half takes in one entry per round; the sort's rises geometrically."""
    from rankops._cores import pnorm

    calls = []
    merged = pnorm.merge_fit
    monkeypatch.setattr(pnorm, "merge_fit", lambda *a, **k: calls.append(k["q"]) or merged(*a, **k))
    # with the windows (on a CPU, from 128 entries: the rank's rows here) and without (a GPU's path: merge rounds)
    for windows_on in (True, False):
        monkeypatch.setattr(windows, "pays", lambda v: windows_on)
        i = np.arange(1.0, 129.0)
        for p in (1.5, 4.0 / 3.0, 1.25, 1.2):
            e = p - 1.0  # 1 / (q - 1)
            x = np.stack([e * 64.0 ** (e - 1.0) * i, e * 96.0 ** (e - 1.0) * i])
            np.testing.assert_allclose(rankops.soft_rank(x, method="permutahedron", regularization="lp", p=p, strength=1.0),
                                       _rank_reference(x, p, 1.0), rtol=1e-10, atol=1e-9)
        x = 1.3 ** np.arange(64.0) * np.random.default_rng(9).uniform(0.9, 1.1, size=(2, 64))
        np.testing.assert_allclose(rankops.soft_sort(x, method="permutahedron", regularization="lp", p=4.0 / 3.0, strength=0.5),
                                   _sort_reference(x, 4.0 / 3.0, 0.5), rtol=1e-10, atol=1e-9 * np.abs(x).max())
    # windows on: the sort (64 entries, under windows.SHORTEST) merges, the ranks finish in windows (p = 3/2's chain by
    # one extension of its run of drops, p = 1.25's by the min-max passes, its ranges bounded by their first data as
    # p = 3/2's, p = 1.2's by extensions alone); windows off: p = 3/2's, 1.25's and 1.2's chains end in the pooling
    # rounds' extensions (rankops._cores.extensions: windows of 64 blocks a side here), the p = 4/3 rank and the sort merge
    assert calls == [4.0, 4.0, 4.0], calls


def test_snowballing_rows_at_p_past_the_closed_forms_leave_the_pooling_rounds(monkeypatch):
    """At p = 1.25 and 1.2 (q = 5, 6: a pool's root by Newton's method) rows whose blocks form by chains took a
    pooling round per block (O(n^2): normal scores at the default softness, thousands of rounds at n = 10^5). They
    leave the pooling rounds once their drops stop halving, within the cap of 4 ceil(log2 n), for the merge rounds
    over the entries' power sums (p = 1.2's sums of fifth powers included); with those switched off they pool for
    more than twice the cap, to the same fit. The rows of :func:`test_rows_past_the_pooling_cap_finish_in_the_merge_rounds`,
    at n = 512: the pooled first half takes in one entry per round."""
    from rankops._cores import pnorm, splits

    rounds = []
    pooled = pnorm._Rules.pooled
    monkeypatch.setattr(pnorm._Rules, "pooled", lambda *a, **k: rounds.append(1) or pooled(*a, **k))
    i = np.arange(1.0, 513.0)
    for p in (1.25, 1.2):
        e = p - 1.0
        x = np.stack([e * 256.0 ** (e - 1.0) * i, e * 384.0 ** (e - 1.0) * i])
        kw = {"method": "permutahedron", "regularization": "lp", "p": p, "strength": 1.0}
        rounds.clear()
        monkeypatch.setattr(pnorm, "ENTRY_MERGES", (5.0, 6.0))
        got = rankops.soft_rank(x, **kw)
        cap = 4 * 9
        assert len(rounds) <= cap, (p, len(rounds))
        rounds.clear()
        monkeypatch.setattr(pnorm, "ENTRY_MERGES", ())
        monkeypatch.setattr(splits, "LEVELS", 0)  # nor the threshold splits of any other q
        np.testing.assert_allclose(rankops.soft_rank(x, **kw), got, rtol=1e-12, atol=1e-10)
        assert len(rounds) > 2 * cap, (p, len(rounds))


def test_sorts_past_the_closed_forms_finish_in_windows_or_extensions(monkeypatch):
    """The p = 1.25, 1.2, 1.4 and 1.7 soft sorts (q = 5, 6, 3.5, 2.43) take their blocks' values from size, weight and
    second moment (the ranks step evenly: ``power_sums.SteppedSignedSums``), as p = 3/2's: on a CPU the windows finish
    the rows their pooling rounds leave, and without the windows (a GPU's route, and ``jax.jit``'s) the rounds'
    extensions do; on a CPU the threshold splits, where such rows went before (1.3-2.7 s for a row of 10^5), never
    run. Values equal the sequential PAV on normal rows of 300 at strengths 10 and 30 (blocks of tens of entries)."""
    from rankops._cores import extensions, pnorm, splits

    calls = collections.Counter()
    for module, name in ((windows, "finish"), (windows, "pool_and_finish"), (splits, "fit_left")):
        monkeypatch.setattr(module, name, functools.partial(lambda f, key, *a, **k: calls.update([key]) or f(*a, **k),
                                                            getattr(module, name), name))
    extend = extensions.Extension.__call__
    monkeypatch.setattr(extensions.Extension, "__call__", lambda *a, **k: calls.update(["extension"]) or extend(*a, **k))
    x = np.random.default_rng(3).normal(size=(3, 300))
    for windows_on in (True, False):
        monkeypatch.setattr(windows, "pays", lambda v: windows_on)
        for p in (1.25, 1.2, 1.4, 1.7):
            assert isinstance(pnorm._extension(pnorm.exponent(p), True).rule, pnorm.SteppedSignedSums)
            for strength in (10.0, 30.0):
                calls.clear()
                got = rankops.soft_sort(x, method="permutahedron", regularization="lp", p=p, strength=strength)
                want = _sort_reference(x, p, strength)
                np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * np.abs(want).max())
                if windows_on:
                    assert calls["fit_left"] == 0 and calls["finish"] + calls["pool_and_finish"] > 0, (p, calls)
                else:  # the splits stay the fallback of a row the extensions leave past the rounds' cost
                    assert calls["extension"] > 0, (p, calls)


@functools.lru_cache(maxsize=None)
def _mostly_settled_rows(p: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, sorts, ranks)``: normal rows, and the paper's PAV of their sort at strength 20 (mostly one-entry blocks,
    a few pooling for rounds) and of their rank at strength 0.2 (late rounds changing few blocks)."""
    x = np.random.default_rng(7).normal(size=(2, 150))
    return x, _sort_reference(x, p, 20.0), _rank_reference(x, p, 0.2)


@pytest.mark.parametrize("q", [3.0, 4.0, 5.0, 6.0])
def test_sort_block_roots_where_terms_change_sign(q, monkeypatch):
    """The soft sort's block equation ``sum_B sign(y_i - v) |y_i - v|^(q-1) = W_B`` (``block_roots.sort_shift``; ``y``
    the ranks, evenly stepped, ``w`` data of either sign) on 300 blocks of 1 to 12 entries, whose roots leave terms of
    both signs, or all positive, or all negative: each block's ``v = mean - t`` equals the bisection root to 1e-12 in
    float64, from its size, weight and step: at q = 3 and 4 in closed form, without a Newton step (the stepped square
    root; the cubic, ``phi(u) = u^3`` whatever u's sign), at q = 5 and 6 by ``stepped.unit_root``; and the same
    from each block's size, weight and second moment alone (``power_sums.SteppedSignedSums``, the blocks' route)."""
    import array_api_compat.numpy as xp

    from rankops._cores.power_sums import SteppedSignedSums, stepped_block_form
    from rankops._lib._adapters import get_adapter

    adapter = get_adapter(xp)
    if q in (3.0, 4.0):
        monkeypatch.setattr(type(adapter), "settle", lambda *a, **k: pytest.fail(f"Newton's steps at q = {q}"))
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 13, size=300)
    y = np.arange(1.0, sizes.sum() + 1.0) / 4.0  # ranks / strength, strength a power of two (permutahedron._signed_projection)
    starts = np.zeros(y.size, dtype=bool)
    starts[np.concatenate([[0], np.cumsum(sizes)[:-1]])] = True
    # each block's weight W_B = h(t) at a t within its half-length (half the blocks: terms of both signs at the root)
    # or past it either way (a quarter each: every term of one sign), spread over its entries with noise summing to 0
    w = np.empty_like(y)
    for a, m in zip(np.flatnonzero(starts), sizes):
        d, half = y[a:a + m] - y[a:a + m].mean(), (m - 1) / 8.0
        t = half * rng.uniform(-0.9, 0.9) if rng.uniform() < 0.5 else rng.choice([-1.0, 1.0]) * (half + rng.uniform(0.2, 2.0))
        noise = rng.normal(size=m)
        w[a:a + m] = np.sum(np.sign(d + t) * np.abs(d + t) ** (q - 1.0)) / m + (noise - noise.mean())
    mean, _, t = block_roots.sort_shift(xp, adapter, starts, y, w, q)
    got, kinds = np.asarray(mean - t), collections.Counter()
    # the same roots from each block's size, weight and second moment alone (its ranks step evenly)
    from_moments = np.asarray(SteppedSignedSums(q if q != 4.0 else 3.0).block_value(xp, stepped_block_form(xp, adapter, starts, y, w)))
    for a, b in zip(np.flatnonzero(starts), np.append(np.flatnonzero(starts)[1:], y.size)):
        want = _root(y[a:b], w[a:b], q)
        np.testing.assert_allclose(got[a:b], want, rtol=0, atol=1e-12 * max(1.0, abs(want)), err_msg=f"block {a}:{b}")
        if q != 4.0:
            np.testing.assert_allclose(from_moments[a:b], want, rtol=0, atol=1e-11 * max(1.0, abs(want)), err_msg=f"{a}:{b}")
        kinds[(bool(np.any(y[a:b] > want)), bool(np.any(y[a:b] < want)))] += b - a > 1
    assert min(kinds[True, True], kinds[True, False], kinds[False, True]) > 40, kinds


# the eager backends: under jax.jit nothing reads values, and every round solves every entry, as before
@pytest.mark.parametrize("name", [b for b in CPU_BACKENDS if b != "jax"])
def test_solves_over_the_blocks_that_changed_equal_the_papers_pav(name, monkeypatch):
    """Where values can be read now, on a CPU, a pooling round solves only the segments that took in a block once they
    are at most a quarter of the entries (:func:`rankops._cores.isotonic.pool_runs`), and the final solve only the
    blocks of several entries, a one-entry block taking its closed form (``pnorm._solved``): the cubic (p = 4/3) and
    Newton's method (p = 1.25), for the sort (weights of either sign) and the rank; the rank's cubic roots on the
    first entries of its blocks of several entries alone (``block_roots.per_block``). Values equal the sequential PAV, the sort's gradient central
    differences; the spies see solves over fewer entries than the batch's, and roots over fewer than their blocks'."""

    solved = []
    for fn in ("shift", "moment_shift", "sort_shift"):  # moment_shift: a round's solve at p = 4/3 and 1.25
        real = getattr(block_roots, fn)
        monkeypatch.setattr(block_roots, fn, lambda xp, adapter, starts, y, *rest, real=real, **kw: solved.append(math.prod(y.shape))
                            or real(xp, adapter, starts, y, *rest, **kw))
    roots = []  # (entries the cubic was solved on, entries of the blocks they stand for)
    monkeypatch.setattr(block_roots, "BLOCK_ENTRIES", 0)  # these rows are short
    # rows this long may pool over their blocks after the first round (windows.pool_and_finish), solving no entries
    monkeypatch.setattr(windows, "SHORTEST", 10**6)
    per_block = block_roots.per_block
    monkeypatch.setattr(block_roots, "per_block", lambda xp, adapter, starts, root, *totals, **kw: per_block(
        xp, adapter, starts, lambda *a: roots.append((math.prod(a[0].shape), math.prod(starts.shape))) or root(*a), *totals,
        **kw))
    to, run = on_backend(name)
    for p in (4.0 / 3.0, 1.25):
        x, sorts, ranks = _mostly_settled_rows(p)
        opts = {"method": "permutahedron", "regularization": "lp", "p": p}
        solved.clear()
        got = run(lambda a: rankops.soft_sort(a, strength=20.0, **opts), to(x))
        np.testing.assert_allclose(np.asarray(got), sorts, rtol=1e-10, atol=1e-10)
        assert min(solved, default=0) < x.size, solved
        solved.clear()
        roots.clear()
        got = run(lambda a: rankops.soft_rank(a, strength=0.2, **opts), to(x))
        np.testing.assert_allclose(np.asarray(got), ranks, rtol=1e-10, atol=1e-10)
        assert min(solved, default=0) < x.size, solved
        # the cubic's root on each block's first entry alone, where blocks are at most half the entries
        assert p != 4.0 / 3.0 or any(k <= n * block_roots.BLOCK_SHARE for k, n in roots), roots
        if name == "numpy":
            small = x[:, :40]
            ct = np.random.default_rng(8).normal(size=small.shape)
            _, vjp = rankops.vjp(rankops.soft_sort, small, strength=5.0, **opts)
            np.testing.assert_allclose(vjp(ct)[0], central_vjp(lambda a: rankops.soft_sort(a, strength=5.0, **opts), small, ct),
                                       atol=1e-6)


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_pooling_rounds_at_p_three_halves_give_a_segments_entries_one_value_without_reading_its_first(name):
    """At q = 2 and 3 a pooling round's values come from each segment's sums by division, subtraction and a square root,
    correctly rounded in a kernel's vector body and its scalar tail alike, so :func:`.isotonic.pool_runs` reads no first
    entry's value (``rules.uniform``): the rounds' values equal, bit for bit, those of rounds that read it, on rank-like
    rows of odd lengths (segments across every vector width's tail), tied and not, in float32 and float64 (JAX: under
    ``jit``, where XLA fuses the sums' gather with the expression)."""
    from rankops._cores import isotonic, pnorm
    from rankops._lib._adapters import get_adapter

    to, run = on_backend(name)
    rng = np.random.default_rng(12)
    for q in (2.0, 3.0):
        for n, ties in ((203, False), (1003, True)):
            for dtype in (np.float32, np.float64):
                x = rng.integers(0, 25, size=(3, n)) if ties else rng.normal(size=(3, n))
                # increasing, as the fit's rows, at a scale where their one-entry values drop often
                y = np.sort(x * (20.0 if q == 2.0 else 1.0), axis=-1).astype(dtype)
                w = np.broadcast_to(np.arange(1, n + 1, dtype=dtype), y.shape)
                v0 = y - w ** (1.0 / (q - 1.0))
                outputs = []
                for uniform in (True, False):
                    rules = pnorm._rules(q, False)
                    assert rules.uniform
                    rules.uniform = uniform

                    def fit(v: Any, yw: Any, rules: Any = rules) -> Any:
                        xp = array_namespace(v)
                        return isotonic.pool_runs(xp, get_adapter(xp), rules, v, yw, 40)[0]

                    outputs.append(np.asarray(run(fit, to(v0), to(np.stack([y, w])))))
                assert np.array_equal(outputs[0], outputs[1]), (q, n, ties, dtype)
                # and the rounds pooled: many entries share their block's value
                assert len(np.unique(outputs[0])) < 0.8 * outputs[0].size, (q, n, ties, dtype)


@pytest.mark.parametrize("p", [1.5, 4.0 / 3.0])
def test_under_jit_rows_that_are_one_block_take_the_guess_and_skip_the_rounds(p, monkeypatch):
    """Under ``jax.jit`` (no value read as the fit runs) a batch whose one-entry values drop often enough is guessed
    (:func:`rankops._cores.one_block.guessed_in_graph`): at strength 1 every row is one block (with short ends at p =
    4/3), the guess proves it, and the pooling rounds never run; at strength 0.05 the rows drop too seldom, the guess
    never runs, and the rounds do. Counted as they run (``jax.debug.callback``: a branch that ``lax.cond`` skips
    calls nothing); values equal the paper's PAV in float64."""
    jax = pytest.importorskip("jax")
    from rankops._cores import one_block, pnorm

    calls: collections.Counter = collections.Counter()
    for module, name, key in ((pnorm, "_fitted", "rounds"), (one_block, "guessed_fit", "guess")):
        real = getattr(module, name)

        def spied(xp: Any, *args: Any, real: Any = real, key: str = key, **kwargs: Any) -> Any:
            jax.debug.callback(lambda: calls.update([key]))
            return real(xp, *args, **kwargs)

        monkeypatch.setattr(module, name, spied)
    x = np.random.default_rng(14).normal(size=(3, 1009))  # a length no other test compiles
    # one program for both strengths (an array argument): the guess and the rounds are branches taken as the fit runs
    ranks = jax.jit(lambda a, s: rankops.soft_rank(a, method="permutahedron", regularization="lp", p=p, strength=s))
    for strength, guessed in ((1.0, True), (0.05, False)):
        calls.clear()
        got = ranks(x, np.float64(strength))
        jax.effects_barrier()
        np.testing.assert_allclose(np.asarray(got), _rank_reference(x, p, strength), rtol=1e-9, atol=1e-9)
        assert (calls["guess"] > 0, calls["rounds"] > 0) == (guessed, not guessed), (strength, calls)


def test_whole_powers_are_products_equal_to_the_power():
    """``power`` and ``odd_power`` at whole exponents up to 8 (p = 1 + 1/e: 1.25's q - 1 = 4 in every top-k search
    step) are products: within a few roundings of ``np.power``, exactly 0 at 0, the sign kept for ``odd_power``."""
    import array_api_compat.numpy as xp

    from rankops._cores.powers import odd_power, power

    a = np.concatenate([-np.geomspace(1e-30, 1e30, 61), [0.0], np.geomspace(1e-30, 1e30, 61)])
    with np.errstate(over="ignore", under="ignore"):
        for e in range(1, 9):
            np.testing.assert_allclose(power(xp, np.abs(a), float(e)), np.abs(a) ** e, rtol=8e-16 * e, atol=0)
            np.testing.assert_allclose(odd_power(xp, a, float(e)), np.sign(a) * np.abs(a) ** e, rtol=8e-16 * e, atol=0)


@pytest.mark.parametrize("q", [2.0, 2.5, 3.0, 3.5, 11.0 / 3.0, 4.0, 4.5, 5.0])
def test_phi_and_its_slope_from_one_power(q):
    """``phi_and_slope`` gives ``sign(a) |a|^(q-1)`` and ``|a|^(q-2)`` within a few roundings of ``np.power`` (at a
    fractional ``q - 2`` the first as ``a |a|^(q-2)``), exactly 0 at 0, and at whole exponents the very products of
    ``odd_power`` and ``power`` (the p = 3/2, 4/3, 5/4 fits unchanged bit for bit)."""
    import array_api_compat.numpy as xp

    from rankops._cores.powers import odd_power, phi_and_slope, power

    a = np.concatenate([-np.geomspace(1e-20, 1e20, 41), [0.0], np.geomspace(1e-20, 1e20, 41)])
    phi, slope = phi_and_slope(xp, a, q)
    np.testing.assert_allclose(phi, np.sign(a) * np.abs(a) ** (q - 1.0), rtol=2e-15 * q, atol=0)
    np.testing.assert_allclose(slope, np.abs(a) ** (q - 2.0), rtol=2e-15 * q, atol=0)
    assert phi[41] == 0.0 and (slope[41] == 0.0 or q == 2.0)
    unsigned = phi_and_slope(xp, np.abs(a), q, signed=False)
    np.testing.assert_allclose(unsigned[0], np.abs(a) ** (q - 1.0), rtol=2e-15 * q, atol=0)
    if float(q).is_integer() and q > 2.0:
        assert np.array_equal(phi, odd_power(xp, a, q - 1.0)) and np.array_equal(slope, power(xp, np.abs(a), q - 2.0))
        assert np.array_equal(unsigned[0], power(xp, np.abs(a), q - 1.0))


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_power_sums_equal_the_sums_of_powers(name):
    """``power_sum`` (a top-k search's totals; on JAX at whole exponents a dot of ``a^(e-1)`` with ``a``) equals the
    row sums of ``a^e`` in float64, within float32 roundings, on one row and on several."""
    from rankops._cores.powers import power_sum

    to, run = on_backend(name)
    a = np.random.default_rng(5).uniform(0.0, 2.0, size=(3, 1000)).astype(np.float32)
    a[:, ::7] = 0.0
    for e, rows in itertools.product([1.0, 2.0, 2.5, 3.0, 4.0], [a[:1], a]):
        got = np.asarray(run(lambda b, e=e: power_sum(array_namespace(b), b, e), to(rows)))
        want = np.sum(rows.astype(np.float64) ** e, axis=-1, keepdims=True)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=0, err_msg=f"{name} e={e} rows={len(rows)}")


@pytest.mark.parametrize("k", [2.0, 2.5, 3.0, 4.0, 5.0])
def test_falling_start_lies_between_the_root_and_jensens_bound(k):
    """``powers.falling_start``, the start of Newton's steps past the closed forms: for 500 blocks of 1 to 40 centred
    data and a root t at which every term ``d_i + t`` is nonnegative (``mean (d + t)^k = W``, evaluated here), the
    power means' bound lies at or above t and at or below Jensen's ``W^(1/k)``, exactly at t for k = 2, and on the
    blocks whose data spread (where Newton's steps from above fall slowly) within 0.85 of Jensen's distance to t
    (0.31-0.70 of it at the median for k = 2.5 to 5)."""
    import array_api_compat.numpy as xp

    from rankops._cores.powers import falling_start

    rng = np.random.default_rng(12)
    roots, mean_w, mean_square = [], [], []
    for _ in range(500):
        d = rng.normal(size=int(rng.integers(1, 41))) * 10.0 ** rng.uniform(-2, 2)
        d -= d.mean()
        t = -d.min() + rng.exponential() * 10.0 ** rng.uniform(-3, 1) * max(np.abs(d).max(), 1e-3)
        roots.append(t)
        mean_w.append(np.mean((d + t) ** k))
        mean_square.append(np.mean(d * d))
    roots, mean_w, mean_square = np.array(roots), np.array(mean_w), np.array(mean_square)
    start = np.asarray(falling_start(xp, mean_w, mean_square, k))
    jensen = mean_w ** (1.0 / k)
    assert np.all(start >= roots * (1.0 - 1e-12)) and np.all(start <= jensen * (1.0 + 1e-12))
    if k == 2.0:
        np.testing.assert_allclose(start, roots, rtol=1e-12)
        return
    spread = mean_square > 0.1 * roots**2
    ratio = (start[spread] - roots[spread]) / (jensen[spread] - roots[spread])
    assert spread.sum() > 100 and ratio.max() < 0.85 and np.median(ratio) < 0.75, (k, ratio.max(), np.median(ratio))


@pytest.mark.parametrize("library", ["numpy", "jax"])
@pytest.mark.parametrize("dtype, scales", [(np.float64, [1e-80, 1e-8, 1.0, 1e8, 1e80]), (np.float32, [1e-10, 1.0, 1e10])])
def test_cubic_root_is_the_real_root_at_every_scale(library, dtype, scales):
    # t^3 + p t + q = 0 for p >= 0 has one real root; at t ~ scale, p ~ scale^2 and q ~ scale^3 (p = 0 on some):
    # the rescaling keeps every power in range. JAX under jit: XLA's own logarithm and exponential (the cube root of
    # Cardano's term as exp(log(a) / 3)) and its fusion of the formula
    from rankops._cores.powers import cubic_root

    if library == "jax":
        jax = pytest.importorskip("jax")
        solve = jax.jit(lambda p, q: cubic_root(array_namespace(p), p, q))
    else:
        import array_api_compat.numpy as xp

        def solve(p: Any, q: Any) -> Any:
            return cubic_root(xp, p, q)

    rng = np.random.default_rng(5)
    for scale in scales:
        t = rng.normal(size=400) * scale
        p = rng.uniform(0.0, 2.0, 400) * rng.integers(0, 2, 400) * scale**2
        got = np.asarray(solve(p.astype(dtype), (-(t**3) - p * t).astype(dtype)))
        assert got.dtype == dtype
        # the root moves by |dq| / (3 t^2 + p) for a change dq of q: within a few roundings of q and p t
        tol = 16 * np.finfo(dtype).eps * (np.abs(t**3) + p * np.abs(t)) / (3 * t**2 + p)
        np.testing.assert_array_less(np.abs(got.astype(np.float64) - t), tol + 1e-300)


def test_the_jax_cube_root_is_within_about_one_unit_in_the_last_place():
    """The cube root that scales Cardano's formula on JAX (the adapter's ``cube_root``: a logarithm, an exponential
    and one Newton step, where the other backends take the power) under ``jit``, against float64's ``np.cbrt`` over 60
    decades of float32 and 600 of float64, exact on cubes, and 0, inf and NaN kept."""
    jax = pytest.importorskip("jax")
    import jax.numpy as xp

    from rankops._lib._adapters import get_adapter

    run = jax.jit(lambda a: get_adapter(xp).cube_root(xp, a))
    rng = np.random.default_rng(8)
    for dtype, decades in ((np.float32, 30), (np.float64, 300)):
        a = np.exp(rng.uniform(-decades, decades, 20_000) * np.log(10.0)).astype(dtype)
        got = np.asarray(run(xp.asarray(a))).astype(np.float64)
        want = np.cbrt(a.astype(np.float64))
        assert np.max(np.abs(got - want) / np.spacing(want.astype(dtype)).astype(np.float64)) < 2.0
        special = np.asarray(run(xp.asarray(np.array([0.0, np.inf, np.nan, 8.0, 27.0, 1e-30], dtype=dtype))))
        np.testing.assert_array_equal(special[:5], [0.0, np.inf, np.nan, 2.0, 3.0])
        np.testing.assert_allclose(special[5], 1e-10, rtol=2 * np.finfo(dtype).eps)


@pytest.mark.parametrize("name", ["torch", "jax"])
def test_cubic_root_derivatives_are_the_implicit_ones_and_finite_where_p_or_q_is_zero(name):
    """The root's gradient is the implicit function's, ``dt/dp = -t / (3t^2 + p)`` and ``dt/dq = -1 / (3t^2 + p)``
    (float64, from 1e-8 to 1e8), also where p = 0 or q = 0 alone, where the rescaling's powers have an infinite slope
    (the rescaling carries no derivative); where both are 0 the root is 0 and its gradient 0, not NaN."""
    from array_api_compat import array_namespace

    from rankops._cores.powers import cubic_root

    to, _ = on_backend(name)
    rng = np.random.default_rng(8)
    scale = 10.0 ** rng.uniform(-8, 8, 300)
    t = rng.normal(size=300) * scale
    p = rng.uniform(0.0, 2.0, 300) * scale**2
    p[:50] = 0.0  # q = -t^3 only
    t[50:100] = 0.0  # q = 0, t = 0 with p > 0
    p[100:110], t[100:110] = 0.0, 0.0  # both 0
    q = -(t**3) - p * t
    if name == "torch":
        import torch

        pp, qq = torch.asarray(p, requires_grad=True), torch.asarray(q, requires_grad=True)
        dp, dq = (g.numpy() for g in torch.autograd.grad(cubic_root(array_namespace(pp), pp, qq).sum(), (pp, qq)))
    else:
        import jax

        dp, dq = (np.asarray(g) for g in jax.grad(lambda a, b: cubic_root(array_namespace(a), a, b).sum(), (0, 1))(to(p), to(q)))
    d = 3 * t**2 + p
    some = d > 0
    np.testing.assert_allclose(dp[some], -t[some] / d[some], rtol=1e-12, atol=0)
    np.testing.assert_allclose(dq[some], -1.0 / d[some], rtol=1e-12, atol=0)
    assert np.all(dp[~some] == 0) and np.all(dq[~some] == 0) and (~some).sum() == 10


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_falling_newton_stops_at_the_root_of_a_convex_increasing_equation(name):
    """``powers.falling_newton`` on ``t^k + e t = c`` (k = q - 1, the magnitude threshold's equation) from three times
    the upper bound ``min(c / e, c^(1/k))``, so that the iterates fall slowly at first: the float64 root (bisection to
    the last bit) within a few units in its last place, with c from 1e-6 to 1e6, and on the backends that run the
    steps eagerly in fewer steps than :func:`powers.newton_steps` allows (12-16 of 19-21: the iterates stop once they
    stop falling)."""
    from array_api_compat import array_namespace

    from rankops._cores.powers import falling_newton, newton_steps
    from rankops._lib._adapters import get_adapter

    to, run = on_backend(name)
    rng = np.random.default_rng(11)
    c = np.geomspace(1e-6, 1e6, 25)
    e = rng.uniform(0.1, 3.0, 25) * rng.integers(0, 2, 25)
    for q in (5.0, 6.0, 10.0):
        k = q - 1.0
        with np.errstate(divide="ignore"):  # e = 0: c / e is inf, and the bound is c^(1/k)
            start = 3.0 * np.minimum(c / e, c ** (1.0 / k))
        steps = []

        def solve(cc, ee, ss, k=k, q=q, steps=steps):
            xp = array_namespace(cc)

            def step(t):
                steps.append(1)
                return t - (t**k + ee * t - cc) / (k * t ** (k - 1.0) + ee)

            return falling_newton(xp, get_adapter(xp), step, ss, q, like=(cc,))

        got = np.asarray(run(solve, to(c), to(e), to(start)))
        want = np.array([bisection(lambda t, ci=ci, ei=ei: t**k + ei * t >= ci, 0.0, si) for ci, ei, si in zip(c, e, start)])
        np.testing.assert_array_less(np.abs(got - want), 4 * np.finfo(np.float64).eps * want)
        if name != "jax":  # under jit the step is traced once
            assert 2 <= len(steps) < newton_steps(q)


def test_under_jit_the_merge_rounds_count_every_entry():
    """``reads_in_eager_node`` under ``jax.jit``: False (the merge rounds then cannot count the blocks, and the pooling
    rounds weigh them so: ``merge_all`` below); eager JAX and NumPy read values."""
    jax = pytest.importorskip("jax")
    import array_api_compat.numpy as np_xp
    import jax.numpy as jnp

    from rankops._lib._adapters import get_adapter

    adapter = get_adapter(jnp)
    seen = []
    jax.jit(lambda x: seen.append(adapter.reads_in_eager_node(x)) or x)(jnp.zeros(3))
    assert seen == [False]
    assert adapter.reads_in_eager_node(jnp.zeros(3)) and get_adapter(np_xp).reads_in_eager_node(np.zeros(3))


def test_under_jit_the_merge_rounds_over_blocks_take_the_shortest_rows_that_hold_them(monkeypatch):
    """Under ``jax.jit`` the merge rounds over the blocks cannot count them: at q = 2 (``regularization="lp", p=2``),
    on a long row (here from 64 entries, as from 1024 in use), they run over rows of a quarter or a half of its padded
    length, the first that holds every row's blocks, else over the whole padded length (``merges.merge_lengths``).
    Each route equals the sequential PAV, after one pooling round that left drops; the quarter alone, forced where
    the blocks need the half, does not. The p = 4/3 rank, whose pooling rounds' extensions finish the snowballing
    chains, traces one merge program, at the padded length; ``"lp"`` at p = 2, without extensions, all three."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from array_api_compat import array_namespace

    from rankops._cores import isotonic, merges, pnorm, power_sums, powers
    from rankops._lib._adapters import get_adapter

    monkeypatch.setattr(merges, "SHORT_MERGE_FROM", 64)
    assert (merges.merge_lengths(64), merges.merge_lengths(40), merges.merge_lengths(32)) == ((16, 32, 64), (16, 32, 64), (32,))

    def fit(a: Any, b: Any, q: float) -> Any:
        xp = array_namespace(a)
        y, w = xp.flip(a, axis=-1), xp.flip(b, axis=-1)
        u, unsettled, _ = isotonic.pool_runs(xp, get_adapter(xp), pnorm._Rules(q), y - powers.odd_power(xp, w, 1.0 / (q - 1.0)),
                                             xp.stack([y, w]), 1)
        blocks = xp.max(xp.sum(xp.astype(isotonic.block_starts(xp, u), xp.int32), axis=-1))
        return xp.flip(power_sums.merge_fit(xp, u, y, w, q=q)[0], axis=-1), blocks, xp.any(unsettled)

    x = _chained_rows(10, 64)
    z, w = -np.sort(-x, axis=-1), np.broadcast_to(np.arange(64, 0, -1.0) * 0.3, x.shape)
    want = np.stack([_pav_projection(a, b, 2.0) for a, b in zip(z, w)])

    def mu(rows: list[int]) -> tuple[np.ndarray, int]:
        v, blocks, unsettled = jax.jit(lambda a, b: fit(a, b, 2.0))(jnp.asarray(z[rows]), jnp.asarray(w[rows]))  # traced anew
        assert bool(unsettled)
        return z[rows] - v, int(blocks)

    # the most blocks a row keeps after the round: 14 (a quarter holds them), 26 (a half), 51
    routes = {16: [0, 5], 32: [0, 2, 5], 64: list(range(6))}
    for length, rows in routes.items():
        got, blocks = mu(rows)
        assert length // 2 < blocks <= length, (length, blocks)
        np.testing.assert_allclose(got, want[rows], rtol=1e-10, atol=1e-9 * np.abs(want).max())

    lengths = []
    rounds = isotonic.merge_rounds
    monkeypatch.setattr(isotonic, "merge_rounds", lambda xp, adapter, kind, v, data: lengths.append(v.shape[-1]) or rounds(
        xp, adapter, kind, v, data))
    for p, traced in ((2.0, [16, 32, 64]), (4.0 / 3.0, [64])):
        lengths.clear()
        jax.make_jaxpr(lambda a: rankops.soft_rank(a, method="permutahedron", regularization="lp", p=p))(jnp.asarray(x))
        assert lengths == traced, (p, lengths)
    monkeypatch.setattr(type(get_adapter(jnp)), "shortcut", lambda self, xp, holds, fast, general: fast())
    np.testing.assert_allclose(mu(routes[16])[0], want[routes[16]], rtol=1e-10, atol=1e-9 * np.abs(want).max())
    assert not np.allclose(mu(routes[32])[0], want[routes[32]], rtol=1e-3)


def test_under_jit_the_p_three_halves_fit_pools_over_its_blocks_where_they_fit_a_short_row(monkeypatch):
    """At q = 3 (p = 3/2) the merge rounds start from the one-entry values. Under ``jax.jit``, on a long row (here from
    64 entries, as from 8192 in use), rows whose blocks fit in a quarter of the padded length pool over their blocks
    to the end instead (``power_sums.pooled_blocks_length``); both routes equal the sequential PAV after one pooling
    round that left drops, and the blocks' route alone, forced where they do not fit, does not."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from array_api_compat import array_namespace

    from rankops._cores import isotonic, pnorm, power_sums
    from rankops._lib._adapters import get_adapter

    monkeypatch.setattr(power_sums, "POOLED_BLOCKS_FROM", 64)
    assert (power_sums.pooled_blocks_length(64), power_sums.pooled_blocks_length(32)) == (16, 32)

    def fit(a: Any, b: Any) -> Any:
        xp = array_namespace(a)
        y, w = xp.flip(a, axis=-1), xp.flip(b, axis=-1)
        u, unsettled, _ = isotonic.pool_runs(xp, get_adapter(xp), pnorm._Rules(3.0), y - xp.sqrt(w), xp.stack([y, w]), 1)
        blocks = xp.sum(xp.astype(isotonic.block_starts(xp, u), xp.int32), axis=-1)  # each row's
        return xp.flip(power_sums.merge_fit(xp, u, y, w, q=3.0)[0], axis=-1), blocks, xp.any(unsettled)

    x = _chained_rows(11, 64)
    z, w = -np.sort(-x, axis=-1), np.broadcast_to(np.arange(64, 0, -1.0) * 3.0, x.shape)
    want = np.stack([_pav_projection(a, b, 1.5) for a, b in zip(z, w)])

    def mu(rows: list[int]) -> tuple[np.ndarray, np.ndarray]:
        v, blocks, unsettled = jax.jit(lambda a, b: fit(a, b))(jnp.asarray(z[rows]), jnp.asarray(w[rows]))  # traced anew
        assert bool(unsettled)
        return np.sign(z[rows] - v) * np.abs(z[rows] - v) ** 2.0, np.asarray(blocks)

    spills = list(range(6))
    got, blocks = mu(spills)  # some row's blocks do not fit: the merge rounds from the one-entry values
    fits = [row for row in spills if blocks[row] <= 16]
    assert fits and len(fits) < 6, blocks
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-9 * np.abs(want).max())
    got, blocks = mu(fits)
    assert blocks.max() <= 16
    np.testing.assert_allclose(got, want[fits], rtol=1e-10, atol=1e-9 * np.abs(want).max())
    monkeypatch.setattr(type(get_adapter(jnp)), "shortcut", lambda self, xp, holds, fast, general: fast())
    np.testing.assert_allclose(mu(fits)[0], want[fits], rtol=1e-10, atol=1e-9 * np.abs(want).max())
    assert not np.allclose(mu(spills)[0], want[spills], rtol=1e-3)


def _chain_problems(q: float = 3.0) -> list[tuple[np.ndarray, np.ndarray, bool]]:
    """``(z, w, signed)`` rows (decreasing, the projection's order) whose pooling rounds snowball at ``q`` (3: p = 3/2,
    4: p = 4/3): the rank's row evenly spaced at the slope of ``w^(1/(q-1))`` halfway along it (its first half takes
    in one entry per round), and a sort's geometric row at strength 0.5 (weights of either sign: the data)."""
    n, e = 128, 1.0 / (q - 1.0)
    chain = -np.sort(-e * 64.0 ** (e - 1.0) * np.arange(1.0, n + 1.0))
    rank = (np.stack([chain, 1.5 * chain]), np.broadcast_to(np.arange(n, 0, -1.0), (2, n)), False)
    x = 1.3 ** np.arange(64.0) * np.random.default_rng(9).uniform(0.9, 1.1, size=(2, 64))
    sort = (np.broadcast_to(np.arange(64, 0, -1.0) / 0.5, x.shape), -np.sort(x, axis=-1), True)
    return [rank, sort]


def _extended_fit(xp: Any, z: Any, w: Any, signed: bool, rounds: int, extend: Any, q: float = 3.0) -> tuple[Any, Any]:
    """``(v, unsettled)``: the fit at ``q`` (3: p = 3/2) of ``(z, w)`` (rows decreasing, the projection's order;
    ``signed``: the sort's weights of either sign) after ``rounds`` pooling rounds with the extensions ``extend``
    (None: none), ``v`` in that order."""
    from rankops._cores import isotonic, pnorm, powers
    from rankops._lib._adapters import get_adapter

    y, wf = xp.flip(z, axis=-1), xp.flip(w, axis=-1)
    rules = (pnorm._SignedRules if signed else pnorm._Rules)(q)
    v, unsettled, _ = isotonic.pool_runs(xp, get_adapter(xp), rules, y - powers.odd_power(xp, wf, 1.0 / (q - 1.0)),
                                         xp.stack([y, wf]), rounds, extend=extend)
    return xp.flip(v, axis=-1), unsettled


def _assert_equals_pav(z: np.ndarray, w: np.ndarray, v: np.ndarray, q: float = 3.0) -> np.ndarray:
    """``v`` (the fit at ``q`` of :func:`_extended_fit`) gives the sequential PAV's projection; returns that ``mu``."""
    mu = np.stack([_pav_projection(a, b, q / (q - 1.0)) for a, b in zip(z, w)])
    d = z - v
    np.testing.assert_allclose(np.sign(d) * np.abs(d) ** (q - 1.0), mu, rtol=1e-10, atol=1e-9 * np.abs(mu).max())
    return mu


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_extensions_finish_snowballing_chains_within_a_few_rounds(name):
    """Where the pooling rounds cannot stop to read values (``jax.jit``, a GPU), a round after one in which a row's
    drops stopped halving pools its first drops further, block by block to either side while the next block
    violates the pool (``rankops._cores.extensions``): the p = 3/2 and p = 4/3 ranks' chains of 128 entries and
    the sorts' geometric rows settle within 8 rounds, where the rounds alone leave them unsettled, and each fit
    equals the sequential PAV."""
    from array_api_compat import array_namespace

    from rankops._cores import pnorm

    def fit(a: Any, b: Any, signed: bool, extended: bool, q: float) -> tuple[Any, Any]:
        xp = array_namespace(a)
        v, unsettled = _extended_fit(xp, a, b, signed, 8, pnorm._extension(q, signed) if extended else None, q)
        return v, xp.any(unsettled)

    to, run = on_backend(name)
    for q in (3.0, 4.0, 5.0, 6.0):
        for z, w, signed in _chain_problems(q)[:1 if q == 6.0 else 2]:  # q = 6's sort row settles in 8 rounds alone
            args = to(np.ascontiguousarray(z)), to(np.ascontiguousarray(w))
            assert bool(np.asarray(run(lambda a, b: fit(a, b, signed, False, q), *args)[1])), (q, signed)
            v, unsettled = run(lambda a, b: fit(a, b, signed, True, q), *args)
            assert not bool(np.asarray(unsettled)), (q, signed)
            _assert_equals_pav(z, w, np.asarray(v), q)


def test_extensions_follow_a_chain_that_turns_within_one_round(monkeypatch):
    """A pool that grew to one side may then stand below the block on its other side (the soft sort's middle block at
    the default softness grows left, then right, then left...): the extension's legs alternate until a leftward leg
    takes nothing (``extensions.LEGS``), so the soft sort's rows of 1000 at p = 3/2 and 4/3 (default softness and
    softness 3) settle in 4, 4, 7 and 4 rounds, where one leg to each side a round (``LEGS = 2``) takes 7, 6, 7 and
    8; every fit the sequential PAV's."""
    import array_api_compat.numpy as xp

    from rankops._cores import extensions, pnorm

    projected = []
    project = pnorm.project
    monkeypatch.setattr(pnorm, "project", lambda *a, **k: projected.append(a[2:4]) or project(*a, **k))

    def rounds(z: np.ndarray, w: np.ndarray, q: float) -> int:
        for count in range(1, 12):
            v, unsettled = _extended_fit(xp, z, w, True, count, pnorm._extension(q, True), q)
            if not unsettled.any():
                _assert_equals_pav(z, w, v, q)
                return count
        return 12

    x = np.random.default_rng(3).standard_normal((1, 1000))
    counts = []
    for p, knob in itertools.product((1.5, 4.0 / 3.0), ({}, {"softness": 3.0})):
        rankops.soft_sort(x, method="permutahedron", regularization="lp", p=p, **knob)
        z, w = (np.ascontiguousarray(a) for a in np.broadcast_arrays(*projected[-1]))
        q = pnorm.exponent(p)
        with monkeypatch.context() as patched:
            patched.setattr(extensions, "LEGS", 2)
            pair = rounds(z, w, q)
        counts.append((rounds(z, w, q), pair))
    assert all(legs <= pair for legs, pair in counts) and sum(c[0] for c in counts) <= sum(c[1] for c in counts) - 6, counts
    assert sum(legs <= 4 for legs, _ in counts) >= 3, counts


# the windows run where values are read as the fit goes (eager backends); JAX's rounds are one traced loop
@pytest.mark.parametrize("name", [b for b in CPU_BACKENDS if b != "jax"])
def test_windows_pooling_rounds_over_blocks_pool_their_chains_on(name, monkeypatch):
    """The windows' fit by pooling rounds over rows of blocks (``power_sums.pool_blocks``: the rank at p = 3/2 and 5/4,
    whose merge tests split a block by its data, and the soft sort's evenly stepped blocks) pools a snowballing chain
    on with the rounds' extensions, a segment of blocks' statistics combined from their block forms
    (``extensions.BlockRows``): the rank's chain of 128 one-entry blocks and the sort's geometric row of 64 settle
    within 16 rounds, where without the extensions they take more than twice as many, to the same fit, the
    sequential PAV's."""
    from rankops._cores import power_sums, powers
    from rankops._lib._adapters import get_adapter

    def fit(a: Any, b: Any, q: float, signed: bool, rounds: list) -> Any:
        xp = array_namespace(a)
        adapter = get_adapter(xp)
        sums = power_sums.SteppedSignedSums(q) if signed else power_sums.PowerSums(q)
        pooled = sums.pooled
        sums.pooled = lambda *args: rounds.append(1) or pooled(*args)
        y, wf = xp.flip(a, axis=-1), xp.flip(b, axis=-1)
        starts = xp.ones(y.shape, dtype=xp.bool)
        data = sums.block_stats(xp, adapter, starts, xp.stack([y, wf]))
        v = power_sums.pool_blocks(xp, adapter, y - powers.odd_power(xp, wf, 1.0 / (q - 1.0)), data, sums)
        return xp.flip(v, axis=-1)

    to, run = on_backend(name)
    for q, (z, w, signed) in ((3.0, _chain_problems(3.0)[0]), (5.0, _chain_problems(5.0)[0]), (5.0, _chain_problems(5.0)[1])):
        args = to(np.ascontiguousarray(z)), to(np.ascontiguousarray(w))
        extended, alone = [], []
        v = run(lambda a, b: fit(a, b, q, signed, extended), *args)
        _assert_equals_pav(z, w, np.asarray(v), q)
        with monkeypatch.context() as patched:
            patched.setattr(power_sums, "Extension", lambda rule: None)
            v = run(lambda a, b: fit(a, b, q, signed, alone), *args)
        _assert_equals_pav(z, w, np.asarray(v), q)
        assert len(extended) <= 16 and len(alone) > 2 * len(extended), (q, signed, len(extended), len(alone))


def test_extended_rounds_equal_the_papers_pav_on_rows_of_many_chains():
    """Rows of clusters far apart (chains that meet, drops on both sides of one block) at p = 3/2 and 4/3, rank and
    sort: pooled to the end with the extensions on NumPy, the fit equals the sequential PAV; and the operators under
    ``jax.jit`` (where the extensions serve) equal it too."""
    import array_api_compat.numpy as xp

    from rankops._cores import pnorm

    jax = pytest.importorskip("jax")
    for n, q in itertools.product((9, 60, 200), (3.0, 4.0, 5.0, 6.0)):
        x = _chained_rows(n, n)
        for signed in (False, True):
            if signed:
                z, w = np.broadcast_to(np.arange(n, 0, -1.0) / 0.3, x.shape), -np.sort(x, axis=-1) - 5.0
            else:
                z, w = -np.sort(-x, axis=-1), np.broadcast_to(np.arange(n, 0, -1.0) * 3.0, x.shape)
            v, unsettled = _extended_fit(xp, z, w, signed, n, pnorm._extension(q, signed), q)
            assert not unsettled.any()
            _assert_equals_pav(z, w, v, q)
    x = _chained_rows(3, 200)
    for p in (1.5, 4.0 / 3.0, 1.25, 1.2):
        opts = {"method": "permutahedron", "regularization": "lp", "p": p, "strength": 0.7}
        np.testing.assert_allclose(jax.jit(lambda a: rankops.soft_rank(a, **opts))(x), _rank_reference(x, p, 0.7), rtol=1e-10,
                                   atol=1e-9)
        np.testing.assert_allclose(jax.jit(lambda a: rankops.soft_sort(a, **opts))(x), _sort_reference(x, p, 0.7), rtol=1e-10,
                                   atol=1e-9 * np.abs(x).max())


@pytest.mark.parametrize("signed", [False, True], ids=["rank", "sort"])
@pytest.mark.parametrize("q", [3.0, 4.0, 5.0, 6.0])
def test_rounds_under_jit_solve_each_block_once_in_slots(q, signed):
    """Under ``jax.jit`` a pooling round of the rank's and the sort's rules solves each block once, in the adapter's
    slots (``block_roots.slotted``, ``slotted_sort``: block b of a row at index b), where NumPy solves it at every
    entry: the same values at every entry (1e-12, float64; a block's entries bit-equal), each slot's block form that
    of its block's entries (the sort's: its evenly stepped ranks' closed form), and the rounds' extension reading the
    forms from the slots equals it reading them at the blocks' first entries."""
    jax = pytest.importorskip("jax")
    import array_api_compat.numpy as np_xp
    import jax.numpy as jnp
    from array_api_compat import array_namespace

    from rankops._cores import extensions, pnorm, power_sums
    from rankops._lib._adapters import get_adapter

    rng = np.random.default_rng(3)
    n = 300
    x = np.sort(rng.normal(size=(3, n)) * 4.0, axis=-1)
    if signed:  # the sort's: its ranks, stepping evenly, and weights of either sign (here in no order: drops)
        y, w = np.broadcast_to(np.arange(1.0, n + 1.0) / 0.3, x.shape).copy(), rng.normal(size=x.shape) * 40.0
    else:  # the rank's: its data decreasing, and rho reversed
        y, w = x[:, ::-1].copy(), np.broadcast_to(np.arange(1.0, n + 1.0), x.shape).copy()
    starts = rng.random(y.shape) < 0.2
    starts[:, 0] = True
    yw = np.stack([y, w])
    rules = (pnorm._SignedRules if signed else pnorm._Rules)(q)

    def entry_form(xp, s):  # each entry's block's form, as the extension's rule reads it
        if signed:
            return power_sums.stepped_block_form(xp, get_adapter(xp), s, xp.asarray(y), xp.asarray(w))
        return rules.pooled_blocks(xp, get_adapter(xp), s, xp.asarray(y), xp.asarray(yw), False)[1]

    want = rules.pooled(np_xp, get_adapter(np_xp), starts, y, yw, False)
    form = entry_form(np_xp, starts)
    kinds = []

    def solved(s, a, b):
        xp = array_namespace(a)
        values, stats = rules.pooled_blocks(xp, get_adapter(xp), s, a, xp.stack([a, b]), False)
        kinds.append(type(stats))
        return values, tuple(stats)

    got, slots = jax.jit(solved)(jnp.asarray(starts), jnp.asarray(y), jnp.asarray(w))
    assert kinds == [extensions.InSlots]
    got = np.asarray(got)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    for row, at in enumerate(np.flatnonzero(r) for r in starts):
        spread = np.repeat(got[row, at], np.diff(np.append(at, n)))
        assert np.array_equal(got[row], spread)  # one value per block, to the bit
        for entry, slot in zip(form, slots):
            np.testing.assert_allclose(np.asarray(slot)[row, :len(at)], entry[row, at], rtol=1e-12,
                                       atol=1e-12 * (np.abs(entry).max() + 1.0))
    if not rules.forms:
        return
    extension = pnorm._extension(q, signed)
    data = jnp.asarray(yw)
    u, s = jnp.asarray(want), jnp.asarray(starts)
    form = entry_form(jnp, s)  # eager: at every entry

    def extended(u, s, *stats, slotted=False):
        xp = array_namespace(u)
        return extension(xp, get_adapter(xp), u, s, data, stats, slotted)

    by_entries = jax.jit(extended)(u, s, *form)
    by_slots = jax.jit(lambda u, s, *a: extended(u, s, *a, slotted=True))(u, s, *slots)
    assert not np.array_equal(np.asarray(by_slots[0]), want)  # the extension pooled some drops on
    for a, b in zip(by_entries, by_slots):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_under_jit_rows_from_sixty_four_entries_carry_the_extensions(monkeypatch):
    """Under ``jax.jit`` the pooling rounds of the p = 3/2 and 4/3 fits carry the extensions on rows of
    ``pnorm.EXTENDED_FROM`` (64) entries or more; a shorter row pools to the end without them (fewer operations a
    round, and a smaller program), with the same values (the PAV reference)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from rankops._cores import extensions, pnorm

    assert pnorm.EXTENDED_FROM == 64
    traced = []
    after_round = extensions.Extension.after_round
    monkeypatch.setattr(extensions.Extension, "after_round", lambda self, *a: traced.append(a[2].shape[-1]) or after_round(self, *a))
    for op, p in (("soft_rank", 1.5), ("soft_sort", 4.0 / 3.0)):
        for n in (63, 64):
            traced.clear()
            x = _chained_rows(n, n)[:2]
            opts = {"method": "permutahedron", "regularization": "lp", "p": p, "strength": 0.7}
            got = jax.jit(lambda a: getattr(rankops, op)(a, **opts))(jnp.asarray(x))
            assert traced == ([] if n < 64 else [n]), (op, n, traced)
            want = (_rank_reference if op == "soft_rank" else _sort_reference)(x, p, 0.7)
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-9 * np.abs(x).max())


@pytest.mark.exhaustive
def test_under_jit_an_empty_batch_of_long_rows_carries_the_extensions():
    """A batch of no rows of 64 entries or more (a loader's last batch) under ``jax.jit``: the pooling rounds carry the
    extensions and their scans, whose blocked scan once reshaped such a batch by -1 ('integer modulo by zero'); each
    fit that carries them (the p-norm ranks at q = 4 and 5, the sorts at q = 3 and 5 and at a q that is no integer,
    the KL sort) returns an empty value and gradient."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    x = jnp.zeros((2, 0, 128), dtype=jnp.float32)
    for op, opts in (("soft_rank", _lp(4.0 / 3.0)), ("soft_rank", _lp(1.25)), ("soft_sort", _lp(1.5)),
                     ("soft_sort", _lp(1.25)), ("soft_sort", _lp(1.4)), ("soft_sort", {"regularization": "kl"})):
        fn = getattr(rankops, op)
        value, grad = jax.jit(jax.value_and_grad(lambda v: jnp.sum(fn(v, method="permutahedron", **opts))))(x)
        assert float(value) == 0.0 and grad.shape == x.shape and grad.dtype == x.dtype, (op, opts)


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_extension_block_firsts_are_a_search_of_the_ordinals(name):
    """``extensions._block_firsts``, the first entry of each numbered block (one inverse permutation), equals NumPy's
    search of the entries' block numbers (``searchsorted``, side left: 0 before the row's first block, n past its last)
    on rows of one block, of one-entry blocks and of random blocks, for every number from -4 to n + 3."""
    from rankops._cores.extensions import _block_firsts
    from rankops._lib._adapters import get_adapter

    to, run = on_backend(name)
    xp = array_namespace(to(np.zeros(1)))

    rng = np.random.default_rng(3)
    n = 40
    starts = rng.random((5, n)) < 0.3
    starts[:, 0] = True
    starts[1, 1:] = False  # one block
    starts[2, :] = True  # one-entry blocks
    ordinal = np.cumsum(starts, axis=-1) - 1
    queries = np.stack([rng.permutation(np.arange(-4, n + 4)).reshape(2, -1) for _ in range(5)])  # every number
    want = np.stack([np.searchsorted(o, q.ravel(), side="left").reshape(q.shape) for o, q in zip(ordinal, queries)])
    got = run(lambda s, o, q: _block_firsts(xp, get_adapter(xp), s, o, q), to(starts), to(ordinal), to(queries))
    assert np.array_equal(np.asarray(got), want), name


def test_extensions_keep_pools_that_share_no_block_each_at_its_value():
    """Every round's extensions (``extensions.Extension``) leave each block (``starts``) at one value, its entries'
    pool's, and within a block of the sequential PAV (steps of pool-adjacent-violators), so that the rounds may stop
    after any of them: on rows of near drops, where a drop's pool to the right and the next one's to the left meet
    (and each drop's two pools share its two blocks), among which only one of any two pools that meet is kept (the
    one that took more blocks). Written both, they would leave a block at two values, which the blocks the fit reads
    from the values (``isotonic.block_starts``) would split."""
    import array_api_compat.numpy as xp

    from rankops._cores import extensions, pnorm
    from rankops._lib._adapters import get_adapter

    adapter, seen = get_adapter(xp), []

    class Recorded(extensions.Extension):
        def __call__(self, xp: Any, adapter: Any, u: Any, starts: Any, data: Any, stats: Any = None,
                     slotted: bool = False) -> tuple[Any, Any]:
            out = super().__call__(xp, adapter, u, starts, data, stats, slotted)
            seen.append(out)
            return out

    rng = np.random.default_rng(0)
    met = 0
    for trial in range(48):
        n, signed = int(rng.integers(8, 60)), trial % 2 == 1
        if trial % 4 < 2:  # clusters far apart, tight within
            x = rng.choice([0.0, 3.0, 10.0, 30.0], size=(4, n)) + rng.normal(size=(4, n)) * rng.choice([0.01, 0.3, 2.0], size=(4, 1))
        else:  # gaps of heavy-tailed sizes
            x = np.cumsum(rng.exponential(size=(4, n)) ** 3, axis=-1)
        scale = 10.0 ** rng.uniform(-1.5, 1.0)
        if signed:
            z, w = np.broadcast_to(np.arange(n, 0, -1.0) / scale, x.shape), -np.sort(x, axis=-1)
        else:
            z, w = -np.sort(-x, axis=-1), np.broadcast_to(np.arange(n, 0, -1.0) * scale, x.shape)
        seen.clear()
        v, _ = _extended_fit(xp, z, w, signed, n, Recorded(pnorm._extension(3.0, signed).rule))
        mu = _assert_equals_pav(z, w, v)
        want = (z - np.sign(mu) * np.sqrt(np.abs(mu)))[:, ::-1]  # the PAV's fit, in the rounds' increasing order
        tol = 1e-9 * (np.abs(want).max() + 1.0)
        rules, yw = (pnorm._SignedRules if signed else pnorm._Rules)(3.0), np.stack([z[:, ::-1], w[:, ::-1]])
        for u, starts in seen:
            inner = ~starts[:, 1:]
            np.testing.assert_array_equal(u[:, 1:][inner], u[:, :-1][inner])
            np.testing.assert_allclose(u, rules.pooled(xp, adapter, starts, None, yw, False), rtol=1e-9, atol=tol)
            assert np.all(np.abs(want[:, 1:] - want[:, :-1])[inner] <= tol)
        met += len(seen)
    assert met >= 20  # the extensions ran (the rows' drops stopped halving)


def test_a_snowballing_row_leaves_the_pooling_rounds_when_its_drops_stop_halving():
    """``merge_cost``: the rank's row of the test above at p = 4/3 takes in one entry per pooling round (one drop for
    up to n rounds); it leaves after a few rounds, with the drop left for the merge rounds. A row whose drops fall
    geometrically (random scores at strength 0.1) runs until it settles, as without ``merge_cost``. Where the merge
    rounds run over every entry (``merge_all``: under ``jax.jit``), the chain pools for their cost, ``log2 n`` rounds."""
    import array_api_compat.numpy as xp

    from rankops._cores import isotonic, pnorm
    from rankops._lib._adapters import get_adapter

    class Counted(pnorm._Rules):
        rounds = 0

        def pooled(self, *args: Any) -> Any:
            Counted.rounds += 1
            return super().pooled(*args)

    def pool(z: np.ndarray, merge_cost: float, merge_all: bool = False, stall_blocks: int = 0) -> tuple[int, bool]:
        y, w = z[::-1][None, :], np.arange(1.0, z.size + 1.0)[None, :]
        Counted.rounds = 0
        _, unsettled, _ = isotonic.pool_runs(xp, get_adapter(xp), Counted(4.0), y - w ** (1.0 / 3.0), np.stack([y, w]), 28, merge_cost,
                                             merge_all=merge_all, stall_blocks=stall_blocks)
        return Counted.rounds, bool(unsettled[0])

    e = 1.0 / 3.0
    chain = -np.sort(-e * 64.0 ** (e - 1.0) * np.arange(1.0, 129.0))
    assert pool(chain, 0.0) == (28, True)
    rounds, unsettled = pool(chain, 1.0)
    assert unsettled and rounds <= 4, rounds
    assert pool(chain, 1.0, merge_all=True) == (7, True)
    # ``stall_blocks``: a row stalls out only with at most that many blocks (the chain keeps 59 after 7 rounds, 38
    # after 28)
    assert pool(chain, 1.0, merge_all=True, stall_blocks=64) == (7, True)
    assert pool(chain, 1.0, merge_all=True, stall_blocks=32) == (28, True)
    scores = -np.sort(-np.random.default_rng(3).normal(size=128)) / 0.1
    settled = pool(scores, 0.0)
    assert pool(scores, 1.0) == settled and not settled[1] and settled[0] >= 2, settled


def test_torch_func_of_the_sort_with_its_ranks_untraced():
    """Under ``torch.func`` the sort's ranks are a plain tensor while its data are traced: the CPU's solves that read
    values (``pnorm._solved``) must stand aside for the data, not only the ranks. ``vmap``, ``grad``, ``jacrev``,
    ``jacfwd`` and ``vmap`` of ``jacrev`` against eager."""
    torch = pytest.importorskip("torch")
    from torch.func import grad, jacfwd, jacrev, vmap

    x = torch.asarray(np.random.default_rng(3).normal(size=(3, 12)))
    f = lambda v: rankops.soft_sort(v, method="permutahedron", regularization="lp", p=4.0 / 3.0, strength=0.5)  # noqa: E731
    np.testing.assert_allclose(vmap(f)(x).numpy(), f(x).numpy(), rtol=1e-12, atol=1e-12)
    xr = x.clone().requires_grad_(True)
    (f(xr) ** 2).sum().backward()
    np.testing.assert_allclose(grad(lambda v: (f(v) ** 2).sum())(x).numpy(), xr.grad.numpy(), rtol=1e-10, atol=1e-12)
    eager = torch.autograd.functional.jacobian(f, x[0]).numpy()
    np.testing.assert_allclose(jacrev(f)(x[0]).numpy(), eager, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(jacfwd(f)(x[0]).numpy(), eager, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(vmap(jacrev(f))(x).numpy(), np.stack([jacrev(f)(r).numpy() for r in x]), rtol=1e-10, atol=1e-12)


def test_a_pooling_round_gives_each_segment_one_value_on_torch():
    """A segment's value is computed at each of its entries, and torch's CPU kernels may round a power of equal
    inputs apart (the vectorized body and the scalar tail: here the last four entries of a 3 x 12 batch). A segment
    split 1 ulp apart was then two blocks for good: p = 1.7 ranks under ``torch.compile`` were off by up to 1.9 (2 rows
    in 200 such batches), and these rounds found other blocks than float64's in 14 of 300 batches of normal rows (the
    first, seed 16). Where every segment is solved each round (compiled; GPU rows), each takes its first entry's
    value."""
    torch = pytest.importorskip("torch")
    from array_api_compat import array_namespace

    from rankops._cores import isotonic, pnorm
    from rankops._lib._adapters import get_adapter

    x = torch.randn(3, 12, generator=torch.Generator().manual_seed(16))
    y = torch.sort(x, dim=-1).values  # the increasing fit of the reversed decreasing row
    w = torch.arange(1.0, 13.0).expand_as(y)
    q = pnorm.exponent(1.7)
    rules = pnorm._Rules(q)
    rules.compact_share = 0.0  # every segment solved each round, as compiled
    xp = array_namespace(y)
    v, unsettled, _ = isotonic.pool_runs(xp, get_adapter(xp), rules, y - w ** (1.0 / (q - 1.0)), torch.stack([y, w]), 12)
    assert not bool(unsettled.any())
    # the same rounds in float64 on NumPy (each segment solved once, in one place): the same blocks and values
    np_xp = array_namespace(np.zeros(1))
    y64, w64 = y.double().numpy(), w.double().numpy()
    v64, _, _ = isotonic.pool_runs(np_xp, get_adapter(np_xp), pnorm._Rules(q), y64 - w64 ** (1.0 / (q - 1.0)),
                                   np.stack([y64, w64]), 12)
    assert np.array_equal(np.asarray(isotonic.block_starts(xp, v)), isotonic.block_starts(np_xp, v64))
    np.testing.assert_allclose(v.numpy(), v64, rtol=1e-6)


def test_tied_rows_keep_their_pooled_blocks_under_jax_default_compilation():
    """JAX's ``jit`` as it compiles by default (the suite's test-time compilation skips the fusion at issue): rows of
    a dozen tied values, p = 4/3 at strength 48.4. XLA fused the pooling round's gather of each segment's first value
    with the cubic root that computes it and evaluated the root again at each entry, rounding it 1 ulp apart in the
    scalar tail; a segment then ended as two blocks, and the top entries' ranks were 59-60 positions off (both rows
    here; 7 of 16 such rows of four seeds, and one of 60 random rows of a differential test against the sequential
    PAV)."""
    jax = pytest.importorskip("jax")
    x = np.random.default_rng(3).integers(0, 12, size=(2, 129)) * 0.76
    f = jax.jit(lambda a: rankops.soft_rank(a, method="permutahedron", strength=48.4, **_lp(4.0 / 3.0)))
    a = jax.numpy.asarray(x)
    got = f.lower(a).compile({"xla_backend_optimization_level": 3, "xla_llvm_disable_expensive_passes": False})(a)
    np.testing.assert_allclose(np.asarray(got), _rank_reference(x, 4.0 / 3.0, 48.4), rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize(("name", "p"), [(h, p) for h in CPU_BACKENDS for p in (1.5, 4.0 / 3.0) if h != "jax" or p != 1.5])
def test_float32_ranks_of_tied_rows_far_from_zero(name, p):
    """float32 rows of 30 tied values at ``x / strength`` up to 1.7e4, whose pooled blocks join whole tie groups: a
    block's entries are centred on its first (exact differences, 0 within a tie group), not on a mean that rounds by a
    unit in the entries' last place, which the root's power amplified: off by up to 0.37 (torch) and 0.13 (NumPy) at
    p = 4/3, and by six positions at n = 1500 (a differential test's row), against 6e-5 now."""
    to, run = on_backend(name)
    x = _tied_float32_rows()
    got = run(lambda a: rankops.soft_rank(a, method="permutahedron", strength=0.147, **_lp(p)), to(x))
    np.testing.assert_allclose(np.asarray(got), _tied_rows_reference(p), atol=1e-3)


def _tied_float32_rows() -> np.ndarray:
    return (np.random.default_rng(0).integers(0, 30, size=(2, 300)) * 86.0).astype(np.float32)


@functools.cache
def _tied_rows_reference(p: float) -> np.ndarray:
    return _rank_reference(_tied_float32_rows().astype(np.float64), p, 0.147)



def _one_block_rows() -> np.ndarray:
    """Rows of 160 at six scales: at strength 0.3 to 1 the smallest are one block (p = 3/2, 4/3), a larger one a block
    between a few entries at its ends, and the largest many blocks."""
    return np.random.default_rng(3).normal(size=(6, 160)) * np.array([0.05, 0.2, 0.5, 1.0, 3.0, 10.0])[:, None]


def _spied_guesses(monkeypatch: Any) -> list:
    """The ``(fitted, start, v0)`` of every ``one_block.guessed_fit`` call, as NumPy arrays."""
    from rankops._cores import one_block

    seen = []
    real = one_block.guessed_fit

    def spy(xp, adapter, v0, *rest):
        out = real(xp, adapter, v0, *rest)
        seen.append(tuple(np.asarray(a) for a in (out[0], out[1], v0)))
        return out

    monkeypatch.setattr(one_block, "guessed_fit", spy)
    return seen


@pytest.mark.parametrize("name", [b for b in CPU_BACKENDS if b != "jax"])
def test_rows_guessed_as_one_block_equal_the_papers_pav(name, monkeypatch):
    """Where values can be read now, on a CPU, a batch whose one-entry values mostly drop is first guessed row by row
    as one block between blocks at its ends (``one_block.guessed_fit``): a row whose guess passes the optimality
    check skips the rounds, a row whose block alone is one block of its own fit goes to the rounds with it pooled,
    the rest from their one-entry values. Each kind is in these batches (the spy sees them); the values equal the
    sequential PAV."""
    seen = _spied_guesses(monkeypatch)
    to, run = on_backend(name)
    x = _one_block_rows()
    for p, strength in ((1.5, 0.3), (4.0 / 3.0, 0.5)):
        seen.clear()
        got = run(lambda a: rankops.soft_rank(a, method="permutahedron", strength=strength, **_lp(p)), to(x))
        np.testing.assert_allclose(np.asarray(got), _rank_reference(x, p, strength), rtol=1e-10, atol=1e-10)
        fitted, start, v0 = seen[0]
        pooled = np.sum(start != v0, axis=-1)[~fitted]
        assert fitted[:2].all() and (pooled > 100).any() and (pooled == 0).any(), (fitted, pooled)


@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_float32_rows_guessed_as_one_block_are_the_rounds_fit(name, monkeypatch):
    """In float32 at 10^4 entries the check's rounding margin still takes the rows that are one block (between short
    blocks at its ends): every row of the p = 3/2 rank at strength 1 and two of the p = 4/3 rank's; another p = 4/3
    row goes to the rounds with a block of 9,234 entries pooled. Every row is at least as near its float64 fit as the rounds alone bring it
    (``one_block.DROPPING`` above 1: no guess): the same partition, its roots from sums in another order on torch
    (the final solve's subsets follow the whole batch's blocks)."""
    from rankops._cores import one_block

    seen = _spied_guesses(monkeypatch)
    to, _ = on_backend(name)
    x = np.random.default_rng(5).normal(size=(4, 10**4)).astype(np.float32) * np.array([1, 2, 3, 5], dtype=np.float32)[:, None]
    for p in (1.5, 4.0 / 3.0):
        rank = lambda a: np.asarray(rankops.soft_rank(to(a), method="permutahedron", strength=1.0, **_lp(p)))  # noqa: E731
        guessed, exact = rank(x), rank(x.astype(np.float64))
        with monkeypatch.context() as m:
            m.setattr(one_block, "DROPPING", (2.0, 2.0))
            rounds = rank(x)
        assert np.all(np.abs(guessed - exact).max(axis=-1) <= np.abs(rounds - exact).max(axis=-1)), p
    pooled = np.sum(seen[-2][1] != seen[-2][2], axis=-1)  # the p = 4/3 guess's (the last call gave up at once)
    assert seen[0][0].all() and seen[-2][0].tolist() == [True, True, False, False] and pooled[2] > 9000, (seen, pooled)


def test_a_block_pooled_before_the_rounds_stays_one_block_through_their_first(monkeypatch):
    """The rounds' first pass over the entries starts from the blocks its values already hold (runs of equal values):
    the blocks a guess pooled (in float32, of the p = 4/3 rows of 10^4 entries above, 9,234 and 5,808 entries: their float64
    fit's blocks that hold the middle entry) are still one block each after it,
    where a first round of one-entry segments would solve each of its entries alone again and undo the pool."""
    from rankops._cores import isotonic

    seen = _spied_guesses(monkeypatch)
    first_rounds = []
    real = isotonic.pool_runs

    def spy(xp, adapter, rules, v, w, max_rounds, *args, **kwargs):
        out = real(xp, adapter, rules, v, w, max_rounds, *args, **kwargs)
        if max_rounds == 1:
            first_rounds.append(np.asarray(out[0]))
        return out

    monkeypatch.setattr(isotonic, "pool_runs", spy)
    x = np.random.default_rng(5).normal(size=(4, 10**4)).astype(np.float32) * np.array([1, 2, 3, 5], dtype=np.float32)[:, None]
    rankops.soft_rank(x, method="permutahedron", strength=1.0, **_lp(4.0 / 3.0))
    fitted, start, v0 = seen[-1]
    pooled = (start != v0) & ~fitted[:, None]
    rows = np.flatnonzero(pooled.any(axis=-1))
    assert rows.size and first_rounds, (fitted, rows)
    after = first_rounds[-1]  # the rounds run on the rows left, in order
    assert after.shape[0] == np.sum(~fitted)
    for row in rows:
        block = after[np.sum(~fitted[:row]), pooled[row]]
        assert block.size > 5000 and np.all(block == block[0]), (row, np.unique(block).size)


def test_guessed_rows_equal_the_rounds_on_random_rows(monkeypatch):
    """Seeded random batches (row lengths 128 to 400, p in {3/2, 4/3, 1.25}, strengths 0.5 to 20, where rows are one
    block or near it, rows at mixed scales and shifts, with ties): the rank with the guess equals the rank by the rounds alone (``one_block.DROPPING``
    above 1) in float64 to 1e-12 on NumPy and torch, and the guess fitted some rows, pooled some before the rounds and
    left some (over all batches), so that each of its outcomes is checked against the rounds."""
    import torch

    from rankops._cores import one_block

    seen = _spied_guesses(monkeypatch)
    rng = np.random.default_rng(11)
    for _ in range(10):
        b, n = int(rng.integers(2, 6)), int(rng.integers(128, 401))
        x = rng.normal(size=(b, n)) * 10.0 ** rng.uniform(-1.5, 0.5, size=(b, 1)) + rng.uniform(-50, 50, size=(b, 1))
        x[:, 5] = x[:, 9]  # a tie in every row
        opts = {"method": "permutahedron", "strength": float(10.0 ** rng.uniform(-0.3, 1.3)),
                **_lp(float(rng.choice([1.5, 4.0 / 3.0, 1.25])))}
        for a in (x, torch.tensor(x)):
            guessed = np.asarray(rankops.soft_rank(a, **opts))
            with monkeypatch.context() as m:
                m.setattr(one_block, "DROPPING", (2.0, 2.0))
                np.testing.assert_allclose(guessed, np.asarray(rankops.soft_rank(a, **opts)), rtol=1e-12, atol=1e-12,
                                           err_msg=str(opts))
    outcomes = [(f, np.sum(s != v, axis=-1)) for f, s, v in seen]
    assert any(f.any() for f, _ in outcomes), "no row fitted by its guess"
    assert any(((p > 0) & ~f).any() for f, p in outcomes), "no row pooled before the rounds"
    assert any(((p == 0) & ~f).any() for f, p in outcomes), "no row left to the rounds"


def _fit_blocks(x: np.ndarray, p: float, strength: float) -> list:
    """Each row's blocks of the float64 fit, in the guess's order (increasing; ``(first, past_last)``), from
    :func:`_rank_reference`'s values: runs of equal ranks less the linear part are no test here, so the blocks come
    from rankops' own starts in float64 (equal to the paper's PAV, checked by the callers)."""
    from rankops._cores import pnorm

    seen = []
    real = pnorm.project

    def spy(*a, **k):
        out = real(*a, **k)
        seen.append(np.asarray(out[2]))
        return out

    with pytest.MonkeyPatch.context() as m:
        m.setattr(pnorm, "project", spy)
        rankops.soft_rank(x.astype(np.float64), method="permutahedron", strength=strength, **_lp(p))
    n, blocks = x.shape[-1], []
    for starts in seen[-1].reshape(-1, n):
        first = np.flatnonzero(starts)
        ends = np.append(first[1:], n)
        blocks.append([(n - b, n - a) for a, b in zip(first, ends)][::-1])  # sorted decreasing -> increasing order
    return blocks


@pytest.mark.parametrize("p, strength", [(1.5, 0.3), (4.0 / 3.0, 0.5)])
def test_guess_pools_the_fits_block_that_holds_the_middle_entry(p, strength, monkeypatch):
    """The guess's search over values (``one_block.guessed_fit``) ends on a block of the fit: the one that holds the
    row's middle entry, where it is not the whole row (rows of 160 at six scales, some with entries below that block's
    value at its ends, which a value from the set's nonnegative terms alone put past every block: the Newton step on
    the signed terms). Each row whose guess was not fitted has either that block pooled in its start or nothing."""
    seen = _spied_guesses(monkeypatch)
    x = _one_block_rows()
    np.testing.assert_allclose(rankops.soft_rank(x, method="permutahedron", strength=strength, **_lp(p)),
                               _rank_reference(x, p, strength), rtol=1e-10, atol=1e-10)
    fitted, start, v0 = seen[-1]
    n, middle, checked = x.shape[-1], x.shape[-1] // 2, 0
    for row, blocks in enumerate(_fit_blocks(x, p, strength)):
        pooled = np.flatnonzero(start[row] != v0[row])
        block = next((a, b) for a, b in blocks if a <= middle < b)
        if fitted[row] or pooled.size == 0:
            continue
        checked += 1
        assert (pooled.min(), pooled.max() + 1) == block or block[1] - block[0] == n, (row, pooled[[0, -1]], block)
    assert checked >= 1, (fitted, [np.sum(start[r] != v0[r]) for r in range(len(fitted))])


@pytest.mark.parametrize("p", [1.3, 1.35, 1.45])
def test_guessed_rows_at_any_other_p_equal_the_papers_pav(p, monkeypatch):
    """At a q with no closed forms or moments the guess runs from a lower share of drops (``one_block.DROPPING[1]``):
    the rounds' alternative there, threshold splits, costs more (a p = 1.35 rank of 10^5 normal scores at strength
    0.1, one block of 84% of the row and 16,000 blocks left of it: 0.5 s before, about 0.1 s with that block pooled).
    Rows of 1000 at strength 1 (p = 1.3: one block of 90% of the row, whose one-entry values drop at 0.67-0.72 of
    their neighbours) and 0.5, and of 3000 at 0.3: the sequential PAV in float64; in float32 within 8 ulps of n (the
    rounds alone: 2.1-4.8 ulps of n off here); and some row fitted or pooled by the guess."""
    seen = _spied_guesses(monkeypatch)
    rng = np.random.default_rng(8)
    for n, strength in ((1000, 1.0), (1000, 0.5), (3000, 0.3)):
        x = rng.normal(size=(3, n))
        kw = dict(method="permutahedron", strength=strength, **_lp(p))
        got = rankops.soft_rank(x, **kw)
        np.testing.assert_allclose(got, _rank_reference(x, p, strength), rtol=1e-10, atol=1e-10 * n)
        low = rankops.soft_rank(x.astype(np.float32), **kw)
        np.testing.assert_allclose(low, got, rtol=0, atol=8 * np.finfo(np.float32).eps * n)
    assert any((f | (np.sum(s != v, axis=-1) > 0)).any() for f, s, v in seen), "no row guessed"


def test_float32_guess_of_a_long_row_is_checked_in_float64(monkeypatch):
    """A p = 1.4 rank of 10^5 normal scores at strength 0.1 is one block of 99.35% of the row and 631 blocks at its
    end. In float32 the optimality check's running sums round by about 10^4 (its margin) where the block's least
    suffix sum is 1.2, and the block was refused (the rows then went to threshold splits: 0.3 s); the check runs again
    in float64 at the block's value one Newton step further, which takes it (``one_block._suffix_sums``): the block
    pooled before the rounds, and the ranks within 4 ulps of n of the float64 call's."""
    seen = _spied_guesses(monkeypatch)
    x = np.random.default_rng(0).normal(size=(1, 10**5))
    kw = dict(method="permutahedron", strength=0.1, **_lp(1.4))
    low = np.asarray(rankops.soft_rank(x.astype(np.float32), **kw), dtype=np.float64)
    fitted, start, v0 = seen[-1]
    assert np.sum(start != v0) > 99_000, np.sum(start != v0)
    np.testing.assert_allclose(low, rankops.soft_rank(x, **kw), rtol=0, atol=4 * np.finfo(np.float32).eps * 10**5)


def test_float32_guess_one_entry_past_its_block_is_refused():
    """A p = 1.25 rank (q = 5) of 10^5 scores 1000 + N(0, 1) in float32 at strength 1 is one block of 99,833 entries
    and 167 one-entry blocks. The float32 search cut a set one entry longer (its value within float32's rounding of the
    block's), and the check passed it: the running sums of 10^5 terms of 10^5 round by 10^3, the extra entry's own term
    was -3.5. That entry was pooled into the block, its rank 3.47 off (the float64 rank of the same row: 99,834,
    exactly its rho). A block's last entry, and the suffix past its first, are now checked on their own terms."""
    torch = pytest.importorskip("torch")
    x = torch.tensor((np.random.default_rng(0).normal(size=(2, 10**5))[1:] + 1000).astype(np.float32))
    kw = dict(method="permutahedron", strength=1.0, **_lp(1.25))
    low = rankops.soft_rank(x, **kw).double().numpy()
    np.testing.assert_allclose(low, rankops.soft_rank(x.double(), **kw).numpy(), rtol=0, atol=8 * np.finfo(np.float32).eps * 10**5)


def test_sort_rows_left_to_threshold_splits_equal_the_papers_pav(monkeypatch):
    """A p = 1.4 soft sort (q = 3.5, weights of either sign) of 3000 normal scores at the default softness goes past
    its pooling rounds to threshold splits, whose pooling afterwards took each pool's root with its terms clipped at
    0 (the rank's rule, whose blocks hold no entry below their value): the sort jumped from 1.17 to -1.69 between two
    neighbours, 4.7 x 10^6 off the paper's PAV on the projection's own inputs. It pools by the sort's rule now."""
    from rankops._cores import pnorm

    seen, project = [], pnorm.project

    def spy(xp, adapter, z, w, q, valid=None, signed=False):
        out = project(xp, adapter, z, w, q, valid, signed)
        seen.append(tuple(np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (z, w, out[0])))))
        return out

    monkeypatch.setattr(pnorm, "project", spy)
    x = np.random.default_rng(0).normal(size=(1, 3000))
    got = rankops.soft_sort(x, method="permutahedron", **_lp(1.4))
    assert np.diff(got[0]).min() > 0
    z, w, mu = (a[0] for a in seen[-1])
    want = _pav_projection(z, w, 1.4)
    np.testing.assert_allclose(mu, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())
    # p = 1.7 went wrong from 10^4 entries (a descent of 1.48 between neighbours)
    got = rankops.soft_sort(np.random.default_rng(0).normal(size=(1, 10**4)), method="permutahedron", **_lp(1.7))
    assert np.diff(got[0]).min() > 0


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_masked_sort_rows_left_to_threshold_splits_equal_their_valid_entries(name):
    """Masked p = 1.7 soft sorts of 300 entries (80% valid) at the default softness take the threshold splits too: a
    row was 13% of its largest value off the same call on its valid entries alone (NumPy), as the pooling after the
    splits took the rank's rule (see the test above)."""
    rng = np.random.default_rng(1)
    x, mask = rng.normal(size=(3, 300)), rng.random((3, 300)) < 0.8
    kw = dict(method="permutahedron", **_lp(1.7))
    to, run = on_backend(name)
    got = np.asarray(run(lambda v, m: rankops.soft_sort(v, mask=m, **kw), to(x), to(mask)), dtype=np.float64)
    for row, valid, out in zip(x, mask, got):
        want = rankops.soft_sort(row[valid][None], **kw)[0]
        np.testing.assert_allclose(out[:valid.sum()], want, rtol=1e-10, atol=1e-10 * np.abs(want).max())


def _increasing_pav_blocks(y: np.ndarray, w: np.ndarray, q: float) -> np.ndarray:
    """True where a block of the increasing fit of ``sum (1/q)|y - v|^q + w v`` begins: sequential PAV, each pool's
    root by bisection (:func:`_root`, terms of either sign)."""
    blocks: list[list] = []
    for i in range(y.size):
        blocks.append([i, i + 1, _root(y[i:i + 1], w[i:i + 1], q)])
        while len(blocks) > 1 and blocks[-2][2] >= blocks[-1][2]:
            b, a = blocks.pop(), blocks.pop()
            blocks.append([a[0], b[1], _root(y[a[0]:b[1]], w[a[0]:b[1]], q)])
    starts = np.zeros(y.size, dtype=bool)
    starts[[a for a, _, _ in blocks]] = True
    return starts


@pytest.mark.parametrize("name", ["numpy", "torch", "jax"])
def test_threshold_splits_give_the_blocks_of_the_papers_pav(name):
    """:func:`splits.split_starts` on rows of either kind (a rank's: y increasing, w its weights; a sort's: y the
    stepped ranks, w data of either sign) at p = 1.4, 1.7 and 1.25 and at several scales: its blocks are those of a
    sequential PAV in float64, and every row settles; under ``jax.jit`` every level runs over every entry."""
    from rankops._cores import pnorm, splits

    from array_api_compat import array_namespace

    from rankops._lib._adapters import get_adapter

    to, run = on_backend(name)
    xp = array_namespace(to(np.zeros(1)))
    adapter = get_adapter(xp)
    pooled = collections.Counter()
    for p in (1.4, 1.7, 1.25):
        q = pnorm.exponent(p)
        # every scale and kind in one call (rows are independent): one program per p under jit
        kinds, yy, ww = _threshold_split_rows(p)
        starts, fitted = run(lambda a, b: splits.split_starts(xp, adapter, lambda *s, **k: block_roots.signed_shift(*s, q, **k), a, b, q),
                             to(yy), to(ww))
        assert np.all(np.asarray(fitted))
        want = _remembered_pav_blocks(yy.tobytes(), ww.tobytes(), yy.shape, q)
        assert np.array_equal(np.asarray(starts), want), (p, np.sum(np.asarray(starts) != want, axis=-1))
        for kind in ("rank", "sort"):
            rows = want[kinds == kind]
            pooled[p, kind, "pools"] += int(rows.size - rows.sum())
            pooled[p, kind, "split rows"] += int(np.sum(rows.sum(axis=-1) > 1))
    assert len(pooled) == 12 and min(pooled.values()) > 0, pooled  # pools and splits at each p, either kind


def _threshold_split_rows(p: float, n: int = 120) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kind of each row, y, w): at scales 0.1, 1 and 30, three rows of a rank's kind (y sorted normal scores, w the
    weights 1..n) and three of a sort's (y the stepped ranks, w normal data of either sign); the same rows on every
    backend."""
    rng = np.random.default_rng(int(p * 100))
    kinds, ys, ws = [], [], []
    for scale in (0.1, 1.0, 30.0):
        steps = np.arange(1.0, n + 1.0)[None, :].repeat(3, axis=0)
        ys += [np.sort(rng.normal(size=(3, n)) * scale, axis=-1), steps * scale]
        ws += [steps, rng.normal(size=(3, n))]
        kinds += ["rank"] * 3 + ["sort"] * 3
    return np.array(kinds), np.concatenate(ys), np.concatenate(ws)


@functools.lru_cache(maxsize=None)
def _remembered_pav_blocks(y_bytes: bytes, w_bytes: bytes, shape: tuple[int, ...], q: float) -> np.ndarray:
    """:func:`_increasing_pav_blocks` of each row, remembered by the rows' bytes: each backend's check asks for the
    same rows."""
    y, w = np.frombuffer(y_bytes).reshape(shape), np.frombuffer(w_bytes).reshape(shape)
    return np.stack([_increasing_pav_blocks(a, b, q) for a, b in zip(y, w)])


@pytest.mark.parametrize("name", ["numpy", "jax"])
def test_threshold_splits_without_float64_find_the_splits_of_a_long_blocks_short_end(name, monkeypatch):
    """Where the device has no float64 (JAX without x64, as a rule on a GPU) the splits run in float32. A rank's
    long top block of 10^4 normal scores (scale 10, p = 1.4) has suffix sums of about 5e7 in f', where a one-entry
    block at its end differs by under 1 (Phi of 0.03 against 8e-7 of rounding per unit): Phi at the float32 root
    came out positive there. Phi corrected to the exact root (the total taken out by the derivative's shares, from
    the shorter side) finds it: the outputs ``|y - v|^(q-1)`` of its blocks, each block's root solved in float64,
    are within 4 float32 units of the float64 splits' (Phi uncorrected: 26 units under ``jax.jit``, where every
    level runs over every entry)."""
    from array_api_compat import array_namespace

    from rankops._cores import pnorm, splits
    from rankops._lib._adapters import get_adapter

    to, run = on_backend(name)
    q, n = pnorm.exponent(1.4), 10_000
    y = np.sort(np.random.default_rng(5).normal(size=(4, n)) * 10.0, axis=-1)
    w = np.broadcast_to(np.arange(1.0, n + 1.0), y.shape)
    npx = array_namespace(y)

    def outputs(starts):
        _, d, t = block_roots.signed_shift(npx, get_adapter(npx), starts, y, w, q)
        return np.abs(d + t) ** (q - 1.0)

    want = outputs(splits.split_starts(npx, get_adapter(npx), lambda *a, **k: block_roots.signed_shift(*a, q, **k), y, w, q)[0])
    xp = array_namespace(to(np.zeros(1)))
    monkeypatch.setattr(splits, "accumulation_dtype", lambda xp, a: a.dtype)
    starts, fitted = run(lambda a, b: splits.split_starts(xp, get_adapter(xp), lambda *s, **k: block_roots.signed_shift(*s, q, **k), a, b, q),
                         to(y.astype(np.float32)), to(w.astype(np.float32)))
    assert np.all(np.asarray(fitted))
    np.testing.assert_allclose(outputs(np.asarray(starts)), want, rtol=0, atol=4 * np.finfo(np.float32).eps * n)


def test_snowballing_rows_at_any_other_p_go_to_threshold_splits(monkeypatch):
    """At p whose loss has no power sums (q not an integer) rows whose blocks form by chains took a pooling round per
    block (a p = 1.4 rank of 10^5 normal scores at strength 0.1 ran for about two minutes). They leave the pooling
    rounds once their drops stop halving, within the cap of 4 ceil(log2 n), for threshold splits (:mod:`.splits`),
    to the paper's PAV; with the splits unable to settle (``LEVELS`` 0) the rows pool on for more than twice the cap,
    to the same fit. Rows as in :func:`test_snowballing_rows_at_p_past_the_closed_forms_leave_the_pooling_rounds`;
    the one-block guess off (``one_block.DROPPING`` above 1), which takes such rows first."""
    from rankops._cores import one_block, pnorm, splits

    monkeypatch.setattr(one_block, "DROPPING", (2.0, 2.0))

    rounds, left = [], []
    pooled, fit_left = pnorm._Rules.pooled, splits.fit_left
    monkeypatch.setattr(pnorm._Rules, "pooled", lambda *a, **k: rounds.append(1) or pooled(*a, **k))
    monkeypatch.setattr(splits, "fit_left", lambda *a: left.append(int(np.sum(np.asarray(a[-1])))) or fit_left(*a))
    i = np.arange(1.0, 513.0)
    for p in (1.4, 1.7):
        e = p - 1.0
        x = np.stack([e * 256.0 ** (e - 1.0) * i, e * 384.0 ** (e - 1.0) * i])
        kw = {"method": "permutahedron", "regularization": "lp", "p": p, "strength": 1.0}
        rounds.clear(), left.clear()
        monkeypatch.setattr(splits, "LEVELS", 4)
        got = rankops.soft_rank(x, **kw)
        np.testing.assert_allclose(got, _rank_reference(x, p, 1.0), rtol=1e-9, atol=1e-9)
        assert left == [2] and len(rounds) <= 4 * 9 + 1, (p, left, len(rounds))
        rounds.clear()
        monkeypatch.setattr(splits, "LEVELS", 0)
        np.testing.assert_allclose(rankops.soft_rank(x, **kw), got, rtol=1e-12, atol=1e-10)
        assert len(rounds) > 2 * 4 * 9, (p, len(rounds))


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_snowballing_rows_at_p_1_4_reach_the_papers_fit_on_every_backend(name):
    """A chained row of :func:`test_snowballing_rows_at_any_other_p_go_to_threshold_splits` (p = 1.4) and a normal
    one on every backend: eager (the splits' levels solve the segments left), under ``jax.jit`` (every level over
    every entry) and on a device where reading values does not pay (array-api-strict's second device, a GPU's
    stand-in): the paper's PAV; torch's and JAX's gradients of a weighted sum, ``rankops.vjp``'s on NumPy."""
    to, run = on_backend(name)
    if name == "array_api_strict":
        import array_api_strict as strict

        to = functools.partial(strict.asarray, device=strict.Device("device1"))
    e = 0.4
    x = np.stack([e * 256.0 ** (e - 1.0) * np.arange(1.0, 513.0), np.random.default_rng(3).normal(size=512)])
    kw = {"method": "permutahedron", "regularization": "lp", "p": 1.4, "strength": 1.0}
    got = run(lambda a: rankops.soft_rank(a, **kw), to(x))
    if name == "array_api_strict":
        got = got.to_device(strict.Device("CPU_DEVICE"))
    np.testing.assert_allclose(np.asarray(got), _rank_reference(x, 1.4, 1.0), rtol=1e-9, atol=1e-9)
    if name in ("torch", "jax"):
        ct = np.random.default_rng(4).normal(size=x.shape)
        want = rankops.vjp(rankops.soft_rank, x, **kw)[1](ct)[0]
        if name == "torch":
            import torch

            xt = torch.tensor(x, requires_grad=True)
            grad = torch.autograd.grad(rankops.soft_rank(xt, **kw), xt, torch.tensor(ct))[0].numpy()
        else:
            import jax

            grad = np.asarray(jax.jit(jax.grad(lambda a: (rankops.soft_rank(a, **kw) * ct).sum()))(to(x)))
        np.testing.assert_allclose(grad, want, rtol=1e-9, atol=1e-9)
