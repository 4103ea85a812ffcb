"""Kendall and Mallows kernels, the smooth Kendall tau and SUQUAN's targets against independent references.

References: pair counts by an explicit double loop over pairs in float64
(ties counted as neither), ``scipy.stats.kendalltau`` (tau-b equals tau-a
without ties), eigenvalues of the Gram matrices, the smooth tau's formula
evaluated with NumPy, and central finite differences.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.stats import kendalltau

import rankops
from tests.backends import CPU_BACKENDS
from tests.backends import on_backend
from rankops._cores import kendall



def _counts(u: np.ndarray, v: np.ndarray) -> tuple[int, int]:
    """(n_c, n_d) by looking at every pair: a pair tied in either vector is neither."""
    nc = nd = 0
    for i, j in itertools.combinations(range(len(u)), 2):
        s = np.sign(u[i] - u[j]) * np.sign(v[i] - v[j])
        nc += s > 0
        nd += s < 0
    return nc, nd


def _gram(x: np.ndarray, y: np.ndarray, f) -> np.ndarray:
    return np.array([[f(*_counts(a, b)) for b in y] for a in x])


def _tied(shape, rng, levels):
    return rng.integers(0, levels, size=shape).astype(np.float64)


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
@pytest.mark.parametrize("algorithm", ["signs", "merges"])
def test_kernels_equal_pair_counts_with_ties(backend_name, algorithm):
    to, run = on_backend(backend_name)
    rng = np.random.default_rng(0)
    x, y = _tied((5, 11), rng, 4), _tied((3, 11), rng, 3)
    p = 11

    def both(a, b):
        return (rankops.kendall_kernel(a, b, algorithm=algorithm), rankops.mallows_kernel(a, b, lam=0.2, algorithm=algorithm),
                rankops.kendall_kernel(a, algorithm=algorithm))

    k, m, gram = (np.asarray(v) for v in run(both, to(x), to(y)))
    assert_allclose(k, _gram(x, y, lambda c, d: (c - d) / (p * (p - 1) / 2)), rtol=0, atol=1e-12)
    assert_allclose(m, _gram(x, y, lambda c, d: np.exp(-0.2 * d)), rtol=1e-12, atol=0)
    assert_allclose(gram, _gram(x, x, lambda c, d: (c - d) / 55), atol=1e-12)  # y defaults to x


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
@pytest.mark.parametrize("algorithm", ["signs", "merges"])
def test_a_vector_holding_a_nan_has_nan_kernel_values(backend_name, algorithm):
    """NaN compares False with everything, so its pairs counted as neither concordant nor discordant would give a
    plausible kernel value: the vector's row and column are NaN instead (SciPy's kendalltau is NaN too), and every
    other value is the clean one; an infinity is ordered (a number)."""
    if backend_name == "dask" and algorithm == "merges":
        pytest.skip("Dask takes signs (test_dask_is_lazy_and_takes_signs)")
    to, run = on_backend(backend_name)
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(4, 7)), rng.normal(size=(3, 7))
    x[1, 2], y[2, 0], x[3, 5] = np.nan, np.nan, np.inf

    def both(a, b):
        return rankops.kendall_kernel(a, b, algorithm=algorithm), rankops.mallows_kernel(a, b, lam=0.3, algorithm=algorithm)

    for got, f in zip((np.asarray(v) for v in run(both, to(x), to(y))), (lambda c, d: (c - d) / 21, lambda c, d: np.exp(-0.3 * d))):
        nan = np.zeros((4, 3), dtype=bool)
        nan[1, :], nan[:, 2] = True, True
        assert np.isnan(got[nan]).all()
        assert_allclose(got[~nan], _gram(x, y, f)[~nan], rtol=1e-12, atol=1e-12)
    assert np.isnan(kendalltau(x[1], y[0]).statistic)


@pytest.mark.parametrize("p", [2, 3, 17, 64, 130])
def test_algorithms_agree_and_equal_scipy_without_ties(p):
    rng = np.random.default_rng(p)
    x, y = rng.normal(size=(4, p)), rng.normal(size=(5, p))
    signs = rankops.kendall_kernel(x, y, algorithm="signs")
    merges = rankops.kendall_kernel(x, y, algorithm="merges")
    assert_allclose(merges, signs, rtol=0, atol=1e-12)
    ref = np.array([[kendalltau(a, b).statistic for b in y] for a in x])
    assert_allclose(signs, ref, rtol=0, atol=1e-12)


def test_auto_switches_to_merges_above_the_crossover():
    """p above SIGNS_UP_TO takes the merge path, with ties: equal to the sign embedding's counts."""
    rng = np.random.default_rng(1)
    p = kendall.SIGNS_UP_TO + 77
    x, y = _tied((2, p), rng, 50), _tied((3, p), rng, 40)
    dot, both = kendall.by_signs(np, x, y)
    assert_allclose(rankops.kendall_kernel(x, y), dot / (p * (p - 1) / 2), rtol=0, atol=1e-12)
    assert_allclose(rankops.mallows_kernel(x, y, lam=1e-5), np.exp(-1e-5 * (both - dot) / 2), rtol=1e-12)
    ref = np.array([[kendalltau(a, b, variant="b").statistic for b in y] for a in x])
    # tau-b divides by sqrt((P - T_x)(P - T_y)), tau-a by P: compare numerators through the tie counts
    tx = np.array([sum(c * (c - 1) // 2 for c in np.unique(a, return_counts=True)[1]) for a in x])
    ty = np.array([sum(c * (c - 1) // 2 for c in np.unique(b, return_counts=True)[1]) for b in y])
    pairs = p * (p - 1) / 2
    assert_allclose(dot, ref * np.sqrt((pairs - tx)[:, None] * (pairs - ty)[None, :]), rtol=1e-9)


@pytest.mark.parametrize("lam", [0.05, 0.3, 2.0])
def test_gram_matrices_are_positive_semidefinite(lam):
    """Kendall: a Gram matrix of sign embeddings, ties included. Mallows: on permutations (no ties), the theorem's domain."""
    rng = np.random.default_rng(2)
    perms = np.stack([rng.permutation(9) for _ in range(40)]).astype(np.float64)
    mixed = np.concatenate([rng.normal(size=(20, 9)), _tied((20, 9), rng, 3)])
    k = rankops.kendall_kernel(mixed)
    assert_allclose(k, k.T, atol=1e-15)
    assert np.linalg.eigvalsh(k).min() >= -1e-10
    m = rankops.mallows_kernel(perms, lam=lam)
    assert_allclose(m, m.T, atol=1e-15)
    assert np.linalg.eigvalsh(m).min() >= -1e-10
    # on permutations exp(-lam n_d) is the Gaussian kernel of the embeddings: ||Phi(u) - Phi(v)||^2 = 4 n_d
    phi = np.sign(perms[:, :, None] - perms[:, None, :])
    sq = ((phi[:, None] - phi[None, :]) ** 2).sum(axis=(-2, -1)) / 2  # each pair appears twice in the full matrix
    assert_allclose(m, np.exp(-lam * sq / 4), rtol=1e-12)


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_batch_axes_axis_and_dtypes(backend_name):
    to, run = on_backend(backend_name)
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(2, 4, 7)), rng.normal(size=(1, 3, 7))  # batch axes broadcast
    ref = np.stack([rankops.kendall_kernel(x[b], y[0]) for b in range(2)])

    def calls(a, b, a32, b32, perm):
        # entries along axis -2: vectors along the last axis
        return (rankops.kendall_kernel(a, b), rankops.kendall_kernel(a.mT, b.mT, axis=-2),
                rankops.mallows_kernel(a32, b32), rankops.kendall_kernel(perm))

    got, moved, got32, ints = run(calls, to(x), to(y), to(x.astype(np.float32)), to(y.astype(np.float32)), to(np.argsort(x, axis=-1)))
    assert_allclose(np.asarray(got), ref, atol=1e-12)
    assert_allclose(np.asarray(moved), ref, atol=1e-12)
    assert str(got32.dtype).endswith("float32")
    assert np.asarray(ints).dtype.kind == "f"  # integer permutations: the default float


def test_dask_is_lazy_and_takes_signs():
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(10)
    x, y = _tied((6, 1100), rng, 30), _tied((4, 1100), rng, 30)  # p above SIGNS_UP_TO: auto still takes signs
    got = rankops.kendall_kernel(da.from_array(x, chunks=(3, 1100)), da.from_array(y, chunks=(2, 1100)))
    assert isinstance(got, da.Array)
    assert_allclose(got.compute(), rankops.kendall_kernel(x, y, algorithm="merges"), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="Dask"):
        rankops.kendall_kernel(da.from_array(x), algorithm="merges")


def test_kernel_errors():
    x = np.zeros((3, 4))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        rankops.kendall_kernel(np.zeros(4))
    with pytest.raises(ValueError, match="as many entries"):
        rankops.kendall_kernel(x, np.zeros((3, 5)))
    with pytest.raises(ValueError, match="algorithm"):
        rankops.kendall_kernel(x, algorithm="fast")
    with pytest.raises(ValueError, match="lam"):
        rankops.mallows_kernel(x, lam=-1.0)
    with pytest.raises(TypeError):
        rankops.kendall_kernel(x, [[1.0, 2.0, 3.0, 4.0]])
    with pytest.raises(ValueError, match="do not broadcast"):
        rankops.kendall_kernel(np.zeros((2, 3, 4)), np.zeros((3, 3, 4)))


# -- the smooth Kendall tau --------------------------------------------------------------------


def _soft_tau(x: np.ndarray, y: np.ndarray, tau: float) -> np.ndarray:
    """sum_{i<j} tanh(dx / tau) tanh(dy / tau) / P, explicitly over pairs i < j."""
    p = x.shape[-1]
    iu = np.triu_indices(p, 1)
    dx = (x[..., :, None] - x[..., None, :])[..., iu[0], iu[1]]
    dy = (y[..., :, None] - y[..., None, :])[..., iu[0], iu[1]]
    return np.sum(np.tanh(dx / tau) * np.tanh(dy / tau), axis=-1) / len(iu[0])


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_soft_kendall_tau_value_and_limit(backend_name):
    to, run = on_backend(backend_name)
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(3, 40)), rng.normal(size=(3, 40))
    got = run(lambda a, b: rankops.soft_kendall_tau(a, b, tau=0.7), to(x), to(y))
    assert_allclose(np.asarray(got), _soft_tau(x, y, 0.7), rtol=1e-10)
    # the limit: tau-a, ties counted as neither (gaps >= 1 here, tanh(1 / 1e-3) = 1)
    xi, yi = _tied((3, 30), rng, 6), _tied((3, 30), rng, 5)
    exact = np.array([(lambda c: (c[0] - c[1]) / 435)(_counts(a, b)) for a, b in zip(xi, yi)])
    got = run(lambda a, b: rankops.soft_kendall_tau(a, b, tau=1e-3), to(xi), to(yi))
    assert_allclose(np.asarray(got), exact, rtol=0, atol=1e-12)


def test_soft_kendall_tau_streams_over_several_blocks():
    """p = 1300 spans two row blocks plus a remainder (the block budget), against the formula; and a NaN row stays alone."""
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(2, 1300)), rng.normal(size=(2, 1300))
    x[1, 7] = np.nan
    got = rankops.soft_kendall_tau(x, y, tau=0.3)
    assert_allclose(got[0], _soft_tau(x[0], y[0], 0.3), rtol=1e-10)
    assert np.isnan(got[1])


def test_soft_kendall_tau_gradients_equal_central_differences():
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(2, 9)), rng.normal(size=(2, 9))
    w = np.array([0.7, -1.3])
    _, pull = rankops.vjp(rankops.soft_kendall_tau, x, y, tau=0.4)
    gx, gy = pull(w)
    h = 1e-6
    for arr, g, which in ((x, gx, 0), (y, gy, 1)):
        fd = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            up, down = arr.copy(), arr.copy()
            up[idx] += h
            down[idx] -= h
            args_up = (up, y) if which == 0 else (x, up)
            args_down = (down, y) if which == 0 else (x, down)
            fd[idx] = (w @ _soft_tau(*args_up, 0.4) - w @ _soft_tau(*args_down, 0.4)) / (2 * h)
        assert_allclose(g, fd, rtol=1e-6, atol=1e-9)


def test_soft_kendall_tau_under_torch_and_jax():
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=(3, 12)), rng.normal(size=(3, 12))
    gx, gy = rankops.vjp(rankops.soft_kendall_tau, x, y, tau=0.5)[1](np.ones(3))
    xt, yt = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    rankops.soft_kendall_tau(xt, yt, tau=0.5).sum().backward()
    assert_allclose(xt.grad.numpy(), gx, rtol=1e-10)
    assert_allclose(yt.grad.numpy(), gy, rtol=1e-10)
    loss = lambda a, b: jnp.sum(rankops.soft_kendall_tau(a, b, tau=0.5))  # noqa: E731
    jx, jy = jax.jit(jax.grad(loss, argnums=(0, 1)))(jnp.asarray(x), jnp.asarray(y))
    assert_allclose(np.asarray(jx), gx, rtol=1e-10)
    assert_allclose(np.asarray(jy), gy, rtol=1e-10)
    vmapped = jax.vmap(lambda a, b: rankops.soft_kendall_tau(a, b, tau=0.5))(jnp.asarray(x), jnp.asarray(y))
    assert_allclose(np.asarray(vmapped), _soft_tau(x, y, 0.5), rtol=1e-10)


def test_soft_kendall_tau_axis_broadcast_and_errors():
    rng = np.random.default_rng(8)
    x, y = rng.normal(size=(6, 3)), rng.normal(size=(6, 1))
    got = rankops.soft_kendall_tau(x, y, axis=0, tau=0.5)
    assert_allclose(got, _soft_tau(x.T, np.broadcast_to(y, x.shape).T, 0.5), rtol=1e-12)
    assert float(rankops.soft_kendall_tau(np.ones(1), np.ones(1))) == 0.0  # no pairs
    with pytest.raises(ValueError, match="tau"):
        rankops.soft_kendall_tau(x, x, tau=0.0)
    with pytest.raises(ValueError, match="broadcastable"):
        rankops.soft_kendall_tau(np.zeros(3), np.zeros(4))


# -- SUQUAN ------------------------------------------------------------------------------------


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_suquan_targets_is_the_cumulative_softmax(backend_name):
    to, _ = on_backend(backend_name)
    h = np.array([[0.3, -1.0, 2.0, 0.1], [0.0, 0.0, 0.0, 0.0]])
    ref = -1.0 + 3.0 * np.cumsum(np.exp(h) / np.exp(h).sum(axis=-1, keepdims=True), axis=-1)
    got = np.asarray(rankops.suquan_targets(to(h), low=-1.0, high=2.0))
    assert_allclose(got, ref, rtol=1e-12)
    assert np.all(np.diff(got, axis=-1) > 0) and np.allclose(got[:, -1], 2.0)
    with pytest.raises(ValueError, match="low < high"):
        rankops.suquan_targets(to(h), low=1.0, high=1.0)


def test_suquan_gradient_reaches_the_parameters():
    """soft_quantile_normalize(x, suquan_targets(h)): the learned quantile function gets a gradient (torch)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    x = torch.tensor(rng.normal(size=(4, 8)))
    h = torch.zeros(8, dtype=torch.float64, requires_grad=True)
    out = rankops.soft_quantile_normalize(x, rankops.suquan_targets(h), epsilon=1e-2)
    w = torch.tensor(rng.normal(size=(4, 8)))
    (out * w).sum().backward()
    assert torch.all(torch.isfinite(h.grad)) and float(h.grad.abs().sum()) > 1e-3
    # against central differences of the same composition
    eps, k = 1e-6, 3
    f = lambda hh: float((rankops.soft_quantile_normalize(x, rankops.suquan_targets(hh), epsilon=1e-2) * w).sum())  # noqa: E731
    e = torch.zeros(8, dtype=torch.float64)
    e[k] = eps
    assert abs((f(h.detach() + e) - f(h.detach() - e)) / (2 * eps) - float(h.grad[k])) < 1e-5
