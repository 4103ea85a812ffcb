"""Differentiable sorting networks against independent float64 references.

- the ``diffsort`` package itself (Petersen et al.'s code, when installed):
  sorted values, its matrix (transposed), the ranks read off it and the
  gradients, equal in float64 for odd-even transposition at any n and the
  bitonic network at powers of two;
- a comparator-by-comparator simulation written here (explicit pair lists,
  the paper's ``alpha a + (1 - alpha) b``), the bitonic network at any n by
  padding with +inf;
- the hard limit: ``np.sort`` and ``scipy.stats.rankdata`` for n = 1 .. 40;
- gradients: central differences; the monotonic relaxations' Jacobians are
  non-negative (Petersen et al., ICLR 2022, Theorem 3), the logistic one's is not.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.special import ndtr as scipy_ndtr
from scipy.stats import rankdata

import rankops
from tests.reference import central_vjp
from rankops._cores import comparators
from rankops._lib import _numerics
from rankops._lib._adapters import get_adapter

DISTRIBUTIONS = ("cauchy", "reciprocal", "optimal", "logistic", "logistic_phi", "gaussian")
RNG = np.random.default_rng(20261125)


def _alpha(distribution: str, d: np.ndarray, steepness: float, art_lambda: float = 0.25) -> np.ndarray:
    """The relaxed comparator's weight on the low wire's value (the papers' formulas, ``d = b - a``)."""
    v = steepness * d
    if distribution == "logistic":
        return 1.0 / (1.0 + np.exp(-v))
    if distribution == "logistic_phi":
        return 1.0 / (1.0 + np.exp(-v / (np.abs(d) + 1e-10) ** art_lambda))
    if distribution == "gaussian":
        return scipy_ndtr(v)
    if distribution == "reciprocal":
        return 0.5 * (v / (2.0 + np.abs(v)) + 1.0)
    if distribution == "cauchy":
        return np.arctan(v) / math.pi + 0.5
    if abs(v) <= 0.25:  # optimal (with the package's guard: |v| + 1e-10)
        return v + 0.5
    tail = 1.0 / (16.0 * (abs(v) + 1e-10))
    return 1.0 - tail if v > 0 else tail


def _layers(network: str, n: int) -> list[list[tuple[int, int]]]:
    """Comparators (low wire, high wire) per layer; bitonic on the next power of two, all ascending (mirrored merges)."""
    if network == "odd_even":
        return [[(i, i + 1) for i in range(k % 2, n - 1, 2)] for k in range(n)]
    size = 1 << max(n - 1, 0).bit_length()
    layers = []
    block = 2
    while block <= size:
        layers.append([(start + i, start + block - 1 - i) for start in range(0, size, block) for i in range(block // 2)])
        half = block // 4
        while half >= 1:
            layers.append([(i, i + half) for i in range(size) if i % (2 * half) < half])
            half //= 2
        block *= 2
    return layers


def _simulate(x: np.ndarray, network: str, distribution: str, steepness: float) -> tuple[np.ndarray, np.ndarray]:
    """``(sorted, P)`` of one row, comparator by comparator; wires from n on hold +inf (exact: they never move a value)."""
    n = len(x)
    size = 1 << max(n - 1, 0).bit_length() if network == "bitonic" else n
    vals = [float(v) for v in x] + [math.inf] * (size - n)
    rows = [np.eye(n)[i] if i < n else None for i in range(size)]
    for layer in _layers(network, n):
        for lo, hi in layer:
            a, b = vals[lo], vals[hi]
            if math.isinf(b):  # +inf on the high wire: the low wire keeps its value
                continue
            al = float(_alpha(distribution, np.float64(b - a), steepness))
            vals[lo], vals[hi] = al * a + (1 - al) * b, (1 - al) * a + al * b
            rows[lo], rows[hi] = al * rows[lo] + (1 - al) * rows[hi], (1 - al) * rows[lo] + al * rows[hi]
    return np.array(vals[:n]), np.array(rows[:n])


@pytest.mark.parametrize("network", ["odd_even", "bitonic"])
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_values_matrix_and_ranks_equal_the_comparator_simulation(network, distribution):
    for n in (1, 2, 5, 6, 8):
        x = RNG.standard_normal((2, n))
        sorted_, mats = zip(*(_simulate(row, network, distribution, 3.0) for row in x))
        kw = {"network": network, "distribution": distribution, "steepness": 3.0}
        assert_allclose(rankops.soft_sort(x, method="diffsort", **kw), np.array(sorted_), rtol=1e-13, atol=1e-13)
        assert_allclose(rankops.diffsort(x, **kw), np.array(mats), rtol=1e-13, atol=1e-13)
        ranks = np.einsum("bij,i->bj", np.array(mats), np.arange(1.0, n + 1))
        assert_allclose(rankops.soft_rank(x, method="diffsort", **kw), ranks, rtol=1e-13, atol=1e-13)
        # descending: the ascending operator on -x, the sort negated
        assert_allclose(rankops.soft_sort(x, method="diffsort", descending=True, **kw), -np.array([_simulate(-r, network, distribution, 3.0)[0] for r in x]),
                        rtol=1e-13, atol=1e-13)
        assert_allclose(rankops.soft_rank(x, method="diffsort", descending=True, **kw), rankops.soft_rank(-x, method="diffsort", **kw))


@pytest.mark.parametrize("temperature", [{"steepness": 10.0}, {"softness": 1.0}, {}])
def test_matrix_rows_are_positions_and_doubly_stochastic(temperature):
    """The matrix, the sort and the rank are one network at one temperature: natively, by softness, and at the
    defaults (the matrix's default is its steepness 10, the methods' is softness 1: each is passed explicitly)."""
    x = RNG.standard_normal((3, 9))
    kw = temperature or {"softness": 1.0}
    p = rankops.diffsort(x, network="bitonic", **kw)
    assert_allclose(p.sum(axis=-1), 1.0, atol=1e-14)
    assert_allclose(p.sum(axis=-2), 1.0, atol=1e-14)
    assert_allclose(np.einsum("bij,bj->bi", p, x), rankops.soft_sort(x, method="diffsort", network="bitonic", **temperature), atol=1e-14)
    assert_allclose(np.einsum("bij,i->bj", p, np.arange(1.0, 10)), rankops.soft_rank(x, method="diffsort", network="bitonic", **temperature),
                    atol=1e-13)


@pytest.mark.parametrize("network", ["odd_even", "bitonic"])
def test_hard_limit_sorts_every_length(network):
    """Gaps of 2 and a logistic of steepness 1e3: every swap decided to the last bit (exp(-1000) = 0)."""
    for n in range(1, 41):
        x = np.array([RNG.permutation(n) * 2.0 for _ in range(3)])
        kw = {"network": network, "distribution": "logistic", "steepness": 1e3}
        assert_allclose(rankops.soft_sort(x, method="diffsort", **kw), np.sort(x, axis=-1), rtol=0, atol=0)
        assert_allclose(rankops.soft_rank(x, method="diffsort", **kw), rankdata(x, axis=-1), rtol=0, atol=0)


def test_equals_the_diffsort_package():
    """Petersen et al.'s own code (float64): values, matrix, ranks and gradients, where its network sorts."""
    torch = pytest.importorskip("torch")
    diffsort = pytest.importorskip("diffsort")
    rng = np.random.default_rng(32)
    for network, n in (("odd_even", 5), ("odd_even", 8), ("bitonic", 8), ("bitonic", 16)):
        x = rng.standard_normal((3, n))
        w = rng.standard_normal((3, n))
        for distribution in DISTRIBUTIONS:
            for steepness in (3.0, 10.0):
                net = diffsort.DiffSortNet(network, n, steepness=steepness, art_lambda=0.25, distribution=distribution)
                xt = torch.tensor(x, requires_grad=True)
                y, p_ds = net(xt)
                (y * torch.tensor(w)).sum().backward()
                kw = {"network": network, "distribution": distribution, "steepness": steepness}
                value, pull = rankops.vjp(rankops.soft_sort, x, method="diffsort", **kw)
                assert_allclose(value, y.detach().numpy(), rtol=1e-13, atol=1e-13)
                assert_allclose(rankops.diffsort(x, **kw), np.swapaxes(p_ds.detach().numpy(), -1, -2), rtol=1e-13, atol=1e-13)
                ranks = p_ds.detach().numpy() @ np.arange(1.0, n + 1)
                assert_allclose(rankops.soft_rank(x, method="diffsort", **kw), ranks, rtol=1e-13, atol=1e-13)
                # the package's Gaussian backward divides by sigma = 1 / steepness rounded to float32 (a relative
                # 3e-8 on u, z^2 times that on the density at z): 1e-8 to 1e-7 on these gradients of order 1
                gaussian = distribution == "gaussian"
                assert_allclose(pull(w)[0], xt.grad.numpy(), rtol=2e-6 if gaussian else 1e-12, atol=2e-7 if gaussian else 1e-12)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("op", ["soft_sort", "soft_rank", "diffsort"])
def test_gradients_match_central_differences(op, distribution):
    network = "bitonic" if distribution in ("cauchy", "gaussian", "optimal") else "odd_even"
    x = RNG.standard_normal((2, 6))
    fn = getattr(rankops, op)
    kw = {"network": network, "distribution": distribution, "steepness": 2.0, "descending": op == "soft_rank"}
    if op != "diffsort":
        kw["method"] = "diffsort"
    value, pull = rankops.vjp(fn, x, **kw)
    ct = RNG.standard_normal(value.shape)
    assert_allclose(pull(ct)[0], central_vjp(lambda z: fn(z, **kw), x, ct), rtol=1e-6, atol=1e-7)


def _jacobian(x: np.ndarray, **kw) -> np.ndarray:
    _, pull = rankops.vjp(rankops.soft_sort, x, method="diffsort", **kw)
    return np.array([pull(np.eye(len(x))[i])[0] for i in range(len(x))])


@pytest.mark.parametrize("network", ["odd_even", "bitonic"])
def test_monotonic_relaxations_have_non_negative_jacobians(network):
    """Every sorted output non-decreasing in every input for cauchy, reciprocal, optimal; the logistic breaks it."""
    worst = {d: 0.0 for d in ("cauchy", "reciprocal", "optimal", "logistic")}
    for trial in range(20):
        n = int(RNG.integers(3, 12))
        x = RNG.standard_normal(n) * RNG.choice([0.1, 1.0, 5.0])
        for distribution in worst:
            for steepness in (1.0, 10.0):
                worst[distribution] = min(worst[distribution], _jacobian(x, network=network, distribution=distribution, steepness=steepness).min())
    assert worst["cauchy"] >= -1e-15 and worst["reciprocal"] >= -1e-15 and worst["optimal"] >= -1e-15, worst
    assert worst["logistic"] < -1e-3, worst  # the property the ICLR 2022 paper restores


def test_long_rows_bitonic():
    """n = 2^14 on one row: hard-limit values, finite gradients that sum to the cotangent's (the matrix is doubly stochastic)."""
    n = 1 << 14
    x = RNG.permutation(n) * 2.0
    kw = {"method": "diffsort", "network": "bitonic", "distribution": "logistic", "steepness": 1e3}
    value, pull = rankops.vjp(rankops.soft_sort, x, **kw)
    assert_allclose(value, np.sort(x), rtol=0, atol=0)
    ct = RNG.standard_normal(n)
    g = pull(ct)[0]
    assert np.all(np.isfinite(g))
    assert_allclose(g, ct[rankdata(x).astype(int) - 1], rtol=0, atol=0)  # the hard sort's gradient: the cotangent unsorted


def test_nan_row_is_nan_and_alone():
    x = RNG.standard_normal((3, 8))
    x[1, 2] = np.nan
    for op in (lambda z: rankops.soft_sort(z, method="diffsort", network="odd_even"), lambda z: rankops.soft_rank(z, method="diffsort"),
               lambda z: rankops.diffsort(z, network="bitonic")):
        out = op(x)
        assert np.all(np.isnan(out[1]))
        clean = op(np.delete(x, 1, axis=0))
        assert_allclose(np.delete(out, 1, axis=0), clean, rtol=0, atol=0)


@pytest.mark.eager_backends
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_float32_shares_keep_their_relative_precision_in_the_tails(backend, distribution):
    """Each wire's two shares, ``1 - f(u)`` kept and ``f(u)`` taken, in float32 against the paper's ``f`` in float64
    for |u| up to 1e6, each relative to itself: within 8 float32 roundings times ``1 + kappa``, ``kappa = |u f'(u) /
    f(u)|`` the share's own condition number (1 for cauchy's tails, |u| for the logistic's, u^2 for the gaussian's).
    Written as ``1/2 + arctan(u)/pi`` (and ``1 - f`` of a rounded ``f``), the small share was a multiple of 3e-8
    (cauchy's at u = -1e6, 3.2e-7, came out 3.0e-7); torch's ``special.ndtr`` flushed Phi(-6) to 0."""
    xp = backend.namespace()
    a = np.geomspace(1e-3, 1e6, 181)
    u = np.concatenate([-a[::-1], [0.0], a]).astype(np.float32)
    keep, take = comparators.shares(xp, get_adapter(xp), distribution, backend.asarray(u), 1.0, 0.25)
    u64 = u.astype(np.float64)
    for got, sign in ((keep, -1.0), (take, 1.0)):
        h = 1e-7  # kappa from a relative step of u in float64
        with np.errstate(over="ignore"):  # the logistic's exp(1e6): its share 0, as it should be
            want = np.array([_alpha(distribution, sign * v, 1.0) for v in u64])
            moved = np.array([_alpha(distribution, sign * v * (1 + h), 1.0) for v in u64])
        kappa = np.abs(np.log(moved, where=want > 0, out=np.zeros_like(want)) - np.log(want, where=want > 0, out=np.zeros_like(want))) / h
        got = backend.to_numpy(got)
        assert got.dtype == np.float32
        bound = 8 * 2.0**-24 * (1 + kappa) * want + 1e-37  # 1e-37: float32's subnormals, below 1.2e-38
        worst = np.argmax(np.abs(got - want) / bound)
        assert np.all(np.abs(got - want) <= bound), f"u = {u[worst]}: {got[worst]} against {want[worst]}"


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", ["numpy", "jax", "torch"])
@pytest.mark.parametrize("network", ["odd_even", "bitonic"])
def test_float32_gradients_of_a_row_spread_over_decades_follow_float64(backend_name, network):
    """The sorted values of 128 entries of either sign, log-uniform over 10^-2..10^2, pulled back in float32 and in
    float64 from the same values and cotangent. A wire near 0.01 takes a far partner's value with a share of about
    3e-4: with that share off by a few 1e-8 absolute the gradients were 0.7-4.4e-3 of their size off (NumPy, torch
    and ``jax.jit``); with the shares exact to float32 (``comparators.shares``), 0.7-2.7e-5."""
    from tests.test_regressions import _sort_gradient

    rng = np.random.default_rng(0)
    x = np.exp(rng.uniform(np.log(1e-2), np.log(1e2), size=(2, 128))) * rng.choice([-1, 1], size=(2, 128))
    ct = rng.normal(size=x.shape)
    grads = [_sort_gradient(backend_name, x.astype(dt), ct.astype(dt), method="diffsort", network=network)
             for dt in (np.float32, np.float64)]
    assert_allclose(grads[0], grads[1], atol=1e-4 * np.abs(grads[1]).max())


def test_portable_normal_cdf_against_scipy():
    u = np.concatenate([np.linspace(-40, 40, 200001), [-np.inf, np.inf, 0.0, -0.0]])
    assert_allclose(_numerics.ndtr(np, u), scipy_ndtr(u), rtol=0, atol=2e-15)
    assert np.isnan(_numerics.ndtr(np, np.array([np.nan]))[0])


@pytest.mark.parametrize("network", ["odd_even", "bitonic"])
def test_matrix_gradient_in_column_blocks(network):
    """n = 40: the matrix's backward runs its columns in three blocks, the last one partial; central differences agree."""
    x = RNG.standard_normal((2, 40))
    kw = {"network": network, "steepness": 3.0}
    value, pull = rankops.vjp(rankops.diffsort, x, **kw)
    ct = RNG.standard_normal(value.shape)
    assert_allclose(pull(ct)[0], central_vjp(lambda z: rankops.diffsort(z, **kw), x, ct), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("network", "forward_at_most", "backward_at_most"), [("odd_even", 12, 48), ("bitonic", 12, 24)])
def test_matrix_memory(network, forward_at_most, backward_at_most):
    """n = 256: the matrix is not kept per layer (it was 517x its output for odd-even, 74x for bitonic).

    Peaks traced by ``tracemalloc`` (NumPy reports its buffers to it), in units of the output's bytes: the forward
    holds the matrix and the shares; the backward recomputes the layers' matrices in blocks of about 8 n / K columns
    (K layers), about 8 matrices' worth, held twice while NumPy's loop concatenates them.
    """
    import tracemalloc

    x = RNG.standard_normal((1, 256))
    rankops.diffsort(x[:, :8], network=network)  # the first call's one-off allocations (caches, imports)
    output = x.shape[-1] ** 2 * x.itemsize
    tracemalloc.start()
    try:
        rankops.diffsort(x, network=network)
        forward = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        value, pull = rankops.vjp(rankops.diffsort, x, network=network)
        pull(np.ones_like(value))
        backward = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert forward < forward_at_most * output, forward / output
    assert backward < backward_at_most * output, backward / output
