"""The O(n log n) methods against independent float64 references written here.

- permutahedron: Blondel et al. 2020, Proposition 3, with a sequential PAV
  (L2 and KL) in plain Python; torchsort itself when it is installed;
- LapSum: the sums of Laplace CDFs evaluated pairwise (O(n^2)), the sort and
  the top-k threshold by ``scipy.optimize.brentq``;
- isotonic regression: ``scipy.optimize.isotonic_regression``;
- gradients: central finite differences through ``rankops.vjp``.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.optimize import brentq, isotonic_regression
from scipy.special import logsumexp

import rankops
from tests.backends import CPU_BACKENDS, on_backend
from tests.reference import central_vjp

# on JAX (each row length and option set a program of its own) under -m exhaustive: the default run checks these
# fits on the eager backends, and JAX's routes through conformance (docs/testing.md, "Tiers and time")
pytestmark = pytest.mark.eager_backends

RNG = np.random.default_rng(20261123)


def _pav(y: np.ndarray, w: np.ndarray, kind: str) -> np.ndarray:
    """Decreasing isotonic fit by the sequential stack algorithm (l2: weights w; kl: log-weights w)."""
    blocks: list[list] = []  # [values, weights]
    value = (lambda b: np.average(b[0], weights=b[1])) if kind == "l2" else (lambda b: logsumexp(b[0]) - logsumexp(b[1]))
    for yi, wi in zip(y, w):
        blocks.append([[yi], [wi]])
        while len(blocks) > 1 and value(blocks[-2]) <= value(blocks[-1]):
            last = blocks.pop()
            blocks[-1][0] += last[0]
            blocks[-1][1] += last[1]
    return np.concatenate([[value(b)] * len(b[0]) for b in blocks])


def _projection(x: np.ndarray, output: str, reg: str, strength: float) -> np.ndarray:
    """Blondel et al. 2020, Prop. 3, row by row: soft rank P(x/eps, rho), ascending soft sort -P(rho/eps, -x)."""
    out = []
    for row in x:
        n = len(row)
        rho = np.arange(n, 0, -1.0)
        if output == "rank":
            order = np.argsort(-row, kind="stable")
            s = row[order] / strength
            v = _pav(s - rho, np.ones(n), "l2") if reg == "l2" else _pav(s, np.log(rho), "kl")
            r = s - v if reg == "l2" else np.exp(s - v)
            out.append(r[np.argsort(order)])
        else:
            s = np.sort(-row)[::-1]
            w = rho / strength
            v = _pav(w - s, np.ones(n), "l2") if reg == "l2" else _pav(w, s, "kl")
            out.append(v - w)
    return np.array(out)


@pytest.mark.parametrize("reg", ["l2", "kl"])
@pytest.mark.parametrize("strength", [0.05, 1.0, 10.0])
@pytest.mark.parametrize("output", ["rank", "sort"])
def test_permutahedron_equals_proposition_3(output, reg, strength):
    x = RNG.normal(size=(4, 9))
    fn = getattr(rankops, f"soft_{output}")
    got = fn(x, method="permutahedron", regularization=reg, strength=strength)
    assert_allclose(got, _projection(x, output, reg, strength), rtol=1e-10, atol=1e-10)
    ct = RNG.normal(size=x.shape)
    _, vjp_fn = rankops.vjp(fn, x, method="permutahedron", regularization=reg, strength=strength)
    fd = central_vjp(lambda z: fn(z, method="permutahedron", regularization=reg, strength=strength), x, ct)
    assert_allclose(vjp_fn(ct)[0], fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reg", ["l2", "kl"])
@pytest.mark.parametrize("output", ["rank", "sort"])
def test_permutahedron_equals_torchsort(output, reg):
    torch = pytest.importorskip("torch")
    torchsort = pytest.importorskip("torchsort")
    x = torch.tensor(RNG.normal(size=(5, 40)), requires_grad=True)
    ct = torch.tensor(RNG.normal(size=(5, 40)))
    ref = getattr(torchsort, f"soft_{output}")(x, regularization=reg, regularization_strength=0.3)
    got = getattr(rankops, f"soft_{output}")(x, method="permutahedron", regularization=reg, strength=0.3)
    assert_allclose(got.detach().numpy(), ref.detach().numpy(), rtol=1e-10, atol=1e-10)
    (g_ref,) = torch.autograd.grad(ref, x, ct)
    (g_got,) = torch.autograd.grad(got, x, ct)
    assert_allclose(g_got.numpy(), g_ref.numpy(), rtol=1e-10, atol=1e-10)


def test_permutahedron_one_entry_blocks_are_exact():
    """Where torchsort's direct forms cancel (1e30 entries; rho / eps swamping s in float32)."""
    x = np.array([1e30, -1e30, 3e29, 5.0])
    assert_allclose(rankops.soft_rank(x, method="permutahedron", strength=1.0), [4.0, 1.0, 3.0, 2.0], rtol=0)
    x32 = RNG.normal(size=(2, 1000)).astype(np.float32)
    assert_allclose(rankops.soft_sort(x32, method="permutahedron", strength=1e-4), np.sort(x32, axis=-1), rtol=0, atol=0)


def _laplace_cdf(u: np.ndarray) -> np.ndarray:
    return np.where(u < 0, 0.5 * np.exp(np.minimum(u, 0)), 1 - 0.5 * np.exp(-np.maximum(u, 0)))


@pytest.mark.parametrize("alpha", [0.05, 0.5, 3.0])
def test_lapsum_equals_laplace_sums(alpha):
    x = RNG.normal(size=(3, 12))
    x[0, 1] = x[0, 0]  # a tie
    ranks = 0.5 + _laplace_cdf((x[..., :, None] - x[..., None, :]) / alpha).sum(-1)
    assert_allclose(rankops.soft_rank(x, method="lapsum", alpha=alpha), ranks, rtol=1e-12, atol=1e-12)
    sorts = []
    for row in x:
        f = lambda t, c: _laplace_cdf((t - row) / alpha).sum() - c  # noqa: E731
        lo, hi = row.min() - 60 * alpha, row.max() + 60 * alpha
        sorts.append([brentq(f, lo, hi, args=(i - 0.5,), xtol=1e-14) for i in range(1, len(row) + 1)])
    assert_allclose(rankops.soft_sort(x, method="lapsum", alpha=alpha), sorts, rtol=1e-11, atol=1e-11)
    k = np.array([0.4, 3.5, 11.2])
    masks = []
    for row, kk in zip(x, k):
        b = brentq(lambda t: _laplace_cdf((row - t) / alpha).sum() - kk, row.min() - 60 * alpha, row.max() + 60 * alpha, xtol=1e-14)
        masks.append(_laplace_cdf((row - b) / alpha))
    got = rankops.soft_topk_mask(x, k, method="lapsum", alpha=alpha)
    assert_allclose(got, masks, rtol=1e-10, atol=1e-10)
    assert_allclose(got.sum(-1), k, rtol=1e-12)


@pytest.mark.parametrize("backend_name", ["numpy", "torch"])
def test_lapsum_rank_keeps_float32_precision_on_rows_wide_in_alphas(backend_name):
    """Rows spanning 1e4 alphas, with clusters closer than alpha: float32 ranks and gradients within a few
    float32 roundings of the float64 sums. The scans multiply decays in [0, 1] (no exp of the raw scale):
    a log-domain cumulative sum would be off by about eps * range / alpha = 6e-4 here."""
    alpha = 0.01
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-50.0, 50.0, size=(2, 150)), rng.normal(scale=alpha, size=(2, 50)) + 17.0], axis=-1)
    g = rng.normal(size=x.shape)
    x32, g32 = x.astype(np.float32), g.astype(np.float32)
    xd = x32.astype(np.float64)  # the float32 inputs, summed in float64
    u = (xd[..., :, None] - xd[..., None, :]) / alpha
    want = 0.5 + _laplace_cdf(u).sum(-1)
    dens = 0.5 * np.exp(-np.abs(u)) / alpha
    want_dx = (dens * (g32[..., :, None] - g32[..., None, :])).sum(-1)
    if backend_name == "numpy":
        value, pull = rankops.vjp(rankops.soft_rank, x32, method="lapsum", alpha=alpha)
        got, got_dx = np.asarray(value), np.asarray(pull(g32)[0])
    else:
        torch = pytest.importorskip("torch")
        xt = torch.from_numpy(x32).requires_grad_()
        y = rankops.soft_rank(xt, method="lapsum", alpha=alpha)
        y.backward(torch.from_numpy(g32))
        got, got_dx = y.detach().numpy(), xt.grad.numpy()
    assert got.dtype == np.float32
    assert np.max(np.abs(got - want)) < 8 * np.spacing(np.float32(x.shape[-1]))
    assert np.max(np.abs(got_dx - want_dx)) < 1e-5 * np.max(np.abs(want_dx))


@pytest.mark.parametrize("op", ["rank", "sort", "topk"])
def test_lapsum_gradients_match_central_differences(op):
    x = RNG.normal(size=(2, 7))
    ct = RNG.normal(size=x.shape)
    if op == "topk":
        k = np.array([1.5, 4.2])
        fn, args = rankops.soft_topk_mask, (k,)
    else:
        fn, args = getattr(rankops, f"soft_{op}"), ()
    call = lambda z, *a: fn(z, *(a or args), method="lapsum", alpha=0.7)  # noqa: E731
    _, vjp_fn = rankops.vjp(fn, x, *args, method="lapsum", alpha=0.7)
    grads = vjp_fn(ct)
    assert_allclose(grads[0], central_vjp(call, x, ct), rtol=1e-6, atol=1e-7)
    if op == "topk":
        dk = [(np.sum(ct * (call(x, k + h) - call(x, k - h)))) / 2e-6 for h in 1e-6 * np.eye(2)]
        assert_allclose(grads[1], dk, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13, 100])
def test_isotonic_regression_equals_scipy(n):
    y = RNG.normal(size=(3, n)).cumsum(-1) * 0.2 + RNG.normal(size=(3, n))
    w = RNG.uniform(0.2, 2.0, size=(3, n))
    for increasing in (True, False):
        ref = np.stack([isotonic_regression(r, weights=ww, increasing=increasing).x for r, ww in zip(y, w)])
        got = rankops.isotonic_regression(y, weights=w, increasing=increasing)
        assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_isotonic_kl_equals_sequential_pav():
    """The KL rounds (used by regularization="kl") against the sequential stack algorithm."""
    from array_api_compat import array_namespace

    from rankops._cores import isotonic
    from rankops._lib._adapters import get_adapter

    y, lw = RNG.normal(size=(3, 77)) * 3, RNG.normal(size=(3, 77))
    xp = array_namespace(y)
    got = isotonic.decreasing(xp, get_adapter(xp), y, lw, "kl")
    assert_allclose(got, np.stack([_pav(a, b, "kl") for a, b in zip(y, lw)]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_isotonic_kl_pooling_rounds_at_any_scale(name):
    """The KL fit's pooling rounds against the sequential stack algorithm on every backend: rows that settle there
    (mostly sorted, log-weights spread over 10^3, where a sum of exp without each segment's maximum overflows)
    and rows left to the merge rounds (zigzags), with masked entries (value -inf, log-weight 0) at the end."""
    from array_api_compat import array_namespace

    from rankops._cores import isotonic
    from rankops._lib._adapters import get_adapter

    n = 40
    y = np.stack([-np.sort(RNG.normal(size=n)) * 400 + RNG.normal(size=n) * 30,  # pooled runs of every length
                  np.where(np.arange(n) % 2 == 0, 1.0, -1.0) * np.linspace(1.0, 50.0, n),  # zigzag: merges
                  RNG.normal(size=n) * 500])
    lw = np.stack([RNG.normal(size=n) * 300, RNG.normal(size=n), RNG.normal(size=n) * 500])
    y[2, -5:], lw[2, -5:] = -np.inf, 0.0
    want = np.stack([_pav(a, b, "kl") for a, b in zip(y, lw)])
    to, run = on_backend(name)
    got = run(lambda a, b: isotonic.decreasing(array_namespace(a), get_adapter(array_namespace(a)), a, b, "kl"), to(y), to(lw))
    got = np.asarray(got)
    assert np.all(got[2, -5:] == -np.inf)
    assert_allclose(got, want, rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("name", CPU_BACKENDS)
@pytest.mark.parametrize("kind", ["kl", "l2"])
def test_extensions_finish_snowballing_chains_within_a_few_rounds(name, kind):
    """Where the pooling rounds cannot stop to read values (``jax.jit``, a GPU), the KL fit's and the l2 soft sort's
    rounds pool their first drops on, block by block, once a row's drops stop halving (``rankops._cores.extensions``:
    ``LogSums``, ``MeanSums``): rows whose first block takes in one neighbour per round (40 to 58 of 128 entries)
    and a random walk (KL: with a masked tail, value -inf and log-weight 0) settle within 8 rounds, where 16 rounds
    alone leave them unsettled, and equal the sequential PAV."""
    from array_api_compat import array_namespace

    from rankops._cores import isotonic
    from rankops._cores.extensions import Extension, LogSums, MeanSums
    from rankops._lib._adapters import get_adapter

    n, rules, rule = 128, isotonic.KINDS[kind], LogSums if kind == "kl" else MeanSums
    walk = np.cumsum(RNG.normal(size=n)) + RNG.normal(size=n)
    if kind == "kl":
        y = np.stack([np.concatenate([[12.0], 0.15 * np.arange(n - 1)]), np.concatenate([[9.0, 8.0], 0.1 * np.arange(n - 2)]), walk])
        w = np.stack([np.zeros(n), RNG.normal(size=n) * 0.1, RNG.normal(size=n)])
        y[2, :9], w[2, :9] = -np.inf, 0.0  # first in an increasing fit: out of every pool
    else:
        y = np.stack([np.concatenate([[400.0], 0.5 * np.arange(n - 1)]), np.concatenate([[300.0, 290.0], 0.4 * np.arange(n - 2)]), walk])
        w = np.stack([np.ones(n), RNG.uniform(0.5, 2.0, size=n), RNG.uniform(0.5, 2.0, size=n)])
    want = np.stack([_pav(a[::-1], b[::-1], kind)[::-1] for a, b in zip(y, w)])  # the increasing fit

    def fit(a, b, rounds, extended):
        xp = array_namespace(a)
        v, unsettled, _ = isotonic.pool_runs(xp, get_adapter(xp), rules, rules.single(xp, a, b), xp.stack([a, b]), rounds,
                                             extend=Extension(rule) if extended else None)
        return v, xp.any(unsettled)

    to, run = on_backend(name)
    assert bool(np.asarray(run(lambda a, b: fit(a, b, 16, False), to(y), to(w))[1]))
    v, unsettled = run(lambda a, b: fit(a, b, 8, True), to(y), to(w))
    assert not bool(np.asarray(unsettled))
    v = np.asarray(v)
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(v), finite)
    assert_allclose(v[finite], want[finite], rtol=1e-10, atol=1e-10)


def test_isotonic_gradients_match_central_differences():
    y = RNG.normal(size=(2, 9))
    w = RNG.uniform(0.5, 2.0, size=(2, 9))
    ct = RNG.normal(size=y.shape)
    _, vjp_fn = rankops.vjp(rankops.isotonic_regression, y, weights=w)
    dy, dw = vjp_fn(ct)
    assert_allclose(dy, central_vjp(lambda z: rankops.isotonic_regression(z, weights=w), y, ct), rtol=1e-6, atol=1e-7)
    assert_allclose(dw, central_vjp(lambda z: rankops.isotonic_regression(y, weights=z), w, ct), rtol=1e-6, atol=1e-7)


def _rounds_of_run_pooling(y: np.ndarray) -> int:
    """How many rounds of pooling every maximal decreasing run of blocks a row needs (sequential reference)."""
    u, starts, r = y.astype(float), np.ones(len(y), bool), 0
    while np.any(u[:-1] > u[1:]):
        starts = starts & ~np.concatenate([[False], u[:-1] > u[1:]])
        ids = np.cumsum(starts) - 1
        u, r = (np.bincount(ids, u) / np.bincount(ids))[ids], r + 1
    return r


@pytest.mark.parametrize("backend_name", ["numpy", "torch", "jax-jit", "jax-vmap"])
def test_isotonic_rows_left_unsettled_by_run_pooling_finish_exactly(backend_name):
    """A row that needs more than log2(n) run-pooling rounds (the merge rounds finish it) next to rows that need none or one."""
    walk = np.random.default_rng(1530)
    hard = np.cumsum(walk.choice([-1.0, 1.0], size=32) * walk.exponential(size=32)) + walk.normal(size=32) * 0.1
    assert _rounds_of_run_pooling(hard) > 5  # the reference's count, so the test keeps its point
    y = np.stack([hard, np.arange(32.0), np.arange(32.0)[::-1]])
    ref = np.stack([isotonic_regression(r).x for r in y])
    if backend_name == "numpy":
        got = rankops.isotonic_regression(y)
    elif backend_name == "torch":
        torch = pytest.importorskip("torch")
        got = rankops.isotonic_regression(torch.asarray(y)).numpy()
    else:
        jax = pytest.importorskip("jax")
        f = jax.jit(rankops.isotonic_regression) if backend_name == "jax-jit" else jax.vmap(rankops.isotonic_regression)
        got = np.asarray(f(jax.numpy.asarray(y)))
    assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_isotonic_merge_rounds_stay_whole_loops_under_jax_linearize():
    """``jax.grad`` runs the merge rounds as the forward does. Partial evaluation re-traces a fixed-count loop's body to
    hoist what its steps share, which split each scan nested in the rounds into one storing its gathers' indices for
    every step and one reading them back: the rounds are ``while`` loops, which it leaves whole, so the linearized
    program holds the forward's loops and no more."""
    jax = pytest.importorskip("jax")
    y = jax.numpy.asarray(np.cumsum(np.random.default_rng(7).normal(size=(3, 32)), axis=-1)[..., ::-1].copy())

    def loops(fn) -> int:
        text = str(jax.make_jaxpr(fn)(y))
        return text.count("scan[") + text.count("while[")

    forward = loops(rankops.isotonic_regression)
    assert forward >= 4  # the pooling and merge rounds, each merge round's sweep, so the count keeps its point
    assert loops(lambda u: jax.linearize(rankops.isotonic_regression, u)[0]) == forward
    assert_allclose(np.asarray(jax.jit(rankops.isotonic_regression)(y)), np.stack([isotonic_regression(r).x for r in np.asarray(y)]),
                    rtol=1e-12, atol=1e-12)
